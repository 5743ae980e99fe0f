"""Phi-3 and Phi-2 beyond tests/test_parity.py: the LongRoPE table against a float64 computation of
transformers' formula and the table choice, LongRoPE config and GGUF errors, Phi-2's unsupported qk_layernorm,
and phi2 GGUF files that keep q/k/v as one attn_qkv tensor (older conversions of the first Phi-2 release)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from blazr.errors import CheckpointError, UnsupportedError
from blazr.models.layers.rope import rope_parameters
from tests.tiny_models import PROMPT_IDS, tiny_config, tiny_weights, write_safetensors

GOLDEN_GGUF = Path(__file__).parent / "golden" / "gguf"

# Phi-4-mini's shape: head_dim 128, partial_rotary_factor 0.75 -> 96 rotated features, 48 factors per list
ROT_DIM, THETA, ORIG, MAX_POS = 96, 10000.0, 4096, 131072
_rng = np.random.default_rng(0)
SHORT = (1.0 + 0.1 * _rng.random(ROT_DIM // 2)).tolist()
LONG = np.sort(1.0 + 40.0 * _rng.random(ROT_DIM // 2)).tolist()


def longrope_reference(short, long, max_pos, orig, seq_len, factor=None, attention_factor=None):
    """transformers' _compute_longrope_parameters in float64: (inv_freq (R/2,), attention factor)."""
    factor = max_pos / orig if factor is None else factor
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    ext = np.asarray(long if seq_len is not None and seq_len > orig else short, dtype=np.float64)
    return 1.0 / (ext * THETA ** (np.arange(0, ROT_DIM, 2) / ROT_DIM)), attention_factor


def longrope(**extra):
    return {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG} | extra


# seq_len: the context the table is fixed for (None: max_position_embeddings, the blazr default)
@pytest.mark.parametrize("seq_len, used", [(None, MAX_POS), (ORIG, ORIG), (ORIG + 1, ORIG + 1), (2048, 2048)])
def test_longrope_table_is_transformers_formula(seq_len, used):
    scaling = longrope(original_max_position_embeddings=ORIG)
    inv_freq, attention = rope_parameters(ROT_DIM, THETA, scaling, MAX_POS, seq_len)
    want, want_attention = longrope_reference(SHORT, LONG, MAX_POS, ORIG, used)
    assert inv_freq.dtype == np.float32 and inv_freq.shape == (ROT_DIM // 2,)
    # float32 as in transformers: the exponent 2i/R is rounded to float32 (6e-8 relative), which theta ** x
    # amplifies by ln(theta) x <= 9.2, so up to ~6e-7
    np.testing.assert_allclose(inv_freq, want, rtol=1e-6)
    assert attention == pytest.approx(want_attention, rel=1e-15)
    assert attention == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))  # Phi-3-128k: 1.19


def test_longrope_picks_long_factors_only_past_the_original_context():
    """llama.cpp's rule: long when the context exceeds original_max_position_embeddings; a model whose
    max_position_embeddings is the original one (4k) keeps the short factors and an attention factor of 1."""
    scaling = longrope(original_max_position_embeddings=ORIG)
    short, _ = rope_parameters(ROT_DIM, THETA, scaling, MAX_POS, ORIG)
    long, _ = rope_parameters(ROT_DIM, THETA, scaling, MAX_POS, ORIG + 1)
    base, _ = rope_parameters(ROT_DIM, THETA)
    np.testing.assert_allclose(base / short, SHORT, rtol=1e-6)
    np.testing.assert_allclose(base / long, LONG, rtol=1e-6)
    at_4k, attention = rope_parameters(ROT_DIM, THETA, scaling, ORIG)
    np.testing.assert_array_equal(at_4k, short)
    assert attention == 1.0


