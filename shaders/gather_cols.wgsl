// gather_cols: out[t, j] = x[t, perm[j]]                     reference: numpy x[:, perm]
// Puts activations into the column order of a packed GPTQ act-order weight (blazr/quant/int4.py), and an
// embedded row of one back into input order (with the inverse permutation).
// bindings: x (T, K) rows x_stride apart, perm (K,) i32 -> out (T, K) dense
// grid: (ceil(K / WG), T)
alias T = f32;
override WG: u32 = 64;

struct Params {
    k: u32,
    x_off: u32,
    x_stride: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> perm: array<i32>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let j = wid.x * WG + lid;
    if (j >= params.k) { return; }
    let t = wid.y;
    out[params.out_off + t * params.k + j] = x[params.x_off + t * params.x_stride + u32(perm[j])];
}
