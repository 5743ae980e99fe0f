// matmul_mxfp4: MXFP4 blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_mxfp4
// block (17 bytes, 32 values): e (e8m0 scale byte), qs[16]: byte i holds the e2m1 code of value i (low
// nibble) and i + 16 (high); v = FP4_LEVELS[code] 2^(e - 128) (doubled levels, half scale, as ggml).
// A unit is one u32 of qs (read at any alignment): values 4u.. and 16 + 4u..
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 32u;
const BLOCK_BYTES: u32 = 17u;
const UNITS: u32 = 4u;
const VECS: u32 = 2u;

// ggml's kvalues_mxfp4 (the e2m1 values doubled) as int8 bytes, for i8_lookup
const FP4_LEVELS = vec4<u32>(0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu);

fn e8m0_half(e: u32) -> f32 {
    if (e < 2u) { return bitcast<f32>(0x00200000u << e); }
    return bitcast<f32>((e - 1u) << 23u);
}

fn unit_offset(u: u32, i: u32) -> u32 { return 4u * u + 16u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let scale = e8m0_half(byte_at(b));
    let q = word_at(b + 1u + 4u * u);
    return array<vec4<f32>, VECS>(
        i8_lookup(FP4_LEVELS, low_nibbles(q)) * scale,
        i8_lookup(FP4_LEVELS, high_nibbles(q)) * scale,
    );
}
