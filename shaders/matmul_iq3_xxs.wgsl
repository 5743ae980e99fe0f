// matmul_iq3_xxs: IQ3_XXS blocks dequantized in registers  reference: blazr/quant/iq_blocks.py::_decode_iq3_xxs
// block (98 bytes, 256 values): d f16, qs[64] (byte m: index into the 256 x 4 codebook for values 4m..4m+3),
// then per group g of 32 values a u32 at 66 + 4g: 4 x 7-bit sign indices (row r: values 32g + 8r..+7) | a
// 4-bit scale << 28; v = grid d (0.5 + scale) / 2, negated by the sign pattern. A unit is one row of 8 values
// (g = u / 4, r = u % 4). Entry points, bindings (codebook) and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 98u;
const UNITS: u32 = 32u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 8u * u + 4u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let aux = word_at(b + 66u + 4u * (u / 4u));
    let scale = f16_at(b) * (0.5 + f32(aux >> 28u)) * 0.5;
    let signs = sign_pattern((aux >> (7u * (u % 4u))) & 127u);
    return array<vec4<f32>, VECS>(
        with_signs(vec4<f32>(bytes4(codebook[byte_at(b + 2u + 2u * u)])) * scale, signs),
        with_signs(vec4<f32>(bytes4(codebook[byte_at(b + 3u + 2u * u)])) * scale, signs >> 4u),
    );
}
