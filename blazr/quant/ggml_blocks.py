"""GGML block layouts decoded with numpy: `dequantize(data, type_name, shape)` is the spec every quantized
kernel is tested against.

Each type has one function that decodes a batch of whole blocks (n, block_bytes) uint8 into (n, block_elems)
float32, vectorised over the blocks. The float ops (f16 -> f32 first, then scale * q, then +/- min) follow
ggml-quants.c and gguf-py in the same order, so results are bit for bit the same. This module holds the
legacy, K-quant, FP4 and activation (Q8_1, Q8_K) types and the one dispatch table; the IQ types live in
`iq_blocks`, the ternary ones in `tq_blocks`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from blazr.errors import CheckpointError
from blazr.quant import block_info, int4, iq_blocks, tq_blocks, unsupported_type
from blazr.quant.block_fields import (
    SHIFT_1BIT,
    SHIFT_2BIT,
    SIGN_BIT_MASKS,
    f16_field,
    f32_field,
    flip_signs,
    nibbles,
    scale_into,
)

# Blocks are decoded in steps of about 64K values, so every temporary stays in the CPU cache.
_STEP_ELEMS = 1 << 16
# A thread gets at least this many steps, so small tensors skip the pool.
_MIN_STEPS_PER_WORKER = 2

BlockDecoder = Callable[[np.ndarray, np.ndarray], None]


# ---- K-quant scale fields --------------------------------------------------------------------------------


def _k_scales_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: 12 bytes -> 8 six-bit scales and 8 six-bit mins, each (n, 8) uint8."""
    low_sc, low_min, high = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([low_sc & 0x3F, (high & 0x0F) | ((low_sc >> 2) & 0x30)], axis=1)
    mins = np.concatenate([low_min & 0x3F, (high >> 4) | ((low_min >> 2) & 0x30)], axis=1)
    return scales, mins


# ---- float types ----------------------------------------------------------------------------------------


def _decode_f16(blocks: np.ndarray, out: np.ndarray) -> None:
    out[:] = blocks.view(np.float16)


def _decode_bf16(blocks: np.ndarray, out: np.ndarray) -> None:
    # bf16 is the top half of an f32: move the 16 bits up.
    bits = out.view(np.uint32)
    bits[:] = blocks.view(np.uint16)
    bits <<= 16


# ---- 32-value blocks ------------------------------------------------------------------------------------


def _decode_q4_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qs[16] (4-bit, offset 8)
    q = nibbles(blocks[:, 2:18]).reshape(len(blocks), 32).view(np.int8)
    q -= 8
    scale_into(out, q, f16_field(blocks, 0))


