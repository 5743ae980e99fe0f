"""AWQ and GPTQ int4 weights, unpacked from each format's published layout and repacked at load into blazr's
one int4 block format, I4Z, which every backend multiplies packed.

I4Z block (20 bytes, 32 consecutive values of one output row):
  d  f16      the checkpoint's scale of the values' group, copied bit for bit
  z  u16      the group's zero point (0..16; a u16 slot keeps the nibbles 4-byte aligned)
  qs[16]      byte i: value i in the low nibble, value i + 16 in the high one (GGML's Q4 order)
A value is (q - z) * d: an exact integer difference times the f16 scale, so dequantization is exact in f32
and the numpy decoder here, the numba one (cpu_blocks) and the WGSL one (shaders/matmul_i4z.wgsl) agree bit
for bit. Q4_1 (v = d q + m) would need the min -z d rounded to f16, which is not exact; hence our own format.

Both formats store W (N, K) as w[n, k] = (q[k, n] - z[g(k), n]) * s[g(k), n] with one f16 scale and one
zero per (group of inputs, output), and differ in how they pack it (AutoAWQ WQLinear_GEMM.from_linear,
AutoGPTQ QuantLinear.pack):
  AWQ (GEMM)  qweight (K, N/8) int32 packed along N: nibble i (bits 4i..4i+3) of word c holds output
              8c + AWQ_ORDER[i]; qzeros (K/g, N/8) the same way; scales (K/g, N); group of input k is k // g.
  GPTQ        qweight (K/8, N) int32 packed along K in order: nibble j of row r holds input 8r + j;
              qzeros (G, N/8) packed along N in order, holding z - 1 in the classic "gptq" checkpoint format
              (dequantizers add 1 back, unmasked) and z in "gptq_v2"; scales (G, N); g_idx (K,) each input's
              group. With act-order (desc_act) the groups are not runs of K: sorting the inputs by group
              (`column_order`) makes every 32-block lie in one group, and the weight carries that
              permutation (QuantWeight.perm) so the backend gathers x's columns before the matmul.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blazr.quant.block_fields import f16_field, nibbles, scale_into

BLOCK = 32  # values per I4Z block
BLOCK_BYTES = 20
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # output 8c + AWQ_ORDER[i] sits in nibble i of word c
_SHIFTS = np.arange(0, 32, 4, dtype=np.uint32)  # bit offset of nibble i


@dataclass(frozen=True)
class Int4Parts:
    """One linear layer's int4 weight, unpacked: w[n, k] = (q[k, n] - zeros[groups[k], n]) * scales[...]."""

    q: np.ndarray  # (K, N) uint8, 0..15
    zeros: np.ndarray  # (G, N) uint16, 0..16
    scales: np.ndarray  # (G, N) float16 (float32 for the rare checkpoint with BF16/F32 scales)
    groups: np.ndarray  # (K,) int64, each input's group in 0..G-1

    @property
    def shape(self) -> tuple[int, int]:
        """(N, K), the HF shape of the dense weight."""
        return self.q.shape[1], self.q.shape[0]


# ---- unpacking the checkpoint layouts --------------------------------------------------------------------


def unpack_along_rows(packed: np.ndarray) -> np.ndarray:
    """(R, C) int32 words, 8 nibbles each in order down the rows -> (8R, C) uint8 (GPTQ qweight)."""
    words = packed.view(np.uint32)
    q = np.empty((words.shape[0], 8, words.shape[1]), dtype=np.uint8)  # (R, 8, C)
    for j, shift in enumerate(_SHIFTS):  # one nibble at a time: a (R, C) temporary, not (R, 8, C) words
        q[:, j] = (words >> shift) & 15
    return q.reshape(-1, packed.shape[1])


def unpack_along_cols(packed: np.ndarray, order: tuple[int, ...] = tuple(range(8))) -> np.ndarray:
    """(R, C) int32 words -> (R, 8C) uint8, nibble i of word c being column 8c + order[i] (AWQ: AWQ_ORDER;
    GPTQ qzeros: in order)."""
    words = packed.view(np.uint32)
    q = np.empty((*words.shape, 8), dtype=np.uint8)  # (R, C, 8): column 8c + j at [:, c, j]
    for i, shift in enumerate(_SHIFTS):
        q[:, :, order[i]] = (words >> shift) & 15
    return q.reshape(packed.shape[0], -1)


