// matmul_tq1_0: TQ1_0 super-blocks dequantized in registers  reference: blazr/quant/tq_blocks.py::_decode_tq1_0
// block (54 bytes, 256 values): qs[48], qh[4], d f16; v = d (trit - 1). A byte holds 5 (qh: 4) base-3 digits
// as a fixed-point fraction: digit k of byte x is ((x 3^k mod 256) 3) >> 8. Digit k of qs byte l (l < 32) is
// value 32k + l; of qs byte 32 + l (l < 16) value 160 + 16k + l; of qh byte l value 240 + 4k + l.
// A unit is 16 consecutive values: 4 words of one digit plane, or (the last) one qh word in 4 planes.
// Entry points, bindings and params: _qmatmul.wgsl.
const BLOCK_ELEMS: u32 = 256u;
const BLOCK_BYTES: u32 = 54u;
const UNITS: u32 = 16u;
const VECS: u32 = 4u;

const POWERS_OF_3 = array<u32, 5>(1u, 3u, 9u, 27u, 81u);

fn unit_offset(u: u32, i: u32) -> u32 { return 16u * u + 4u * i; }

// the 4 values from value e on (a multiple of 4): (byte offset of their 4 bytes, digit k)
fn tq1_place(e: u32) -> vec2<u32> {
    if (e < 160u) { return vec2<u32>(e % 32u, e / 32u); }
    if (e < 240u) { return vec2<u32>(32u + (e - 160u) % 16u, (e - 160u) / 16u); }
    return vec2<u32>(48u, (e - 240u) / 4u);
}

fn decode_unit(b: u32, u: u32) -> array<vec4<f32>, VECS> {
    let d = f16_at(b + 52u);
    var v: array<vec4<f32>, VECS>;
    for (var i = 0u; i < VECS; i++) {
        let place = tq1_place(16u * u + 4u * i);
        let on_top = (bytes4(word_at(b + place.x)) * POWERS_OF_3[place.y]) & vec4<u32>(255u);
        let top = (on_top * 3u) >> vec4<u32>(8u);
        v[i] = vec4<f32>(vec4<i32>(top) - 1) * d;
    }
    return v;
}
