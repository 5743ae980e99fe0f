// matmul_experts: out[t, j, n] = x[t] . w[expert_ids[t, j], n]   reference: tests/reference.py::matmul_experts
// bindings: x (T, K) rows x_stride apart, w (E, N, K) dense, expert_ids (T, k) i32 -> out (T, k, N); params
// grid: (ceil(N / WG), T * k)
alias T = f32;
override WG: u32 = 64;

struct Params {
    k: u32,
    n: u32,
    x_off: u32,
    x_stride: u32,
    w_off: u32,
    expert_ids_off: u32,
    per_token: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> w: array<T>;
@group(0) @binding(2) var<storage, read> expert_ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = wid.x * WG + lid;
    let pair = wid.y;  // t * per_token + j
    if (n >= params.n) { return; }
    let t = pair / params.per_token;
    let expert = u32(expert_ids[params.expert_ids_off + pair]);
    let xrow = params.x_off + t * params.x_stride;
    let wrow = params.w_off + (expert * params.n + n) * params.k;
    var acc = 0.0;
    for (var k = 0u; k < params.k; k++) {
        acc += f32(x[xrow + k]) * f32(w[wrow + k]);
    }
    out[params.out_off + pair * params.n + n] = T(acc);
}
