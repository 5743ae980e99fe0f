// matmul_q5_0: Q5_0 blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q5_0
// block (22 bytes, 32 values): d f16, qh[4] (bit j: bit 4 of value j), qs[16]: byte i holds value i (low
// nibble) and i + 16 (high); v = d (q - 16). A unit is one u32 of qs (read at any alignment): values 4u..
// and 16 + 4u.. Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 32u;
const BLOCK_BYTES: u32 = 22u;
const UNITS: u32 = 4u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 4u * u + 16u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let d = f16_at(b);
    let qh = word_at(b + 2u);
    let q = word_at(b + 6u + 4u * u);
    let shifts = vec4<u32>(4u * u) + vec4<u32>(0u, 1u, 2u, 3u);
    let lo = low_nibbles(q) | (((vec4<u32>(qh) >> shifts) & vec4<u32>(1u)) << vec4<u32>(4u));
    let hi = high_nibbles(q) | (((vec4<u32>(qh) >> (shifts + 16u)) & vec4<u32>(1u)) << vec4<u32>(4u));
    return array<vec4<f32>, VECS>(d * vec4<f32>(vec4<i32>(lo) - 16), d * vec4<f32>(vec4<i32>(hi) - 16));
}
