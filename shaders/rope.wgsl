// rope: rotate the first rot features of each head by p * inv_freq   reference: tests/reference.py::rope
// bindings: x (T, H, Dh) rows x_stride apart, table (T, R/2, 2) f32 [cos, sin] -> out (T, H, Dh); params
// grid: (ceil(H * Dh / WG), T). STYLE 0 "neox" pairs i with i + R/2; 1 "interleaved" pairs 2i with 2i + 1.
// The cos/sin table is built on the host in float64: an f32 angle p * inv_freq is off by ~1e-3 rad at p ~ 1e4.
alias T = f32;
override WG: u32 = 64;
override STYLE: u32 = 0;

struct Params {
    heads: u32,
    head_dim: u32,
    rot: u32,
    x_off: u32,
    x_stride: u32,
    table_off: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = wid.x * WG + lid;
    let t = wid.y;
    if (e >= params.heads * params.head_dim) { return; }
    let i = e % params.head_dim;
    let src = params.x_off + t * params.x_stride + e - i;  // start of this head
    var v = f32(x[src + i]);
    if (i < params.rot) {
        let half = params.rot / 2u;
        var pair = i / 2u;
        var partner = i ^ 1u;
        var first = (i & 1u) == 0u;
        if (STYLE == 0u) {
            first = i < half;
            pair = select(i - half, i, first);
            partner = select(i - half, i + half, first);
        }
        let at = params.table_off + (t * half + pair) * 2u;
        let other = f32(x[src + partner]);
        v = select(v * table[at] + other * table[at + 1u], v * table[at] - other * table[at + 1u], first);
    }
    out[params.out_off + t * params.heads * params.head_dim + e] = T(v);
}
