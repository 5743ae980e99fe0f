// snake: x + sin(alpha x)^2 / alpha, alpha per channel   reference: tests/reference.py::snake
// bindings: x (C, L), alpha (C,), dense -> out (C, L); params
// grid: ceil(C * L / WG) workgroups (folded into y past 65535), one invocation per element.
alias T = f32;
override WG: u32 = 64;

struct Params {
    n: u32,
    length: u32,
    grid_x: u32,
    x_off: u32,
    alpha_off: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> alpha: array<T>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.y * params.grid_x * WG + gid.x;
    if (i >= params.n) { return; }
    let a = f32(alpha[params.alpha_off + i / params.length]);
    let v = f32(x[params.x_off + i]);
    let s = sin(a * v);
    out[params.out_off + i] = T(v + s * s / a);
}
