// matmul_nvfp4: NVFP4 blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_nvfp4
// block (36 bytes, 64 values): 4 ue4m3 scales (one per group of 16), qs[32]: bytes 8g.. hold the e2m1 codes of
// values 16g + l (low nibble) and 16g + 8 + l (high); v = FP4_LEVELS[code] ue4m3 / 2 (doubled levels, half
// scale, as ggml). Blocks are 4-byte aligned: a unit is one u32 word of qs, values 16g + 4k.. and
// 16g + 8 + 4k.. (g = u / 2, k = u % 2). Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 64u;
const BLOCK_BYTES: u32 = 36u;
const UNITS: u32 = 8u;
const VECS: u32 = 2u;

// ggml's kvalues_mxfp4 (the e2m1 values doubled) as int8 bytes, for i8_lookup
const FP4_LEVELS = vec4<u32>(0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu);

fn ue4m3_half(x: u32) -> f32 {
    let exponent = (x >> 3u) & 15u;
    let mantissa = f32(x & 7u);
    if (x == 0x7fu) { return 0.0; }
    if (exponent == 0u) { return ldexp(mantissa, -10); }  // subnormal: m 2^-9 / 2
    return ldexp(8.0 + mantissa, i32(exponent) - 11);  // (1 + m / 8) 2^(e - 7) / 2
}

fn unit_offset(u: u32, i: u32) -> u32 { return 16u * (u / 2u) + 8u * i + 4u * (u % 2u); }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let scale = ue4m3_half(byte_at(b + u / 2u));
    let q = w[(b >> 2u) + 1u + u];
    return array<vec4<f32>, VECS>(
        i8_lookup(FP4_LEVELS, low_nibbles(q)) * scale,
        i8_lookup(FP4_LEVELS, high_nibbles(q)) * scale,
    );
}
