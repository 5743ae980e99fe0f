// matmul_q4_k: Q4_K super-blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q4_k
// block (144 bytes, 256 values): d f16, dmin f16, scales[12] (6-bit scale and min per group of 32), qs[128]:
// chunk j of 32 bytes holds group 2j in its low nibbles and group 2j + 1 in its high; v = d sc q - dmin m.
// A unit is one u32 of a chunk (blocks are 4-byte aligned): values 64j + l.. and 64j + 32 + l.. (l = 4 (u % 8)).
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 144u;
const UNITS: u32 = 32u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 64u * (u / 8u) + 32u * i + 4u * (u % 8u); }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let dm = unpack2x16float(w[b >> 2u]);  // (d, dmin)
    let j = u / 8u;
    let lo = k_scale_min(b, 2u * j);
    let hi = k_scale_min(b, 2u * j + 1u);
    let q = w[(b + 16u + 32u * j) / 4u + u % 8u];
    return array<vec4<f32>, VECS>(
        vec4<f32>(low_nibbles(q)) * (dm.x * lo.x) - dm.y * lo.y,
        vec4<f32>(high_nibbles(q)) * (dm.x * hi.x) - dm.y * hi.y,
    );
}
