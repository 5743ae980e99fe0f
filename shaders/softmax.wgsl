// softmax over the last axis                                 reference: tests/reference.py::softmax
// bindings: x (R, N) rows x_stride apart -> out (R, N); params. Uses _reduce.wgsl.
// grid: (R, 1): one workgroup per row
alias T = f32;
override WG: u32 = 64;

struct Params {
    n: u32,
    x_off: u32,
    x_stride: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read_write> out: array<T>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let xrow = params.x_off + wid.x * params.x_stride;
    let orow = params.out_off + wid.x * params.n;
    var best = -3.0e38;
    for (var i = lid; i < params.n; i += WG) { best = max(best, f32(x[xrow + i])); }
    let top = reduce_max(best, lid);
    var total = 0.0;
    for (var i = lid; i < params.n; i += WG) { total += exp(f32(x[xrow + i]) - top); }
    let inv = 1.0 / reduce_sum(total, lid);
    for (var i = lid; i < params.n; i += WG) { out[orow + i] = T(exp(f32(x[xrow + i]) - top) * inv); }
}
