// embed: out[t, :] = table[ids[t], :]                        reference: tests/reference.py::embed
// bindings: table (V, D) rows table_stride apart, ids (T,) i32 -> out (T, D); params
// A table split into row blocks (larger than one binding) runs once per block: rows row_lo..row_hi-1.
// entry main_f16x2: an F16 table on an adapter without shader-f16: table_h holds two halves a u32 word,
// unpacked with unpack2x16float into an f32 out.
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
@group(0) @binding(0) var<storage, read> table_h: array<u32>;  // element i: half i & 1 of word i >> 1

const NONE: u32 = 0xffffffffu;

// The table element out[t, d] copies; NONE when d is past the row or the token's row is in another block.
fn table_index(wid: vec3<u32>, lid: u32) -> u32 {
    let d = wid.x * WG + lid;
    let id = u32(ids[params.ids_off + wid.y]);
    if (d >= params.dim || id < params.row_lo || id >= params.row_hi) { return NONE; }
    return params.table_off + (id - params.row_lo) * params.table_stride + d;
}

fn out_index(wid: vec3<u32>, lid: u32) -> u32 { return params.out_off + wid.y * params.dim + wid.x * WG + lid; }

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = table_index(wid, lid);
    if (i != NONE) { out[out_index(wid, lid)] = table[i]; }
}

@compute @workgroup_size(WG)
fn main_f16x2(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = table_index(wid, lid);
    if (i != NONE) { out[out_index(wid, lid)] = T(unpack2x16float(table_h[i >> 1u])[i & 1u]); }
}
