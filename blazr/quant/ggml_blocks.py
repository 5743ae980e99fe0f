"""GGML block layouts decoded with numpy: `dequantize(data, type_name, shape)` is the spec every quantized
kernel is tested against.

Each type has one function that decodes a batch of whole blocks (n, block_bytes) uint8 into (n, block_elems)
float32, vectorised over the blocks. The float ops (f16 -> f32 first, then scale * q, then +/- min) follow
ggml-quants.c and gguf-py in the same order, so results are bit for bit the same.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from blazr.errors import CheckpointError
from blazr.quant import block_info, unsupported_type

# Blocks are decoded in steps of about 64K values, so every temporary stays in the CPU cache.
_STEP_ELEMS = 1 << 16
# A thread gets at least this many steps, so small tensors skip the pool.
_MIN_STEPS_PER_WORKER = 2

_SHIFT_2BIT = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
_SHIFT_1BIT = np.array(range(8), dtype=np.uint8).reshape(1, 8, 1)

BlockDecoder = Callable[[np.ndarray, np.ndarray], None]


# ---- shared field readers -------------------------------------------------------------------------------


def _f16(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The f16 field at byte `offset` of every block, as (n, 1) float32."""
    return blocks[:, offset : offset + 2].view(np.float16).astype(np.float32)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """(..., w) bytes -> (..., 2, w): all low nibbles, then all high nibbles (the ggml order)."""
    out = np.empty((*packed.shape[:-1], 2, packed.shape[-1]), dtype=np.uint8)
    np.bitwise_and(packed, 0x0F, out=out[..., 0, :])
    np.right_shift(packed, 4, out=out[..., 1, :])
    return out


def _k_scales_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: 12 bytes -> 8 six-bit scales and 8 six-bit mins, each (n, 8) uint8."""
    low_sc, low_min, high = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([low_sc & 0x3F, (high & 0x0F) | ((low_sc >> 2) & 0x30)], axis=1)
    mins = np.concatenate([low_min & 0x3F, (high >> 4) | ((low_min >> 2) & 0x30)], axis=1)
    return scales, mins


def _scale_into(out: np.ndarray, q: np.ndarray, scale: np.ndarray, offset: np.ndarray | None = None) -> None:
    """out = scale * q (+ offset), rounded after each op as ggml does; a plain cast then in-place ops is the
    fastest numpy order."""
    out[:] = q
    out *= scale
    if offset is not None:
        out += offset


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
    q = _nibbles(blocks[:, 2:18]).reshape(len(blocks), 32).view(np.int8)
    q -= 8
    _scale_into(out, q, _f16(blocks, 0))


def _decode_q4_1(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, m f16, qs[16] (4-bit)
    q = _nibbles(blocks[:, 4:20]).reshape(len(blocks), 32)
    _scale_into(out, q, _f16(blocks, 0), _f16(blocks, 2))


def _five_bit(high_bits: np.ndarray, packed: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1: 4 bytes of fifth bits (bit j -> value j) + 16 nibble bytes -> (n, 32) uint8 in 0..31."""
    q = _nibbles(packed).reshape(len(packed), 32)
    q |= np.unpackbits(high_bits, axis=1, bitorder="little") << 4
    return q


def _decode_q5_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qh[4], qs[16] (5-bit, offset 16)
    q = _five_bit(blocks[:, 2:6], blocks[:, 6:22]).view(np.int8)
    q -= 16
    _scale_into(out, q, _f16(blocks, 0))


