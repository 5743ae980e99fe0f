// concat: the rows of a, then those of b   reference: tests/reference.py::concat
// bindings: a (M, L), b (N, L), dense -> out (M + N, L); params
// grid: ceil((M + N) L / WG) workgroups (folded into y past 65535), one invocation per element.
alias T = f32;
override WG: u32 = 64;

struct Params {
    n: u32,
    n_a: u32,
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
    if (i < params.n_a) {
        out[params.out_off + i] = a[params.a_off + i];
    } else {
        out[params.out_off + i] = b[params.b_off + i - params.n_a];
    }
}
