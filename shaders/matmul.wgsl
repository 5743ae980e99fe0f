// matmul: out[t, n] = sum_k x[t, k] * w[n, k]  (x @ w.T)     reference: tests/reference.py::matmul
// bindings: x (T, K) rows x_stride apart, w (N, K) dense -> out (T, N) rows out_stride apart; params
// entry main:    any layout. grid (ceil(N / WG), ceil(T / 4)): an invocation computes one output column for
//                4 tokens, so each weight element is loaded once per 4 tokens.
// entry matvec4: K, offsets and strides multiples of 4 (x4, w4 are the same buffers read as vec4).
//                grid (ceil(N / WG), T): an invocation computes one output; vec4 loads run 10x faster on
//                llvmpipe than scalar ones. Both accumulate in f32 whatever T is.
alias T = f32;
override WG: u32 = 64;

struct Params {
    tokens: u32,
    k: u32,
    n: u32,
    x_off: u32,
    x_stride: u32,
    w_off: u32,
    out_off: u32,
    out_stride: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> w: array<T>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(0) var<storage, read> x4: array<vec4<T>>;
@group(0) @binding(1) var<storage, read> w4: array<vec4<T>>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = wid.x * WG + lid;
    let t0 = wid.y * 4u;
    if (n >= params.n) { return; }
    let rows = min(4u, params.tokens - t0);
    // rows past the last token re-read the last one, so the inner loop has no branches
    let x0 = params.x_off + t0 * params.x_stride;
    let x1 = x0 + min(1u, rows - 1u) * params.x_stride;
    let x2 = x0 + min(2u, rows - 1u) * params.x_stride;
    let x3 = x0 + min(3u, rows - 1u) * params.x_stride;
    let wrow = params.w_off + n * params.k;
    var acc = vec4<f32>(0.0);
    for (var k = 0u; k < params.k; k++) {
        let xs = vec4<f32>(f32(x[x0 + k]), f32(x[x1 + k]), f32(x[x2 + k]), f32(x[x3 + k]));
        acc += f32(w[wrow + k]) * xs;
    }
    for (var r = 0u; r < rows; r++) {
        out[params.out_off + (t0 + r) * params.out_stride + n] = T(acc[r]);
    }
}

@compute @workgroup_size(WG)
fn matvec4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = wid.x * WG + lid;
    let t = wid.y;
    if (n >= params.n) { return; }
    let k4 = params.k / 4u;
    let xrow = (params.x_off + t * params.x_stride) / 4u;
    let wrow = (params.w_off + n * params.k) / 4u;
    var acc = vec4<f32>(0.0);
    for (var k = 0u; k < k4; k++) {
        acc += vec4<f32>(w4[wrow + k]) * vec4<f32>(x4[xrow + k]);
    }
    out[params.out_off + t * params.out_stride + n] = T(acc.x + acc.y + acc.z + acc.w);
}
