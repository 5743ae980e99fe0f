// Library (prepended to act.wgsl and glu.wgsl by blazr/backends/wgsl.py): the ACTIVATIONS of base.py in f32.
// kind: 0 silu, 1 gelu (erf), 2 gelu_tanh, 3 relu, 4 tanh, 5 sigmoid, 6 exp, 7 softplus, 8 leaky_relu, 9 sin -- the
// order of blazr.backends.base.ACTIVATIONS. activation() is leaky_relu with the default slope 0.01 (glu's);
// act.wgsl passes its slope to activation_sloped().

// Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7), the same formula as the numpy backend.
fn erf_approx(z: f32) -> f32 {
    let a = abs(z);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t;
    return sign(z) * (1.0 - poly * exp(-a * a));
}

// log(1 + e) for e in [0, 1], exact where 1 + e rounds (the classic log1p correction)
fn log1p_unit(e: f32) -> f32 {
    let u = 1.0 + e;
    if (u == 1.0) { return e; }
    return log(u) * (e / (u - 1.0));
}

fn activation(x: f32, kind: u32) -> f32 {
    return activation_sloped(x, kind, 0.01);
}

fn activation_sloped(x: f32, kind: u32, slope: f32) -> f32 {
    switch kind {
        // clamping -x at 88 keeps exp finite in f32 and changes nothing visible
        case 0u: { return x / (1.0 + exp(min(-x, 88.0))); }
        case 1u: { return 0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476)); }
        // tanh saturates long before 15; clamping keeps exp-based tanh implementations finite
        case 2u: {
            let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            return 0.5 * x * (1.0 + tanh(clamp(u, -15.0, 15.0)));
        }
        case 3u: { return max(x, 0.0); }
        case 4u: { return tanh(clamp(x, -15.0, 15.0)); }
        // sigmoid and softplus from e^-|x| <= 1, so that nothing overflows
        case 5u: {
            let e = exp(-abs(x));
            return select(e, 1.0, x >= 0.0) / (1.0 + e);
        }
        case 6u: { return exp(x); }
        case 7u: { return max(x, 0.0) + log1p_unit(exp(-abs(x))); }
        case 9u: { return sin(x); }
        default: { return select(slope * x, x, x >= 0.0); }
    }
}
