// matmul_q4_1: Q4_1 blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q4_1
// block (20 bytes, 32 values): d f16, m f16, qs[16]: byte i holds value i (low nibble) and i + 16; v = d q + m.
// Blocks are 4-byte aligned: a unit is one u32 word of qs, values 4u.. and 16 + 4u..
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 32u;
const BLOCK_BYTES: u32 = 20u;
const UNITS: u32 = 4u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 4u * u + 16u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let dm = unpack2x16float(w[b >> 2u]);  // (d, m)
    let q = w[(b >> 2u) + 1u + u];
    return array<vec4<f32>, VECS>(dm.x * vec4<f32>(low_nibbles(q)) + dm.y, dm.x * vec4<f32>(high_nibbles(q)) + dm.y);
}
