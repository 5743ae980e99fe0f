// lstm: bidirectional LSTM recurrence, PyTorch gate order i, f, g, o   reference: tests/reference.py::lstm
// bindings: gates (T, 8H) input projections (forward [:4H], backward [4H:]), w_hh (2, 4H, H), dense;
// state (2, 2, H): each direction's h and c, read at the start and written at the end
// -> out (T, 2H): forward h in [:H], backward h in [H:]; params
// grid: (2, 1, 1): one workgroup per direction walks steps step0 .. step0 + n_steps - 1 (the host splits T
// into such runs: lavapipe returned wrong values once one invocation looped 65536 times in a dispatch);
// within a run the state h, c stays in workgroup memory.
alias T = f32;
override WG: u32 = 64;
const MAX_H: u32 = 1024u;

struct Params {
    steps: u32,
    step0: u32,
    n_steps: u32,
    hidden: u32,
    gates_off: u32,
    w_hh_off: u32,
    state_off: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> gates: array<T>;
@group(0) @binding(1) var<storage, read> w_hh: array<T>;
@group(0) @binding(2) var<storage, read_write> state: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;
@group(0) @binding(4) var<uniform> params: Params;

var<workgroup> h_prev: array<f32, MAX_H>;
var<workgroup> c_state: array<f32, MAX_H>;

fn sigmoid(z: f32) -> f32 {
    let e = exp(-abs(z));
    return select(e, 1.0, z >= 0.0) / (1.0 + e);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let d = wid.x;
    let h = params.hidden;
    let w0 = params.w_hh_off + d * 4u * h * h;
    let s0 = params.state_off + d * 2u * h;
    for (var u = lid; u < h; u += WG) {
        h_prev[u] = state[s0 + u];
        c_state[u] = state[s0 + h + u];
    }
    workgroupBarrier();
    for (var s = params.step0; s < params.step0 + params.n_steps; s++) {
        let t = select(s, params.steps - 1u - s, d == 1u);
        let g0 = params.gates_off + t * 8u * h + d * 4u * h;
        // each invocation owns units u, u + WG, ...: it reads the shared h_prev, keeps its new h in a register
        var h_new: array<f32, 16>;  // MAX_H / WG units at WG = 64
        var slot = 0u;
        for (var u = lid; u < h; u += WG) {
            var z = vec4<f32>(f32(gates[g0 + u]), f32(gates[g0 + h + u]), f32(gates[g0 + 2u * h + u]),
                              f32(gates[g0 + 3u * h + u]));
            for (var j = 0u; j < h; j++) {
                let hj = h_prev[j];
                z += hj * vec4<f32>(f32(w_hh[w0 + u * h + j]), f32(w_hh[w0 + (h + u) * h + j]),
                                    f32(w_hh[w0 + (2u * h + u) * h + j]), f32(w_hh[w0 + (3u * h + u) * h + j]));
            }
            let c = sigmoid(z.y) * c_state[u] + sigmoid(z.x) * tanh(clamp(z.z, -15.0, 15.0));
            c_state[u] = c;
            h_new[slot] = sigmoid(z.w) * tanh(clamp(c, -15.0, 15.0));
            out[params.out_off + t * 2u * h + d * h + u] = T(h_new[slot]);
            slot++;
        }
        workgroupBarrier();  // every invocation has read h_prev for this step
        slot = 0u;
        for (var u = lid; u < h; u += WG) {
            h_prev[u] = h_new[slot];
            slot++;
        }
        workgroupBarrier();
    }
    for (var u = lid; u < h; u += WG) {
        state[s0 + u] = h_prev[u];
        state[s0 + h + u] = c_state[u];
    }
}
