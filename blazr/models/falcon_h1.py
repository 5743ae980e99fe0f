"""Falcon-H1 (HF FalconH1ForCausalLM, model_type falcon_h1; GGUF falcon-h1): attention and a Mamba2 mixer side by
side in every layer.

Each layer is x + ssm_out * mamba(h) + attn_out * attn(attn_in * h) with h = input_layernorm(x) (keys times
key_multiplier), then x + MLP(pre_ff_layernorm(x)), the MLP down(up(x) SiLU(gate_mult gate(x))) times
down_mult. The mixer (blazr.models.layers.ssm) reads ssm_in * h and scales its in_proj output per section
(z, x, B, C, dt) by ssm_multipliers; its inner size is mamba_d_ssm, and its gated norm may sit after the gate
(the released models), before it, or be absent (mamba_rms_norm false). Every multiplier of a dense projection
is folded into that projection's rows at load; the embeddings and logits are scaled as they run. llama.cpp's
converter folds all of them into the weights, so a GGUF file's multipliers are all 1 here. Each layer's cache
entry is a ParallelCache: a paged (k, v) pair and a state slot per running sequence (blazr.models.cache).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from blazr.errors import ConfigError, UnsupportedError
from blazr.models import llama
from blazr.models.base import HF_ACTIVATIONS, Array, Step, host_array, trace
from blazr.models.cache import ParallelCache, SSMStateCache
from blazr.models.hybrid import GGUF_MAMBA_NAMES, HybridLM, MambaArgs
from blazr.models.layers.attention import Attention
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.module import Module
from blazr.models.layers.ssm import Mamba2Mixer, SSMShape


@dataclass
class ModelArgs(llama.ModelArgs, MambaArgs):
    model_type: str = "falcon_h1"
    max_position_embeddings: int = 8192
    rms_norm_eps: float = 1e-5
    mamba_d_ssm: int | None = 1024  # the mixer's inner size (None: mamba_expand * hidden_size)
    mamba_norm_before_gate: bool = True
    mamba_rms_norm: bool = False
    projectors_bias: bool = False  # out_proj's bias (in_proj's is mamba_proj_bias)
    embedding_multiplier: float = 1.0
    lm_head_multiplier: float = 1.0
    mlp_multipliers: list[float] = field(default_factory=lambda: [1.0, 1.0])  # gate, down
    key_multiplier: float = 1.0
    attention_in_multiplier: float = 1.0
    attention_out_multiplier: float = 1.0
    ssm_multipliers: list[float] = field(default_factory=lambda: [1.0] * 5)  # z, x, B, C, dt
    ssm_in_multiplier: float = 1.0
    ssm_out_multiplier: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        self.check_mamba()
        self.mlp_multipliers = list(self.mlp_multipliers or [1.0, 1.0])
        self.ssm_multipliers = list(self.ssm_multipliers or [1.0] * 5)
        if len(self.mlp_multipliers) != 2 or len(self.ssm_multipliers) != 5:
            raise ConfigError(
                f"mlp_multipliers (gate, down) and ssm_multipliers (z, x, B, C, dt) have 2 and 5 entries, not "
                f"{len(self.mlp_multipliers)} and {len(self.ssm_multipliers)}"
            )

    INNER_KEYS = "mamba_d_ssm"

    @property
    def mamba_inner(self) -> int:
        return self.mamba_d_ssm or self.mamba_expand * self.hidden_size

    def is_attention(self, layer: int) -> bool:
        return False  # every layer has a Mamba mixer (and attention beside it)

    @property
    def ssm_shape(self) -> SSMShape:
        if not self.mamba_rms_norm:
            norm = "none"
        else:
            norm = "before_gate" if self.mamba_norm_before_gate else "after_gate"
        return replace(super().ssm_shape, out_bias=self.projectors_bias, norm=norm)


class FalconH1Block(Module):
    """x + mamba(h) + attn(h), h = input_layernorm(x); then x + feed_forward(pre_ff_layernorm(x)). The
    multipliers are in the weights (Model.sanitize)."""

    OPS = ("binary",)

    def __init__(self, layer: int, attn: Attention, mamba: Mamba2Mixer, mlp: GatedMLP, norm):
        self.layer, self.self_attn, self.mamba, self.feed_forward = layer, attn, mamba, mlp
        self.input_layernorm, self.pre_ff_layernorm = norm(), norm()

    def children(self) -> dict[str, Module]:
        return {
            "input_layernorm.": self.input_layernorm,
            "self_attn.": self.self_attn,
            "mamba.": self.mamba,
            "pre_ff_layernorm.": self.pre_ff_layernorm,
            "feed_forward.": self.feed_forward,
        }

    def __call__(self, x: Array, step: Step, kv: tuple[Array, Array], state: SSMStateCache) -> Array:
        be, i = self.self_attn.be, self.layer
        h = self.input_layernorm(x)  # (T, D)
        trace("attn_norm", i, h)
        mixed = be.binary("add", self.mamba(h, step, *state), self.self_attn(h, step, *kv))  # (T, D)
        x = be.binary("add", x, mixed)  # (T, D)
        trace("ffn_inp", i, x)
        h = self.pre_ff_layernorm(x)  # (T, D)
        trace("ffn_norm", i, h)
        x = be.binary("add", x, self.feed_forward(h))  # (T, D)
        trace("l_out", i, x)
        return x


class Model(HybridLM, llama.Model):
    """A Falcon-H1 causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    NORM = "model.final_layernorm."

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        super().__init__(args, backend, dtype)
        if args.embedding_multiplier != 1.0:
            d = args.hidden_size
            self.embed_scale = backend.upload(np.full(d, args.embedding_multiplier, np.float32), self.dtype)
        self.scale_logits(args.lm_head_multiplier)

    def make_block(self, layer: int) -> FalconH1Block:
        a, be = self.args, self.be
        attn = Attention(be, self.attention_shape, layer, self.inv_freq, 0, self.attention_scaling)
        mlp = GatedMLP(
            be, a.hidden_size, a.intermediate_size, HF_ACTIVATIONS[a.hidden_act], layer, a.mlp_bias
        )
        mamba = Mamba2Mixer(be, a.ssm_shape, layer)
        return FalconH1Block(layer, attn, mamba, mlp, lambda: self.make_norm(a.hidden_size))

    def make_cache(self, num_blocks: int, block_size: int, num_seqs: int = 1) -> list[ParallelCache]:
        """Per layer (k, v), each (num_blocks * block_size, Hkv, Dh), and an SSMStateCache of num_seqs slots."""
        shape = (num_blocks * block_size, self.args.num_key_value_heads, self.args.head_dim)
        return [
            ParallelCache(
                (self.be.empty(shape, self.dtype), self.be.empty(shape, self.dtype)),
                SSMStateCache(*layer.mamba.make_state(num_seqs)),
            )
            for layer in self.layers
        ]

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        # llama.cpp's converter names the pre-MLP norm "blk.N.ffn_norm", without ".weight" (its tensor map
        # lists the HF name with the suffix): back to the HF name
        weights = {k + ".weight" if k.endswith(".pre_ff_layernorm") else k: t for k, t in weights.items()}
        weights = super().sanitize(weights)
        for i in range(self.args.num_hidden_layers):
            for name, rows in self._multipliers(i).items():
                if name in weights:
                    weights[name] = _scaled(weights[name], rows, name)
                elif name.endswith(".weight"):
                    raise UnsupportedError(
                        f"{name} is missing or not a dense tensor: Falcon-H1's multipliers are folded into "
                        "dense weights at load (GPTQ / AWQ checkpoints of it are not supported)"
                    )
        return weights

    def _multipliers(self, layer: int) -> dict[str, Any]:
        """Tensor name -> the factor (a float, or an (out,) vector) its rows are scaled by; factors of 1 left out."""
        a, p = self.args, self.LAYERS.format(layer)
        att, mlp, m = p + "self_attn.", p + "feed_forward.", p + "mamba."
        ain, km, aout = a.attention_in_multiplier, a.key_multiplier, a.attention_out_multiplier
        gate, down = a.mlp_multipliers
        out: dict[str, Any] = {
            att + "q_proj.weight": ain,
            att + "k_proj.weight": ain * km,
            att + "k_proj.bias": km,
            att + "v_proj.weight": ain,
            att + "o_proj.weight": aout,
            att + "o_proj.bias": aout,
            mlp + "gate_proj.weight": gate,
            mlp + "gate_proj.bias": gate,
            mlp + "down_proj.weight": down,
            mlp + "down_proj.bias": down,
            m + "out_proj.weight": a.ssm_out_multiplier,
            m + "out_proj.bias": a.ssm_out_multiplier,
        }
        s = a.ssm_shape
        gn = s.groups * s.state
        sections = (s.inner, s.inner, gn, gn, s.heads)  # in_proj's rows: z, x, B, C, dt
        mup = np.repeat(np.asarray(a.ssm_multipliers, np.float32), sections)  # (2 d_inner + 2 G N + H,)
        if (mup != 1.0).any() or a.ssm_in_multiplier != 1.0:
            out[m + "in_proj.weight"] = mup * np.float32(a.ssm_in_multiplier)
            out[m + "in_proj.bias"] = mup
        return {k: v for k, v in out.items() if np.any(np.asarray(v) != 1.0)}


