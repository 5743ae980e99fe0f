// matmul_iq4_nl: IQ4_NL blocks dequantized in registers     reference: blazr/quant/iq_blocks.py::_decode_iq4_nl
// block (18 bytes, 32 values): d f16, qs[16]: byte i holds the level index of value i (low nibble) and i + 16
// (high); v = IQ4_LEVELS[index] d. A unit is one u32 of qs (read at any alignment): values 4u.. and 16 + 4u..
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 32u;
const BLOCK_BYTES: u32 = 18u;
const UNITS: u32 = 4u;
const VECS: u32 = 2u;

// ggml's kvalues_iq4nl (blazr/quant/iq_grids.py::IQ4_NL_VALUES) as int8 bytes, for i8_lookup
const IQ4_LEVELS = vec4<u32>(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);

fn unit_offset(u: u32, i: u32) -> u32 { return 4u * u + 16u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let d = f16_at(b);
    let q = word_at(b + 2u + 4u * u);
    return array<vec4<f32>, VECS>(
        i8_lookup(IQ4_LEVELS, low_nibbles(q)) * d,
        i8_lookup(IQ4_LEVELS, high_nibbles(q)) * d,
    );
}
