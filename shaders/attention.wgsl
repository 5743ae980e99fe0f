// attention: causal attention over the paged KV cache, GQA, sliding window, softcap, ALiBi, attention sinks
//                                                            reference: tests/reference.py::attention
// bindings: q (T, H, Dh) rows q_stride apart, k_cache, v_cache (S, Hkv, Dh), block_tables (B, max_blocks),
// ctx_lens (B,), q_lens (B,) i32 -> out (T, H, Dh); params; alibi (H,) f32 slopes (any buffer when has_alibi
// is 0); sinks (H,) f32 logits in each head's softmax sum (any buffer when has_sinks is 0). Uses _reduce.wgsl.
// grid: (H, T): one workgroup per (query head, token). Keys go by in tiles of WG with an online softmax
// (flash-style): invocation i scores key tile + i, then accumulates output features i, i + WG, ...
alias T = f32;
override WG: u32 = 64;
const MAX_DH: u32 = 256u;
const PER_INVOCATION: u32 = 4u;  // MAX_DH / WG for WG >= 64
const NEG: f32 = -3.0e38;

struct Params {
    q_off: u32,
    q_stride: u32,
    k_cache_off: u32,
    v_cache_off: u32,
    block_tables_off: u32,
    ctx_lens_off: u32,
    q_lens_off: u32,
    out_off: u32,
    max_blocks: u32,
    block_size: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    window: u32,
    scale: f32,
    softcap: f32,
    alibi_off: u32,
    has_alibi: u32,
    sinks_off: u32,
    has_sinks: u32,
}

@group(0) @binding(0) var<storage, read> q: array<T>;
@group(0) @binding(1) var<storage, read> k_cache: array<T>;
@group(0) @binding(2) var<storage, read> v_cache: array<T>;
@group(0) @binding(3) var<storage, read> block_tables: array<i32>;
@group(0) @binding(4) var<storage, read> ctx_lens: array<i32>;
@group(0) @binding(5) var<storage, read> q_lens: array<i32>;
@group(0) @binding(6) var<storage, read_write> out: array<T>;
@group(0) @binding(7) var<uniform> params: Params;
@group(0) @binding(8) var<storage, read> alibi: array<f32>;
@group(0) @binding(9) var<storage, read> sinks: array<f32>;

var<workgroup> query: array<f32, MAX_DH>;
var<workgroup> probs: array<f32, WG>;
var<workgroup> slots: array<u32, WG>;
var<workgroup> span: vec3<u32>;  // (sequence, first key, one past the last key)

// The token's sequence and key range; the loop over sequences is short (the batch size).
fn key_span(t: u32) -> vec3<u32> {
    var start = 0u;
    var b = 0u;
    loop {
        let n = u32(q_lens[params.q_lens_off + b]);
        if (t < start + n) { break; }
        start += n;
        b += 1u;
    }
    let pos = u32(ctx_lens[params.ctx_lens_off + b]) - u32(q_lens[params.q_lens_off + b]) + (t - start);
    var lo = 0u;
    if (params.window > 0u && pos + 1u > params.window) { lo = pos + 1u - params.window; }
    return vec3<u32>(b, lo, pos + 1u);
}

fn cache_row(b: u32, j: u32) -> u32 {
    let block = u32(block_tables[params.block_tables_off + b * params.max_blocks + j / params.block_size]);
    return block * params.block_size + j % params.block_size;
}

// slope: ALiBi's for this query head (0 without), added times the key position j before the soft-cap
fn score(slot: u32, kvh: u32, j: u32, slope: f32) -> f32 {
    let base = params.k_cache_off + (slot * params.kv_heads + kvh) * params.head_dim;
    var dot = 0.0;
    for (var d = 0u; d < params.head_dim; d++) { dot += query[d] * f32(k_cache[base + d]); }
    var s = dot * params.scale + slope * f32(j);
    if (params.softcap > 0.0) { s = params.softcap * tanh(clamp(s / params.softcap, -15.0, 15.0)); }
    return s;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let t = wid.y;
    let kvh = h / (params.heads / params.kv_heads);
    var slope = 0.0;
    if (params.has_alibi != 0u) { slope = alibi[params.alibi_off + h]; }
    if (lid == 0u) { span = key_span(t); }
    for (var d = lid; d < params.head_dim; d += WG) {
        query[d] = f32(q[params.q_off + t * params.q_stride + h * params.head_dim + d]);
    }
    let range = workgroupUniformLoad(&span);  // also the barrier that publishes `query`
    var m = NEG;
    var l = 0.0;
    if (params.has_sinks != 0u) {  // the sink as a first key of weight exp(0) = 1 and no value
        m = sinks[params.sinks_off + h];
        l = 1.0;
    }
    var acc = array<f32, PER_INVOCATION>();
    for (var tile = range.y; tile < range.z; tile += WG) {
        let j = tile + lid;
        var s = NEG;
        if (j < range.z) {
            slots[lid] = cache_row(range.x, j);
            s = score(slots[lid], kvh, j, slope);
        }
        let m_new = max(m, reduce_max(s, lid));
        probs[lid] = select(0.0, exp(s - m_new), j < range.z);
        let correction = exp(m - m_new);  // 0 on the first tile (m is NEG), unless a sink started it
        workgroupBarrier();
        let count = min(WG, range.z - tile);
        var total = 0.0;
        for (var jj = 0u; jj < count; jj++) { total += probs[jj]; }
        l = l * correction + total;
        for (var r = 0u; r < PER_INVOCATION; r++) {
            let d = lid + r * WG;
            if (d < params.head_dim) {
                var a = acc[r] * correction;
                for (var jj = 0u; jj < count; jj++) {
                    let row = params.v_cache_off + (slots[jj] * params.kv_heads + kvh) * params.head_dim;
                    a += probs[jj] * f32(v_cache[row + d]);
                }
                acc[r] = a;
            }
        }
        m = m_new;
        workgroupBarrier();  // before the next tile overwrites probs and slots
    }
    for (var r = 0u; r < PER_INVOCATION; r++) {
        let d = lid + r * WG;
        if (d < params.head_dim) {
            out[params.out_off + (t * params.heads + h) * params.head_dim + d] = T(acc[r] / l);
        }
    }
}
