// matmul_q6_k: Q6_K super-blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q6_k
// block (210 bytes, 256 values): ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8 (one per 16
// values), d f16; v = d sc (q - 32). In half h (128 values), ql byte 64h + l holds value l (low nibble) and
// 64 + l (high), qh byte 32h + l holds bits 4-5 of values l, 32 + l, 64 + l, 96 + l (l < 32).
// A unit is 4 consecutive l of one half (u32 reads at any alignment): values 128h + 32i + l.., i = 0..3.
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 210u;
const UNITS: u32 = 16u;
const VECS: u32 = 4u;

fn unit_offset(u: u32, i: u32) -> u32 { return 128u * (u / 8u) + 32u * i + 4u * (u % 8u); }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let h = u / 8u;
    let l = 4u * (u % 8u);
    let d = f16_at(b + 208u);
    let ql0 = word_at(b + 64u * h + l);
    let ql1 = word_at(b + 64u * h + 32u + l);
    let qh = bytes4(word_at(b + 128u + 32u * h + l));
    let s = b + 192u + 8u * h + l / 16u;  // scale of value 128h + 32i + l is byte s + 2i
    let q0 = vec4<i32>(low_nibbles(ql0) | ((qh & vec4<u32>(3u)) << vec4<u32>(4u))) - 32;
    let q1 = vec4<i32>(low_nibbles(ql1) | (((qh >> vec4<u32>(2u)) & vec4<u32>(3u)) << vec4<u32>(4u))) - 32;
    let q2 = vec4<i32>(high_nibbles(ql0) | (((qh >> vec4<u32>(4u)) & vec4<u32>(3u)) << vec4<u32>(4u))) - 32;
    let q3 = vec4<i32>(high_nibbles(ql1) | ((qh >> vec4<u32>(6u)) << vec4<u32>(4u))) - 32;
    return array<vec4<f32>, VECS>(
        vec4<f32>(q0) * (d * i8_at(s)),
        vec4<f32>(q1) * (d * i8_at(s + 2u)),
        vec4<f32>(q2) * (d * i8_at(s + 4u)),
        vec4<f32>(q3) * (d * i8_at(s + 6u)),
    );
}
