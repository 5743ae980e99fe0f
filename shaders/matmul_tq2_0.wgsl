// matmul_tq2_0: TQ2_0 super-blocks dequantized in registers  reference: blazr/quant/tq_blocks.py::_decode_tq2_0
// block (66 bytes, 256 values): qs[64] (2-bit codes), d f16; v = d (code - 1). In half h (128 values), bits
// 2s..2s+1 of qs byte 32h + l hold value 128h + 32s + l (l < 32). A unit is 4 consecutive l of one half, all
// s (u32 reads at any alignment). Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 66u;
const UNITS: u32 = 16u;
const VECS: u32 = 4u;

fn unit_offset(u: u32, i: u32) -> u32 { return 128u * (u / 8u) + 32u * i + 4u * (u % 8u); }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let d = f16_at(b + 64u);
    let q = bytes4(word_at(b + 4u * u));  // byte 32h + l, as u = 8h + l / 4
    var v: array<vec4<f32>, VECS>;
    for (var s = 0u; s < 4u; s++) {
        v[s] = vec4<f32>(vec4<i32>((q >> vec4<u32>(2u * s)) & vec4<u32>(3u)) - 1) * d;
    }
    return v;
}
