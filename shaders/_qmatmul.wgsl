// Library: matmul and embed on GGML blocks kept packed, shared by every shaders/matmul_<format>.wgsl.
// reference: tests/reference.py::matmul / ::embed on blazr/quant/ggml_blocks.py::dequantize of the same blocks.
// The format file defines BLOCK_ELEMS, BLOCK_BYTES, UNITS (per block), VECS (vec4s per unit),
// unit_offset(u, i) (the first of the 4 values of vec i of unit u, within the block) and decode_unit(b, u)
// (unit u of the block at byte b, dequantized in registers). Blocks are read as u32 words at byte offsets.
// bindings: w (N rows of row_bytes bytes, u32 words), x4 (T, K) rows x_stride apart, read as vec4 (K, x_off
//           and x_stride multiples of 4), ids (T,) i32 for embed, codebook (IQ formats) -> out (T, N) or (T, K)
//           rows out_stride apart
// entry matvec:  grid (ceil(N / WG), T): an invocation dots one weight row with one token.
// entry matmul4: grid (ceil(N / WG), ceil(T / 4)): one weight row with 4 tokens, so each block decodes once
//                per 4 tokens. entry matvec_glu (T < 4, the gate/up rows of one weight): an invocation dots
//                rows n and n + F, writes both to out and act(gate) * up to glu (T, F); KIND as in glu.wgsl.
//                entry embed: grid (ceil(K / BLOCK_ELEMS * UNITS / WG), T); rows row_lo..row_hi-1.
// entry matvec_experts: grid (ceil(N / WG), P): pair p (token p / per_token) dots row n of expert ids[p] with
//                its token; w holds experts row_lo..row_hi-1, N rows each (pairs routed elsewhere return).
alias T = f32;
override WG: u32 = 64;
override KIND: u32 = 0;

struct Params {
    tokens: u32,
    k: u32,
    n: u32,
    row_bytes: u32,
    x_off: u32,
    x_stride: u32,
    out_off: u32,
    out_stride: u32,
    ids_off: u32,
    row_lo: u32,
    row_hi: u32,
    glu_off: u32,
    per_token: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x4: array<vec4<T>>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read> ids: array<i32>;
@group(0) @binding(5) var<storage, read_write> glu: array<T>;
// the codebook of an IQ format (blazr/quant/iq_grids.py as int8 bytes in u32 words, one row after another);
// the other formats never read it, so their pipelines have no such binding
@group(0) @binding(6) var<storage, read> codebook: array<u32>;

// 4 bytes from byte b at any alignment (the buffer carries one spare word past the last block).
fn word_at(b: u32) -> u32 {
    let i = b >> 2u;
    let s = (b & 3u) * 8u;
    if (s == 0u) { return w[i]; }
    return (w[i] >> s) | (w[i + 1u] << (32u - s));
}

fn byte_at(b: u32) -> u32 { return (w[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu; }

fn i8_at(b: u32) -> f32 { return f32(bitcast<i32>(byte_at(b) << 24u) >> 24u); }

// the u16 at an even byte offset b
fn u16_at(b: u32) -> u32 { return (w[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu; }

// the 4 bytes of q as int8
fn i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q << 24u, q << 16u, q << 8u, q)) >> vec4<u32>(24u));
}

// every f16 field sits at an even byte offset, every f32 field at a multiple of 4
fn f16_at(b: u32) -> f32 { return unpack2x16float(w[b >> 2u] >> ((b & 2u) * 8u)).x; }
fn f32_at(b: u32) -> f32 { return bitcast<f32>(w[b >> 2u]); }

fn bytes4(q: u32) -> vec4<u32> { return vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(0xffu); }
fn low_nibbles(q: u32) -> vec4<u32> { return bytes4(q) & vec4<u32>(0xfu); }
fn high_nibbles(q: u32) -> vec4<u32> { return bytes4(q) >> vec4<u32>(4u); }

// Q4_K / Q5_K: the 6-bit (scale, min) of group g from the 12 scale bytes at b + 4
fn k_scale_min(b: u32, g: u32) -> vec2<f32> {
    let a = byte_at(b + 4u + g);
    let c = byte_at(b + 8u + g);
    if (g < 4u) { return vec2<f32>(f32(a & 63u), f32(c & 63u)); }
    let low = byte_at(b + g);
    return vec2<f32>(f32((c & 15u) | ((low >> 6u) << 4u)), f32((c >> 4u) | ((a >> 6u) << 4u)));
}

// table[codes] for 16 int8 entries packed in 4 u32 (entry c: byte c % 4 of word c / 4): a vector indexed at
// run time stays in registers, where a const array is first copied to memory (about 2x slower on lavapipe)
fn i8_lookup(table: vec4<u32>, codes: vec4<u32>) -> vec4<f32> {
    let c = codes >> vec4<u32>(2u);
    let words = vec4<u32>(table[c.x], table[c.y], table[c.z], table[c.w]);
    let shifts = vec4<u32>(24u) - (codes & vec4<u32>(3u)) * 8u;  // entry c's byte to the top
    return vec4<f32>(bitcast<vec4<i32>>(words << shifts) >> vec4<u32>(24u));
}

// IQ formats: the 8 sign bits of a 7-bit sign index (ggml's ksigns_iq2xs: the 8th makes the count of minus
// signs even)
fn sign_pattern(i: u32) -> u32 { return i | ((countOneBits(i) & 1u) << 7u); }

// v with value j negated where bit j of s is set (exact, as ggml's multiply by -1)
fn with_signs(v: vec4<f32>, s: u32) -> vec4<f32> {
    return select(v, -v, ((vec4<u32>(s) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u)) != vec4<u32>(0u));
}

@compute @workgroup_size(WG)
fn matvec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = wid.x * WG + lid;
    if (n >= params.n) { return; }
    let xrow = (params.x_off + wid.y * params.x_stride) / 4u;
    out[params.out_off + wid.y * params.out_stride + n] = T(row_dot(n, xrow));
}

