// concat: row r of out is row r of a, then row r of b   reference: tests/reference.py::concat
// bindings: a (R, row_a), b (R, row_b), dense -> out (R, row_a + row_b); params. Stacking rows (axis 0) is
// the one-row case: row_a = a's size, row_b = b's.
// grid: ceil((M + N) L / WG) workgroups (folded into y past 65535), one invocation per element.
alias T = f32;
override WG: u32 = 64;

struct Params {
    n: u32,
    row_a: u32,
    row_b: u32,
    grid_x: u32,
    a_off: u32,
    b_off: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> a: array<T>;
@group(0) @binding(1) var<storage, read> b: array<T>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.y * params.grid_x * WG + gid.x;
    if (i >= params.n) { return; }
    let width = params.row_a + params.row_b;
    let r = i / width;
    let j = i % width;
    if (j < params.row_a) {
        out[params.out_off + i] = a[params.a_off + r * params.row_a + j];
    } else {
        out[params.out_off + i] = b[params.b_off + r * params.row_b + j - params.row_a];
    }
}
