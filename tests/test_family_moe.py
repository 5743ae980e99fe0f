"""Mixtral, Qwen2-MoE, OLMoE, Qwen3-MoE and Granite-MoE beyond tests/test_parity.py: the expert layouts a
checkpoint may hold (transformers 5's fused 3-D tensors as well as per-expert ones), Mixtral's GGUF arriving as
"llama", Granite-MoE's routing and the GGUF configs of the two last, and the errors: an expert count or top-k
the tensors disagree with names the config key and the tensor. Quantized experts: tests/test_moe_packed.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_parity import GOLDEN, LOGIT_ATOL, PROMPT_IDS, greedy_run, load_golden
from tests.tiny_models import tiny_config, tiny_weights, transformers_checkpoint, write_safetensors

MOE = ("mixtral", "qwen2_moe", "olmoe", "qwen3_moe", "granitemoe")
COUNT_KEY = {
    "mixtral": "num_local_experts",
    "qwen2_moe": "num_experts",
    "olmoe": "num_experts",
    "qwen3_moe": "num_experts",
    "granitemoe": "num_local_experts",
}


def _cpu():
    from blazr.backends import get_backend

    return get_backend("cpu")


def _checkpoint(name: str, tmp_path: Path, **overrides):
    from blazr.loaders import load_checkpoint

    write_safetensors(name, tmp_path)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(json.loads(config_path.read_text()) | overrides))
    return load_checkpoint(tmp_path)


@pytest.mark.parametrize("name", MOE)
def test_moe_layer_declares_its_ops(name, tmp_path):
    from blazr.models import build_model

    model = build_model(_checkpoint(name, tmp_path), _cpu())
    ops = {op for op, _, _ in model.required_ops()}
    assert {"matmul_experts", "topk", "softmax", "glu"} <= ops
    assert ("act" in ops) == (name == "qwen2_moe")  # the shared expert's sigmoid gate is a tanh


@pytest.mark.parametrize("name", MOE)
def test_transformers5_fused_experts_load_as_per_expert_ones(name, tmp_path):
    """A checkpoint saved with transformers 5's state-dict names (experts.gate_up_proj (E, 2F, D),
    experts.down_proj (E, D, F)) runs as the per-expert checkpoint does: the golden greedy ids."""
    from blazr.models import build_model

    checkpoint = _checkpoint(name, tmp_path)
    _, fused = transformers_checkpoint(name, tiny_weights(name))
    assert any(k.endswith("experts.gate_up_proj") for k in fused)
    checkpoint.tensors = fused
    golden = load_golden(name, "f32")
    ids, logits = greedy_run(build_model(checkpoint, _cpu()), _cpu(), list(PROMPT_IDS), 8)
    assert np.array_equal(ids, golden["ids"][:8])
    assert np.abs(logits - golden["logits"][: len(logits)]).max() <= LOGIT_ATOL


def test_mixtral_gguf_is_llama_with_experts():
    from blazr.loaders import load_checkpoint

    checkpoint = load_checkpoint(GOLDEN / "gguf" / "mixtral_f32.gguf")
    assert checkpoint.gguf_metadata["general.architecture"] == "llama"
    assert checkpoint.config["architectures"] == ["MixtralForCausalLM"]
    assert checkpoint.config["num_local_experts"] == tiny_config("mixtral")["num_local_experts"]
    assert checkpoint.tensors["model.layers.0.mlp.experts.gate_proj.weight"].shape[0] == 4


@pytest.mark.parametrize("name", MOE)
@pytest.mark.parametrize("experts", [3, 5])
def test_expert_count_other_than_the_tensors_names_key_and_tensor(name, experts, tmp_path):
    from blazr.errors import CheckpointError
    from blazr.models import build_model

    key = COUNT_KEY[name]
    checkpoint = _checkpoint(name, tmp_path, **{key: experts})
    with pytest.raises(CheckpointError, match=rf"{key} = {experts}") as err:
        build_model(checkpoint, _cpu())
    # the tensor as the checkpoint names it (Granite-MoE keeps its experts under block_sparse_moe)
    where = "model.layers.0.block_sparse_moe." if name == "granitemoe" else "model.layers.0.mlp."
    assert where in str(err.value)


@pytest.mark.parametrize("name", MOE)
def test_gguf_expert_count_other_than_the_tensors_names_key_and_tensor(name):
    from blazr.errors import CheckpointError
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    checkpoint = load_checkpoint(GOLDEN / "gguf" / f"{name}_f32.gguf")
    key = "num_local_experts"  # the GGUF expert_count key, as the loader names it
    checkpoint.config = checkpoint.config | {key: 2, "num_experts_per_tok": 1}
    with pytest.raises(CheckpointError, match=r"holds 4 experts but config num_\w+ = 2"):
        build_model(checkpoint, _cpu())


@pytest.mark.parametrize("name", MOE)
def test_top_k_above_the_expert_count_names_both_keys(name, tmp_path):
    from blazr.errors import ConfigError
    from blazr.models import build_model

    checkpoint = _checkpoint(name, tmp_path, num_experts_per_tok=5)
    with pytest.raises(ConfigError, match=rf"num_experts_per_tok 5 .*{COUNT_KEY[name]} \(4\)"):
        build_model(checkpoint, _cpu())


def test_mixtral_gguf_with_one_tensor_per_expert():
    """Older llama.cpp converters wrote Mixtral's experts one 2-D tensor each (blk.N.ffn_gate.E): they map to
    the checkpoint's per-expert names and run as the merged 3-D tensors do."""
    from blazr.loaders import load_checkpoint
    from blazr.loaders.gguf import GGUF_TO_HF, hf_name
    from blazr.models import build_model, llama

    table = GGUF_TO_HF | llama.GGUF_TENSOR_NAMES
    assert hf_name("blk.1.ffn_gate.3.weight", table) == "model.layers.1.mlp.experts.3.w1.weight"
    assert hf_name("blk.1.ffn_up.3.weight", table) == "model.layers.1.mlp.experts.3.w3.weight"
    assert hf_name("blk.1.ffn_down.3.weight", table) == "model.layers.1.mlp.experts.3.w2.weight"
    checkpoint = load_checkpoint(GOLDEN / "gguf" / "mixtral_f32.gguf")
    split = {}
    for name, tensor in checkpoint.tensors.items():
        part = next((p for p in ("gate", "up", "down") if name.endswith(f"experts.{p}_proj.weight")), None)
        if part is None:
            split[name] = tensor
            continue
        word = {"gate": "w1", "up": "w3", "down": "w2"}[part]
        for e, rows in enumerate(tensor.load()):  # (E, rows, cols) -> E tensors (rows, cols)
            split[name.replace(f"experts.{part}_proj", f"experts.{e}.{word}")] = rows
    checkpoint.tensors = split
    golden = load_golden("mixtral", "f32")
    ids, logits = greedy_run(build_model(checkpoint, _cpu()), _cpu(), list(PROMPT_IDS), 8)
    assert np.array_equal(ids, golden["ids"][:8])
    assert np.abs(logits - golden["logits"][: len(logits)]).max() <= LOGIT_ATOL


