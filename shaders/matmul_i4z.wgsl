// matmul_i4z: I4Z blocks (blazr's AWQ/GPTQ int4) dequantized in registers   reference: blazr/quant/int4.py::decode_i4z
// block (20 bytes, 32 values): d f16, z u16, qs[16]: byte i holds value i (low nibble) and i + 16; v = (q - z) d.
// q - z is an exact small integer and d an f16, so each value is exact in f32, as on the CPU.
// Blocks are 4-byte aligned: a unit is one u32 word of qs, values 4u.. and 16 + 4u..
// Entry points, bindings and params: _qmatmul.wgsl. GPTQ act-order weights get x with its columns already
// in packed order (gather_cols.wgsl).
const BLOCK_ELEMS: u32 = 32u;
const BLOCK_BYTES: u32 = 20u;
const UNITS: u32 = 4u;
const VECS: u32 = 2u;

fn unit_offset(u: u32, i: u32) -> u32 { return 4u * u + 16u * i; }

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let head = w[b >> 2u];  // d in the low half, z in the high half
    let d = unpack2x16float(head).x;
    let z = vec4<f32>(f32(head >> 16u));
    let q = w[(b >> 2u) + 1u + u];
    return array<vec4<f32>, VECS>((vec4<f32>(low_nibbles(q)) - z) * d, (vec4<f32>(high_nibbles(q)) - z) * d);
}