def _decode_q4_1(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, m f16, qs[16] (4-bit)
    q = nibbles(blocks[:, 4:20]).reshape(len(blocks), 32)
    scale_into(out, q, f16_field(blocks, 0), f16_field(blocks, 2))


def _five_bit(high_bits: np.ndarray, packed: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1: 4 bytes of fifth bits (bit j -> value j) + 16 nibble bytes -> (n, 32) uint8 in 0..31."""
    q = nibbles(packed).reshape(len(packed), 32)
    q |= np.unpackbits(high_bits, axis=1, bitorder="little") << 4
    return q


def _decode_q5_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qh[4], qs[16] (5-bit, offset 16)
    q = _five_bit(blocks[:, 2:6], blocks[:, 6:22]).view(np.int8)
    q -= 16
    scale_into(out, q, f16_field(blocks, 0))


def _decode_q5_1(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, m f16, qh[4], qs[16] (5-bit)
    q = _five_bit(blocks[:, 4:8], blocks[:, 8:24])
    scale_into(out, q, f16_field(blocks, 0), f16_field(blocks, 2))


def _decode_q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qs[32] int8
    scale_into(out, blocks[:, 2:34].view(np.int8), f16_field(blocks, 0))


def _decode_q8_1(blocks: np.ndarray, out: np.ndarray) -> None:
    # ggml's activation format: d, s (d * sum of q; not needed here), qs[32] int8. gguf-py sizes the block
    # 40 bytes (the first layout: d, s f32); ggml now writes 36 (d, s f16). Read whichever the table gives.
    if blocks.shape[1] == 40:
        scale_into(out, blocks[:, 8:40].view(np.int8), f32_field(blocks, 0))
    else:
        scale_into(out, blocks[:, 4:36].view(np.int8), f16_field(blocks, 0))


def _decode_q1_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qs[16]: one bit per value, set -> +d, clear -> -d; 128 values (no gguf-py reference)
    n = len(blocks)
    out[:] = f16_field(blocks, 0)
    flip_signs(out.reshape(n, 16, 8), np.take(SIGN_BIT_MASKS, ~blocks[:, 2:18], axis=0))


# ---- FP4 blocks (MXFP4 32 values, NVFP4 64) ---------------------------------------------------------------

# e2m1 levels doubled (ggml's kvalues_mxfp4); the scale tables below hold half the scale to match.
_FP4_LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def _e8m0_half_table() -> np.ndarray:
    """(256,) float32: e8m0 byte x -> 2^(x - 128), ggml_e8m0_to_fp32_half; x < 2 give subnormals."""
    x = np.arange(256, dtype=np.uint32)
    bits = np.where(x < 2, np.uint32(0x00200000) << x, (x - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def _ue4m3_half_table() -> np.ndarray:
    """(256,) float32: NVFP4 unsigned e4m3 byte -> half its value (exact); 0x00 and 0x7F (NaN) read as 0."""
    x = np.arange(256)
    exponent, mantissa = (x >> 3) & 0xF, x & 7
    value = np.where(exponent == 0, mantissa * 2.0**-9, (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    value[(x == 0) | (x == 0x7F)] = 0
    return (value * 0.5).astype(np.float32)


_E8M0_HALF = _e8m0_half_table()
_UE4M3_HALF = _ue4m3_half_table()


def _decode_mxfp4(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: e8m0 scale byte, qs[16] (4-bit e2m1 codes: low nibbles, then high)
    codes = nibbles(blocks[:, 1:17]).reshape(len(blocks), 32)
    np.take(_FP4_LEVELS, codes, out=out, mode="clip")
    with np.errstate(over="ignore"):  # the largest scales overflow to inf, as in ggml
        out *= np.take(_E8M0_HALF, blocks[:, 0:1])


def _decode_nvfp4(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: 4 ue4m3 scales, qs[32]: 4 groups of 16 values, 8 bytes each (low nibbles, then high); 64 values
    n = len(blocks)
    codes = nibbles(blocks[:, 4:36].reshape(n, 4, 8)).reshape(n, 4, 16)
    out_groups = out.reshape(n, 4, 16)
    np.take(_FP4_LEVELS, codes, out=out_groups, mode="clip")
    out_groups *= np.take(_UE4M3_HALF, blocks[:, 0:4]).reshape(n, 4, 1)


# ---- 256-value K-quant super-blocks ---------------------------------------------------------------------


def _decode_q2_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: scales[16] (4-bit scale | 4-bit min), qs[64] (2-bit), d f16, dmin f16; 16 groups of 16
    n = len(blocks)
    scales = blocks[:, 0:16]
    group_scale = (f16_field(blocks, 80) * (scales & 0x0F)).reshape(n, 16, 1)
    group_min = (f16_field(blocks, 82) * (scales >> 4)).reshape(n, 16, 1)
    q = (blocks[:, 16:80].reshape(n, 2, 1, 32) >> SHIFT_2BIT) & 3  # (n, 2, 4, 32)
    out_groups = out.reshape(n, 16, 16)
    scale_into(out_groups, q.reshape(n, 16, 16), group_scale)
    out_groups -= group_min


def _q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """Q3_K: 12 bytes -> 16 six-bit signed scales (n, 16) int8: low nibbles from bytes 0-7, 2 high bits
    from bytes 8-11."""
    n = len(packed)
    low = nibbles(packed[:, 0:8]).reshape(n, 16)
    high = (packed[:, 8:12].reshape(n, 1, 1, 4) >> SHIFT_2BIT) & 3  # (n, 1, 4, 4)
    scales = (low | (high.reshape(n, 16) << 4)).view(np.int8)
    scales -= 32
    return scales


def _decode_q3_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: hmask[32] (a clear bit means q - 4), qs[64] (2-bit), scales[12], d f16; 16 groups of 16
    n = len(blocks)
    group_scale = (f16_field(blocks, 108) * _q3_k_scales(blocks[:, 96:108])).reshape(n, 16, 1)
    low = (blocks[:, 32:96].reshape(n, 2, 1, 32) >> SHIFT_2BIT) & 3  # (n, 2, 4, 32)
    high = (blocks[:, 0:32].reshape(n, 1, 32) >> SHIFT_1BIT) & 1  # (n, 8, 32)
    q = (low.reshape(n, 8, 32) | (high << 2)).view(np.int8)
    q -= 4
    scale_into(out.reshape(n, 16, 16), q.reshape(n, 16, 16), group_scale)


def _decode_q4_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, dmin f16, scales[12] (6-bit scales and mins), qs[128] (4-bit); 8 groups of 32
    n = len(blocks)
    scales, mins = _k_scales_mins(blocks[:, 4:16])
    group_scale = (f16_field(blocks, 0) * scales).reshape(n, 8, 1)
    group_min = (f16_field(blocks, 2) * mins).reshape(n, 8, 1)
    q = nibbles(blocks[:, 16:144].reshape(n, 4, 32)).reshape(n, 8, 32)
    out_groups = out.reshape(n, 8, 32)
    scale_into(out_groups, q, group_scale)
    out_groups -= group_min


def _decode_q5_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, dmin f16, scales[12], qh[32] (bit 4 of group g = bit g), qs[128] (4-bit); 8 groups of 32
    n = len(blocks)
    scales, mins = _k_scales_mins(blocks[:, 4:16])
    group_scale = (f16_field(blocks, 0) * scales).reshape(n, 8, 1)
    group_min = (f16_field(blocks, 2) * mins).reshape(n, 8, 1)
    q = nibbles(blocks[:, 48:176].reshape(n, 4, 32)).reshape(n, 8, 32)
    q |= ((blocks[:, 16:48].reshape(n, 1, 32) >> SHIFT_1BIT) & 1) << 4
    out_groups = out.reshape(n, 8, 32)
    scale_into(out_groups, q, group_scale)
    out_groups -= group_min


def _decode_q6_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8, d f16; 16 groups of 16
    n = len(blocks)
    group_scale = (f16_field(blocks, 208) * blocks[:, 192:208].view(np.int8)).reshape(n, 16, 1)
    low = nibbles(blocks[:, 0:128].reshape(n, 2, 64))  # (n, 2, 2, 64)
    high = (blocks[:, 128:192].reshape(n, 2, 1, 32) >> SHIFT_2BIT) & 3  # (n, 2, 4, 32)
    q = (low.reshape(n, 256) | (high.reshape(n, 256) << 4)).view(np.int8)
    q -= 32
    scale_into(out.reshape(n, 16, 16), q.reshape(n, 16, 16), group_scale)


def _decode_q8_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # ggml's K-quant activation format: d f32, qs[256] int8, bsums[16] int16 (group sums; not needed here)
    scale_into(out, blocks[:, 4:260].view(np.int8), f32_field(blocks, 0))


_DECODERS: dict[str, BlockDecoder] = {
    "F16": _decode_f16,
    "BF16": _decode_bf16,
    "Q4_0": _decode_q4_0,
    "Q4_1": _decode_q4_1,
    "Q5_0": _decode_q5_0,
    "Q5_1": _decode_q5_1,
    "Q8_0": _decode_q8_0,
    "Q8_1": _decode_q8_1,
    "Q1_0": _decode_q1_0,
    "MXFP4": _decode_mxfp4,
    "NVFP4": _decode_nvfp4,
    "Q2_K": _decode_q2_k,
    "Q3_K": _decode_q3_k,
    "Q4_K": _decode_q4_k,
    "Q5_K": _decode_q5_k,
    "Q6_K": _decode_q6_k,
    "Q8_K": _decode_q8_k,
    **iq_blocks.DECODERS,
    **tq_blocks.DECODERS,
}
# blazr's own block formats (blazr.quant.INTERNAL_TYPES), kept apart from the GGML table above
_INTERNAL_DECODERS: dict[str, BlockDecoder] = {"I4Z": int4.decode_i4z}


# ---- entry point ----------------------------------------------------------------------------------------


def _raw_bytes(data: np.ndarray, type_name: str, shape: tuple[int, ...]) -> np.ndarray:
    """`data` as a flat uint8 view, checked against the size `shape` needs."""
    n_elems = int(np.prod(shape, dtype=np.int64))
    block_elems, block_bytes = block_info(type_name)
    row_len = shape[-1] if shape else 1
    if row_len % block_elems:
        raise CheckpointError(
            f"{type_name} tensor of shape {shape}: last dim {row_len} is not a multiple of {block_elems}"
        )
    raw = np.asarray(data).reshape(-1).view(np.uint8)
    expected = n_elems // block_elems * block_bytes
    if raw.nbytes != expected:
        raise CheckpointError(
            f"{type_name} tensor of shape {shape} needs {expected} bytes, but its data has {raw.nbytes} bytes"
        )
    return raw


def _decode_steps(decode: BlockDecoder, blocks: np.ndarray, out: np.ndarray, step: int) -> None:
    for start in range(0, len(blocks), step):
        decode(blocks[start : start + step], out[start : start + step])


def _decode_parallel(decode: BlockDecoder, blocks: np.ndarray, out: np.ndarray) -> None:
    """Decode all blocks; big tensors are split into one contiguous range per CPU (numpy frees the GIL)."""
    step = max(1, _STEP_ELEMS // out.shape[1])
    n_steps = -(-len(blocks) // step)
    n_workers = min(_cpu_count(), n_steps // _MIN_STEPS_PER_WORKER)
    if n_workers <= 1:
        _decode_steps(decode, blocks, out, step)
        return
    span = -(-n_steps // n_workers) * step  # blocks per worker, a whole number of steps
    jobs = [
        _pool().submit(_decode_steps, decode, blocks[a : a + span], out[a : a + span], step)
        for a in range(0, len(blocks), span)
    ]
    for job in jobs:
        job.result()


@functools.lru_cache(maxsize=1)
def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=_cpu_count(), thread_name_prefix="blazr-dequant")


# A forked child has none of the parent's threads: give it a fresh pool.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool.cache_clear)


def dequantize(data: np.ndarray, type_name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Decode the raw bytes of one GGUF tensor into float32 of `shape`.

    `shape` is in numpy order (GGUF dims reversed; the last axis is contiguous). F32 data comes back as a
    view of `data`; every other type as a new array.
    """
    shape = tuple(int(d) for d in shape)
    decoder = _DECODERS.get(type_name) or _INTERNAL_DECODERS.get(type_name)
    if type_name != "F32" and decoder is None:
        raise unsupported_type(type_name)
    raw = _raw_bytes(data, type_name, shape)
    if type_name == "F32":
        return raw.view(np.float32).reshape(shape)
    block_elems, block_bytes = block_info(type_name)
    blocks = raw.reshape(-1, block_bytes)  # (n_blocks, block_bytes)
    out = np.empty((len(blocks), block_elems), dtype=np.float32)  # (n_blocks, block_elems)
    _decode_parallel(decoder, blocks, out)
    return out.reshape(shape)
