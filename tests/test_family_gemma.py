"""Gemma and Gemma 2 beyond tests/test_parity.py: how their configs are read (the legacy "gelu", Gemma 2's
layer pattern, query_pre_attn_scalar, soft-caps), how llama.cpp reads their GGUF hparams, and the options blazr
refuses (each error names the config key)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from blazr.errors import UnsupportedError
from blazr.models import gemma, gemma2, model_module_name
from tests.test_parity import GOLDEN
from tests.tiny_models import tiny_config, write_safetensors


def _build(path: Path):
    from blazr.backends import get_backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    return build_model(load_checkpoint(path), get_backend("cpu"))


def _safetensors(name: str, tmp_path: Path, **overrides) -> Path:
    write_safetensors(name, tmp_path)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(json.loads(config_path.read_text()) | overrides))
    return tmp_path


def test_registry_resolves_gemma_and_gemma2():
    assert model_module_name({"architectures": ["GemmaForCausalLM"]}) == "gemma"
    assert model_module_name({"model_type": "gemma2"}) == "gemma2"
    assert model_module_name({}, {"general.architecture": "gemma"}) == "gemma"
    assert model_module_name({}, {"general.architecture": "gemma2"}) == "gemma2"


# ---- config reading ------------------------------------------------------------------------------------------


def test_gemma_legacy_gelu_runs_as_gelu_tanh():
    """The released Gemma configs say hidden_act "gelu"; transformers runs it as GELU-tanh."""
    assert gemma.ModelArgs.from_dict({"hidden_act": "gelu"}).hidden_act == "gelu_pytorch_tanh"
    assert gemma.ModelArgs.from_dict({}).hidden_act == "gelu_pytorch_tanh"


def test_gemma2_reads_hidden_activation_not_hidden_act():
    args = gemma2.ModelArgs.from_dict({"hidden_act": "silu"})
    assert args.activation == "gelu_pytorch_tanh"


def test_gemma2_even_layers_slide_by_default(tmp_path):
    model = _build(_safetensors("gemma2", tmp_path))
    window = tiny_config("gemma2")["sliding_window"]
    assert [layer.self_attn.window for layer in model.layers] == [window, 0, window, 0]
    assert model.final_softcap == tiny_config("gemma2")["final_logit_softcapping"]
    assert model.layers[0].self_attn.s.softcap == tiny_config("gemma2")["attn_logit_softcapping"]


def test_gemma2_query_pre_attn_scalar_sets_the_attention_scale(tmp_path):
    """The parity models keep query_pre_attn_scalar = head_dim (llama.cpp assumes it), so check it here."""
    model = _build(_safetensors("gemma2", tmp_path, query_pre_attn_scalar=144))
    assert math.isclose(model.layers[0].self_attn.scale, 144**-0.5)


def test_gemma2_without_softcaps_needs_no_tanh(tmp_path):
    model = _build(
        _safetensors("gemma2", tmp_path, attn_logit_softcapping=None, final_logit_softcapping=None)
    )
    assert model.final_softcap == 0.0 and model.layers[0].self_attn.s.softcap == 0.0
    assert ("act", "f32", None) not in model.required_ops()


# ---- GGUF hparams as llama.cpp reads them --------------------------------------------------------------------


def test_gemma2_gguf_reads_caps_window_and_pattern():
    from blazr.loaders import load_checkpoint

    config = load_checkpoint(GOLDEN / "gguf" / "gemma2_f32.gguf").config
    want = tiny_config("gemma2")
    for key in (
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "sliding_window",
        "query_pre_attn_scalar",
    ):
        assert config[key] == want[key], key


def _gguf_config(meta: dict, **config) -> dict:
    base = dict(num_hidden_layers=4, num_attention_heads=4, hidden_size=64, head_dim=16, rope_theta=10000.0)
    return gemma2.gguf_config("gemma2", lambda key, default=None: meta.get(key, default), base | config)


def test_gemma2_gguf_defaults_are_llama_cpps():
    out = _gguf_config({})
    assert (out["attn_logit_softcapping"], out["final_logit_softcapping"]) == (50.0, 30.0)
    assert out["layer_types"] == [gemma2.LOCAL, gemma2.GLOBAL] * 2
    assert out["query_pre_attn_scalar"] == 16  # head_dim
    # the 46-layer 27B scales by hidden / heads (llama.cpp, after gemma_pytorch)
    assert (
        _gguf_config({}, num_hidden_layers=46, hidden_size=4608, num_attention_heads=32, head_dim=128)[
            "query_pre_attn_scalar"
        ]
        == 144
    )
    assert _gguf_config({"attention.sliding_window_pattern": 4})["layer_types"] == [gemma2.LOCAL] * 3 + [
        gemma2.GLOBAL
    ]
    flags = [True, False, False, True]
    assert _gguf_config({"attention.sliding_window_pattern": flags})["layer_types"] == [
        gemma2.LOCAL if f else gemma2.GLOBAL for f in flags
    ]


# ---- refused options -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", [gemma, gemma2])
def test_bidirectional_attention_is_refused(module):
    with pytest.raises(UnsupportedError, match="use_bidirectional_attention"):
        module.ModelArgs.from_dict({"use_bidirectional_attention": True})


def test_unknown_activation_names_its_key():
    with pytest.raises(UnsupportedError, match="hidden_act 'swiglu'"):
        gemma.ModelArgs.from_dict({"hidden_act": "swiglu"})
    with pytest.raises(UnsupportedError, match="hidden_activation 'swiglu'"):
        gemma2.ModelArgs.from_dict({"hidden_activation": "swiglu"})


def test_gemma2_bad_layer_types_name_the_key():
    with pytest.raises(UnsupportedError, match="layer_types lists 1 layers"):
        gemma2.ModelArgs.from_dict({"num_hidden_layers": 2, "layer_types": ["full_attention"]})
    with pytest.raises(UnsupportedError, match="layer_types.*chunked_attention"):
        gemma2.ModelArgs.from_dict({"num_hidden_layers": 1, "layer_types": ["chunked_attention"]})


def test_gemma2_gguf_with_its_own_sliding_rope_base_is_refused():
    with pytest.raises(UnsupportedError, match="rope.freq_base_swa"):
        _gguf_config({"rope.freq_base_swa": 1_000_000.0})
    assert _gguf_config({"rope.freq_base_swa": 10000.0})["model_type"] == "gemma2"  # the same base is fine
