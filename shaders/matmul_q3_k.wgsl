// matmul_q3_k: Q3_K super-blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q3_k
// block (110 bytes, 256 values): hmask[32], qs[64] (2-bit), scales[12] (16 six-bit signed scales), d f16;
// v = d sc (q - 4 if the hmask bit is clear). In half h (128 values), bits 2s..2s+1 of qs byte 32h + l and
// bit 4h + s of hmask byte l hold value 128h + 32s + l (l < 32). A unit is 4 consecutive l of one half, all s
// (u32 reads at any alignment). Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 110u;
const UNITS: u32 = 16u;
const VECS: u32 = 4u;

fn unit_offset(u: u32, i: u32) -> u32 { return 128u * (u / 8u) + 32u * i + 4u * (u % 8u); }

// scale of group g (16 values): low 4 bits from nibble g / 8 of byte g % 8, high 2 from byte 8 + g % 4
fn q3_scale(b: u32, g: u32) -> f32 {
    let low = (byte_at(b + 96u + g % 8u) >> (4u * (g / 8u))) & 15u;
    let high = (byte_at(b + 104u + g % 4u) >> (2u * (g / 4u))) & 3u;
    return f32(i32(low | (high << 4u)) - 32);
}

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let h = u / 8u;
    let l = 4u * (u % 8u);
    let d = f16_at(b + 108u);
    let q = bytes4(word_at(b + 32u + 32u * h + l));
    let hmask = bytes4(word_at(b + l));
    var v: array<vec4<f32>, VECS>;
    for (var s = 0u; s < 4u; s++) {
        let low = (q >> vec4<u32>(2u * s)) & vec4<u32>(3u);
        let high = (hmask >> vec4<u32>(4u * h + s)) & vec4<u32>(1u);
        let codes = vec4<i32>(low | (high << vec4<u32>(2u))) - 4;
        v[s] = vec4<f32>(codes) * (d * q3_scale(b, 8u * h + 2u * s + l / 16u));
    }
    return v;
}
