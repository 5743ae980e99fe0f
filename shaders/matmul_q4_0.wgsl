// matmul_q4_0: Q4_0 blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q4_0
// block (18 bytes, 32 values): d f16, qs[16]: byte i holds value i (low nibble) and i + 16 (high); v = d (q - 8).
// A unit is one u32 of qs (blocks are 2-byte aligned, so read at any alignment): values 4u.. and 16 + 4u..
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 32u;
const BLOCK_BYTES: u32 = 18u;
const UNITS: u32 = 4u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 4u * u + 16u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let d = f16_at(b);
    let q = word_at(b + 2u + 4u * u);
    return array<vec4<f32>, VECS>(d * (vec4<f32>(low_nibbles(q)) - 8.0), d * (vec4<f32>(high_nibbles(q)) - 8.0));
}