def _decode_q5_1(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, m f16, qh[4], qs[16] (5-bit)
    q = _five_bit(blocks[:, 4:8], blocks[:, 8:24])
    _scale_into(out, q, _f16(blocks, 0), _f16(blocks, 2))


def _decode_q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qs[32] int8
    _scale_into(out, blocks[:, 2:34].view(np.int8), _f16(blocks, 0))


# ---- 256-value K-quant super-blocks ---------------------------------------------------------------------


def _decode_q2_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: scales[16] (4-bit scale | 4-bit min), qs[64] (2-bit), d f16, dmin f16; 16 groups of 16
    n = len(blocks)
    scales = blocks[:, 0:16]
    group_scale = (_f16(blocks, 80) * (scales & 0x0F)).reshape(n, 16, 1)
    group_min = (_f16(blocks, 82) * (scales >> 4)).reshape(n, 16, 1)
    q = (blocks[:, 16:80].reshape(n, 2, 1, 32) >> _SHIFT_2BIT) & 3  # (n, 2, 4, 32)
    out_groups = out.reshape(n, 16, 16)
    _scale_into(out_groups, q.reshape(n, 16, 16), group_scale)
    out_groups -= group_min


def _q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """Q3_K: 12 bytes -> 16 six-bit signed scales (n, 16) int8: low nibbles from bytes 0-7, 2 high bits
    from bytes 8-11."""
    n = len(packed)
    low = _nibbles(packed[:, 0:8]).reshape(n, 16)
    high = (packed[:, 8:12].reshape(n, 1, 1, 4) >> _SHIFT_2BIT) & 3  # (n, 1, 4, 4)
    scales = (low | (high.reshape(n, 16) << 4)).view(np.int8)
    scales -= 32
    return scales


def _decode_q3_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: hmask[32] (a clear bit means q - 4), qs[64] (2-bit), scales[12], d f16; 16 groups of 16
    n = len(blocks)
    group_scale = (_f16(blocks, 108) * _q3_k_scales(blocks[:, 96:108])).reshape(n, 16, 1)
    low = (blocks[:, 32:96].reshape(n, 2, 1, 32) >> _SHIFT_2BIT) & 3  # (n, 2, 4, 32)
    high = (blocks[:, 0:32].reshape(n, 1, 32) >> _SHIFT_1BIT) & 1  # (n, 8, 32)
    q = (low.reshape(n, 8, 32) | (high << 2)).view(np.int8)
    q -= 4
    _scale_into(out.reshape(n, 16, 16), q.reshape(n, 16, 16), group_scale)


def _decode_q4_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, dmin f16, scales[12] (6-bit scales and mins), qs[128] (4-bit); 8 groups of 32
    n = len(blocks)
    scales, mins = _k_scales_mins(blocks[:, 4:16])
    group_scale = (_f16(blocks, 0) * scales).reshape(n, 8, 1)
    group_min = (_f16(blocks, 2) * mins).reshape(n, 8, 1)
    q = _nibbles(blocks[:, 16:144].reshape(n, 4, 32)).reshape(n, 8, 32)
    out_groups = out.reshape(n, 8, 32)
    _scale_into(out_groups, q, group_scale)
    out_groups -= group_min


def _decode_q5_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, dmin f16, scales[12], qh[32] (bit 4 of group g = bit g), qs[128] (4-bit); 8 groups of 32
    n = len(blocks)
    scales, mins = _k_scales_mins(blocks[:, 4:16])
    group_scale = (_f16(blocks, 0) * scales).reshape(n, 8, 1)
    group_min = (_f16(blocks, 2) * mins).reshape(n, 8, 1)
    q = _nibbles(blocks[:, 48:176].reshape(n, 4, 32)).reshape(n, 8, 32)
    q |= ((blocks[:, 16:48].reshape(n, 1, 32) >> _SHIFT_1BIT) & 1) << 4
    out_groups = out.reshape(n, 8, 32)
    _scale_into(out_groups, q, group_scale)
    out_groups -= group_min


def _decode_q6_k(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8, d f16; 16 groups of 16
    n = len(blocks)
    group_scale = (_f16(blocks, 208) * blocks[:, 192:208].view(np.int8)).reshape(n, 16, 1)
    low = _nibbles(blocks[:, 0:128].reshape(n, 2, 64))  # (n, 2, 2, 64)
    high = (blocks[:, 128:192].reshape(n, 2, 1, 32) >> _SHIFT_2BIT) & 3  # (n, 2, 4, 32)
    q = (low.reshape(n, 256) | (high.reshape(n, 256) << 4)).view(np.int8)
    q -= 32
    _scale_into(out.reshape(n, 16, 16), q.reshape(n, 16, 16), group_scale)


_DECODERS: dict[str, BlockDecoder] = {
    "F16": _decode_f16,
    "BF16": _decode_bf16,
    "Q4_0": _decode_q4_0,
    "Q4_1": _decode_q4_1,
    "Q5_0": _decode_q5_0,
    "Q5_1": _decode_q5_1,
    "Q8_0": _decode_q8_0,
    "Q2_K": _decode_q2_k,
    "Q3_K": _decode_q3_k,
    "Q4_K": _decode_q4_k,
    "Q5_K": _decode_q5_k,
    "Q6_K": _decode_q6_k,
}


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
    if type_name != "F32" and type_name not in _DECODERS:
        raise unsupported_type(type_name)
    raw = _raw_bytes(data, type_name, shape)
    if type_name == "F32":
        return raw.view(np.float32).reshape(shape)
    block_elems, block_bytes = block_info(type_name)
    blocks = raw.reshape(-1, block_bytes)  # (n_blocks, block_bytes)
    out = np.empty((len(blocks), block_elems), dtype=np.float32)  # (n_blocks, block_elems)
    _decode_parallel(_DECODERS[type_name], blocks, out)
    return out.reshape(shape)
