// matmul_q5_1: Q5_1 blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q5_1
// block (24 bytes, 32 values): d f16, m f16, qh[4] (bit j: bit 4 of value j), qs[16]: byte i holds value i
// (low nibble) and i + 16 (high); v = d q + m. Blocks are 4-byte aligned: a unit is one u32 word of qs,
// values 4u.. and 16 + 4u.. Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 32u;
const BLOCK_BYTES: u32 = 24u;
const UNITS: u32 = 4u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 4u * u + 16u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let dm = unpack2x16float(w[b >> 2u]);  // (d, m)
    let qh = vec4<u32>(w[(b >> 2u) + 1u]);
    let q = w[(b >> 2u) + 2u + u];
    let shifts = vec4<u32>(4u * u) + vec4<u32>(0u, 1u, 2u, 3u);
    let lo = low_nibbles(q) | (((qh >> shifts) & vec4<u32>(1u)) << vec4<u32>(4u));
    let hi = high_nibbles(q) | (((qh >> (shifts + 16u)) & vec4<u32>(1u)) << vec4<u32>(4u));
    return array<vec4<f32>, VECS>(dm.x * vec4<f32>(lo) + dm.y, dm.x * vec4<f32>(hi) + dm.y);
}