def test_longrope_explicit_factor_and_attention_factor_and_su_spelling():
    scaling = longrope(original_max_position_embeddings=ORIG, factor=8.0)
    _, attention = rope_parameters(ROT_DIM, THETA, scaling, MAX_POS)
    assert attention == pytest.approx(longrope_reference(SHORT, LONG, MAX_POS, ORIG, None, factor=8.0)[1])
    _, attention = rope_parameters(ROT_DIM, THETA, longrope(attention_factor=1.5), MAX_POS)
    assert attention == 1.5
    su = {"type": "su", "short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": ORIG}
    for got, want in zip(
        rope_parameters(ROT_DIM, THETA, su, MAX_POS),
        rope_parameters(ROT_DIM, THETA, longrope(original_max_position_embeddings=ORIG), MAX_POS),
        strict=True,
    ):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("key", ["short_factor", "long_factor"])
def test_longrope_list_of_wrong_length_names_the_key(key):
    scaling = longrope(original_max_position_embeddings=ORIG) | {key: [1.0] * (ROT_DIM // 2 - 1)}
    with pytest.raises(UnsupportedError, match=rf"rope_scaling\.{key} has 47 values; .* 48"):
        rope_parameters(ROT_DIM, THETA, scaling, MAX_POS)
    missing = {k: v for k, v in longrope().items() if k != key}
    with pytest.raises(UnsupportedError, match=rf"rope_scaling\.{key}"):
        rope_parameters(ROT_DIM, THETA, missing, MAX_POS)


# ---- Phi-3 model ---------------------------------------------------------------------------------------------


def _build(name: str, tmp_path: Path, **config):
    """The tiny model `name` with `config` keys changed, built on the CPU backend."""
    from blazr.backends import get_backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    write_safetensors(name, tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | config))
    return build_model(load_checkpoint(tmp_path), get_backend("cpu"))


def test_phi3_factor_list_of_wrong_length_fails_at_load(tmp_path):
    scaling = tiny_config("phi3")["rope_scaling"]
    with pytest.raises(UnsupportedError, match=r"rope_scaling\.long_factor has 5 values"):
        _build("phi3", tmp_path, rope_scaling=scaling | {"long_factor": scaling["long_factor"][:5]})


def test_phi3_rejects_rope_types_transformers_rejects(tmp_path):
    with pytest.raises(UnsupportedError, match="'linear' is not supported for Phi-3"):
        _build("phi3", tmp_path, rope_scaling={"rope_type": "linear", "factor": 2.0})


def test_phi3_full_rotary_folds_the_attention_factor_into_the_scale(tmp_path):
    """Every feature rotated: the LongRoPE attention factor squared multiplies the q.k scale; partial rotary
    (the tiny model's 12 of 16) multiplies only q's rotated features, by a gain made at load."""
    scaling = tiny_config("phi3")["rope_scaling"]
    full = {k: v + v[-2:] if k.endswith("_factor") else v for k, v in scaling.items()}  # 8 per list
    model = _build("phi3", tmp_path / "full", partial_rotary_factor=1.0, rope_scaling=full)
    attn = model.layers[0].self_attn
    factor = math.sqrt(1 + math.log(512 / 4) / math.log(4))
    assert attn.q_gain is None and attn.scale == pytest.approx(factor**2 / 4)
    partial = _build("phi3", tmp_path / "partial").layers[0].self_attn
    assert partial.scale == pytest.approx(1 / 4)
    np.testing.assert_allclose(partial.q_gain, [factor**2] * 12 + [1.0] * 4, rtol=1e-6)


def test_phi3_gguf_carries_longrope_as_llama_cpp_reads_it():
    from blazr.loaders import load_checkpoint
    from blazr.models.phi3 import ModelArgs

    checkpoint = load_checkpoint(GOLDEN_GGUF / "phi3_f32.gguf")
    assert not [n for n in checkpoint.tensors if "rope_factors" in n]  # config, not weights
    args = ModelArgs.from_dict(checkpoint.config)
    hf = tiny_config("phi3")
    assert args.rot_dim == 12 and args.sliding_window == 32
    scaling = args.rope_scaling
    np.testing.assert_allclose(scaling["long_factor"], hf["rope_scaling"]["long_factor"], rtol=1e-7)
    np.testing.assert_allclose(scaling["short_factor"], hf["rope_scaling"]["short_factor"], rtol=1e-7)
    assert scaling["original_max_position_embeddings"] == 4
    assert scaling["attention_factor"] == pytest.approx(math.sqrt(4.5), rel=1e-7)  # stored as float32


def test_phi3_gguf_factor_tensor_of_wrong_length_names_it():
    from blazr.loaders import load_checkpoint
    from blazr.models.phi3 import ModelArgs

    config = load_checkpoint(GOLDEN_GGUF / "phi3_f32.gguf").config
    with pytest.raises(CheckpointError, match=r"rope_factors_short\.weight is 5 values; LongRoPE needs 6"):
        ModelArgs.from_dict(config | {"rope_factors_short": config["rope_factors_short"][:5]})


# ---- Phi-2 ---------------------------------------------------------------------------------------------------


def test_phi2_qk_layernorm_is_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="qk_layernorm"):
        _build("phi2", tmp_path, qk_layernorm=True)


