"""The backend contract: 4 memory calls, the op set in OPS, and one capability query.

Model code calls only these. Every op has a float64 reference of the same name and signature in
tests/reference.py, and (for the wgpu backend) a shader shaders/<op>.wgsl. Anything not in OPS is built in
Python from these ops. Arrays are opaque handles (`Array`): numpy arrays on the CPU backend, device buffers
elsewhere; only `upload`/`download` cross the host boundary.

Conventions for every op:
  * activations are row-major, tokens first: x (T, D), q/k/v (T, H, Dh);
  * dense weights keep the Hugging Face layout (out_features, in_features), so matmul computes x @ w.T;
  * integer index arrays (ids, positions, slots, block tables, lengths) are int32;
  * ops never mutate their inputs, except kv_write, which writes the cache in place, and causal_conv1d and
    ssm_scan, which write their per-sequence state slots in place.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

Array = Any  # a backend's array handle

OPS: tuple[str, ...] = (
    # linear algebra
    "embed",
    "matmul",
    "matmul_experts",
    # normalisation
    "rms_norm",
    "layer_norm",
    # attention
    "rope",
    "kv_write",
    "attention",
    "attention_dense",
    "attention_relative",
    # elementwise
    "softmax",
    "glu",
    "act",
    "binary",
    # selection
    "topk",
    "sample",
    # sequence
    "conv1d",
    "conv_transpose1d",
    "ssm_scan",
    "causal_conv1d",
    # layout
    "transpose",
    # speech synthesis (Kokoro / iSTFTNet)
    "lstm",
    "stft",
    "istft",
    "instance_norm",
    "snake",
    "concat",
)

# act(x, kind, slope) and glu(gate, up, kind); tanh is for logit soft-capping (softcap * tanh(x / softcap)),
# sigmoid/exp/softplus/leaky_relu for TTS vocoders (VITS, HiFi-GAN). New kinds go at the end: kernels number
# them by their index here.
# sin: iSTFTNet's phase (Kokoro).
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu", "tanh", "sigmoid", "exp", "softplus", "leaky_relu", "sin")
BINARY_OPS = ("add", "sub", "mul", "div", "min", "max")  # binary(op, a, b), numpy broadcasting
# each binary op's function in an array namespace (numpy's names, which CuPy shares)
BINARY_UFUNCS = dict(add="add", sub="subtract", mul="multiply", div="divide", min="minimum", max="maximum")
ROPE_STYLES = ("neox", "interleaved")  # neox: rotate halves (HF); interleaved: adjacent pairs (GPT-J)
DTYPES = ("f32", "f16", "bf16")  # activation / dense-weight dtypes a backend may support


@dataclass
class SampleParams:
    """Per-row sampling knobs for `Backend.sample`; every field has one entry per logits row (B,)."""

    temperature: np.ndarray  # (B,) f32; 0 means greedy (argmax)
    top_k: np.ndarray  # (B,) int32; 0 disables
    top_p: np.ndarray  # (B,) f32; 1.0 disables
    min_p: np.ndarray  # (B,) f32; 0.0 disables
    uniform: (
        np.ndarray
    )  # (B,) f64 in [0, 1): the random draw, made on the host from each request's seeded RNG


@runtime_checkable
class Backend(Protocol):
    """What every backend module (`blazr/backends/<name>.py`) exports as `Backend`."""

    name: str  # "cpu", "wgpu:0", "cuda:0"

    # ---- memory -------------------------------------------------------------------------------------
    def upload(self, a: np.ndarray, dtype: str | None = None) -> Array:
        """Copy a host array to the device; float arrays are cast to `dtype` (default: the compute dtype)."""

    def download(self, a: Array) -> np.ndarray:
        """Copy a device array to a host numpy array."""

    def empty(self, shape: tuple[int, ...], dtype: str = "f32") -> Array:
        """A new device array; contents undefined. dtype is one of DTYPES or "i32"."""

    def sync(self) -> None:
        """Wait until all queued device work is done."""

    # ---- linear algebra -----------------------------------------------------------------------------
    def embed(self, table: Array, ids: Array) -> Array:
        """table (V, D), ids (T,) -> (T, D): rows of the table."""

    def matmul(self, x: Array, w: Array) -> Array:
        """x (T, K), w (N, K) -> (T, N) = x @ w.T. w is a dense array or a packed quantized weight."""

    def matmul_experts(self, x: Array, w: Array, expert_ids: Array) -> Array:
        """x (T, K), w (E, N, K), expert_ids (T, k) -> (T, k, N): token t through each of its k experts."""

    # ---- normalisation ------------------------------------------------------------------------------
    def rms_norm(self, x: Array, w: Array, eps: float) -> Array:
        """x (T, D), w (D,) -> (T, D) = x / sqrt(mean(x^2) + eps) * w."""

    def layer_norm(self, x: Array, w: Array, b: Array | None, eps: float) -> Array:
        """x (T, D), w (D,), b (D,) or None -> (T, D) = (x - mean) / sqrt(var + eps) * w + b."""

    # ---- attention ----------------------------------------------------------------------------------
    def rope(
        self, x: Array, positions: Array, inv_freq: Array, style: str, rot_dim: int | None = None
    ) -> Array:
        """x (T, H, Dh), positions (T,), inv_freq (R/2,) -> (T, H, Dh) rotated.

        The first `rot_dim` (default Dh) features of each head are rotated, the rest pass through (partial
        rotary, as in Phi and GPT-NeoX). Angle for pair i at position p is p * inv_freq[i]. style "neox"
        pairs feature i with i + R/2; "interleaved" pairs 2i with 2i+1.
        """

    def kv_write(self, k_cache: Array, v_cache: Array, k: Array, v: Array, slots: Array) -> None:
        """In place: k_cache/v_cache (S, Hkv, Dh) with S = num_blocks * block_size; k, v (T, Hkv, Dh);
        slots (T,) -> cache[slots[t]] = k[t], v[t]. A slot is block_id * block_size + offset."""

    def attention(
        self,
        q: Array,
        k_cache: Array,
        v_cache: Array,
        block_tables: Array,
        ctx_lens: Array,
        q_lens: Array,
        block_size: int,
        scale: float,
        window: int = 0,
        softcap: float = 0.0,
        alibi: Array | None = None,
        sinks: Array | None = None,
    ) -> Array:
        """Causal attention of a batch of sequences over the paged KV cache (GQA by head grouping).

        q (T, H, Dh) holds B sequences back to back, q_lens (B,) tokens each (sum = T). Sequence b's keys
        are its first ctx_lens[b] cache positions, found through block_tables (B, max_blocks): position j
        lives in slot block_tables[b, j // block_size] * block_size + j % block_size. Its queries are
        positions ctx_lens[b] - q_lens[b] .. ctx_lens[b] - 1 and see keys at positions <= their own;
        with window > 0 only the last `window` positions (pos_q - pos_k < window). softcap > 0 applies
        softcap * tanh(score / softcap) before the softmax (Gemma 2). alibi (H,) float32, when given, holds
        per-query-head ALiBi slopes: the score of head h for the key at position j is
        scale * q.k + alibi[h] * j before the soft-cap and the softmax (j the key's absolute position; the
        softmax ignores a constant per query, so this is the relative form -alibi[h] * (pos_q - j)). The
        slopes multiply j as given: a model that biases before scaling passes its slopes times `scale`.
        sinks (H,) float32, when given, holds one learnt logit per query head that takes part in the softmax
        as a key with no value would (GPT-OSS's attention sinks): weights exp(s_j) / (sum_j exp(s_j) +
        exp(sinks[h])). Query head h reads KV head h // (H // Hkv). Returns (T, H, Dh).
        """

    def attention_dense(
        self,
        q: Array,
        k: Array,
        v: Array,
        q_lens: Array,
        kv_lens: Array,
        scale: float,
        causal: bool = False,
        window: int = 0,
        rel_bias: Array | None = None,
    ) -> Array:
        """Attention without a cache over B sequences packed back to back (block-diagonal, no padding):
        encoders, cross-attention, and prompts that need no KV cache.

        q (Tq, H, Dk) holds q_lens[b] rows of sequence b; k (Tk, Hkv, Dk) and v (Tk, Hkv, Dv) hold its
        kv_lens[b] rows (q_lens, kv_lens (B,) int32; sums Tq, Tk). Query i of sequence b is at position
        kv_lens[b] - q_lens[b] + i (the last q_lens positions) and sees the keys j of its own sequence:
        every one, or with causal only j <= its position; window > 0 keeps only keys with
        |position - j| < window (both sides unless causal: ModernBERT's local attention of width w is
        window = w // 2 + 1). A query that sees no key gets zeros. Query head h reads KV head
        h // (H // Hkv). rel_bias (H, 2R + 1) f32 or None: a relative position bias (MPNet's), added to the
        scaled score of query head h at position pos for key j as rel_bias[h, clamp(j - pos, -R, R) + R]
        before the softmax. Returns (Tq, H, Dv).
        """

    def attention_relative(
        self, q: Array, k: Array, v: Array, rel_k: Array, rel_v: Array, scale: float
    ) -> Array:
        """Self-attention of one sequence with relative position keys and values shared by the heads (Shaw
        et al.; VITS's text encoder). q, k, v (T, H, D); rel_k, rel_v (2W + 1, D) for offsets -W..W.
        Query i and key j score scale * (q_i . k_j + q_i . rel_k[j - i + W]), the relative term only when
        |j - i| <= W; every key is visible; out_i = sum_j p_ij * (v_j + rel_v[j - i + W] if |j - i| <= W).
        Returns (T, H, D)."""

    # ---- elementwise --------------------------------------------------------------------------------
    def softmax(self, x: Array) -> Array:
        """Softmax over the last axis."""

    def glu(self, gate: Array, up: Array, kind: str) -> Array:
        """act(gate, kind) * up, elementwise, kind in ACTIVATIONS (leaky_relu with the default slope). VITS's
        WaveNet gate tanh(a) * sigmoid(b) is glu(b, act(a, "tanh"), "sigmoid")."""

    def act(self, x: Array, kind: str, slope: float = 0.01) -> Array:
        """Elementwise activation, kind in ACTIVATIONS:
        silu x sigmoid(x); gelu x Phi(x) (erf); gelu_tanh 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
        relu max(x, 0); tanh; sigmoid 1 / (1 + e^-x); exp e^x (inf past float32's range, x > ~88.7);
        softplus log(1 + e^x), computed without overflow; leaky_relu x if x >= 0 else slope * x; sin. Only
        leaky_relu reads `slope` (HiFi-GAN uses 0.1)."""

    def binary(self, op: str, a: Array, b: Array) -> Array:
        """Elementwise op in BINARY_OPS with numpy broadcasting of b to a's shape."""

    # ---- selection ----------------------------------------------------------------------------------
    def topk(self, x: Array, k: int) -> tuple[Array, Array]:
        """x (B, N) -> values (B, k), indices (B, k) int32, largest first (ties: lower index first)."""

    def sample(self, logits: Array, params: SampleParams) -> Array:
        """logits (B, V) -> ids (B,) int32. Per row: temperature 0 -> argmax. Otherwise divide by
        temperature, keep the top_k largest (if > 0), softmax, keep the smallest set of most likely tokens
        whose mass reaches top_p, drop tokens below min_p * max prob, renormalise, and pick the token where
        the cumulative probability (tokens in descending order, ties by lower id) first exceeds uniform."""

    # ---- sequence -----------------------------------------------------------------------------------
    def conv1d(
        self,
        x: Array,
        w: Array,
        b: Array | None,
        stride: int,
        pad: int,
        groups: int,
        dilation: int = 1,
        pre_act: str | None = None,
        slope: float = 0.01,
        residual: Array | None = None,
    ) -> Array:
        """x (C_in, L), w (C_out, C_in // groups, Kw), b (C_out,) or None -> (C_out, L_out), as PyTorch's
        Conv1d: zero padding `pad` on both sides, output column t reads input column
        t * stride + j * dilation - pad at tap j, and L_out = (L + 2 pad - dilation (Kw - 1) - 1) // stride + 1.
        Output channel o reads the input channels of its group o // (C_out // groups).
        Fusions (HiFi-GAN's act -> conv -> add steps, so the activated input and the sum are never stored
        apart): pre_act (a kind of ACTIVATIONS, slope as for act) is applied to x before it is padded and
        convolved; residual (C_out, L_out) is added to the output."""

    def conv_transpose1d(
        self,
        x: Array,
        w: Array,
        b: Array | None,
        stride: int,
        pad: int,
        groups: int = 1,
        pre_act: str | None = None,
        slope: float = 0.01,
    ) -> Array:
        """x (C_in, L), w (C_in, C_out // groups, Kw) (PyTorch's ConvTranspose1d layout), b (C_out,) or None
        -> (C_out, L_out), L_out = (L - 1) stride - 2 pad + Kw (no output padding, no dilation): input column
        t adds w[c, o, j] x[c, t] to output column t * stride + j - pad (those outside [0, L_out) dropped).
        Input channel c feeds the output channels of its group c // (C_in // groups). HiFi-GAN's upsampler.
        pre_act (a kind of ACTIVATIONS, slope as for act) is applied to x first (HiFi-GAN's LeakyReLU before
        each upsampler, fused so that the activated input is never stored apart)."""

    def causal_conv1d(
        self,
        x: Array,
        w: Array,
        b: Array | None,
        states: Array,
        seq_slots: Array,
        q_lens: Array,
        fresh: Array,
        act: str | None = "silu",
    ) -> Array:
        """Depthwise causal convolution of B sequences laid back to back, each carrying its last K-1 inputs from
        call to call in a state slot (Mamba's conv1d). x (T, C): sequence i's q_lens[i] new rows in order
        (sum q_lens = T; a length may be 0); w (C, K); b (C,) or None; states (S, K-1, C), written in place;
        seq_slots (B,) int32 the slot of each sequence; fresh (B,) int32, 1 where the sequence starts in this
        call (its slot's old content reads as zeros). With window = [old state rows (K-1), new rows] of a
        sequence, out[t, c] = act(b[c] + sum_j w[c, j] window[t + j, c]) (act a kind of ACTIVATIONS, or None);
        afterwards the slot holds the window's last K-1 rows. Returns out (T, C).

        states are float32 whatever the activations' dtype. A slot outside [0, S) raises IndexError where the
        backend can tell without a device read; two sequences of one call must not share a slot."""

    def ssm_scan(
        self,
        x: Array,
        dt: Array,
        A: Array,
        B: Array,
        C: Array,
        D: Array,
        states: Array,
        seq_slots: Array,
        q_lens: Array,
        fresh: Array,
    ) -> Array:
        """Selective scan of B sequences laid back to back (Mamba2's SSD recurrence, and Mamba 1's with P = 1).
        x (T, H, P), dt (T, H) (already softplus'ed), A (H,) or (H, N) (Mamba 1: a decay rate per state),
        B and C (T, G, N), D (H,), states (S, H, P, N) float32, written in place; seq_slots, q_lens, fresh as
        for causal_conv1d. Head h reads group h // (H // G). Per sequence, from its slot's state (zeros when
        fresh), for each of its rows t:  state[h, p, n] = exp(dt[t, h] A[h(, n)]) state[h, p, n]
        + dt[t, h] x[t, h, p] B[t, g, n];  y[t, h, p] = sum_n state[h, p, n] C[t, g, n] + D[h] x[t, h, p].
        The slot keeps the final state. Returns y (T, H, P).

        The state is float32 and accumulated in float32 whatever the activations' dtype (wgpu f16)."""

    # ---- layout -------------------------------------------------------------------------------------
    def transpose(self, x: Array) -> Array:
        """x (M, N) -> (N, M) contiguous: conv1d's (channels, time) output as the (time, channels) rows the
        rest of a network reads (the Whisper and TTS front ends)."""

    # ---- speech synthesis ---------------------------------------------------------------------------
    def lstm(self, gates: Array, w_hh: Array) -> Array:
        """Bidirectional single-layer LSTM, batch 1, PyTorch's nn.LSTM gate order (i, f, g, o).
        gates (T, 8H): the input projections x W_ih^T + b_ih + b_hh, forward direction in columns [:4H],
        backward in [4H:]; w_hh (2, 4H, H) the recurrent weights of each direction. Zero initial state; per
        step z = gates[t] + h W_hh^T, c = sig(f) c + sig(i) tanh(g), h = sig(o) tanh(c). The backward
        direction runs t = T-1 .. 0. Returns (T, 2H): forward h in [:H], backward in [H:]."""

    def stft(self, x: Array, window: Array, hop: int) -> tuple[Array, Array]:
        """torch.stft(x, n_fft=N, hop, window, center=True, pad_mode="reflect", onesided) as magnitude and
        angle: x (L,), window (N,) -> mag (N/2 + 1, F), phase (N/2 + 1, F) with F = L // hop + 1 and
        phase = atan2(im, re) (0 where the bin is 0; the DC and Nyquist bins have im = +0 exactly)."""

    def istft(self, mag: Array, phase: Array, window: Array, hop: int) -> Array:
        """torch.istft of mag * e^(i phase), center=True, no length: mag, phase (N/2 + 1, F), window (N,)
        -> (hop * (F - 1),). Each frame is the real inverse DFT (the imaginary parts of the DC and Nyquist
        bins ignored), times the window, overlap-added at f * hop, divided by the overlap-added squared
        window, and N/2 samples dropped at each end."""

    def instance_norm(self, x: Array, scale: Array, shift: Array, eps: float) -> Array:
        """x (C, L), scale (C,), shift (C,) -> (C, L): each row normalised over time (mean 0, biased
        variance 1 with eps), then times scale[c] plus shift[c] (InstanceNorm1d, and AdaIN's style affine)."""

    def snake(self, x: Array, alpha: Array) -> Array:
        """x (C, L), alpha (C,) -> x + sin(alpha x)^2 / alpha per channel (iSTFTNet's Snake1D)."""

    def concat(self, a: Array, b: Array, axis: int = 0) -> Array:
        """axis 0: a (M, L), b (N, L) -> (M + N, L), the rows of a, then those of b (channel stacking).
        axis -1: a (..., La), b (..., Lb) with the same leading shape -> (..., La + Lb), each row of a followed
        by the same row of b (multi-head latent attention's latent and rotary parts)."""

    # ---- capability ---------------------------------------------------------------------------------
    def kernels_own_threads(self) -> AbstractContextManager:
        """A context in which the backend's own kernels alone spread work over threads: for a network whose
        parallel work is the backend's kernels with small library calls (BLAS) between them, whose thread
        pool would otherwise spin against the kernels' one (the CPU backend keeps BLAS to one thread)."""

    def hold_packed(self, fmt: str) -> None:
        """Told, as a model loads, of each weight kept in its blocks (`fmt`, a quant format name): a backend
        whose kernel choices depend on holding packed weights makes them now, so that the first forward
        takes the same kernels as every later one (the CPU backend's dense matmuls join numba's pool)."""

    def supports(self, op: str, dtype: str | None = None, fmt: str | None = None) -> bool:
        """Whether `op` runs here with activations of `dtype` and (for matmul/embed) weights in `fmt`
        (None for dense, else a quant format name such as "Q4_K"). Checked once when a model loads."""


def check_supports(backend: Backend, needs: list[tuple[str, str | None, str | None]]) -> None:
    """Raise UnsupportedError naming the first (op, dtype, fmt) the backend lacks. Called at model load."""
    from blazr.errors import UnsupportedError

    for op, dtype, fmt in needs:
        if not backend.supports(op, dtype, fmt):
            if dtype and backend.supports(op, None, fmt):
                raise UnsupportedError(
                    f"device {backend.name} cannot compute in {dtype}; use --dtype f32 or another --device"
                )
            what = (
                op + (f" with {dtype} activations" if dtype else "") + (f" on {fmt} weights" if fmt else "")
            )
            raise UnsupportedError(f"device {backend.name} does not support {what}")


# ---- float16 KV caches (blazr.engine.kv_dtype) ------------------------------------------------------------
HALF_MAX = 65504.0  # the largest finite float16: a float16 KV cache saturates there instead of holding inf


def to_half(x: np.ndarray) -> np.ndarray:
    """float16 of float32 `x`, same shape, round to nearest even; beyond +-65504 saturates (NaN stays NaN)."""
    return np.clip(x, -HALF_MAX, HALF_MAX).astype(np.float16)


def as_half_bits(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each float16 array as a view of its uint16 bits, as the numba kernels take them (numba has no float16 on
    the CPU; blazr.backends.half_bits widens them); any other array as it is (a list, not a generator: this runs
    twice a layer and decode step; 2.95 -> 2.7 us for two caches)."""
    return tuple([a.view(np.uint16) if a.dtype == np.float16 else a for a in arrays])
