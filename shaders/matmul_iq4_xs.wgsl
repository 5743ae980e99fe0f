// matmul_iq4_xs: IQ4_XS blocks dequantized in registers  reference: blazr/quant/iq_blocks.py::_decode_iq4_xs
// block (136 bytes, 256 values): d f16, scales_h u16 (2 high bits per group of 32), scales_l[4] (a nibble per
// group, low first), qs[128]: bytes 16g.. of group g hold the level index of value 32g + l (low nibble) and
// 32g + 16 + l (high); v = IQ4_LEVELS[index] d (sc - 32). Blocks are 4-byte aligned: a unit is one u32 word of
// a group, values 32g + 4k.. and 32g + 16 + 4k.. (g = u / 4, k = u % 4). Entry points etc.: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 136u;
const UNITS: u32 = 32u;
const VECS: u32 = 2u;

// ggml's kvalues_iq4nl (blazr/quant/iq_grids.py::IQ4_NL_VALUES) as int8 bytes, for i8_lookup
const IQ4_LEVELS = vec4<u32>(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);

fn unit_offset(u: u32, i: u32) -> u32 { return 32u * (u / 4u) + 16u * i + 4u * (u % 4u); }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let g = u / 4u;
    let head = w[b >> 2u];  // d f16, scales_h u16
    let low = (byte_at(b + 4u + g / 2u) >> (4u * (g % 2u))) & 15u;
    let high = (head >> (16u + 2u * g)) & 3u;
    let scale = unpack2x16float(head).x * f32(i32(low | (high << 4u)) - 32);
    let q = w[(b >> 2u) + 2u + u];
    return array<vec4<f32>, VECS>(
        i8_lookup(IQ4_LEVELS, low_nibbles(q)) * scale,
        i8_lookup(IQ4_LEVELS, high_nibbles(q)) * scale,
    );
}
