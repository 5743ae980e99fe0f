// sample: the GPU half of Backend.sample                     reference: tests/reference.py::sample
// entry argmax:    logits (B, V) rows logits_stride apart -> ids (B,) i32 (ties to the lower id)
// entry row_stats: logits, temperature (B,) f32 -> stats (B, 2) f32 = [max of logits / t, sum exp(logits / t - max)]
// bindings in that order, params last. Uses _reduce.wgsl. grid: (B, 1): one workgroup per row.
// Candidates come from topk.wgsl; the host picks among them with the row's stats (a few floats per row).
alias T = f32;
override WG: u32 = 64;
const NONE: u32 = 0xffffffffu;

struct Params {
    vocab: u32,
    logits_off: u32,
    logits_stride: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> logits: array<T>;
@group(0) @binding(1) var<storage, read_write> ids: array<i32>;
@group(0) @binding(2) var<storage, read> temperature: array<f32>;
@group(0) @binding(3) var<storage, read_write> stats: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn argmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = params.logits_off + wid.x * params.logits_stride;
    var best_v = bitcast<f32>(0xff800000u);
    var best_i = NONE;
    for (var i = lid; i < params.vocab; i += WG) {
        let v = f32(logits[row + i]);
        if (ranks_before(v, i, best_v, best_i)) {
            best_v = v;
            best_i = i;
        }
    }
    let best = reduce_best(best_v, best_i, lid);
    if (lid == 0u) { ids[params.out_off + wid.x] = i32(best.y); }
}

@compute @workgroup_size(WG)
fn row_stats(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = params.logits_off + wid.x * params.logits_stride;
    let t = temperature[wid.x];
    var best = -3.0e38;
    for (var i = lid; i < params.vocab; i += WG) { best = max(best, f32(logits[row + i]) / t); }
    let top = reduce_max(best, lid);
    var total = 0.0;
    for (var i = lid; i < params.vocab; i += WG) { total += exp(f32(logits[row + i]) / t - top); }
    let z = reduce_sum(total, lid);
    if (lid == 0u) {
        stats[params.out_off + wid.x * 2u] = top;
        stats[params.out_off + wid.x * 2u + 1u] = z;
    }
}
