"""DeepSeek-V2/V3 beyond tests/test_parity.py: the latent KV cache's size, the engine's batching invariants on
a model whose cache is one latent array a layer, quantized experts kept packed, the router variants against a
direct reading of transformers' code, and the config errors."""

from __future__ import annotations

import numpy as np
import pytest

from blazr.backends import get_backend
from blazr.engine import Engine
from blazr.errors import ConfigError
from tests.test_batching_invariants import IdTokenizer, check_invariants
from tests.tiny_models import tiny_config, tiny_weights

FAMILIES = ("deepseek_v2", "deepseek_v3")


def tiny_model(name: str, **overrides):
    from blazr.models.deepseek2 import Model, ModelArgs

    model = Model(ModelArgs.from_dict(tiny_config(name) | overrides), get_backend("cpu"), "f32")
    model.load_weights(model.sanitize(tiny_weights(name)))
    return model


@pytest.mark.parametrize("name", FAMILIES)
def test_the_cache_holds_one_latent_per_token_and_layer(name):
    """kv_lora_rank + qk_rope_head_dim float32 values a token and layer (40 here; DeepSeek-V2: 576), not
    the expanded 2 H (nope + rope) keys and values, and the engine counts the shared array once."""
    from blazr.engine.runner import cache_bytes_per_block

    cfg, model = tiny_config(name), tiny_model(name)
    latent = cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
    per_token = cache_bytes_per_block(model, 16) / 16
    assert per_token == cfg["num_hidden_layers"] * latent * 4
    k, v = model.make_cache(2, 16)[0]
    assert k is v and k.shape == (32, 1, latent)


@pytest.mark.parametrize("name", FAMILIES)
def test_engine_invariants(name):
    """batch == alone, chunked prefill == one-shot, prefix hit == cold, preempted == uninterrupted, no
    leaked block, with MLA's one cache array a layer and DeepSeek's host-side routing."""
    model = tiny_model(name)

    def make(num_ctx=64, **kw):
        return Engine(model, IdTokenizer(), model.be, num_ctx=num_ctx, **kw)

    prompts = [[1, 17, 99, 3, 250], [1, 64], [1, 5, 9, 11, 13, 17, 19, 23, 29, 31, 37], [1, 2, 3]]
    check_invariants(make, prompts, shared=list(range(40, 60)), max_tokens=10)


@pytest.mark.parametrize("name", FAMILIES)
def test_quantized_experts_run_packed_as_their_dequantized_self(name, tmp_path):
    from blazr.backends.cpu import Backend
    from tests.test_moe_packed import packed_and_dense_runs

    be = Backend()
    be.set_int8_activations(False)
    (ids, logits), (want_ids, want_logits) = packed_and_dense_runs(name, be, tmp_path, "Q8_0")
    np.testing.assert_array_equal(ids, want_ids)
    assert np.abs(logits - want_logits).max() <= 1e-4


def _transformers_v2_router(logits, top_k, groups, topk_groups, scale):
    """DeepseekV2TopkRouter.forward (group_limited_greedy), line by line in numpy."""
    scores = np.exp(logits - logits.max(-1, keepdims=True))
    scores /= scores.sum(-1, keepdims=True)
    t, e = scores.shape
    group_scores = scores.reshape(t, groups, e // groups).max(-1)
    group_idx = np.argsort(-group_scores, -1)[:, :topk_groups]
    mask = np.zeros_like(group_scores)
    np.put_along_axis(mask, group_idx, 1, -1)
    scores = np.where(np.repeat(mask, e // groups, -1) > 0, scores, 0.0)
    ids = np.argsort(-scores, -1)[:, :top_k]
    return np.take_along_axis(scores, ids, -1) * scale, ids


def _transformers_v3_router(logits, bias, top_k, groups, topk_groups, scale):
    """DeepseekV3TopkRouter.forward, line by line in numpy."""
    scores = 1 / (1 + np.exp(-logits))
    choice = scores + bias
    t, e = scores.shape
    group_scores = np.sort(choice.reshape(t, groups, e // groups), -1)[..., -2:].sum(-1)
    group_idx = np.argsort(-group_scores, -1)[:, :topk_groups]
    mask = np.zeros_like(group_scores)
    np.put_along_axis(mask, group_idx, 1, -1)
    choice = np.where(np.repeat(mask, e // groups, -1) > 0, choice, -np.inf)
    ids = np.argsort(-choice, -1)[:, :top_k]
    weights = np.take_along_axis(scores, ids, -1)
    return weights / (weights.sum(-1, keepdims=True) + 1e-20) * scale, ids


def test_router_variants_follow_transformers():
    from blazr.models.layers.router import Routing, route_groups

    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((50, 16)) * 2).astype(np.float32)  # (T, E): 16 experts in 4 groups
    bias = (rng.standard_normal(16) * 0.3).astype(np.float32)
    got = route_groups(logits, Routing("group_limited_greedy", 4, 2, 16.0), 6, False, None)
    want = _transformers_v2_router(logits.astype(np.float64), 6, 4, 2, 16.0)
    for g, w in zip(got, want, strict=True):  # same experts and weights, in descending order of choice
        np.testing.assert_allclose(np.sort(g, -1), np.sort(w, -1), rtol=1e-5)
    got = route_groups(logits, Routing("noaux_tc", 4, 2, 2.5), 6, True, bias)
    want = _transformers_v3_router(logits.astype(np.float64), bias, 6, 4, 2, 2.5)
    np.testing.assert_array_equal(np.sort(got[1], -1), np.sort(want[1], -1))
    np.testing.assert_allclose(np.sort(got[0], -1), np.sort(want[0], -1), rtol=1e-5)


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"kv_lora_rank": None}, "kv_lora_rank"),
        ({"n_group": 3}, "n_group 3 does not divide"),
        ({"topk_group": 3}, "topk_group 3"),
        ({"topk_method": "sinkhorn"}, "topk_method 'sinkhorn'"),
        ({"num_experts_per_tok": 5}, "num_experts_per_tok 5"),
    ],
)
def test_config_errors_name_the_key(overrides, match):
    from blazr.models.deepseek2 import ModelArgs

    with pytest.raises(ConfigError, match=match):
        ModelArgs.from_dict(tiny_config("deepseek_v2") | overrides)