def _scaled(tensor: Any, rows: Any, name: str) -> np.ndarray:
    """A dense checkpoint tensor with its rows (first axis) times `rows` (a float or an (out,) vector), float32."""
    if getattr(tensor, "quantized", False):
        raise UnsupportedError(
            f"{name} is stored as {tensor.dtype} blocks: Falcon-H1's multipliers are folded into dense weights "
            "at load, which quantized blocks cannot take (llama.cpp's GGUF files have them folded already)"
        )
    a = host_array(tensor).astype(np.float32)
    factor = np.asarray(rows, np.float32)
    return a * (factor.reshape(-1, *([1] * (a.ndim - 1))) if factor.ndim else factor)


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = GGUF_MAMBA_NAMES | {
    "output_norm": "model.final_layernorm",
    "blk.{N}.ffn_norm": "model.layers.{N}.pre_ff_layernorm",
    "blk.{N}.ffn_gate": "model.layers.{N}.feed_forward.gate_proj",
    "blk.{N}.ffn_up": "model.layers.{N}.feed_forward.up_proj",
    "blk.{N}.ffn_down": "model.layers.{N}.feed_forward.down_proj",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps q/k rows as they are (llama.cpp: NEOX)
GGUF_CONFIG_READS_TENSORS = True  # the gated norm and the biases: from which tensors the file has


def gguf_config(arch: str, get, config: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """llama.cpp's falcon-h1 keys: the ssm.* sizes (heads as ssm.time_step_rank) beside the attention's. Its
    converter folds every multiplier into the weights, so all are 1 here; its graph normalises after the gate
    when a file has ssm_norm, and gates alone when it has none."""
    inner, heads = int(get("ssm.inner_size")), int(get("ssm.time_step_rank"))
    return config | {
        "model_type": "falcon_h1",
        "architectures": ["FalconH1ForCausalLM"],
        "mamba_d_ssm": inner,
        "mamba_n_heads": heads,
        "mamba_d_head": inner // heads,
        "mamba_d_state": int(get("ssm.state_size")),
        "mamba_n_groups": int(get("ssm.group_count", 1)),
        "mamba_d_conv": int(get("ssm.conv_kernel")),
        "mamba_rms_norm": "blk.0.ssm_norm.weight" in shapes,
        "mamba_norm_before_gate": False,
        "mamba_conv_bias": "blk.0.ssm_conv1d.bias" in shapes,
        "mamba_proj_bias": "blk.0.ssm_in.bias" in shapes,
        "projectors_bias": "blk.0.ssm_out.bias" in shapes,
        "mlp_bias": "blk.0.ffn_up.bias" in shapes,
        "attention_bias": "blk.0.attn_q.bias" in shapes,
    }
