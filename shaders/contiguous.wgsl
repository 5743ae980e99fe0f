// contiguous (internal, no base.OPS entry): a dense copy of a strided view, converting S to T on the way.
// bindings: x (up to 4-d strided view of S) -> out (dense, same shape, T); params
// entry widen_f16x2: x is an F16 weight on an adapter without shader-f16 (xh: two halves a u32 word), out f32.
// grid: ceil(n / WG) workgroups, folded into y past 65535
alias S = f32;
alias T = f32;
override WG: u32 = 64;

struct Params {
    n: u32,
    d1: u32,
    d2: u32,
    d3: u32,
    x_off: u32,
    x0: u32,
    x1: u32,
    x2: u32,
    x3: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<S>;
@group(0) @binding(1) var<storage, read_write> out: array<T>;
@group(0) @binding(2) var<uniform> params: Params;
@group(0) @binding(0) var<storage, read> xh: array<u32>;  // element i: half i & 1 of word i >> 1

// Element i of the dense output: the invocation's flat index in the folded grid.
fn flat_index(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * groups.x + wid.x) * WG + lid;
}

// Where element i of the dense output sits in the strided view x.
fn x_index(i: u32) -> u32 {
    let i3 = i % params.d3;
    let i2 = (i / params.d3) % params.d2;
    let i1 = (i / (params.d3 * params.d2)) % params.d1;
    let i0 = i / (params.d3 * params.d2 * params.d1);
    return params.x_off + i0 * params.x0 + i1 * params.x1 + i2 * params.x2 + i3 * params.x3;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, groups, lid);
    if (i >= params.n) { return; }
    out[params.out_off + i] = T(x[x_index(i)]);
}

@compute @workgroup_size(WG)
fn widen_f16x2(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, groups, lid);
    if (i >= params.n) { return; }
    let j = x_index(i);
    out[params.out_off + i] = T(unpack2x16float(xh[j >> 1u])[j & 1u]);
}
