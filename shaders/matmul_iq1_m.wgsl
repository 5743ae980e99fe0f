// matmul_iq1_m: IQ1_M super-blocks dequantized in registers  reference: blazr/quant/iq_blocks.py::_decode_iq1_m
// block (56 bytes, 256 values): qs[32] (bits 0-7 of an 11-bit index into the 2048 x 8 codebook of -1, 0, 1;
// row k: values 8k..8k+7), qh[16] (nibble k, low first: bits 8-10 of row k | the sign of its offset << 3),
// 4 u16 at 48: 16 x 3-bit scales (3 (k / 2 % 4) in word k / 8) with the f16 d in their top nibbles;
// v = (grid +/- 1/8) d (2 scale + 1). Blocks are 4-byte aligned; a unit is one row.
// Entry points, bindings (codebook) and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 56u;
const UNITS: u32 = 32u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 8u * u + 4u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let sc = vec2<u32>(w[(b >> 2u) + 12u], w[(b >> 2u) + 13u]);  // the 4 u16 scale words
    let d_low = ((sc.x >> 12u) & 0xfu) | ((sc.x >> 24u) & 0xf0u);  // top nibbles of words 0 and 1
    let d_bits = d_low | ((sc.y >> 4u) & 0xf00u) | ((sc.y >> 16u) & 0xf000u);
    let words = vec4<u32>(sc.x, sc.x >> 16u, sc.y, sc.y >> 16u);
    let code = (words[u / 8u] >> (3u * ((u / 2u) % 4u))) & 7u;
    let scale = unpack2x16float(d_bits).x * f32(2u * code + 1u);
    let nibble = (byte_at(b + 32u + u / 2u) >> (4u * (u % 2u))) & 15u;
    let index = byte_at(b + u) | ((nibble & 7u) << 8u);
    let delta = select(0.125, -0.125, nibble >= 8u);
    return array<vec4<f32>, VECS>(
        (i8x4(codebook[2u * index]) + delta) * scale,
        (i8x4(codebook[2u * index + 1u]) + delta) * scale,
    );
}