def _phi2_gguf(path: Path, fuse_qkv: bool) -> Path:
    """The tiny Phi-2 as a phi2 GGUF with every 2-D weight in Q8_0, q/k/v apart or as one attn_qkv tensor."""
    import gguf

    cfg, w = tiny_config("phi2"), tiny_weights("phi2")
    writer = gguf.GGUFWriter(path, "phi2")
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    writer.add_layer_norm_eps(cfg["layer_norm_eps"])
    writer.add_rope_dimension_count(6)
    names = {"model.embed_tokens": "token_embd", "model.final_layernorm": "output_norm", "lm_head": "output"}
    layer = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.dense": "attn_output",
        "mlp.fc1": "ffn_up",
        "mlp.fc2": "ffn_down",
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        names |= {p + hf: f"blk.{i}.{g}" for hf, g in layer.items()}
        if fuse_qkv:
            for suffix in ("weight", "bias"):
                parts = [w.pop(f"{p}self_attn.{x}_proj.{suffix}") for x in "qkv"]
                w[f"{p}self_attn.qkv.{suffix}"] = np.concatenate(parts)  # (3 D, D) or (3 D,)
            names[p + "self_attn.qkv"] = f"blk.{i}.attn_qkv"
    for name, a in w.items():
        base, suffix = name.rsplit(".", 1)
        if a.ndim == 2:
            writer.add_tensor(
                f"{names[base]}.{suffix}",
                gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0),
                raw_dtype=gguf.GGMLQuantizationType.Q8_0,
            )
        else:
            writer.add_tensor(f"{names[base]}.{suffix}", a)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_phi2_gguf_with_fused_attn_qkv_runs_like_split_q_k_v(tmp_path):
    """attn_qkv (rows q, k, v) is split into q/k/v row ranges that keep their Q8_0 blocks; the attention
    stacks them back into one packed matrix, and the logits equal those of a file that stores them apart."""
    from blazr.backends import get_backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from blazr.models.batch import ForwardBatch
    from blazr.quant import QuantWeight

    backend = get_backend("cpu")
    logits = {}
    for fused in (False, True):
        checkpoint = load_checkpoint(_phi2_gguf(tmp_path / f"phi2_{fused}.gguf", fused))
        assert ("model.layers.0.self_attn.qkv_proj.weight" in checkpoint.tensors) == fused
        model = build_model(checkpoint, backend)
        assert isinstance(model.layers[0].self_attn.qkv_proj, QuantWeight)  # kept packed
        cache = model.make_cache(1, 16)
        batch = ForwardBatch.single(list(PROMPT_IDS), 0, [0], 16, all_logits=True)
        logits[fused] = np.asarray(backend.download(model(batch, cache)))  # (P, V)
    np.testing.assert_array_equal(logits[True], logits[False])
