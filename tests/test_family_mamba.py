"""Mamba, Falcon-Mamba, Mamba2 and the Bamba, Granite-4.0-H, Nemotron-H, Jamba and Falcon-H1 hybrids beyond
tests/test_parity.py: the state cache's size (flat in the context), the engine's invariants on models with state
slots instead of (Mamba, Mamba2) or beside (the hybrids) paged KV (batch == alone, chunked == one-shot, preempted
== uninterrupted, no prefix reuse, no leaked slot), quantized files against their dequantized selves, and the
errors."""

from __future__ import annotations

import numpy as np
import pytest

from blazr.backends import get_backend
from blazr.engine import Engine, SamplingParams
from blazr.errors import CheckpointError, ConfigError
from tests.test_batching_invariants import IdTokenizer, check_invariants, run
from tests.tiny_models import tiny_config, tiny_weights

FAMILIES = (
    "mamba",
    "falcon_mamba",
    "mamba2",
    "bamba",
    "granitemoehybrid",
    "nemotron_h",
    "nemotron_h_moe",
    "jamba",
    "falcon_h1",
)
MODULE = {
    "falcon_mamba": "mamba",
    "nemotron_h_moe": "nemotron_h",
}  # tiny models whose family module has another name


def tiny_model(name: str = "mamba2", backend=None, **overrides):
    import importlib

    family = importlib.import_module(f"blazr.models.{MODULE.get(name, name)}")
    args = family.ModelArgs.from_dict(tiny_config(name) | overrides)
    model = family.Model(args, backend or get_backend("cpu"), "f32")
    model.load_weights(model.sanitize(tiny_weights(name)))
    return model


def test_the_state_cache_is_one_slot_per_sequence_whatever_the_context():
    """Per layer a conv window of K - 1 inputs and an (H, P, N) state for each of num_seqs sequences; nothing
    per token, so the engine's KV blocks cost nothing."""
    from blazr.engine.runner import cache_bytes_per_block
    from blazr.models.cache import SSMStateCache

    cfg, model = tiny_config("mamba2"), tiny_model()
    conv_dim = cfg["num_heads"] * cfg["head_dim"] + 2 * cfg["n_groups"] * cfg["state_size"]
    for blocks in (1, 64):
        cache = model.make_cache(blocks, 16, num_seqs=3)
        assert len(cache) == cfg["num_hidden_layers"] and all(isinstance(c, SSMStateCache) for c in cache)
        assert cache[0].conv.shape == (3, cfg["conv_kernel"] - 1, conv_dim)
        assert cache[0].ssm.shape == (3, cfg["num_heads"], cfg["head_dim"], cfg["state_size"])
    assert cache_bytes_per_block(model, 16) == 1  # no per-token cache (the pool's floor of one byte)


def test_a_hybrid_cache_has_paged_kv_for_attention_and_state_slots_for_mamba():
    from blazr.engine.runner import cache_bytes_per_block
    from blazr.models.cache import SSMStateCache

    cfg, model = tiny_config("bamba"), tiny_model("bamba")
    cache = model.make_cache(4, 16, num_seqs=2)
    for i, entry in enumerate(cache):
        if i in cfg["attn_layer_indices"]:
            k, v = entry
            assert not isinstance(entry, SSMStateCache) and k.shape == (64, 2, 16) and v.shape == k.shape
        else:
            assert isinstance(entry, SSMStateCache) and entry.ssm.shape == (2, 8, 16, 16)
    per_token = 2 * len(cfg["attn_layer_indices"]) * cfg["num_key_value_heads"] * cfg["head_dim"] * 4
    assert cache_bytes_per_block(model, 16) == 16 * per_token  # the attention layers' keys and values only


