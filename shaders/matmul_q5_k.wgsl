// matmul_q5_k: Q5_K super-blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q5_k
// block (176 bytes, 256 values): d f16, dmin f16, scales[12] (as Q4_K), qh[32] (bit g of byte l is bit 4 of
// value 32g + l), qs[128] (as Q4_K); v = d sc q - dmin m. A unit is one u32 of qs plus the matching qh word
// (blocks are 4-byte aligned): values 64j + l.. and 64j + 32 + l.. (l = 4 (u % 8)).
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 176u;
const UNITS: u32 = 32u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 64u * (u / 8u) + 32u * i + 4u * (u % 8u); }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let dm = unpack2x16float(w[b >> 2u]);  // (d, dmin)
    let j = u / 8u;
    let lo = k_scale_min(b, 2u * j);
    let hi = k_scale_min(b, 2u * j + 1u);
    let q = w[(b + 48u + 32u * j) / 4u + u % 8u];
    let h = bytes4(w[(b + 16u) / 4u + u % 8u]);
    let q_lo = low_nibbles(q) | (((h >> vec4<u32>(2u * j)) & vec4<u32>(1u)) << vec4<u32>(4u));
    let q_hi = high_nibbles(q) | (((h >> vec4<u32>(2u * j + 1u)) & vec4<u32>(1u)) << vec4<u32>(4u));
    return array<vec4<f32>, VECS>(
        vec4<f32>(q_lo) * (dm.x * lo.x) - dm.y * lo.y,
        vec4<f32>(q_hi) * (dm.x * hi.x) - dm.y * hi.y,
    );
}
