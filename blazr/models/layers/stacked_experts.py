"""Every expert's projections as one lazy checkpoint tensor, kept packed when the backend can multiply them.

SparseMoE declares (E, 2F, D) gate/up and (E, D, F) down arrays. A checkpoint holds each projection as one 3-D
tensor (GGUF's `ffn_gate_exps`, ...) or as E 2-D tensors. StackedExperts stands for the declared array without
reading anything: the weight uploader (blazr.models.base.WeightUploader) turns a quantized one into a
QuantExperts (the blocks as they are in the file) where the backend multiplies experts in their format, and
anything else into the dense array (`load()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.models.base import host_array


@dataclass(eq=False)
class StackedExperts:
    """`parts`: one entry per projection stacked by rows (gate then up, or down alone), each either
    (one 3-D tensor (E, N_i, K),) or E 2-D tensors (N_i, K) in expert order."""

    name: str  # the declared checkpoint name, e.g. "model.layers.0.mlp.experts.gate_up_proj"
    parts: tuple[tuple[Any, ...], ...]
    experts: int

    @property
    def shape(self) -> tuple[int, int, int]:
        rows = sum(_rows(part) for part in self.parts)
        return (self.experts, rows, int(self.parts[0][0].shape[-1]))

    @property
    def tensors(self) -> list[Any]:
        return [t for part in self.parts for t in part]

    @property
    def dtype(self) -> str:
        """The checkpoint format, or formats joined by "+" (Q4_K gate/up rows with Q6_K ones)."""
        names = [str(getattr(part[0], "dtype", "F32")) for part in self.parts]
        return names[0] if len(set(names)) == 1 else "+".join(names)

    @property
    def formats(self) -> set[str]:
        return {str(getattr(t, "dtype", "F32")) for t in self.tensors}

    @property
    def source(self):
        return getattr(self.parts[0][0], "source", None)

    @property
    def quantized(self) -> bool:
        """Every tensor holds GGML blocks a kernel can read in place: one format per projection, and no
        per-expert column order (a GPTQ act-order permutation differs per expert)."""
        return all(
            getattr(t, "quantized", False)
            and hasattr(t, "load_blocks")
            and getattr(t, "input_perm", None) is None
            for t in self.tensors
        ) and all(len({t.dtype for t in part}) == 1 for part in self.parts)

    def packed(self):
        """The blocks as a QuantExperts: 3-D tensors as views of the file, per-expert ones concatenated."""
        from blazr.quant import QuantWeight
        from blazr.quant.experts import QuantExperts

        weights = []
        for part in self.parts:
            if len(part) == 1:
                blocks = part[0].load_blocks()  # (E * N_i, row_bytes)
            else:
                blocks = np.concatenate([t.load_blocks() for t in part])  # (E * N_i, row_bytes), a copy
                _release(part)
            weights.append(QuantWeight(blocks, part[0].dtype, (len(blocks), self.shape[2])))
        return QuantExperts(tuple(weights), self.experts)

    def load(self) -> np.ndarray:
        """The dense (E, sum N_i, K) array, dequantized where the checkpoint is quantized."""
        if len(self.parts) == 1 and len(self.parts[0]) == 1:
            return host_array(self.parts[0][0])  # (E, N, K): a view of the file where it is float32
        out = np.concatenate([_dense(part) for part in self.parts], axis=1)  # (E, sum N_i, K), a copy
        self.release()  # the mapped originals are unused now
        return out

    def release(self) -> None:
        for part in self.parts:
            _release(part)


def _rows(part: tuple[Any, ...]) -> int:
    return int(part[0].shape[-2])


def _dense(part: tuple[Any, ...]) -> np.ndarray:
    if len(part) == 1:
        return host_array(part[0])  # (E, N_i, K)
    return np.stack([host_array(t) for t in part])  # (E, N_i, K)


def _release(part: tuple[Any, ...]) -> None:
    for t in part:
        release = getattr(t, "release", None)
        if release is not None:
            release()
