// topk: the k largest of each row, largest first, ties by lower index   reference: tests/reference.py::topk
// bindings: x (B, N) rows x_stride apart -> values (B, k), indices (B, k) i32; params. Uses _reduce.wgsl.
// grid: (B, 1): one workgroup per row; k rounds, each picking the best entry ranked after the last pick.
alias T = f32;
override WG: u32 = 64;
const NONE: u32 = 0xffffffffu;

struct Params {
    n: u32,
    k: u32,
    x_off: u32,
    x_stride: u32,
    values_off: u32,
    indices_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read_write> values: array<T>;
@group(0) @binding(2) var<storage, read_write> indices: array<i32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = params.x_off + wid.x * params.x_stride;
    let neg_inf = bitcast<f32>(0xff800000u);
    var last_v = bitcast<f32>(0x7f800000u);  // +inf, index NONE: everything ranks after it
    var last_i = NONE;
    for (var r = 0u; r < params.k; r++) {
        var best_v = neg_inf;
        var best_i = NONE;
        for (var i = lid; i < params.n; i += WG) {
            let v = f32(x[row + i]);
            if (ranks_before(last_v, last_i, v, i) && ranks_before(v, i, best_v, best_i)) {
                best_v = v;
                best_i = i;
            }
        }
        let best = reduce_best(best_v, best_i, lid);
        last_v = bitcast<f32>(best.x);
        last_i = best.y;
        if (lid == 0u) {
            values[params.values_off + wid.x * params.k + r] = T(last_v);
            indices[params.indices_off + wid.x * params.k + r] = i32(last_i);
        }
    }
}
