// matmul_iq2_s: IQ2_S super-blocks dequantized in registers  reference: blazr/quant/iq_blocks.py::_decode_iq2_s
// block (82 bytes, 256 values): d f16, qs[32] (bits 0-7 of a 10-bit index into the 1024 x 8 codebook; row k:
// values 8k..8k+7), signs[32] (bit j of byte k negates value 8k + j), qh[8] (bits 8-9 of row k at bits
// 2 (k % 4) of byte k / 4), scales[8] (a nibble per 16 values, low first); v = grid d (0.5 + scale) / 4,
// signed. A unit is one row. Entry points, bindings (codebook) and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 82u;
const UNITS: u32 = 32u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 8u * u + 4u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let high = (byte_at(b + 66u + u / 4u) >> (2u * (u % 4u))) & 3u;
    let index = byte_at(b + 2u + u) | (high << 8u);
    let nibble = (byte_at(b + 74u + u / 4u) >> (4u * ((u / 2u) % 2u))) & 15u;  // group of 16: u / 2
    let scale = f16_at(b) * (0.5 + f32(nibble)) * 0.25;
    let signs = byte_at(b + 34u + u);
    return array<vec4<f32>, VECS>(
        with_signs(vec4<f32>(bytes4(codebook[2u * index])) * scale, signs),
        with_signs(vec4<f32>(bytes4(codebook[2u * index + 1u])) * scale, signs >> 4u),
    );
}
