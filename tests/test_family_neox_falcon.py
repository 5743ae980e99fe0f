"""StarCoder2, GPT-NeoX and Falcon beyond tests/test_parity.py: their GGUF files where llama.cpp's converter
changes the model (StarCoder2 loses its sliding window), their checkpoint layouts (fused q/k/v rows), and the
options blazr refuses (each error names the config key)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_parity import GOLDEN, LOGIT_ATOL, PROMPT_IDS, greedy_run, load_golden
from tests.tiny_models import write_safetensors

WINDOW = 16  # tests/tiny_zoo/starcoder2.py


def _cpu():
    from blazr.backends import get_backend

    return get_backend("cpu")


def _build(path: Path):
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    return build_model(load_checkpoint(path), _cpu())


def _safetensors(name: str, tmp_path: Path, **overrides) -> Path:
    write_safetensors(name, tmp_path)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(json.loads(config_path.read_text()) | overrides))
    return tmp_path


# ---- StarCoder2 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, storage", [("f32", "f32"), ("f16", "gguf_f16")])
def test_starcoder2_gguf_is_the_model_without_its_window(dtype, storage, tmp_path):
    """llama.cpp's converter writes no sliding window for StarCoder2 (and llama.cpp runs it with full attention):
    the GGUF file runs as the SafeTensors model without the window, and matches transformers on every position
    the window does not reach yet."""
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    checkpoint = load_checkpoint(GOLDEN / "gguf" / f"starcoder2_{dtype}.gguf")
    assert not checkpoint.config.get("sliding_window")
    model = build_model(checkpoint, _cpu())
    assert [layer.self_attn.window for layer in model.layers] == [0, 0]
    ids, logits = greedy_run(model, model.be, list(PROMPT_IDS), 64)  # (64,), (72, V)

    golden = load_golden("starcoder2", storage)
    unwindowed = WINDOW  # positions 0..15 see at most 16 tokens: the window changes nothing there
    assert np.abs(logits[:unwindowed] - golden["logits"][:unwindowed]).max() <= LOGIT_ATOL
    if (
        dtype == "f32"
    ):  # the same weights as the F32 SafeTensors file, so the same run once the window is gone
        full = _build(_safetensors("starcoder2", tmp_path, sliding_window=None))
        want_ids, want_logits = greedy_run(full, full.be, list(PROMPT_IDS), 64)
        assert np.array_equal(ids, want_ids)
        assert np.abs(logits - want_logits).max() <= 1e-5


# ---- GPT-NeoX -------------------------------------------------------------------------------------------------


def test_neox_fused_rows_are_reordered_from_per_head_to_q_k_v():
    from blazr.models.gpt_neox import per_head_to_qkv_rows

    heads, head_dim = 3, 2
    # row r of the checkpoint belongs to head r // (3 Dh), part (r // Dh) % 3 (q, k, v), feature r % Dh
    rows = np.arange(3 * heads * head_dim)
    out = per_head_to_qkv_rows(rows, heads, head_dim)
    want = [
        h * 3 * head_dim + part * head_dim + i
        for part in range(3)
        for h in range(heads)
        for i in range(head_dim)
    ]
    assert out.tolist() == want
    weight = np.stack([rows, -rows], axis=1)  # (3 H Dh, 2): a weight's columns move with its rows
    assert (
        per_head_to_qkv_rows(weight, heads, head_dim).tolist()
        == np.stack([want, [-r for r in want]], 1).tolist()
    )


def test_neox_reads_mask_buffers_and_a_head_named_lm_head(tmp_path):
    """Old GPT-NeoX checkpoints carry the causal-mask buffers attention.bias / attention.masked_bias, and a
    checkpoint saved from transformers 5's model may name the head lm_head: both load as the same model."""
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    checkpoint = load_checkpoint(_safetensors("gpt_neox", tmp_path))
    tensors = dict(checkpoint.tensors)
    tensors["lm_head.weight"] = tensors.pop("embed_out.weight")
    for i in range(2):
        tensors[f"gpt_neox.layers.{i}.attention.bias"] = np.tril(np.ones((1, 1, 8, 8), dtype=bool))
        tensors[f"gpt_neox.layers.{i}.attention.masked_bias"] = np.asarray(-1e9, dtype=np.float32)
    checkpoint.tensors = tensors
    model = build_model(checkpoint, _cpu())
    ids, logits = greedy_run(model, model.be, list(PROMPT_IDS), 64)
    golden = load_golden("gpt_neox", "f32")
    assert np.array_equal(ids, golden["ids"])
    assert np.abs(logits - golden["logits"]).max() <= LOGIT_ATOL


