// istft: torch.istft (center, no length) of mag * e^(i phase)   reference: tests/reference.py::istft
// bindings: mag (N/2 + 1, F), phase (N/2 + 1, F), window (N,), dense -> out (hop * (F - 1),); params
// grid: ceil(out_len / WG) workgroups: one invocation per output sample inverts the few frames that cover
// it (the N-term inverse DFT directly), overlap-adds them and divides by the summed squared window.
alias T = f32;
override WG: u32 = 64;
const TWO_PI: f32 = 6.283185307179586;

struct Params {
    n_fft: u32,
    hop: u32,
    frames: u32,
    out_len: u32,
    mag_off: u32,
    phase_off: u32,
    window_off: u32,
    out_off: u32,
}

@group(0) @binding(0) var<storage, read> mag: array<T>;
@group(0) @binding(1) var<storage, read> phase: array<T>;
@group(0) @binding(2) var<storage, read> window: array<T>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;
@group(0) @binding(4) var<uniform> params: Params;

fn bin_re(k: u32, f: u32) -> f32 {
    let i = k * params.frames + f;
    return f32(mag[params.mag_off + i]) * cos(f32(phase[params.phase_off + i]));
}

fn bin_im(k: u32, f: u32) -> f32 {
    let i = k * params.frames + f;
    return f32(mag[params.mag_off + i]) * sin(f32(phase[params.phase_off + i]));
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    if (t >= params.out_len) { return; }
    let n_fft = params.n_fft;
    let half = n_fft / 2u;
    let tp = t + half;  // position in the padded signal
    var f_lo = 0u;
    if (tp + 1u > n_fft) { f_lo = (tp + 1u - n_fft + params.hop - 1u) / params.hop; }
    let f_hi = min(params.frames - 1u, tp / params.hop);
    var total = 0.0;
    var envelope = 0.0;
    for (var f = f_lo; f <= f_hi; f++) {
        let n = tp - f * params.hop;
        var sample = bin_re(0u, f) + select(-1.0, 1.0, n % 2u == 0u) * bin_re(half, f);
        for (var k = 1u; k < half; k++) {
            let angle = TWO_PI * f32((k * n) % n_fft) / f32(n_fft);
            sample += 2.0 * (bin_re(k, f) * cos(angle) - bin_im(k, f) * sin(angle));
        }
        let w = f32(window[params.window_off + n]);
        total += sample / f32(n_fft) * w;
        envelope += w * w;
    }
    out[params.out_off + t] = T(total / envelope);
}
