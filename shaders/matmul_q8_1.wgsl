// matmul_q8_1: Q8_1 blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q8_1
// block (40 bytes, 32 values; gguf's layout): d f32, s f32 (d times the sum of q; not needed), qs[32] int8;
// v = d q. Blocks are 4-byte aligned: a unit is 4 qs bytes read as one u32, values 4u..4u+3.
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 32u;
const BLOCK_BYTES: u32 = 40u;
const UNITS: u32 = 8u;
const VECS: u32 = 1u;

fn unit_offset(u: u32, i: u32) -> u32 { return 4u * u; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    return array<vec4<f32>, VECS>(i8x4(w[(b >> 2u) + 2u + u]) * f32_at(b));
}
