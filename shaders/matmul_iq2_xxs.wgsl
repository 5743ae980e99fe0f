// matmul_iq2_xxs: IQ2_XXS blocks dequantized in registers  reference: blazr/quant/iq_blocks.py::_decode_iq2_xxs
// block (66 bytes, 256 values): d f16, then per group g of 32 values two u32 at 2 + 8g: 4 grid index bytes
// (row r: values 32g + 8r..+7 from the 256 x 8 codebook), and 4 x 7-bit sign indices | a 4-bit scale << 28;
// v = grid d (0.5 + scale) / 4, negated by the sign pattern. A unit is one row of 8 values (g = u / 4,
// r = u % 4); reads at any alignment. Entry points, bindings (codebook) and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 66u;
const UNITS: u32 = 32u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 8u * u + 4u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let r = u % 4u;
    let index = byte_at(b + 2u + 8u * (u / 4u) + r);
    let aux = word_at(b + 6u + 8u * (u / 4u));
    let scale = f16_at(b) * (0.5 + f32(aux >> 28u)) * 0.25;
    let signs = sign_pattern((aux >> (7u * r)) & 127u);
    return array<vec4<f32>, VECS>(
        with_signs(vec4<f32>(bytes4(codebook[2u * index])) * scale, signs),
        with_signs(vec4<f32>(bytes4(codebook[2u * index + 1u])) * scale, signs >> 4u),
    );
}
