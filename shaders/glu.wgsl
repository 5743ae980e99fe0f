// glu: out = act(gate) * up                                  reference: tests/reference.py::glu
// bindings: gate, up (T, F) rows gate_stride / up_stride apart -> out (T, F); params. Uses _activations.wgsl.
// grid: (ceil(F / WG), T). KIND picks the activation (order of base.ACTIVATIONS).
alias T = f32;
override WG: u32 = 64;
override KIND: u32 = 0;

struct Params {
    dim: u32,
    gate_off: u32,
    gate_stride: u32,
    up_off: u32,
    up_stride: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> gate: array<T>;
@group(0) @binding(1) var<storage, read> up: array<T>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let d = wid.x * WG + lid;
    let t = wid.y;
    if (d >= params.dim) { return; }
    let g = activation(f32(gate[params.gate_off + t * params.gate_stride + d]), KIND);
    out[params.out_off + t * params.dim + d] = T(g * f32(up[params.up_off + t * params.up_stride + d]));
}
