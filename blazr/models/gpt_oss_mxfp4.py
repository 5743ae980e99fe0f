"""GPT-OSS's released SafeTensors keep the experts in MXFP4: `<prefix>experts.gate_up_proj_blocks` (E, 2F, D/32,
16) and `down_proj_blocks` (E, D, F/32, 16) uint8, two FP4 (e2m1) values a byte, and `*_scales` (E, rows, K/32)
uint8 power-of-two exponents (2^(s - 127)) per 32 values, rows as (out, in), gate and up rows interleaved.

GGML's MXFP4 block holds the same numbers: one e8m0 byte (the same exponent: ggml's values are twice FP4's
and its scale half) and 16 bytes whose low nibbles are values 0-15 and high nibbles values 16-31, where the
released layout puts value 2i in the low and 2i + 1 in the high nibble of byte i. Repacked once at load (a
copy of the expert bytes, as llama.cpp's converter makes), the experts then stay packed like a GGUF's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blazr.errors import CheckpointError
from blazr.loaders.gguf import GGUFTensor

BLOCK_BYTES = 17  # ggml block_mxfp4: e8m0 exponent, then 16 bytes of nibbles


def repack_mxfp4(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """blocks (..., K/32, 16) and scales (..., K/32) uint8 in the released layout -> GGML MXFP4 rows
    (..., K/32 * 17) uint8."""
    nibbles = np.empty((*blocks.shape[:-1], 32), dtype=np.uint8)  # (..., K/32, 32) value n of each block
    nibbles[..., 0::2] = blocks & 0x0F
    nibbles[..., 1::2] = blocks >> 4
    qs = nibbles[..., :16] | (nibbles[..., 16:] << 4)  # (..., K/32, 16) ggml: value j low, j + 16 high
    out = np.concatenate([scales[..., None], qs], axis=-1)  # (..., K/32, 17)
    return out.reshape(*blocks.shape[:-2], -1)


def mxfp4_experts(weights: dict[str, Any]) -> dict[str, Any]:
    """Every `*_blocks` / `*_scales` pair -> packed expert tensors under the names GGUF files give them
    (experts.gate_proj / up_proj (E, F, D) from the interleaved gate_up rows, experts.down_proj (E, D, F)),
    which stack_experts then stacks as it stacks a GGUF's."""
    out = dict(weights)
    for name in [n for n in weights if n.endswith("_blocks")]:
        base = name.removesuffix("_blocks")
        scales_name = base + "_scales"
        if scales_name not in weights:
            raise CheckpointError(f"the checkpoint has {name!r} but no {scales_name!r}")
        blocks, scales = np.asarray(out.pop(name).load()), np.asarray(out.pop(scales_name).load())
        if blocks.ndim != 4 or blocks.shape[-1] != 16 or scales.shape != blocks.shape[:-1]:
            raise CheckpointError(
                f"{name!r} {blocks.shape} / {scales_name!r} {scales.shape} are not MXFP4 blocks (E, rows, K/32, 16)"
            )
        source = getattr(weights[name], "source", None)
        rows = repack_mxfp4(blocks, scales)  # (E, R, K/32 * 17)
        prefix, kind = base.rsplit(".", 1)  # "...mlp.experts", "gate_up_proj" / "down_proj"
        if kind == "gate_up_proj":
            out[prefix + ".gate_proj.weight"] = _packed(prefix + ".gate_proj", rows[:, 0::2], source)
            out[prefix + ".up_proj.weight"] = _packed(prefix + ".up_proj", rows[:, 1::2], source)
            bias = out.get(base + "_bias")
            if bias is not None:  # (E, 2F) interleaved as the rows were -> gate then up
                b = np.asarray(bias.load() if hasattr(bias, "load") else bias)
                out[base + "_bias"] = np.concatenate([b[:, 0::2], b[:, 1::2]], axis=1)
        else:
            out[prefix + f".{kind}.weight"] = _packed(prefix + f".{kind}", rows, source)
    return out


def _packed(name: str, rows: np.ndarray, source) -> GGUFTensor:
    """A packed MXFP4 tensor (E, R, K) held in memory, read like a GGUF's."""
    from blazr.quant.ggml_blocks import dequantize

    rows = np.ascontiguousarray(rows)  # (E, R, K/32 * 17)
    e, r, nbytes = rows.shape
    shape = (e, r, nbytes // BLOCK_BYTES * 32)
    return GGUFTensor(
        name=name,
        shape=shape,
        dtype="MXFP4",
        source=source,
        _read=lambda: dequantize(rows.reshape(-1), "MXFP4", shape),
        _read_blocks=lambda: rows.reshape(e * r, nbytes),
    )
