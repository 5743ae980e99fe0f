// matmul_q2_k: Q2_K super-blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q2_k
// block (84 bytes, 256 values): scales[16] (low nibble: scale, high: min, one per 16 values), qs[64] (2-bit),
// d f16, dmin f16; v = d sc q - dmin m. In half h (128 values), bits 2s..2s+1 of qs byte 32h + l hold value
// 128h + 32s + l (l < 32). A unit is one u32 of a half (blocks are 4-byte aligned): 4 consecutive l, all s.
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 84u;
const UNITS: u32 = 16u;
const VECS: u32 = 4u;

fn unit_offset(u: u32, i: u32) -> u32 { return 128u * (u / 8u) + 32u * i + 4u * (u % 8u); }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let dm = unpack2x16float(w[(b >> 2u) + 20u]);  // (d, dmin)
    let q = bytes4(w[(b >> 2u) + 4u + u]);
    var v: array<vec4<f32>, VECS>;
    for (var s = 0u; s < 4u; s++) {
        let sm = byte_at(b + 8u * (u / 8u) + 2u * s + (u % 8u) / 4u);  // group (128h + 32s + l) / 16
        let codes = (q >> vec4<u32>(2u * s)) & vec4<u32>(3u);
        v[s] = vec4<f32>(codes) * (dm.x * f32(sm & 15u)) - dm.y * f32(sm >> 4u);
    }
    return v;
}
