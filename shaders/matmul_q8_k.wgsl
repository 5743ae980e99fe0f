// matmul_q8_k: Q8_K super-blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q8_k
// block (292 bytes, 256 values): d f32, qs[256] int8, bsums[16] int16 (group sums; not needed); v = d q.
// Blocks are 4-byte aligned: a unit is 4 u32 words of qs, values 16u..16u+15.
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 292u;
const UNITS: u32 = 16u;
const VECS: u32 = 4u;

fn unit_offset(u: u32, i: u32) -> u32 { return 16u * u + 4u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let d = f32_at(b);
    let q = (b >> 2u) + 1u + 4u * u;
    return array<vec4<f32>, VECS>(i8x4(w[q]) * d, i8x4(w[q + 1u]) * d, i8x4(w[q + 2u]) * d, i8x4(w[q + 3u]) * d);
}
