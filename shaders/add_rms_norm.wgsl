// add_rms_norm: sum = a + b; out = sum / sqrt(mean(sum^2) + eps) * w, per row (a residual add and the next
// RMSNorm in one dispatch; the wgpu backend fuses them, see wgpu_fusion.py).
// reference: tests/reference.py::binary("add") then ::rms_norm
// bindings: a, b (T, D) rows a_stride / b_stride apart, w (D,) -> sum (T, D), out (T, D); params.
// Uses _reduce.wgsl. grid: (T, 1): one workgroup per row. Each invocation re-reads only the sums it wrote.
alias T = f32;
override WG: u32 = 64;

struct Params {
    dim: u32,
    a_off: u32,
    a_stride: u32,
    b_off: u32,
    b_stride: u32,
    w_off: u32,
    sum_off: u32,
    out_off: u32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read> a: array<T>;
@group(0) @binding(1) var<storage, read> b: array<T>;
@group(0) @binding(2) var<storage, read> w: array<T>;
@group(0) @binding(3) var<storage, read_write> sum: array<T>;
@group(0) @binding(4) var<storage, read_write> out: array<T>;
@group(0) @binding(5) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let arow = params.a_off + wid.x * params.a_stride;
    let brow = params.b_off + wid.x * params.b_stride;
    let srow = params.sum_off + wid.x * params.dim;
    let orow = params.out_off + wid.x * params.dim;
    var squares = 0.0;
    for (var d = lid; d < params.dim; d += WG) {
        let s = T(f32(a[arow + d]) + f32(b[brow + d]));
        sum[srow + d] = s;
        squares += f32(s) * f32(s);
    }
    let inv = 1.0 / sqrt(reduce_sum(squares, lid) / f32(params.dim) + params.eps);
    for (var d = lid; d < params.dim; d += WG) {
        out[orow + d] = T(f32(sum[srow + d]) * inv * f32(w[params.w_off + d]));
    }
}
