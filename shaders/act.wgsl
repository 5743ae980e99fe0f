// act: elementwise activation                                reference: tests/reference.py::act
// bindings: x (n,) dense -> out (n,); params. Uses _activations.wgsl.
// grid: ceil(n / WG) workgroups, folded into y past 65535. KIND picks the activation; slope is leaky_relu's.
alias T = f32;
override WG: u32 = 64;
override KIND: u32 = 0;

struct Params {
    n: u32,
    x_off: u32,
    out_off: u32,
    slope: f32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read_write> out: array<T>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * groups.x + wid.x) * WG + lid;
    if (i >= params.n) { return; }
    out[params.out_off + i] = T(activation_sloped(f32(x[params.x_off + i]), KIND, params.slope));
}
