// stft: torch.stft (center, reflect padding, onesided) as magnitude and angle   reference: tests/reference.py::stft
// bindings: x (L,), window (N,), dense -> mag (N/2 + 1, F), phase (N/2 + 1, F); params
// grid: ceil(bins * frames / WG) workgroups: one invocation per (bin, frame) sums the N-term DFT directly
// (iSTFTNet's N is 16-20, where an FFT saves nothing).
alias T = f32;
override WG: u32 = 64;
const TWO_PI: f32 = 6.283185307179586;
const PI: f32 = 3.141592653589793;

struct Params {
    length: u32,
    n_fft: u32,
    hop: u32,
    frames: u32,
    bins: u32,
    x_off: u32,
    window_off: u32,
    mag_off: u32,
    phase_off: u32,
}

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> window: array<T>;
@group(0) @binding(2) var<storage, read_write> mag: array<T>;
@group(0) @binding(3) var<storage, read_write> phase: array<T>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= params.bins * params.frames) { return; }
    let k = i / params.frames;
    let f = i % params.frames;
    let n_fft = params.n_fft;
    let last = i32(params.length) - 1;
    var re = 0.0;
    var im = 0.0;
    for (var n = 0u; n < n_fft; n++) {
        var src = i32(f * params.hop + n) - i32(n_fft / 2u);
        src = select(src, -src, src < 0);  // reflect about the first and the last sample
        src = select(src, 2 * last - src, src > last);
        let v = f32(x[params.x_off + u32(src)]) * f32(window[params.window_off + n]);
        let angle = TWO_PI * f32((k * n) % n_fft) / f32(n_fft);  // reduced first: exact small arguments
        re += v * cos(angle);
        im -= v * sin(angle);
    }
    if (k == 0u || 2u * k == n_fft) { im = 0.0; }  // the DC and Nyquist bins of a real signal are real
    var angle_out = 0.0;
    if (im == 0.0) {
        angle_out = select(0.0, PI, re < 0.0);
    } else {
        angle_out = atan2(im, re);
    }
    let o = k * params.frames + f;
    mag[params.mag_off + o] = T(sqrt(re * re + im * im));
    phase[params.phase_off + o] = T(angle_out);
}
