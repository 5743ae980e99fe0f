"""Mixture-of-experts weights kept in their GGML blocks: every expert of a projection in one block array.

A GGUF file stores each projection of a layer's experts as one 3-D tensor (E, N, K) (`ffn_gate_exps`, ...),
whose blocks read as (E * N, row_bytes) rows, expert e's rows e N .. (e + 1) N - 1: a view of the mapped
file. QuantExperts keeps that view and hands out one expert's rows as a QuantWeight, so a backend multiplies
each active expert with the same packed kernels a dense layer uses, and no expert is ever widened to float.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blazr.errors import CheckpointError
from blazr.quant import QuantRowStack, QuantWeight


@dataclass(frozen=True, eq=False)
class QuantExperts:
    """The E experts of one or more projections, packed. `parts` are QuantWeights of E * N_i rows each (expert
    e's rows of part i are e N_i .. (e + 1) N_i - 1); several parts (gate and up, each in its own format in a
    Q4_K_M file) stack by rows within each expert, so the layer makes one `matmul_experts` call for both.
    The logical shape is (E, sum N_i, K), as the dense (E, N, K) array it stands for."""

    parts: tuple[QuantWeight, ...]
    experts: int
    # expert e's (N, K) weight: a QuantWeight of its rows, or a QuantRowStack of its rows of every part. Made
    # once here: the wgpu backend keeps device copies by the weight object's identity.
    _per_expert: tuple[QuantWeight | QuantRowStack, ...] = field(init=False, repr=False)

    def __post_init__(self):
        e, k = self.experts, self.parts[0].shape[1]
        for part in self.parts:
            if part.shape[0] % e or part.shape[1] != k:
                raise CheckpointError(
                    f"{part.format} expert weight of shape {part.shape} does not hold {e} experts of {k} columns"
                )
        views = []
        for expert in range(e):
            rows = [p.rows(expert * (p.shape[0] // e), (expert + 1) * (p.shape[0] // e)) for p in self.parts]
            views.append(rows[0] if len(rows) == 1 else QuantRowStack(tuple(rows)))
        object.__setattr__(self, "_per_expert", tuple(views))

    def expert(self, e: int) -> QuantWeight | QuantRowStack:
        """Expert e's packed (N, K) weight (views of these blocks)."""
        return self._per_expert[e]

    def part_rows(self, i: int) -> int:
        """N_i: the rows each expert has in part i."""
        return self.parts[i].shape[0] // self.experts

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.experts, sum(self.part_rows(i) for i in range(len(self.parts))), self.parts[0].shape[1])

    @property
    def format(self) -> str:
        return "+".join(p.format for p in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    @property
    def ndim(self) -> int:
        return 3
