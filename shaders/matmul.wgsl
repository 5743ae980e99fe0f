// matmul: out[t, n] = sum_k x[t, k] * w[n, k]  (x @ w.T)     reference: tests/reference.py::matmul
// bindings: x (T, K) rows x_stride apart, w (N, K) dense -> out (T, N) rows out_stride apart; params
// entry main:    any layout. grid (ceil(N / WG), ceil(T / 4)): an invocation computes one output column for
//                4 tokens, so each weight element is loaded once per 4 tokens.
// entry matvec4: K, offsets and strides multiples of 4 (x4, w4 are the same buffers read as vec4).
//                grid (ceil(N / WG), T): an invocation computes one output; vec4 loads run 10x faster on
//                llvmpipe than scalar ones. Both accumulate in f32 whatever T is.
// entries main_f16x2, matvec4_f16x2: the same two kernels for an F16 weight on an adapter without
//                shader-f16: wh holds two halves a u32 word (the f16 bytes as they are), unpacked in
//                registers with unpack2x16float, which every WebGPU backend has; x and out are f32 there.
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
@group(0) @binding(1) var<storage, read> wh: array<u32>;         // element i: half i & 1 of word i >> 1
@group(0) @binding(1) var<storage, read> wh4: array<vec2<u32>>;  // 4 halves a load

// One invocation of `main`: output column n for tokens t0..t0+rows-1. Rows past the last token re-read
// the last one, so the inner loop has no branches.
struct Tile {
    n: u32,
    t0: u32,
    rows: u32,
    x_rows: vec4<u32>,  // first element of each token's x row
    w_row: u32,         // first element of weight row n
}

fn tile(wid: vec3<u32>, lid: u32) -> Tile {
    let t0 = wid.y * 4u;
    let rows = min(4u, params.tokens - t0);
    let last = vec4<u32>(rows - 1u);
    let x_rows = params.x_off + (t0 + min(vec4<u32>(0u, 1u, 2u, 3u), last)) * params.x_stride;
    let n = wid.x * WG + lid;
    return Tile(n, t0, rows, x_rows, params.w_off + n * params.k);
}

fn x_at(c: Tile, k: u32) -> vec4<f32> {
    return vec4<f32>(f32(x[c.x_rows.x + k]), f32(x[c.x_rows.y + k]), f32(x[c.x_rows.z + k]), f32(x[c.x_rows.w + k]));
}

fn store(c: Tile, acc: vec4<f32>) {
    for (var r = 0u; r < c.rows; r++) {
        out[params.out_off + (c.t0 + r) * params.out_stride + c.n] = T(acc[r]);
    }
}

fn half_at(i: u32) -> f32 { return unpack2x16float(wh[i >> 1u])[i & 1u]; }

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = tile(wid, lid);
    if (c.n >= params.n) { return; }
    var acc = vec4<f32>(0.0);
    for (var k = 0u; k < params.k; k++) {
        acc += f32(w[c.w_row + k]) * x_at(c, k);
    }
    store(c, acc);
}

@compute @workgroup_size(WG)
fn main_f16x2(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = tile(wid, lid);
    if (c.n >= params.n) { return; }
    var acc = vec4<f32>(0.0);
    var k = min(c.w_row & 1u, params.k);  // a row starting on an odd half (odd K) takes its first element alone
    if (k == 1u) { acc += half_at(c.w_row) * x_at(c, 0u); }
    for (; k + 1u < params.k; k += 2u) {
        let pair = unpack2x16float(wh[(c.w_row + k) >> 1u]);
        acc += pair.x * x_at(c, k);
        acc += pair.y * x_at(c, k + 1u);
    }
    if (k < params.k) { acc += half_at(c.w_row + k) * x_at(c, k); }
    store(c, acc);
}

// One invocation of `matvec4`: output n of token t; x and weight rows in vec4 units.
struct Cell {
    n: u32,
    t: u32,
    x_row: u32,
    w_row: u32,
}

fn cell(wid: vec3<u32>, lid: u32) -> Cell {
    let n = wid.x * WG + lid;
    return Cell(n, wid.y, (params.x_off + wid.y * params.x_stride) / 4u, (params.w_off + n * params.k) / 4u);
}

fn store_cell(c: Cell, acc: vec4<f32>) {
    out[params.out_off + c.t * params.out_stride + c.n] = T(acc.x + acc.y + acc.z + acc.w);
}

@compute @workgroup_size(WG)
fn matvec4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = cell(wid, lid);
    if (c.n >= params.n) { return; }
    let k4 = params.k / 4u;
    var acc = vec4<f32>(0.0);
    for (var k = 0u; k < k4; k++) {
        acc += vec4<f32>(w4[c.w_row + k]) * vec4<f32>(x4[c.x_row + k]);
    }
    store_cell(c, acc);
}

@compute @workgroup_size(WG)
fn matvec4_f16x2(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = cell(wid, lid);
    if (c.n >= params.n) { return; }
    let k4 = params.k / 4u;
    var acc = vec4<f32>(0.0);
    for (var k = 0u; k < k4; k++) {
        let q = wh4[c.w_row + k];
        acc += vec4<f32>(unpack2x16float(q.x), unpack2x16float(q.y)) * vec4<f32>(x4[c.x_row + k]);
    }
    store_cell(c, acc);
}
