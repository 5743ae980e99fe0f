// layer_norm: out = (x - mean) / sqrt(var + eps) * w + b, per row   reference: tests/reference.py::layer_norm
// bindings: x (T, D) rows x_stride apart, w (D,), b (D,) (any buffer when has_bias is 0) -> out (T, D); params
// grid: (T, 1): one workgroup per row. Uses _reduce.wgsl; the variance is taken around the mean (two pass).
alias T = f32;
override WG: u32 = 64;

struct Params {
    dim: u32,
    x_off: u32,
    x_stride: u32,
    w_off: u32,
    b_off: u32,
    has_bias: u32,
    out_off: u32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> w: array<T>;
@group(0) @binding(2) var<storage, read> b: array<T>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let xrow = params.x_off + wid.x * params.x_stride;
    let orow = params.out_off + wid.x * params.dim;
    var total = 0.0;
    for (var d = lid; d < params.dim; d += WG) { total += f32(x[xrow + d]); }
    let mean = reduce_sum(total, lid) / f32(params.dim);
    var squares = 0.0;
    for (var d = lid; d < params.dim; d += WG) {
        let c = f32(x[xrow + d]) - mean;
        squares += c * c;
    }
    let inv = 1.0 / sqrt(reduce_sum(squares, lid) / f32(params.dim) + params.eps);
    for (var d = lid; d < params.dim; d += WG) {
        var v = (f32(x[xrow + d]) - mean) * inv * f32(w[params.w_off + d]);
        if (params.has_bias != 0u) { v += f32(b[params.b_off + d]); }
        out[orow + d] = T(v);
    }
}
