// binary: out = a (op) b with b broadcast to a's shape       reference: tests/reference.py::binary
// bindings: a, b (up to 4-d strided views; a broadcast axis of b has stride 0) -> out dense, a's shape; params
// grid: ceil(n / WG) workgroups, folded into y past 65535. OP: 0 add, 1 sub, 2 mul, 3 div, 4 min, 5 max
// (base.BINARY_OPS).
alias T = f32;
override WG: u32 = 64;
override OP: u32 = 0;

struct Params {
    n: u32,
    d1: u32,            // a's shape is (n / (d1 d2 d3), d1, d2, d3)
    d2: u32,
    d3: u32,
    a_off: u32,
    a0: u32,            // a's strides
    a1: u32,
    a2: u32,
    a3: u32,
    b_off: u32,
    b0: u32,            // b's strides, 0 on broadcast axes
    b1: u32,
    b2: u32,
    b3: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> a: array<T>;
@group(0) @binding(1) var<storage, read> b: array<T>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * groups.x + wid.x) * WG + lid;
    if (i >= params.n) { return; }
    let i3 = i % params.d3;
    let i2 = (i / params.d3) % params.d2;
    let i1 = (i / (params.d3 * params.d2)) % params.d1;
    let i0 = i / (params.d3 * params.d2 * params.d1);
    let x = f32(a[params.a_off + i0 * params.a0 + i1 * params.a1 + i2 * params.a2 + i3 * params.a3]);
    let y = f32(b[params.b_off + i0 * params.b0 + i1 * params.b1 + i2 * params.b2 + i3 * params.b3]);
    var r: f32;
    switch OP {
        case 0u: { r = x + y; }
        case 1u: { r = x - y; }
        case 2u: { r = x * y; }
        case 3u: { r = x / y; }
        case 4u: { r = min(x, y); }
        default: { r = max(x, y); }
    }
    out[params.out_off + i] = T(r);
}
