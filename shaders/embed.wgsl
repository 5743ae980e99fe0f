// embed: out[t, :] = table[ids[t], :]                        reference: tests/reference.py::embed
// bindings: table (V, D) rows table_stride apart, ids (T,) i32 -> out (T, D); params
// A table split into row blocks (larger than one binding) runs once per block: rows row_lo..row_hi-1.
// grid: (ceil(D / WG), T)
alias T = f32;
override WG: u32 = 64;

struct Params {
    dim: u32,
    table_off: u32,     // in elements, like every offset and stride
    table_stride: u32,
    ids_off: u32,
    out_off: u32,
    row_lo: u32,
    row_hi: u32,
}

@group(0) @binding(0) var<storage, read> table: array<T>;
@group(0) @binding(1) var<storage, read> ids: array<i32>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let d = wid.x * WG + lid;
    let t = wid.y;
    if (d >= params.dim) { return; }
    let id = u32(ids[params.ids_off + t]);
    if (id < params.row_lo || id >= params.row_hi) { return; }
    out[params.out_off + t * params.dim + d] = table[params.table_off + (id - params.row_lo) * params.table_stride + d];
}
