// causal_conv1d: depthwise causal convolution of B sequences, states in place   reference: tests/reference.py::causal_conv1d
// bindings: x (T, C) rows x_stride apart, w (C, K) dense, b (C,) (any buffer when has_bias is 0) in T; seqs (B, 4) i32 [slot, first row,
// rows, fresh] of each sequence; states (S, K-1, C) f32 read_write: each sequence's slot is the start of its
// window (zeros where fresh) and then takes the window's last K-1 rows -> out (T, C); params. Uses
// _activations.wgsl: KIND picks the activation when HAS_ACT is 1.
// grid: (ceil(C / WG), B): one invocation per (sequence, channel) runs the sequence's rows.
alias T = f32;
override WG: u32 = 64;
override KIND: u32 = 0;
override HAS_ACT: u32 = 1;

struct Params {
    channels: u32,
    k: u32,
    has_bias: u32,
    x_stride: u32,
    x_off: u32,
    w_off: u32,
    b_off: u32,
    seqs_off: u32,
    states_off: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> w: array<T>;
@group(0) @binding(2) var<storage, read> b: array<T>;
@group(0) @binding(3) var<storage, read> seqs: array<i32>;
@group(0) @binding(4) var<storage, read_write> states: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<T>;
@group(0) @binding(6) var<uniform> params: Params;

// row i of a sequence's window at channel ch: its slot's state rows (zeros when fresh), then its new rows
fn window(s0: u32, first: u32, fresh: bool, i: u32, ch: u32) -> f32 {
    if (i + 1u < params.k) {
        return select(states[s0 + i * params.channels + ch], 0.0, fresh);
    }
    return f32(x[params.x_off + (first + i + 1u - params.k) * params.x_stride + ch]);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let ch = wid.x * WG + lid;
    if (ch >= params.channels) { return; }
    let seq = params.seqs_off + wid.y * 4u;
    let slot = u32(seqs[seq]);
    let first = u32(seqs[seq + 1u]);
    let rows = u32(seqs[seq + 2u]);
    let fresh = seqs[seq + 3u] != 0;
    let s0 = params.states_off + slot * (params.k - 1u) * params.channels;
    let w0 = params.w_off + ch * params.k;
    var bias = 0.0;
    if (params.has_bias != 0u) { bias = f32(b[params.b_off + ch]); }
    for (var t = 0u; t < rows; t++) {
        var acc = bias;
        for (var j = 0u; j < params.k; j++) { acc += f32(w[w0 + j]) * window(s0, first, fresh, t + j, ch); }
        if (HAS_ACT != 0u) { acc = activation(acc, KIND); }
        out[params.out_off + (first + t) * params.channels + ch] = T(acc);
    }
    // the window's last K-1 rows; ascending, each old row is read before it is overwritten (rows + r >= r)
    for (var r = 0u; r + 1u < params.k; r++) {
        states[s0 + r * params.channels + ch] = window(s0, first, fresh, rows + r, ch);
    }
}
