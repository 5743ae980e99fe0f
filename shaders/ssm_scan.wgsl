// ssm_scan: Mamba2 selective scan over T steps of one sequence   reference: tests/reference.py::ssm_scan
// bindings: x (T, H, P), dt (T, H), a (H,), b (T, G, N), c (T, G, N), d (H,), state (H, P, N), all dense
// -> y (T, H, P), new_state (H, P, N); params
// grid: ceil(H * P / WG) workgroups: one invocation per (head, feature) keeps its N states in new_state.
alias T = f32;
override WG: u32 = 64;

struct Params {
    steps: u32,
    heads: u32,
    p: u32,
    groups: u32,
    n: u32,
    x_off: u32,
    dt_off: u32,
    a_off: u32,
    b_off: u32,
    c_off: u32,
    d_off: u32,
    state_off: u32,
    y_off: u32,
    new_state_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> dt: array<T>;
@group(0) @binding(2) var<storage, read> a: array<T>;
@group(0) @binding(3) var<storage, read> b: array<T>;
@group(0) @binding(4) var<storage, read> c: array<T>;
@group(0) @binding(5) var<storage, read> d: array<T>;
@group(0) @binding(6) var<storage, read> state: array<T>;
@group(0) @binding(7) var<storage, read_write> y: array<T>;
@group(0) @binding(8) var<storage, read_write> new_state: array<T>;
@group(0) @binding(9) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let hp = wid.x * WG + lid;
    if (hp >= params.heads * params.p) { return; }
    let h = hp / params.p;
    let g = h / (params.heads / params.groups);
    let s0 = params.new_state_off + hp * params.n;
    for (var i = 0u; i < params.n; i++) { new_state[s0 + i] = state[params.state_off + hp * params.n + i]; }
    let a_h = f32(a[params.a_off + h]);
    let d_h = f32(d[params.d_off + h]);
    for (var t = 0u; t < params.steps; t++) {
        let dt_th = f32(dt[params.dt_off + t * params.heads + h]);
        let decay = exp(dt_th * a_h);
        let xv = f32(x[params.x_off + t * params.heads * params.p + hp]);
        let bc = (t * params.groups + g) * params.n;
        var out = 0.0;
        for (var i = 0u; i < params.n; i++) {
            let s = decay * f32(new_state[s0 + i]) + dt_th * xv * f32(b[params.b_off + bc + i]);
            new_state[s0 + i] = T(s);
            out += s * f32(c[params.c_off + bc + i]);
        }
        y[params.y_off + t * params.heads * params.p + hp] = T(out + d_h * xv);
    }
}
