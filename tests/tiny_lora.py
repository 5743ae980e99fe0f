"""LoRA cases on the tiny models: which base, which peft LoraConfig, which torch seed made the adapter.

tests/parity/make_lora_reference.py writes each case's adapter (by peft) and transformers' PeftModel output
to tests/golden/lora/<case>/; tests/test_lora.py runs the same adapter files through blazr.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "golden" / "lora"

_ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
_MLP = ["gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class LoraCase:
    base: str  # a tests.tiny_models model
    seed: int
    lora_config: dict[str, Any] = field(default_factory=dict)  # peft.LoraConfig keywords


CASES = {
    # every linear layer of a Llama block
    "llama_all": LoraCase("llama", 11, dict(r=4, lora_alpha=8, target_modules=_ATTN + _MLP)),
    # attention only, a larger rank
    "llama_attn": LoraCase("llama", 12, dict(r=8, lora_alpha=8, target_modules=_ATTN)),
    # the MLP only, rsLoRA scaling (alpha / sqrt(r))
    "llama_mlp_rslora": LoraCase("llama", 13, dict(r=4, lora_alpha=2, use_rslora=True, target_modules=_MLP)),
    # per-module rank and alpha (rank_pattern / alpha_pattern) on a qk-norm family
    "qwen3_patterns": LoraCase(
        "qwen3",
        14,
        dict(
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "v_proj", "down_proj"],
            rank_pattern={"down_proj": 2},
            alpha_pattern={"v_proj": 2},
        ),
    ),
    # Phi-3's fused qkv_proj and gate_up_proj as single checkpoint tensors
    "phi3_fused": LoraCase(
        "phi3",
        15,
        dict(r=4, lora_alpha=4, target_modules=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]),
    ),
}
