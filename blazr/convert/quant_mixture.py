"""Which ggml type each tensor gets in a K-quant file (Q4_K_M, Q4_K_S, Q5_K_M, Q5_K_S, Q6_K), as llama-quantize
chooses without an importance matrix (llama-quant.cpp's llama_tensor_get_type for dense models), so that a
blazr-converted file has the tensor types of the one llama-quantize makes from the same weights.

The rules: the output matrix (and a tied token embedding, which serves as it) takes Q6_K, or Q8_0 when its
rows are not a multiple of 256; the _M mixtures give Q6_K to the value projections and the FFN down
projections of the first and last eighth of the layers and every third layer between (use_more_bits),
counting those tensors in llama-quantize's order (by layer number, then name: `quantize_order`); Q4_K_S gives Q5_K to the first four value
projections and the first eighth's down projections; a 70B-class model (80 layers) takes Q5_K for value
projections that would be Q4_K. A type whose 256-value blocks do not divide a row falls back to a 32-value
one (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), and to F16 when even that does not fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# outtype -> (base ggml type, GGUF file type name)
K_OUTTYPES = {
    "q4_k_m": ("Q4_K", "MOSTLY_Q4_K_M"),
    "q4_k_s": ("Q4_K", "MOSTLY_Q4_K_S"),
    "q5_k_m": ("Q5_K", "MOSTLY_Q5_K_M"),
    "q5_k_s": ("Q5_K", "MOSTLY_Q5_K_S"),
    "q6_k": ("Q6_K", "MOSTLY_Q6_K"),
}
BLOCK = {"Q4_K": 256, "Q5_K": 256, "Q6_K": 256, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32, "F16": 1}
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def quantize_order(name: str) -> tuple[int, str]:
    """llama-quantize's tensor order (its loader's weight_name_comparer): layer number, then name; tensors
    outside the blocks first."""
    match = re.match(r"blk\.(\d+)\.", name)
    return (int(match.group(1)) if match else -1, name)


def _category(name: str) -> str:
    if name == "output.weight":
        return "output"
    if name == "token_embd.weight":
        return "token_embd"
    for key, category in (
        ("attn_qkv.weight", "attn_v"),  # llama-quantize treats fused QKV and MLA's kv_b as value-like
        ("attn_kv_b.weight", "attn_v"),
        ("attn_v.weight", "attn_v"),
        ("attn_output.weight", "attn_output"),
        ("ffn_down", "ffn_down"),
    ):
        if key in name:
            return category
    return "other"


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


@dataclass
class MixturePlan:
    """Call `type_for` once per quantizable tensor, in `quantize_order` (the counters are llama-quantize's)."""

    outtype: str
    names: list[str]  # every tensor name the file will hold, in order
    n_layer: int
    seventy_b: bool = False  # llama-quantize's LLM_TYPE_70B: 80-layer llama (with GQA) and qwen2
    i_attention_wv: int = 0
    i_ffn_down: int = 0

    def __post_init__(self) -> None:
        self.base, self.file_type = K_OUTTYPES[self.outtype]
        self.n_attention_wv = sum(_category(name) == "attn_v" for name in self.names)
        self.tied = "output.weight" not in self.names

    def type_for(self, name: str, n_cols: int) -> str:
        """The ggml type of a 2-D weight whose rows hold n_cols values."""
        category, kind, mixture = _category(name), self.base, self.outtype
        if category == "output" or (self.tied and category == "token_embd"):
            kind = "Q8_0" if n_cols % 256 else "Q6_K"
        elif category == "attn_v":
            if mixture in ("q4_k_m", "q5_k_m") and _use_more_bits(self.i_attention_wv, self.n_attention_wv):
                kind = "Q6_K"
            elif mixture == "q4_k_s" and self.i_attention_wv < 4:
                kind = "Q5_K"
            if self.seventy_b and kind == "Q4_K":
                kind = "Q5_K"
            self.i_attention_wv += 1
        elif category == "ffn_down":
            i_layer = self.i_ffn_down
            if mixture in ("q4_k_m", "q5_k_m") and _use_more_bits(i_layer, self.n_layer):
                kind = "Q6_K"
            elif mixture == "q4_k_s" and i_layer < self.n_layer // 8:
                kind = "Q5_K"
            self.i_ffn_down += 1
        return fallback(kind, n_cols)


def fallback(kind: str, n_cols: int) -> str:
    """A type whose blocks fit rows of n_cols values (llama-quantize's tensor_type_fallback)."""
    if n_cols % BLOCK[kind] == 0:
        return kind
    smaller = FALLBACK.get(kind, kind)
    return smaller if n_cols % BLOCK[smaller] == 0 else "F16"


def is_seventy_b(arch: str, config: dict) -> bool:
    layers = config["num_hidden_layers"]
    if arch == "llama":
        heads = config["num_attention_heads"]
        return layers == 80 and (config.get("num_key_value_heads") or heads) != heads
    return arch == "qwen2" and layers == 80
