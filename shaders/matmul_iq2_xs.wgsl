// matmul_iq2_xs: IQ2_XS blocks dequantized in registers  reference: blazr/quant/iq_blocks.py::_decode_iq2_xs
// block (74 bytes, 256 values): d f16, qs[32] u16 (9-bit index into the 512 x 8 codebook | 7-bit sign index
// << 9; code k: values 8k..8k+7), scales[8] (a nibble per 16 values, low first); v = grid d (0.5 + scale) / 4,
// negated by the sign pattern. A unit is the 8 values of one code. Entry points, bindings (the
// codebook) and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 74u;
const UNITS: u32 = 32u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 8u * u + 4u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let code = u16_at(b + 2u + 2u * u);
    let index = code & 511u;
    let nibble = (byte_at(b + 66u + u / 4u) >> (4u * ((u / 2u) % 2u))) & 15u;  // group of 16: u / 2
    let scale = f16_at(b) * (0.5 + f32(nibble)) * 0.25;
    let signs = sign_pattern(code >> 9u);
    return array<vec4<f32>, VECS>(
        with_signs(vec4<f32>(bytes4(codebook[2u * index])) * scale, signs),
        with_signs(vec4<f32>(bytes4(codebook[2u * index + 1u])) * scale, signs >> 4u),
    );
}
