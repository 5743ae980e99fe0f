// attention_relative: self-attention of one sequence with relative position keys and values shared by the
// heads (Shaw et al.; VITS's text encoder)                  reference: tests/reference.py::attention_relative
// bindings: q, k, v (T, H, D) rows q_stride / k_stride / v_stride apart (each row's heads dense), rel_k,
// rel_v (2W + 1, D) dense for offsets -W..W -> out (T, H, D) dense; params.
// Query i scores key j as scale * (q_i . k_j + q_i . rel_k[j - i + W]), the relative term only when
// |j - i| <= W; every key is visible; out_i = sum_j p_ij (v_j + rel_v[j - i + W] when |j - i| <= W).
// grid: (H, Y, Z), query row t = y + z * grid_y (one dimension holds at most 65535 workgroups): one workgroup
// per (head, query row). Keys go by in tiles of WG with an online softmax as in attention_dense.wgsl:
// invocation i scores key tile + i, then accumulates output features i, i + WG, ...
alias T = f32;
override WG: u32 = 64;
const MAX_D: u32 = 256u;
const PER_INVOCATION: u32 = 4u;  // MAX_D / WG for WG >= 64
const NEG: f32 = -3.0e38;

struct Params {
    q_off: u32,
    q_stride: u32,
    k_off: u32,
    k_stride: u32,
    v_off: u32,
    v_stride: u32,
    rel_k_off: u32,
    rel_v_off: u32,
    out_off: u32,
    rows: u32,
    heads: u32,
    dim: u32,
    window: u32,
    grid_y: u32,
    scale: f32,
}

@group(0) @binding(0) var<storage, read> q: array<T>;
@group(0) @binding(1) var<storage, read> k: array<T>;
@group(0) @binding(2) var<storage, read> v: array<T>;
@group(0) @binding(3) var<storage, read> rel_k: array<T>;
@group(0) @binding(4) var<storage, read> rel_v: array<T>;
@group(0) @binding(5) var<storage, read_write> out: array<T>;
@group(0) @binding(6) var<uniform> params: Params;

var<workgroup> query: array<f32, MAX_D>;  // (D,) this row's query
var<workgroup> probs: array<f32, WG>;  // (WG,) this key tile's weights
var<workgroup> partial: array<f32, WG>;  // (WG,) tree reduction scratch

// The tile's largest score (as _reduce.wgsl's reduce_max). Call from uniform control flow only.
fn tile_max(value: f32, lid: u32) -> f32 {
    partial[lid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (lid < width) { partial[lid] = max(partial[lid], partial[lid + width]); }
        workgroupBarrier();
    }
    let best = partial[0];
    workgroupBarrier();
    return best;
}

// The row of rel_k / rel_v for query i and key j, or -1 when |j - i| > W (no relative term).
fn rel_row(i: u32, j: u32) -> i32 {
    let offset = i32(j) - i32(i);
    let w = i32(params.window);
    return select(-1, offset + w, abs(offset) <= w);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let i = wid.y + wid.z * params.grid_y;
    if (i >= params.rows) { return; }  // the last z slice's spare workgroups: uniform, before any barrier
    let dim = params.dim;
    for (var d = lid; d < dim; d += WG) {
        query[d] = f32(q[params.q_off + i * params.q_stride + h * dim + d]);
    }
    workgroupBarrier();
    var m = NEG;
    var l = 0.0;
    var acc = array<f32, PER_INVOCATION>();
    for (var tile = 0u; tile < params.rows; tile += WG) {
        let j = tile + lid;
        var s = NEG;
        if (j < params.rows) {
            let base = params.k_off + j * params.k_stride + h * dim;
            var dot = 0.0;
            for (var d = 0u; d < dim; d++) { dot += query[d] * f32(k[base + d]); }
            let r = rel_row(i, j);
            if (r >= 0) {
                let rel_base = params.rel_k_off + u32(r) * dim;
                for (var d = 0u; d < dim; d++) { dot += query[d] * f32(rel_k[rel_base + d]); }
            }
            s = dot * params.scale;
        }
        let m_new = max(m, tile_max(s, lid));
        probs[lid] = select(0.0, exp(s - m_new), j < params.rows);
        let correction = exp(m - m_new);  // 0 on the first tile: m is NEG
        workgroupBarrier();
        let count = min(WG, params.rows - tile);
        var total = 0.0;
        for (var jj = 0u; jj < count; jj++) { total += probs[jj]; }
        l = l * correction + total;
        for (var slot = 0u; slot < PER_INVOCATION; slot++) {
            let d = lid + slot * WG;
            if (d < dim) {
                var a = acc[slot] * correction;
                for (var jj = 0u; jj < count; jj++) {
                    var value = f32(v[params.v_off + (tile + jj) * params.v_stride + h * dim + d]);
                    let r = rel_row(i, tile + jj);
                    if (r >= 0) { value += f32(rel_v[params.rel_v_off + u32(r) * dim + d]); }
                    a += probs[jj] * value;
                }
                acc[slot] = a;
            }
        }
        m = m_new;
        workgroupBarrier();  // before the next tile overwrites probs
    }
    let inv = 1.0 / l;  // l >= 1: the largest score's weight is exp(0)
    for (var slot = 0u; slot < PER_INVOCATION; slot++) {
        let d = lid + slot * WG;
        if (d < dim) {
            out[params.out_off + (i * params.heads + h) * dim + d] = T(acc[slot] * inv);
        }
    }
}
