// conv_transpose1d: grouped transposed 1-d convolution with stride, `pad` columns dropped each side
//                                                              reference: tests/reference.py::conv_transpose1d
// bindings: x (C_in, L), w (C_in, C_out / groups, Kw), b (C_out,) (any buffer when has_bias is 0), all dense
// -> out (C_out, L_out), L_out = (L - 1) stride - 2 pad + Kw; params
// grid: (ceil(L_out / WG), C_out). One invocation per output element gathers the taps that land on it: input
// column t, tap j reaches output column t * stride + j - pad.
alias T = f32;
override WG: u32 = 64;

struct Params {
    length: u32,
    per_group_in: u32,  // C_in / groups
    per_group_out: u32, // C_out / groups
    kw: u32,
    stride: u32,
    pad: u32,
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
    let p = l + params.pad;  // column before the crop: t * stride + j == p
    // inputs t with 0 <= p - t * stride < kw and t < length
    let t_hi = min(p / params.stride, params.length - 1u);
    var t_lo = 0u;
    if (p + 1u > params.kw) { t_lo = (p + 1u - params.kw + params.stride - 1u) / params.stride; }
    let g = o / params.per_group_out;
    let o_in_group = o % params.per_group_out;
    var acc = 0.0;
    for (var c = g * params.per_group_in; c < (g + 1u) * params.per_group_in; c++) {
        let xrow = params.x_off + c * params.length;
        let wrow = params.w_off + (c * params.per_group_out + o_in_group) * params.kw;
        for (var t = t_lo; t <= t_hi; t++) {
            acc += f32(x[xrow + t]) * f32(w[wrow + p - t * params.stride]);
        }
    }
    if (params.has_bias != 0u) { acc += f32(b[params.b_off + o]); }
    out[params.out_off + o * params.l_out + l] = T(acc);
}
