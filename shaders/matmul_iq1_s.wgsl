// matmul_iq1_s: IQ1_S super-blocks dequantized in registers  reference: blazr/quant/iq_blocks.py::_decode_iq1_s
// block (50 bytes, 256 values): d f16, qs[32] (bits 0-7 of an 11-bit index into the 2048 x 8 codebook of
// -1, 0, 1; row k: values 8k..8k+7), qh[8] u16 (group g of 32 values: bits 3r..3r+2 are bits 8-10 of row
// 4g + r, bits 12-14 a scale, bit 15 the sign of the offset); v = (grid +/- 1/8) d (2 scale + 1).
// A unit is one row (g = u / 4, r = u % 4). Entry points, bindings (codebook) and params:
// _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 50u;
const UNITS: u32 = 32u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 8u * u + 4u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let qh = u16_at(b + 34u + 2u * (u / 4u));
    let index = byte_at(b + 2u + u) | (((qh >> (3u * (u % 4u))) & 7u) << 8u);
    let scale = f16_at(b) * f32(2u * ((qh >> 12u) & 7u) + 1u);
    let delta = select(0.125, -0.125, qh >= 0x8000u);
    return array<vec4<f32>, VECS>(
        (i8x4(codebook[2u * index]) + delta) * scale,
        (i8x4(codebook[2u * index + 1u]) + delta) * scale,
    );
}
