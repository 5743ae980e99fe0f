// conv1d: grouped 1-d convolution with stride, dilation and zero padding  reference: tests/reference.py::conv1d
// bindings: x (C_in, L), w (C_out, C_in / groups, Kw), b (C_out,) (any buffer when has_bias is 0), all dense
// -> out (C_out, L_out); params
// grid: (ceil(L_out / WG), C_out)
alias T = f32;
override WG: u32 = 64;

struct Params {
    length: u32,
    c_out: u32,
    per_group_in: u32,  // C_in / groups
    per_group_out: u32, // C_out / groups
    kw: u32,
    stride: u32,
    pad: u32,
    dilation: u32,
    l_out: u32,
    has_bias: u32,
    x_off: u32,
    w_off: u32,
    b_off: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> w: array<T>;
@group(0) @binding(2) var<storage, read> b: array<T>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let l = wid.x * WG + lid;
    let o = wid.y;
    if (l >= params.l_out) { return; }
    let first_in = (o / params.per_group_out) * params.per_group_in;
    var acc = 0.0;
    for (var c = 0u; c < params.per_group_in; c++) {
        let xrow = params.x_off + (first_in + c) * params.length;
        let wrow = params.w_off + (o * params.per_group_in + c) * params.kw;
        for (var j = 0u; j < params.kw; j++) {
            // position in the unpadded input
            let at = i32(l * params.stride + j * params.dilation) - i32(params.pad);
            if (at >= 0 && at < i32(params.length)) { acc += f32(x[xrow + u32(at)]) * f32(w[wrow + j]); }
        }
    }
    if (params.has_bias != 0u) { acc += f32(b[params.b_off + o]); }
    out[params.out_off + o * params.l_out + l] = T(acc);
}