def test_neox_gguf_hparams_are_read_as_llama_cpp_does():
    from blazr.loaders import load_checkpoint

    config = load_checkpoint(GOLDEN / "gguf" / "gpt_neox_f32.gguf").config
    assert config["model_type"] == "gpt_neox"
    assert config["rope_dimension_count"] == 4  # rotary_pct 0.25 of head_dim 16
    assert config["use_parallel_residual"] is True
    assert config["layer_norm_eps"] == pytest.approx(1e-5)


# ---- Falcon ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "heads, exponents",
    [
        (8, [1, 2, 3, 4, 5, 6, 7, 8]),
        # not a power of two: the 4-head slopes, then every other one of the 8-head sequence
        (6, [2, 4, 6, 8, 1, 3]),
        (12, [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5]),
        (32, [k / 4 for k in range(1, 33)]),
    ],
)
def test_alibi_slopes_are_build_alibi_tensors(heads, exponents):
    """transformers' build_alibi_tensor (Falcon, Bloom): slope_h = 2^-exponent_h."""
    from blazr.models.layers.attention import alibi_slopes

    np.testing.assert_allclose(alibi_slopes(heads), 2.0 ** -np.asarray(exponents), rtol=1e-12)


def test_falcon_rw_alibi_moves_the_logits(tmp_path):
    """Falcon-RW runs without RoPE, and its ALiBi matters: without the slopes the tiny model leaves the golden
    logits (with them it matches them: tests/test_parity.py)."""
    model = _build(_safetensors("falcon_rw", tmp_path))
    assert all(layer.self_attn.inv_freq is None for layer in model.layers)
    for layer in model.layers:
        layer.self_attn.alibi = None
    _, logits = greedy_run(model, model.be, list(PROMPT_IDS), 8)  # (16, V)
    golden = load_golden("falcon_rw", "f32")["logits"][: len(logits)]
    assert np.abs(logits - golden).max() > 100 * LOGIT_ATOL


def test_falcon_new_architecture_without_parallel_attn_is_refused(tmp_path):
    from blazr.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match=r"parallel_attn"):
        _build(_safetensors("falcon", tmp_path, parallel_attn=False))


@pytest.mark.parametrize(
    "layout, heads, kv_heads, order",
    [
        # rows of 1 feature per head: q0 q1 k0 v0 | q2 q3 k1 v1 (two groups of two query heads)
        ("grouped", 4, 2, ["q0", "q1", "k0", "v0", "q2", "q3", "k1", "v1"]),
        ("multi_query", 4, 1, ["q0", "q1", "q2", "q3", "k0", "v0"]),
        ("per_head", 2, 2, ["q0", "k0", "v0", "q1", "k1", "v1"]),
    ],
)
def test_falcon_fused_rows_are_reordered_to_q_k_v(layout, heads, kv_heads, order):
    from blazr.models.falcon import fused_to_qkv_rows

    rows = np.array(order)
    out = fused_to_qkv_rows(rows, layout, heads, kv_heads).tolist()
    want = (
        [f"q{h}" for h in range(heads)]
        + [f"k{h}" for h in range(kv_heads)]
        + [f"v{h}" for h in range(kv_heads)]
    )
    assert out == want


def test_falcon_gguf_norms_follow_the_tensors_as_in_llama_cpp():
    """llama.cpp gives a falcon layer a second norm when the file has attn_norm_2 (ln_attn; attn_norm is then
    ln_mlp); the tiny model has both."""
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    checkpoint = load_checkpoint(GOLDEN / "gguf" / "falcon_f32.gguf")
    assert checkpoint.config["num_ln_in_parallel_attn"] == 2 and checkpoint.config["num_kv_heads"] == 2
    model = build_model(checkpoint, _cpu())
    assert {"transformer.h.0.ln_attn.weight", "transformer.h.0.ln_mlp.bias"} <= set(model.weight_shapes())


def test_falcon_gguf_config_of_the_other_layouts():
    """Without attn_norm_2: one KV head is Falcon-7B (multi-query), more are Falcon2-11B (grouped, one norm)."""
    from blazr.models.falcon import ModelArgs, gguf_config

    base = {"num_attention_heads": 4, "hidden_size": 64, "intermediate_size": 256, "rope_theta": 10000.0}

    def get(key, default=None):
        return {"attention.layer_norm_epsilon": 1e-5}.get(key, default)

    seven_b = ModelArgs.from_dict(gguf_config("falcon", get, base | {"num_key_value_heads": 1}, {}))
    assert (seven_b.num_key_value_heads, seven_b.two_norms, seven_b.parallel_attn) == (1, False, True)
    eleven_b = ModelArgs.from_dict(gguf_config("falcon", get, base | {"num_key_value_heads": 2}, {}))
    assert (eleven_b.num_key_value_heads, eleven_b.two_norms, eleven_b.parallel_attn) == (2, False, True)
