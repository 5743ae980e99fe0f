// rms_norm: out = x / sqrt(mean(x^2) + eps) * w, per row     reference: tests/reference.py::rms_norm
// bindings: x (T, D) rows x_stride apart, w (D,) -> out (T, D); params. Uses _reduce.wgsl.
// grid: (T, 1): one workgroup per row
alias T = f32;
override WG: u32 = 64;

struct Params {
    dim: u32,
    x_off: u32,
    x_stride: u32,
    w_off: u32,
    out_off: u32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> w: array<T>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let xrow = params.x_off + wid.x * params.x_stride;
    let orow = params.out_off + wid.x * params.dim;
    var squares = 0.0;
    for (var d = lid; d < params.dim; d += WG) {
        let v = f32(x[xrow + d]);
        squares += v * v;
    }
    let inv = 1.0 / sqrt(reduce_sum(squares, lid) / f32(params.dim) + params.eps);
    for (var d = lid; d < params.dim; d += WG) {
        out[orow + d] = T(f32(x[xrow + d]) * inv * f32(w[params.w_off + d]));
    }
}
