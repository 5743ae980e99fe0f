// ssm_scan: selective scan of B sequences laid back to back, states in place   reference: tests/reference.py::ssm_scan
// bindings: x (T, H, P), dt (T, H), b, c (T, G, N) in T; a (H, A_cols) and d (H,) f32 (A_cols 1, or N: a decay
// rate per state, Mamba 1); seqs (B, 4) i32 [slot, first row, rows, fresh] of each sequence; states (S, H, P, N)
// f32 read_write, each sequence's slot updated in place (zeroed first where fresh) -> y (T, H, P); params
// grid: (ceil(H * P / WG), B): one invocation per (sequence, head h, feature p) runs the sequence's rows through
// its N states, accumulating in f32 whatever T is.
alias T = f32;
override WG: u32 = 64;

struct Params {
    heads: u32,
    p: u32,
    groups: u32,
    n: u32,
    a_cols: u32,
    x_off: u32,
    dt_off: u32,
    a_off: u32,
    b_off: u32,
    c_off: u32,
    d_off: u32,
    seqs_off: u32,
    states_off: u32,
    y_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> dt: array<T>;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<T>;
@group(0) @binding(4) var<storage, read> c: array<T>;
@group(0) @binding(5) var<storage, read> d: array<f32>;
@group(0) @binding(6) var<storage, read> seqs: array<i32>;
@group(0) @binding(7) var<storage, read_write> states: array<f32>;
@group(0) @binding(8) var<storage, read_write> y: array<T>;
@group(0) @binding(9) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let hp = wid.x * WG + lid;  // h * P + p
    if (hp >= params.heads * params.p) { return; }
    let seq = params.seqs_off + wid.y * 4u;
    let slot = u32(seqs[seq]);
    let first = u32(seqs[seq + 1u]);
    let rows = u32(seqs[seq + 2u]);
    let h = hp / params.p;
    let g = h / (params.heads / params.groups);
    let s0 = params.states_off + (slot * params.heads * params.p + hp) * params.n;  // this (h, p)'s N states
    if (seqs[seq + 3u] != 0) {
        for (var i = 0u; i < params.n; i++) { states[s0 + i] = 0.0; }
    }
    let a0 = params.a_off + h * params.a_cols;
    let d_h = d[params.d_off + h];
    for (var t = first; t < first + rows; t++) {
        let dt_th = f32(dt[params.dt_off + t * params.heads + h]);
        let xv = f32(x[params.x_off + t * params.heads * params.p + hp]);
        let dx = dt_th * xv;
        let bc = (t * params.groups + g) * params.n;
        var decay = exp(dt_th * a[a0]);
        var acc = 0.0;
        for (var i = 0u; i < params.n; i++) {
            if (params.a_cols > 1u) { decay = exp(dt_th * a[a0 + i]); }
            let s = decay * states[s0 + i] + dx * f32(b[params.b_off + bc + i]);
            states[s0 + i] = s;
            acc += s * f32(c[params.c_off + bc + i]);
        }
        y[params.y_off + t * params.heads * params.p + hp] = T(acc + d_h * xv);
    }
}