def test_granitemoe_routing_is_a_softmax_over_the_top_k_logits():
    """transformers' GraniteMoe router: top k of the logits, then a softmax over those k. SparseMoE's
    renormalised top k of the full softmax gives the same weights, largest first."""
    from blazr.models.base import record_trace
    from blazr.models.layers.moe import SparseMoE

    be, rng = _cpu(), np.random.default_rng(0)
    t, d, f, e, k = 5, 8, 6, 4, 2
    moe = SparseMoE(be, d, f, e, k, "silu", 0, norm_topk_prob=True)
    router = rng.standard_normal((e, d)).astype(np.float32)  # (E, D)
    moe.router = be.upload(router, "f32")
    moe.gate_up_proj = be.upload(rng.standard_normal((e, 2 * f, d)).astype(np.float32), "f32")  # (E, 2F, D)
    moe.down_proj = be.upload(rng.standard_normal((e, d, f)).astype(np.float32), "f32")  # (E, D, F)
    x = rng.standard_normal((t, d)).astype(np.float32)  # (T, D)
    with record_trace(be) as rec:
        moe(be.upload(x, "f32"))
    top = -np.sort(-(x @ router.T), axis=-1)[:, :k]  # (T, k) largest logits first
    want = np.exp(top - top[:, :1])
    want /= want.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(rec[("ffn_moe_weights", 0)], want, rtol=1e-5, atol=1e-6)


def test_qwen3_moe_gguf_config_reads_as_llama_cpp_runs_it():
    """llama.cpp's qwen3moe graph renormalises the k weights and makes every layer sparse."""
    from blazr.loaders import load_checkpoint

    config = load_checkpoint(GOLDEN / "gguf" / "qwen3_moe_f32.gguf").config
    tiny = tiny_config("qwen3_moe")
    assert config["architectures"] == ["Qwen3MoeForCausalLM"]
    assert config["moe_intermediate_size"] == tiny["moe_intermediate_size"]
    assert config["head_dim"] == tiny["head_dim"]
    assert (config["norm_topk_prob"], config["decoder_sparse_step"], config["mlp_only_layers"]) == (
        True,
        1,
        [],
    )


def test_granitemoe_gguf_config_keeps_the_multipliers():
    from blazr.loaders import load_checkpoint

    config = load_checkpoint(GOLDEN / "gguf" / "granitemoe_f32.gguf").config
    tiny = tiny_config("granitemoe")
    assert config["architectures"] == ["GraniteMoeForCausalLM"]
    for key in ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"):
        assert config[key] == tiny[key], key
    assert (config["num_local_experts"], config["intermediate_size"]) == (4, tiny["intermediate_size"])


def test_qwen3_moe_dense_layers_follow_mlp_only_layers_and_sparse_step():
    from blazr.models.layers.mlp import GatedMLP
    from blazr.models.layers.moe import SparseMoE
    from blazr.models.qwen3_moe import Model, ModelArgs

    args = ModelArgs.from_dict(tiny_config("qwen3_moe") | {"num_hidden_layers": 4, "mlp_only_layers": None})
    assert args.mlp_only_layers == []  # Qwen3MoeConfig's default None reads as no dense layer
    args = ModelArgs.from_dict(
        tiny_config("qwen3_moe") | {"num_hidden_layers": 4, "decoder_sparse_step": 2, "mlp_only_layers": [3]}
    )
    model = Model(args, _cpu())
    assert [type(layer.mlp) for layer in model.layers] == [GatedMLP, SparseMoE, GatedMLP, GatedMLP]
    assert model.layers[0].mlp.ffn == tiny_config("qwen3_moe")["intermediate_size"]