def awq_parts(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, group_size: int) -> Int4Parts:
    """AutoAWQ GEMM tensors (shapes checked by the loader) -> the unpacked weight."""
    k = qweight.shape[0]
    q = unpack_along_cols(qweight, AWQ_ORDER)  # (K, N)
    zeros = unpack_along_cols(qzeros, AWQ_ORDER).astype(np.uint16)  # (K/g, N)
    return Int4Parts(q, zeros, scales, np.arange(k) // group_size)


def gptq_parts(
    qweight: np.ndarray, qzeros: np.ndarray | None, scales: np.ndarray, groups: np.ndarray, zero_offset: int
) -> Int4Parts:
    """AutoGPTQ tensors -> the unpacked weight. qzeros None (a symmetric checkpoint that left them out) means
    the symmetric zero 8; zero_offset is 1 for the "gptq" checkpoint format (it stores z - 1), 0 for v2."""
    q = unpack_along_rows(qweight)  # (K, N)
    if qzeros is None:
        zeros = np.full(scales.shape, 8, dtype=np.uint16)  # (G, N)
    else:
        zeros = unpack_along_cols(qzeros).astype(np.uint16) + np.uint16(zero_offset)  # (G, N)
    return Int4Parts(q, zeros, scales, np.asarray(groups, np.int64))


def dequantize_parts(parts: Int4Parts) -> np.ndarray:
    """The dense weight (N, K) float32, input columns in checkpoint order."""
    diff = parts.q.astype(np.int32) - parts.zeros[parts.groups]  # (K, N) exact integers
    w = diff.astype(np.float32)
    w *= parts.scales[parts.groups].astype(np.float32)  # (K, N), one rounding-free product per value
    return np.ascontiguousarray(w.T)


# ---- repacking into I4Z ---------------------------------------------------------------------------------


def column_order(groups: np.ndarray) -> np.ndarray | None:
    """Inputs sorted by group (stable), as int32 (K,); None when they already are (no act-order)."""
    if np.all(groups[1:] >= groups[:-1]):
        return None
    return np.argsort(groups, kind="stable").astype(np.int32)


def block_groups(groups: np.ndarray, perm: np.ndarray | None) -> np.ndarray | None:
    """The group of each 32-input block in packed order (K/32,), or None when a block would mix groups."""
    if len(groups) % BLOCK:
        return None
    runs = (groups if perm is None else groups[perm]).reshape(-1, BLOCK)  # (K/32, 32)
    if np.any(runs != runs[:, :1]):
        return None
    return runs[:, 0]


def pack_i4z(parts: Int4Parts, perm: np.ndarray | None) -> np.ndarray:
    """I4Z rows (N, K/32 * 20) uint8, inputs in `perm` order; ValueError when a block would mix groups.
    The scales must be float16 (copied, never rounded)."""
    n, k = parts.shape
    if parts.scales.dtype != np.float16:
        raise ValueError(f"I4Z keeps float16 scales exactly, not {parts.scales.dtype}")
    groups = block_groups(parts.groups, perm)
    if groups is None:
        raise ValueError(f"the groups of the {k} inputs do not come in whole runs of {BLOCK}")
    q = parts.q if perm is None else parts.q[perm]  # (K, N), inputs in packed order
    halves = q.reshape(k // BLOCK, 2, 16, n)  # (blocks, low/high nibble, byte, N)
    out = np.empty((n, k // BLOCK, BLOCK_BYTES), dtype=np.uint8)  # (N, blocks, 20)
    # nibbles are paired before the transpose to rows, which then moves half the bytes
    out[:, :, 4:] = (halves[:, 0] | (halves[:, 1] << 4)).transpose(2, 0, 1)
    d = np.ascontiguousarray(parts.scales[groups].T, dtype="<f2")  # (N, blocks)
    z = np.ascontiguousarray(parts.zeros[groups].T, dtype="<u2")  # (N, blocks)
    out[:, :, 0:2] = d.view(np.uint8).reshape(n, -1, 2)
    out[:, :, 2:4] = z.view(np.uint8).reshape(n, -1, 2)
    return out.reshape(n, -1)


def decode_i4z(blocks: np.ndarray, out: np.ndarray) -> None:
    """The numpy spec of I4Z: blocks (n, 20) uint8 -> out (n, 32) float32, v = (q - z) * d."""
    q = nibbles(blocks[:, 4:20]).reshape(len(blocks), BLOCK).astype(np.int32)  # (n, 32)
    q -= blocks[:, 2:4].view("<u2").astype(np.int32)  # minus z (n, 1)
    scale_into(out, q, f16_field(blocks, 0))
