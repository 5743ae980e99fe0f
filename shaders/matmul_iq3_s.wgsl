// matmul_iq3_s: IQ3_S super-blocks dequantized in registers  reference: blazr/quant/iq_blocks.py::_decode_iq3_s
// block (110 bytes, 256 values): d f16, qs[64] (bits 0-7 of a 9-bit index into the 512 x 4 codebook; index m:
// values 4m..4m+3), qh[8] (bit 8 of index m: bit m % 8 of byte m / 8), signs[32] (bit j of byte k negates
// value 8k + j), scales[4] (a nibble per 32 values, low first); v = grid d (1 + 2 scale), signed. A unit is
// the 8 values of sign byte u (reads at any alignment). Entry points, bindings (codebook) and
// params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 110u;
const UNITS: u32 = 32u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 8u * u + 4u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let high = byte_at(b + 66u + u / 4u) >> (2u * (u % 4u));  // bit 8 of indices 2u and 2u + 1
    let index0 = byte_at(b + 2u + 2u * u) | ((high & 1u) << 8u);
    let index1 = byte_at(b + 3u + 2u * u) | ((high & 2u) << 7u);
    let nibble = (byte_at(b + 106u + u / 8u) >> (4u * ((u / 4u) % 2u))) & 15u;  // group of 32: u / 4
    let scale = f16_at(b) * f32(1u + 2u * nibble);
    let signs = byte_at(b + 74u + u);
    return array<vec4<f32>, VECS>(
        with_signs(vec4<f32>(bytes4(codebook[index0])) * scale, signs),
        with_signs(vec4<f32>(bytes4(codebook[index1])) * scale, signs >> 4u),
    );
}
