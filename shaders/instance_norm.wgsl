// instance_norm: (x - mean) / sqrt(var + eps) * scale + shift per channel   reference: tests/reference.py::instance_norm
// bindings: x (C, L), scale (C,), shift (C,), dense -> out (C, L); params
// grid: (C, 1, 1): one workgroup per channel; the variance is taken around the mean (two passes).
alias T = f32;
override WG: u32 = 64;

struct Params {
    length: u32,
    x_off: u32,
    scale_off: u32,
    shift_off: u32,
    out_off: u32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> scale: array<T>;
@group(0) @binding(2) var<storage, read> shift: array<T>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;
@group(0) @binding(4) var<uniform> params: Params;

var<workgroup> partial: array<f32, WG>;

// the sum of `value` over the workgroup (WG a power of two); called from uniform control flow
fn workgroup_sum(value: f32, lid: u32) -> f32 {
    partial[lid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (lid < width) { partial[lid] += partial[lid + width]; }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wid.x;
    let row = c * params.length;
    var total = 0.0;
    for (var i = lid; i < params.length; i += WG) { total += f32(x[params.x_off + row + i]); }
    let mean = workgroup_sum(total, lid) / f32(params.length);
    var squares = 0.0;
    for (var i = lid; i < params.length; i += WG) {
        let d = f32(x[params.x_off + row + i]) - mean;
        squares += d * d;
    }
    let inv = 1.0 / sqrt(workgroup_sum(squares, lid) / f32(params.length) + params.eps);
    let a = inv * f32(scale[params.scale_off + c]);
    let b = f32(shift[params.shift_off + c]);
    for (var i = lid; i < params.length; i += WG) {
        out[params.out_off + row + i] = T((f32(x[params.x_off + row + i]) - mean) * a + b);
    }
}