def test_a_falcon_h1_layer_keeps_paged_kv_and_a_state_slot():
    """Attention and Mamba side by side: every layer's entry is a ParallelCache of both; only the keys and
    values count per block."""
    from blazr.engine.runner import cache_bytes_per_block
    from blazr.models.cache import ParallelCache, SSMStateCache

    cfg, model = tiny_config("falcon_h1"), tiny_model("falcon_h1")
    cache = model.make_cache(4, 16, num_seqs=2)
    assert len(cache) == cfg["num_hidden_layers"]
    for entry in cache:
        (k, v), state = entry
        assert isinstance(entry, ParallelCache) and isinstance(state, SSMStateCache)
        assert k.shape == (64, 2, 16) and v.shape == k.shape and state.ssm.shape == (2, 8, 16, 16)
    per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 4
    assert cache_bytes_per_block(model, 16) == 16 * per_token


def test_falcon_h1_gated_norm_variants():
    """mamba_rms_norm false: y SiLU(z), no norm weight; norm_before_gate: RMSNorm(y) SiLU(z). Each changes the
    logits (tests/test_parity.py checks the released configs' RMSNorm(y SiLU(z)) against transformers)."""
    from blazr.models.batch import ForwardBatch
    from blazr.models.falcon_h1 import Model, ModelArgs
    from tests.test_parity import PROMPT_IDS

    def logits(weights=None, **overrides):
        model = Model(ModelArgs.from_dict(tiny_config("falcon_h1") | overrides), get_backend("cpu"), "f32")
        model.load_weights(model.sanitize(weights or tiny_weights("falcon_h1")))
        batch = ForwardBatch.single(list(PROMPT_IDS), 0, [0], 16, all_logits=True)
        return np.asarray(model.be.download(model(batch, model.make_cache(1, 16))))

    with pytest.raises(CheckpointError, match="unexpected tensor.*mamba.norm.weight"):
        logits(mamba_rms_norm=False)  # a checkpoint with the norm names it
    no_norm = {k: a for k, a in tiny_weights("falcon_h1").items() if not k.endswith("mamba.norm.weight")}
    released, before, ungated = (
        logits(),
        logits(mamba_norm_before_gate=True),
        logits(no_norm, mamba_rms_norm=False),
    )
    assert np.abs(released - before).max() > 0.1 and np.abs(released - ungated).max() > 0.1


def test_falcon_h1_multipliers_fold_into_dense_weights_only():
    """llama.cpp's files have the multipliers folded (all 1 here, Q8_0 blocks kept packed); a quantized tensor
    that would need one is refused by name."""
    from pathlib import Path

    from blazr.errors import UnsupportedError
    from blazr.loaders import LazyTensor, load_checkpoint
    from blazr.models.falcon_h1 import _scaled

    ckpt = load_checkpoint(Path(__file__).parent / "golden" / "gguf" / "falcon_h1_f32.gguf")
    cfg = ckpt.config
    assert cfg["mamba_rms_norm"] and not cfg["mamba_norm_before_gate"] and cfg["mamba_d_ssm"] == 128
    assert not any(k.endswith("multiplier") for k in cfg)  # the defaults: 1
    tensor = LazyTensor("w", (2, 32), "Q8_0", Path("x.gguf"), lambda: np.zeros((2, 32), np.float32))
    with pytest.raises(UnsupportedError, match="w is stored as Q8_0 blocks"):
        _scaled(tensor, 0.5, "w")


@pytest.mark.parametrize("name", FAMILIES)
def test_engine_invariants(name):
    """batch == alone, chunked prefill == one-shot, a repeated prefix == cold (no reuse: hits stay 0),
    preempted == uninterrupted, with every sequence's state in its own slot (Bamba: beside its paged KV)."""
    model = tiny_model(name)

    def make(num_ctx=64, **kw):
        return Engine(model, IdTokenizer(), model.be, num_ctx=num_ctx, **kw)

    prompts = [[1, 17, 99, 3, 250], [1, 64], [1, 5, 9, 11, 13, 17, 19, 23, 29, 31, 37], [1, 2, 3]]
    check_invariants(make, prompts, shared=list(range(40, 60)), max_tokens=10, prefix_cache=False)
    engine = make(max_seqs=3)
    greedy = SamplingParams(max_tokens=5, temperature=0.0)
    run(engine, {0: [("a", prompts[0], greedy), ("b", prompts[1], greedy)], 1: [("c", prompts[2], greedy)]})
    assert engine.scheduler.states.num_free == 3 and engine.pool.num_free == engine.pool.num_blocks


