// matmul_q8_0: Q8_0 blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q8_0
// block (34 bytes, 32 values): d f16, qs[32] int8; v = d q. A unit is 4 qs bytes read as one u32 at any
// alignment: values 4u..4u+3. Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 32u;
const BLOCK_BYTES: u32 = 34u;
const UNITS: u32 = 8u;
const VECS: u32 = 1u;

fn unit_offset(u: u32, i: u32) -> u32 { return 4u * u; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let q = word_at(b + 2u + 4u * u);
    let signed = vec4<i32>(bitcast<i32>(q << 24u), bitcast<i32>(q << 16u), bitcast<i32>(q << 8u), bitcast<i32>(q));
    return array<vec4<f32>, VECS>(f16_at(b) * vec4<f32>(signed >> vec4<u32>(24u)));
}
