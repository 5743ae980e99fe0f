"""What the mixture-of-experts tiny models share: per-expert weights in the layout checkpoints keep on disk,
and transformers 5's fused (E, 2F, D) / (E, D, F) expert tensors for the reference run."""

from __future__ import annotations

import re

import numpy as np

NUM_EXPERTS, TOP_K = 4, 2
# router rows of norm ~3 spread each token's E logits by a few units, so the k-th and (k+1)-th largest
# probabilities stay far apart and float32 noise (or F16 rounding of both sides alike) never swaps an expert
ROUTER_GAIN = 3.0


def experts(draw, prefix: str, d: int, f: int, names: tuple[str, str, str]) -> dict[str, np.ndarray]:
    """Router and per-expert gate/up/down weights, HF names under `prefix` (names: the gate, up, down words)."""
    gate, up, down = names
    w = {prefix + "gate.weight": draw.linear(NUM_EXPERTS, d, ROUTER_GAIN)}
    for e in range(NUM_EXPERTS):
        w[prefix + f"experts.{e}.{gate}.weight"] = draw.linear(f, d)
        w[prefix + f"experts.{e}.{up}.weight"] = draw.linear(f, d)
        w[prefix + f"experts.{e}.{down}.weight"] = draw.linear(d, f, 2.0)
    return w


def fuse_experts(weights: dict[str, np.ndarray], names: tuple[str, str, str]) -> dict[str, np.ndarray]:
    """Per-expert tensors -> transformers 5's state-dict names `<prefix>experts.gate_up_proj` (E, 2F, D) and
    `<prefix>experts.down_proj` (E, D, F), as its from_pretrained conversion makes them."""
    gate, up, down = names
    out, found = {}, {}
    for name, a in weights.items():
        m = re.match(r"^(.+\.experts)\.(\d+)\.(\w+)\.weight$", name)
        if m is None:
            out[name] = a
        else:
            found.setdefault(m[1], {}).setdefault(m[3], {})[int(m[2])] = a
    for prefix, parts in found.items():

        def stack(word: str, parts=parts) -> np.ndarray:
            return np.stack([parts[word][e] for e in range(len(parts[word]))])

        out[prefix + ".gate_up_proj"] = np.concatenate([stack(gate), stack(up)], axis=1)
        out[prefix + ".down_proj"] = stack(down)
    return out