@pytest.mark.parametrize("name", ["mamba", "bamba", "falcon_h1"])
def test_engine_invariants_on_wgpu(name):
    """The state slots through the WGSL ops (lavapipe in CI): batch == alone, chunked == one-shot, preempted ==
    uninterrupted, as on the CPU."""
    from tests.conftest import AVAILABLE_BACKENDS

    if "wgpu" not in AVAILABLE_BACKENDS:
        pytest.skip("no WebGPU adapter here")
    model = tiny_model(name, backend=get_backend("wgpu"))

    def make(num_ctx=64, **kw):
        return Engine(model, IdTokenizer(), model.be, num_ctx=num_ctx, **kw)

    prompts = [[1, 17, 99, 3, 250], [1, 64], [1, 5, 9, 11, 13, 17, 19, 23, 29, 31, 37], [1, 2, 3]]
    check_invariants(make, prompts, shared=list(range(40, 60)), max_tokens=10, prefix_cache=False)


def test_the_engine_refuses_what_a_recurrent_state_cannot_do(tmp_path):
    model = tiny_model()
    with pytest.raises(ConfigError, match="speculative decoding is not supported .*state-space"):
        Engine(model, IdTokenizer(), model.be, num_ctx=64, speculative="ngram")
    engine = Engine(model, IdTokenizer(), model.be, num_ctx=64)
    assert not engine.kv.enable_prefix_cache
    engine.slots.create("s")
    with pytest.raises(ConfigError, match="slot files hold KV-cache rows"):
        engine.slots.save("s", tmp_path / "s.bin", "x")


@pytest.mark.parametrize("name", ["mamba", "falcon_mamba", "mamba2", "bamba", "nemotron_h", "falcon_h1"])
def test_a_quantized_file_runs_as_its_dequantized_self(name, tmp_path):
    """in_proj and out_proj in Q8_0 blocks (float32 activations) give the ids and logits of the same file with
    those matmuls stored as the F32 values the blocks decode to."""
    from blazr.backends.cpu import Backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from blazr.quant import QuantWeight
    from tests.test_moe_packed import requantized_gguf
    from tests.test_parity import GOLDEN, PROMPT_IDS, greedy_run

    be = Backend()
    be.set_int8_activations(False)
    runs = []
    for dequantized in (False, True):
        path = tmp_path / f"{name}_{dequantized}.gguf"
        src = GOLDEN / "gguf" / f"{name}_f32.gguf"
        requantized_gguf(src, path, "Q8_0", dequantized, suffixes=("ssm_in.weight", "ssm_out.weight"))
        model = build_model(load_checkpoint(path), be)
        layer = model.layers[0]  # a Mamba layer
        mixer = {"bamba": "self_attn", "falcon_h1": "mamba"}.get(name, "mixer")
        mixer = getattr(layer, mixer)
        assert isinstance(mixer.in_proj, QuantWeight) != dequantized  # kept packed
        runs.append(greedy_run(model, be, list(PROMPT_IDS), 16))
    (ids, logits), (want_ids, want_logits) = runs
    np.testing.assert_array_equal(ids, want_ids)
    assert np.abs(logits - want_logits).max() <= 1e-4


