// attention_dense: attention without a cache over B sequences packed back to back (block-diagonal), GQA,
// causal, window, Dk != Dv                                     reference: tests/reference.py::attention_dense
// bindings: q (Tq, H, Dk) rows q_stride apart, k (Tk, Hkv, Dk) rows k_stride apart, v (Tk, Hkv, Dv) rows
// v_stride apart, starts (2, B + 1) i32: prefix sums of q_lens then of kv_lens (made on the host, so no
// invocation walks the batch) -> out (Tq, H, Dv); params; rel (H, 2R + 1) f32: the relative position bias
// (MPNet's) added to the score of key j for the query at pos as rel[h, clamp(j - pos, -R, R) + R] when has_rel
// (any buffer fills the binding when not; rel_width = 2R + 1).
// grid: (H, Y, Z), query row t = y + z * grid_y (one dimension holds at most 65535 workgroups): one workgroup
// per (query head, query row). Keys go by in tiles of WG with an online softmax (flash-style): invocation i
// scores key tile + i, then accumulates output features i, i + WG, ... as attention.wgsl does.
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
    starts_off: u32,
    out_off: u32,
    rows: u32,
    batch: u32,
    heads: u32,
    kv_heads: u32,
    dk: u32,
    dv: u32,
    causal: u32,
    window: u32,
    grid_y: u32,
    scale: f32,
    rel_off: u32,
    rel_width: u32,
    has_rel: u32,
}

@group(0) @binding(0) var<storage, read> q: array<T>;
@group(0) @binding(1) var<storage, read> k: array<T>;
@group(0) @binding(2) var<storage, read> v: array<T>;
@group(0) @binding(3) var<storage, read> starts: array<i32>;
@group(0) @binding(4) var<storage, read_write> out: array<T>;
@group(0) @binding(5) var<uniform> params: Params;
@group(0) @binding(6) var<storage, read> rel: array<f32>;

var<workgroup> query: array<f32, MAX_D>;  // (Dk,) this row's query
var<workgroup> probs: array<f32, WG>;  // (WG,) this key tile's weights
// (first key row of the sequence, first key, one past the last key, the query's position as i32 bits)
var<workgroup> span: vec4<u32>;
var<workgroup> partial: array<f32, WG>;  // (WG,) tree reduction scratch

// The tile's largest score (as _reduce.wgsl's reduce_max; kept here so the op needs no library).
// Call from uniform control flow only.
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

fn q_start(b: u32) -> u32 { return u32(starts[params.starts_off + b]); }
fn k_start(b: u32) -> u32 { return u32(starts[params.starts_off + params.batch + 1u + b]); }

// The keys row t sees: its sequence by binary search over the query prefix sums (the last b with
// q_start(b) <= t, so empty sequences, which share their start, are skipped), then causal and window.
fn key_span(t: u32) -> vec4<u32> {
    var lo = 0u;
    var hi = params.batch;
    while (lo < hi) {
        let mid = (lo + hi + 1u) / 2u;
        if (q_start(mid) <= t) { lo = mid; } else { hi = mid - 1u; }
    }
    if (lo >= params.batch) { return vec4<u32>(0u, 0u, 0u, 0u); }  // past every sequence: a zero row
    let nq = i32(q_start(lo + 1u) - q_start(lo));
    let nk = i32(k_start(lo + 1u) - k_start(lo));
    let pos = nk - nq + i32(t - q_start(lo));  // negative for queries before every key (cross, causal)
    var first = 0;
    var last = nk;
    if (params.causal != 0u) { last = min(last, pos + 1); }
    if (params.window > 0u) {
        first = max(first, pos - i32(params.window) + 1);
        last = min(last, pos + i32(params.window));
    }
    return vec4<u32>(k_start(lo), u32(first), u32(max(first, last)), bitcast<u32>(pos));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let t = wid.y + wid.z * params.grid_y;
    if (t >= params.rows) { return; }  // the last z slice's spare workgroups: uniform, before any barrier
    let kvh = h / (params.heads / params.kv_heads);
    if (lid == 0u) { span = key_span(t); }
    for (var d = lid; d < params.dk; d += WG) {
        query[d] = f32(q[params.q_off + t * params.q_stride + h * params.dk + d]);
    }
    let range = workgroupUniformLoad(&span);  // also the barrier that publishes `query`
    var m = NEG;
    var l = 0.0;
    var acc = array<f32, PER_INVOCATION>();
    for (var tile = range.y; tile < range.z; tile += WG) {
        let j = tile + lid;
        var s = NEG;
        if (j < range.z) {
            let base = params.k_off + (range.x + j) * params.k_stride + kvh * params.dk;
            var dot = 0.0;
            for (var d = 0u; d < params.dk; d++) { dot += query[d] * f32(k[base + d]); }
            s = dot * params.scale;
            if (params.has_rel != 0u) {
                let reach = i32(params.rel_width / 2u);
                let offset = clamp(i32(j) - bitcast<i32>(range.w), -reach, reach) + reach;
                s += rel[params.rel_off + h * params.rel_width + u32(offset)];
            }
        }
        let m_new = max(m, tile_max(s, lid));
        probs[lid] = select(0.0, exp(s - m_new), j < range.z);
        let correction = exp(m - m_new);  // 0 on the first tile: m is NEG
        workgroupBarrier();
        let count = min(WG, range.z - tile);
        var total = 0.0;
        for (var jj = 0u; jj < count; jj++) { total += probs[jj]; }
        l = l * correction + total;
        for (var r = 0u; r < PER_INVOCATION; r++) {
            let d = lid + r * WG;
            if (d < params.dv) {
                var a = acc[r] * correction;
                for (var jj = 0u; jj < count; jj++) {
                    let row = params.v_off + (range.x + tile + jj) * params.v_stride + kvh * params.dv;
                    a += probs[jj] * f32(v[row + d]);
                }
                acc[r] = a;
            }
        }
        m = m_new;
        workgroupBarrier();  // before the next tile overwrites probs
    }
    let inv = select(0.0, 1.0 / l, l > 0.0);  // a query that sees no key gets zeros
    for (var r = 0u; r < PER_INVOCATION; r++) {
        let d = lid + r * WG;
        if (d < params.dv) {
            out[params.out_off + (t * params.heads + h) * params.dv + d] = T(acc[r] * inv);
        }
    }
}
