// matmul_q1_0: Q1_0 blocks dequantized in registers     reference: blazr/quant/ggml_blocks.py::_decode_q1_0
// block (18 bytes, 128 values): d f16, qs[16]: bit j of byte i is value 8i + j; set: v = d, clear: v = -d.
// A unit is one u32 of qs (read at any alignment): bit m of it is value 32u + m.
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 128u;
const BLOCK_BYTES: u32 = 18u;
const UNITS: u32 = 4u;
const VECS: u32 = 8u;

fn unit_offset(u: u32, i: u32) -> u32 { return 32u * u + 4u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let d = vec4<f32>(f16_at(b));
    let clear = ~word_at(b + 2u + 4u * u);  // a clear bit negates d
    var v: array<vec4<f32>, VECS>;
    for (var i = 0u; i < VECS; i++) {
        v[i] = with_signs(d, clear >> (4u * i));
    }
    return v;
}