fn row_dot(n: u32, xrow: u32) -> f32 {
    var acc = vec4<f32>(0.0);
    for (var blk = 0u; blk < params.k / BLOCK_ELEMS; blk++) {
        let b = n * params.row_bytes + blk * BLOCK_BYTES;
        let xb = xrow + blk * (BLOCK_ELEMS / 4u);
        for (var u = 0u; u < UNITS; u++) {
            var v = decode_unit(b, u);
            for (var i = 0u; i < VECS; i++) {
                acc += v[i] * vec4<f32>(x4[xb + unit_offset(u, i) / 4u]);
            }
        }
    }
    return acc.x + acc.y + acc.z + acc.w;
}

@compute @workgroup_size(WG)
fn matvec_glu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let f = params.n / 2u;
    let n = wid.x * WG + lid;
    if (n >= f) { return; }
    let xrow = (params.x_off + wid.y * params.x_stride) / 4u;
    let row = params.out_off + wid.y * params.out_stride;
    let gate = T(row_dot(n, xrow));
    let up = T(row_dot(n + f, xrow));
    out[row + n] = gate;
    out[row + n + f] = up;
    glu[params.glu_off + wid.y * f + n] = T(activation(f32(gate), KIND) * f32(up));
}

@compute @workgroup_size(WG)
fn matvec_experts(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = wid.x * WG + lid;
    let pair = wid.y;
    let expert = u32(ids[params.ids_off + pair]);
    if (n >= params.n || expert < params.row_lo || expert >= params.row_hi) { return; }
    let xrow = (params.x_off + (pair / params.per_token) * params.x_stride) / 4u;
    let row = (expert - params.row_lo) * params.n + n;
    out[params.out_off + pair * params.out_stride + n] = T(row_dot(row, xrow));
}

@compute @workgroup_size(WG)
fn matmul4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = wid.x * WG + lid;
    let t0 = wid.y * 4u;
    if (n >= params.n) { return; }
    let rows = min(4u, params.tokens - t0);
    // rows past the last token re-read the last one, so the inner loop has no branches
    let stride = params.x_stride / 4u;
    let x0 = (params.x_off + t0 * params.x_stride) / 4u;
    let xs = vec4<u32>(x0, x0 + min(1u, rows - 1u) * stride, x0 + min(2u, rows - 1u) * stride,
                       x0 + min(3u, rows - 1u) * stride);
    var acc = mat4x4<f32>();  // column r: token t0 + r
    for (var blk = 0u; blk < params.k / BLOCK_ELEMS; blk++) {
        let b = n * params.row_bytes + blk * BLOCK_BYTES;
        for (var u = 0u; u < UNITS; u++) {
            var v = decode_unit(b, u);
            for (var i = 0u; i < VECS; i++) {
                let e = (blk * BLOCK_ELEMS + unit_offset(u, i)) / 4u;
                acc[0] += v[i] * vec4<f32>(x4[xs.x + e]);
                acc[1] += v[i] * vec4<f32>(x4[xs.y + e]);
                acc[2] += v[i] * vec4<f32>(x4[xs.z + e]);
                acc[3] += v[i] * vec4<f32>(x4[xs.w + e]);
            }
        }
    }
    for (var r = 0u; r < rows; r++) {
        let a = acc[r];
        out[params.out_off + (t0 + r) * params.out_stride + n] = T(a.x + a.y + a.z + a.w);
    }
}

@compute @workgroup_size(WG)
fn embed(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let unit = wid.x * WG + lid;
    let t = wid.y;
    if (unit >= params.k / BLOCK_ELEMS * UNITS) { return; }
    let id = u32(ids[params.ids_off + t]);
    if (id < params.row_lo || id >= params.row_hi) { return; }
    let blk = unit / UNITS;
    let u = unit % UNITS;
    var v = decode_unit((id - params.row_lo) * params.row_bytes + blk * BLOCK_BYTES, u);
    for (var i = 0u; i < VECS; i++) {
        let o = params.out_off + t * params.out_stride + blk * BLOCK_ELEMS + unit_offset(u, i);
        for (var j = 0u; j < 4u; j++) { out[o + j] = T(v[i][j]); }
    }
}
