"""Float64 numpy reference for every op in blazr.backends.base.OPS: same names, same signatures.

Written for clarity, never for speed, and never calling backend code. Inputs are host numpy arrays; every
float result is float64. See the docstrings in blazr/backends/base.py for the contract each one follows.
"""

from __future__ import annotations

import math

import numpy as np


def _f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


# ---- linear algebra ---------------------------------------------------------------------------------
def embed(table, ids):
    return _f64(table)[np.asarray(ids)]


def matmul(x, w):
    return _f64(x) @ _f64(w).T


def matmul_experts(x, w, expert_ids):
    x, w = _f64(x), _f64(w)
    t, k = expert_ids.shape
    out = np.zeros((t, k, w.shape[1]))
    for token in range(t):
        for slot in range(k):
            out[token, slot] = w[expert_ids[token, slot]] @ x[token]
    return out


# ---- normalisation ----------------------------------------------------------------------------------
def rms_norm(x, w, eps):
    x = _f64(x)
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * _f64(w)


def layer_norm(x, w, b, eps):
    x = _f64(x)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out = (x - mean) / np.sqrt(var + eps) * _f64(w)
    return out if b is None else out + _f64(b)


# ---- attention --------------------------------------------------------------------------------------
def rope(x, positions, inv_freq, style, rot_dim=None):
    x = _f64(x)
    out = x.copy()
    r = x.shape[-1] if rot_dim is None else rot_dim
    for t, pos in enumerate(positions):
        for i in range(r // 2):
            a, b = (i, i + r // 2) if style == "neox" else (2 * i, 2 * i + 1)
            angle = pos * float(inv_freq[i])
            c, s = math.cos(angle), math.sin(angle)
            out[t, :, a] = x[t, :, a] * c - x[t, :, b] * s
            out[t, :, b] = x[t, :, b] * c + x[t, :, a] * s
    return out


def kv_write(k_cache, v_cache, k, v, slots):
    for t, slot in enumerate(slots):
        k_cache[slot] = k[t]
        v_cache[slot] = v[t]


def attention(
    q,
    k_cache,
    v_cache,
    block_tables,
    ctx_lens,
    q_lens,
    block_size,
    scale,
    window=0,
    softcap=0.0,
    alibi=None,
    sinks=None,
):
    q, k_cache, v_cache = _f64(q), _f64(k_cache), _f64(v_cache)
    n_heads, n_kv = q.shape[1], k_cache.shape[1]
    out = np.zeros_like(q)
    row = 0
    for b in range(len(ctx_lens)):
        ctx, n = int(ctx_lens[b]), int(q_lens[b])
        slots = [block_tables[b][j // block_size] * block_size + j % block_size for j in range(ctx)]
        keys, values = k_cache[slots], v_cache[slots]  # (ctx, Hkv, Dh), position j at index j
        for i in range(n):
            pos_q = ctx - n + i
            visible = [j for j in range(ctx) if j <= pos_q and (window <= 0 or pos_q - j < window)]
            for h in range(n_heads):
                kv = h // (n_heads // n_kv)  # GQA: consecutive query heads share one KV head
                scores = keys[visible, kv] @ q[row + i, h] * scale  # (len(visible),)
                if alibi is not None:  # ALiBi: the head's slope times each key's absolute position
                    scores = scores + float(alibi[h]) * np.asarray(visible, dtype=np.float64)
                if softcap > 0:
                    scores = softcap * np.tanh(scores / softcap)
                if sinks is not None:  # a learnt logit of no key: in the softmax's sum, dropped after it
                    out[row + i, h] = softmax(np.append(scores, float(sinks[h])))[:-1] @ values[visible, kv]
                    continue
                out[row + i, h] = softmax(scores) @ values[visible, kv]
        row += n
    return out


def attention_dense(q, k, v, q_lens, kv_lens, scale, causal=False, window=0, rel_bias=None):
    """Per sequence: each query head against its KV head's keys, masked to the visible ones (causal: up to
    the query's position; window: within `window` positions), plus rel_bias[h, clip(j - i) + R]; a query with
    no visible key gives zeros. Whole sequences at a time (a loop per query and head took seconds for 200
    sequences, once per backend)."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    bias = None if rel_bias is None else _f64(rel_bias)  # (H, 2R + 1)
    n_heads, n_kv = q.shape[1], k.shape[1]
    out = np.zeros((q.shape[0], n_heads, v.shape[2]))
    q0 = k0 = 0
    for nq, nk in zip((int(n) for n in q_lens), (int(n) for n in kv_lens), strict=True):
        pos_q = np.arange(nq)[:, None] + (nk - nq)  # (nq, 1)
        j = np.arange(nk)[None, :]  # (1, nk)
        visible = np.ones((nq, nk), dtype=bool)
        if causal:
            visible &= j <= pos_q
        if window > 0:
            visible &= np.abs(pos_q - j) < window
        keys = np.repeat(k[k0 : k0 + nk], n_heads // n_kv, axis=1)  # (nk, H, Dk) each query head's keys
        values = np.repeat(v[k0 : k0 + nk], n_heads // n_kv, axis=1)  # (nk, H, Dv)
        scores = np.einsum("qhd,khd->hqk", q[q0 : q0 + nq], keys) * scale  # (H, nq, nk)
        if bias is not None:
            reach = (bias.shape[1] - 1) // 2  # R
            scores = scores + bias[:, np.clip(j - pos_q, -reach, reach) + reach]
        scores = np.where(visible, scores, -np.inf)
        top = np.where(visible.any(axis=1), scores.max(axis=2, initial=-np.inf), 0.0)  # (H, nq)
        weights = np.exp(scores - top[..., None])  # (H, nq, nk), 0 where not visible
        total = weights.sum(axis=2, keepdims=True)
        weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
        out[q0 : q0 + nq] = np.einsum("hqk,khd->qhd", weights, values)
        q0, k0 = q0 + nq, k0 + nk
    return out


def attention_relative(q, k, v, rel_k, rel_v, scale):
    q, k, v, rel_k, rel_v = _f64(q), _f64(k), _f64(v), _f64(rel_k), _f64(rel_v)
    t, n_heads, _ = q.shape
    reach = (rel_k.shape[0] - 1) // 2  # W
    out = np.zeros(q.shape)
    for h in range(n_heads):
        for i in range(t):
            scores = np.zeros(t)
            values = v[:, h].copy()  # (T, D): each key's value, plus its relative value inside the window
            for j in range(t):
                scores[j] = q[i, h] @ k[j, h]
                if abs(j - i) <= reach:
                    scores[j] += q[i, h] @ rel_k[j - i + reach]
                    values[j] += rel_v[j - i + reach]
            out[i, h] = softmax(scores * scale) @ values
    return out


# ---- elementwise ------------------------------------------------------------------------------------
def softmax(x):
    x = _f64(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def act(x, kind, slope=0.01):
    x = _f64(x)
    if kind == "silu":
        return x / (1.0 + np.exp(-x))
    if kind == "gelu":
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    if kind == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "tanh":
        return np.tanh(x)
    if kind == "sigmoid":
        return np.exp(-np.logaddexp(0.0, -x))  # 1 / (1 + e^-x) without overflow
    if kind == "exp":
        return np.exp(x)
    if kind == "softplus":
        return np.logaddexp(0.0, x)  # log(e^0 + e^x)
    if kind == "leaky_relu":
        return np.where(x >= 0, x, slope * x)
    if kind == "sin":
        return np.sin(x)
    raise ValueError(kind)


def glu(gate, up, kind):
    return act(gate, kind) * _f64(up)


def binary(op, a, b):
    a, b = _f64(a), _f64(b)
    ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
    return (ops | {"min": np.minimum, "max": np.maximum})[op](a, b)


# ---- selection --------------------------------------------------------------------------------------
def _descending(row):
    """Indices of row from largest to smallest; equal values in index order."""
    return sorted(range(len(row)), key=lambda i: (-row[i], i))


def topk(x, k):
    x = _f64(x)
    idx = np.array([_descending(r)[:k] for r in x], dtype=np.int32).reshape(len(x), k)
    return np.take_along_axis(x, idx, axis=-1), idx


def sample(logits, params):
    logits = _f64(logits)
    ids = []
    for b, row in enumerate(logits):
        if params.temperature[b] == 0:
            ids.append(int(np.argmax(row)))
            continue
        row = row / float(params.temperature[b])
        order = _descending(row)
        if params.top_k[b] > 0:
            order = order[: params.top_k[b]]
        probs = softmax(row[order])
        if params.top_p[b] < 1.0:
            reach = next((i for i, c in enumerate(np.cumsum(probs)) if c >= params.top_p[b]), len(probs) - 1)
            order, probs = order[: reach + 1], probs[: reach + 1]
        if params.min_p[b] > 0.0:
            keep = probs >= params.min_p[b] * probs.max()
            order, probs = [i for i, k in zip(order, keep, strict=True) if k], probs[keep]
        probs = probs / probs.sum()
        cum = np.cumsum(probs)
        pick = next((i for i, c in enumerate(cum) if c > params.uniform[b]), len(cum) - 1)
        ids.append(order[pick])
    return np.array(ids, dtype=np.int32)


# ---- sequence ---------------------------------------------------------------------------------------
def conv1d(x, w, b, stride, pad, groups, dilation=1, pre_act=None, slope=0.01, residual=None):
    if pre_act is not None:
        return conv1d(act(x, pre_act, slope), w, b, stride, pad, groups, dilation, residual=residual)
    if residual is not None:
        return conv1d(x, w, b, stride, pad, groups, dilation) + _f64(residual)
    x, w = _f64(x), _f64(w)
    c_in, length = x.shape
    c_out, c_per_group, kw = w.shape
    xpad = np.concatenate([np.zeros((c_in, pad)), x, np.zeros((c_in, pad))], axis=1)
    l_out = (length + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((c_out, l_out))
    taps = np.arange(l_out)[:, None] * stride + dilation * np.arange(kw)  # (L_out, Kw) padded input columns
    for o in range(c_out):
        g = o // (c_out // groups)
        inputs = xpad[g * c_per_group : (g + 1) * c_per_group]  # (C_in/g, L + 2pad)
        out[o] = np.einsum("ck,ctk->t", w[o], inputs[:, taps])  # every output position at once
    return out if b is None else out + _f64(b)[:, None]


def conv_transpose1d(x, w, b, stride, pad, groups=1, pre_act=None, slope=0.01):
    if pre_act is not None:
        return conv_transpose1d(act(x, pre_act, slope), w, b, stride, pad, groups)
    x, w = _f64(x), _f64(w)
    c_in, length = x.shape
    _, c_out_per_group, kw = w.shape
    c_in_per_group = c_in // groups
    full = np.zeros((c_out_per_group * groups, (length - 1) * stride + kw))  # before cropping `pad` each side
    for c in range(c_in):
        g = c // c_in_per_group
        for t in range(length):
            # input column t, tap j lands on full column t * stride + j
            full[g * c_out_per_group : (g + 1) * c_out_per_group, t * stride : t * stride + kw] += (
                x[c, t] * w[c]
            )
    out = full[:, pad : full.shape[1] - pad]  # (C_out, (L - 1) stride - 2 pad + Kw)
    return out if b is None else out + _f64(b)[:, None]


def transpose(x):
    return _f64(x).T.copy()


def _sequences(seq_slots, q_lens, fresh):
    """(slot, first row, rows, fresh) of each sequence laid back to back."""
    lens = np.asarray(q_lens).tolist()
    starts = np.cumsum([0, *lens]).tolist()
    for i, slot in enumerate(np.asarray(seq_slots).tolist()):
        yield slot, starts[i], lens[i], bool(fresh[i])


_activation = act  # causal_conv1d's `act` argument hides the function


def causal_conv1d(x, w, b, states, seq_slots, q_lens, fresh, act="silu"):
    """Returns (out, new_states); `states` itself is left alone."""
    x, w = _f64(x), _f64(w)
    new_states = _f64(states).copy()  # (S, K-1, C)
    k = w.shape[1]
    out = np.zeros_like(x)  # (T, C)
    for slot, start, n, new in _sequences(seq_slots, q_lens, fresh):
        old = np.zeros_like(new_states[slot]) if new else new_states[slot]  # (K-1, C)
        window = np.concatenate([old, x[start : start + n]])  # (K-1 + n, C)
        for t in range(n):
            out[start + t] = np.sum(w.T * window[t : t + k], axis=0)
        new_states[slot] = window[n:]  # its last K-1 rows
    if b is not None:
        out += _f64(b)
    return (out if act is None else _activation(out, act)), new_states


def ssm_scan(x, dt, A, B, C, D, states, seq_slots, q_lens, fresh):
    """Returns (y, new_states); `states` itself is left alone."""
    x, dt, A, B, C, D = (_f64(a) for a in (x, dt, A, B, C, D))
    new_states = _f64(states).copy()  # (S, H, P, N)
    n_heads = x.shape[1]
    heads_per_group = n_heads // B.shape[1]
    rates = A[:, None] if A.ndim == 1 else A  # (H, 1) or (H, N)
    y = np.zeros_like(x)  # (T, H, P)
    for slot, start, n, new in _sequences(seq_slots, q_lens, fresh):
        state = np.zeros_like(new_states[slot]) if new else new_states[slot].copy()  # (H, P, N)
        for t in range(start, start + n):
            for h in range(n_heads):
                g = h // heads_per_group
                decay = np.exp(dt[t, h] * rates[h])  # (1,) or (N,)
                state[h] = decay * state[h] + dt[t, h] * np.outer(x[t, h], B[t, g])
                y[t, h] = state[h] @ C[t, g] + D[h] * x[t, h]
        new_states[slot] = state
    return y, new_states


# ---- speech synthesis -------------------------------------------------------------------------------
def lstm(gates, w_hh):
    gates, w_hh = _f64(gates), _f64(w_hh)
    steps, h = gates.shape[0], gates.shape[1] // 8
    out = np.zeros((steps, 2 * h))
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    for d in (0, 1):
        hidden, cell = np.zeros(h), np.zeros(h)
        for t in range(steps) if d == 0 else reversed(range(steps)):
            z = gates[t, 4 * h * d : 4 * h * (d + 1)] + w_hh[d] @ hidden
            i, f, g, o = z[:h], z[h : 2 * h], z[2 * h : 3 * h], z[3 * h :]
            cell = sig(f) * cell + sig(i) * np.tanh(g)
            hidden = sig(o) * np.tanh(cell)
            out[t, h * d : h * (d + 1)] = hidden
    return out


def stft(x, window, hop):
    """The DFT written out (no FFT), of reflect-padded, windowed frames."""
    x, window = _f64(x), _f64(window)
    n = len(window)
    padded = np.pad(x, (n // 2, n // 2), mode="reflect")
    frames = len(x) // hop + 1
    k = np.arange(n // 2 + 1)[:, None]
    angle = 2 * np.pi * ((k * np.arange(n)[None, :]) % n) / n  # (K, N)
    re, im = np.zeros((len(k), frames)), np.zeros((len(k), frames))
    for f in range(frames):
        seg = padded[f * hop : f * hop + n] * window
        re[:, f], im[:, f] = np.cos(angle) @ seg, -np.sin(angle) @ seg
    im[0], im[n // 2] = 0.0, 0.0  # real-signal bins: exactly real
    return np.hypot(re, im), np.arctan2(im, re)


def istft(mag, phase, window, hop):
    mag, phase, window = _f64(mag), _f64(phase), _f64(window)
    n = len(window)
    frames = mag.shape[1]
    re, im = mag * np.cos(phase), mag * np.sin(phase)
    k = np.arange(n // 2 + 1)[:, None]
    angle = 2 * np.pi * ((k * np.arange(n)[None, :]) % n) / n  # (K, N)
    weight = np.full((n // 2 + 1, 1), 2.0)  # bins 1..N/2-1 stand for their conjugates too
    weight[0], weight[n // 2] = 1.0, 1.0
    total = n + hop * (frames - 1)
    signal, envelope = np.zeros(total), np.zeros(total)
    for f in range(frames):
        frame = ((weight * re[:, f : f + 1]) * np.cos(angle)).sum(0)
        frame -= ((weight * im[:, f : f + 1]) * np.sin(angle))[1 : n // 2].sum(0)
        signal[f * hop : f * hop + n] += frame / n * window
        envelope[f * hop : f * hop + n] += window * window
    return signal[n // 2 : total - n // 2] / envelope[n // 2 : total - n // 2]


def instance_norm(x, scale, shift, eps):
    x, scale, shift = _f64(x), _f64(scale), _f64(shift)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale[:, None] + shift[:, None]


def snake(x, alpha):
    x, alpha = _f64(x), _f64(alpha)[:, None]
    return x + np.sin(alpha * x) ** 2 / alpha


def concat(a, b, axis=0):
    return np.concatenate([_f64(a), _f64(b)], axis=axis)