def test_nemotron_h_moe_quantized_experts_run_packed_as_their_dequantized_self(tmp_path):
    """Nemotron 3's ungated experts in Q8_0 blocks stay packed (QuantExperts) and give the ids and logits of the
    same file with the experts stored as the F32 values the blocks decode to."""
    from blazr.backends.cpu import Backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from blazr.models.layers.moe_ungated import UngatedMoE
    from blazr.quant.experts import QuantExperts
    from tests.test_moe_packed import requantized_gguf
    from tests.test_parity import GOLDEN, PROMPT_IDS, greedy_run

    be = Backend()
    be.set_int8_activations(False)
    runs = []
    for dequantized in (False, True):
        path = tmp_path / f"nemotron_h_moe_{dequantized}.gguf"
        requantized_gguf(GOLDEN / "gguf" / "nemotron_h_moe_f32.gguf", path, "Q8_0", dequantized)
        model = build_model(load_checkpoint(path), be)
        moe = next(layer.mixer for layer in model.layers if isinstance(layer.mixer, UngatedMoE))
        assert isinstance(moe.up_proj, QuantExperts) != dequantized  # never widened to float
        assert isinstance(moe.down_proj, QuantExperts) != dequantized
        runs.append(greedy_run(model, be, list(PROMPT_IDS), 16))
    (ids, logits), (want_ids, want_logits) = runs
    np.testing.assert_array_equal(ids, want_ids)
    assert np.abs(logits - want_logits).max() <= 1e-4


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"num_heads": 6}, "num_heads \\* head_dim"),
        ({"n_groups": 3}, "n_groups=3 must divide"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ],
)
def test_config_errors_name_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        tiny_model(**overrides)


@pytest.mark.parametrize(
    "tensor, shape, match",
    [
        ("conv1d.weight", (192, 1, 3), "kernel of 3 but the config's conv_kernel is 4"),
        ("conv1d.weight", (160, 1, 4), "160 channels .*state_size 16, n_groups 2"),
    ],
)
def test_tensors_that_disagree_with_the_config_are_named(tensor, shape, match):
    from blazr.models.mamba2 import Model, ModelArgs

    model = Model(ModelArgs.from_dict(tiny_config("mamba2")), get_backend("cpu"), "f32")
    weights = tiny_weights("mamba2")
    weights[f"backbone.layers.1.mixer.{tensor}"] = np.zeros(shape, np.float32)
    with pytest.raises(CheckpointError, match=f"backbone.layers.1.mixer.{tensor}.*{match}"):
        model.load_weights(model.sanitize(weights))


@pytest.mark.parametrize(
    "name, overrides, error, match",
    [
        ("bamba", {"attn_layer_indices": [1, 7]}, ConfigError, "attn_layer_indices names layer 7"),
        ("bamba", {"mamba_n_heads": 6}, ConfigError, "mamba_n_heads \\* mamba_d_head"),
        ("granitemoehybrid", {"layer_types": ["mamba"]}, ConfigError, "layer_types lists 1 layers"),
        ("nemotron_h", {"hybrid_override_pattern": "M-*X"}, ConfigError, "hybrid_override_pattern has 'X'"),
        (
            "nemotron_h",
            {"hybrid_override_pattern": "M-*E", "n_group": 3},
            ConfigError,
            "n_group 3 does not divide",
        ),
        ("nemotron_h_moe", {"num_experts_per_tok": 9}, ConfigError, "num_experts_per_tok 9 must be between"),
        ("jamba", {"attn_layer_period": 0}, ConfigError, "attn_layer_period=0"),
    ],
)
def test_hybrid_config_errors_name_the_key(name, overrides, error, match):
    with pytest.raises(error, match=match):
        tiny_model(name, **overrides)


def test_a_jamba_file_whose_layers_follow_no_period_is_refused():
    from blazr.models.jamba import _period

    assert _period([2, 6], 8, "attention") == (4, 2) and _period([], 8, "attention") == (9, 8)
    with pytest.raises(CheckpointError, match=r"attention layers \[1, 2, 5\] are not every k-th layer"):
        _period([1, 2, 5], 8, "attention")
