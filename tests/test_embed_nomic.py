"""NomicBERT (nomic-embed-text) beyond the shared tiny-encoder tests of tests/test_embed.py: the hub's config
spelling (nomic's own keys, which real checkpoints have) and transformers' give the same model, the hub options
blazr does not run are refused by name, and llama.cpp's "nomic-bert" GGUF files (F32, F16, Q8_0 from its own
converter: tests/parity/make_encoder_gguf.py) against sentence-transformers on the original weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blazr.errors import UnsupportedError
from blazr.tasks.embed import Embedder
from tests.test_embed_gguf import COSINE, GGUF, cosine, families, golden
from tests.tiny_encoders import SENTENCES, write_case

CASE = "nomic_mean_normalize"
# keys only transformers' NomicBertConfig reads, and keys only nomic's hub config has (tests/tiny_encoders.py
# writes both, as either loader needs its own)
TRANSFORMERS_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_act",
    "max_position_embeddings",
    "layer_norm_eps",
    "rope_parameters",
)
HUB_KEYS = (
    "n_embd",
    "n_inner",
    "n_layer",
    "n_head",
    "activation_function",
    "n_positions",
    "layer_norm_epsilon",
)


@pytest.fixture
def nomic_dir(tmp_path):
    return write_case(CASE, tmp_path)


def rewrite_config(root, drop=(), **changes) -> None:
    config = json.loads((root / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in drop} | changes
    (root / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("spelling", ["hub", "transformers"])
def test_either_config_spelling_gives_sentence_transformers_vectors(nomic_dir, spelling):
    """A hub config.json (n_embd, rotary_emb_base, activation_function "swiglu", ...) as nomic-embed-text-v1.5
    ships it, and the same model saved with transformers' key names."""
    drop = TRANSFORMERS_KEYS if spelling == "hub" else HUB_KEYS + ("rotary_emb_base",)
    rewrite_config(nomic_dir, drop)
    model = Embedder.load(nomic_dir, device="cpu")
    want = golden(CASE)
    got = model.embed(list(SENTENCES))  # (9, 64)
    np.testing.assert_allclose(got, want["vectors"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        model.embed(list(SENTENCES), prompt_name="query"), want["query_vectors"], atol=1e-5
    )


def test_the_hub_rope_base_is_read(nomic_dir):
    """rotary_emb_base (nomic's spelling of the rope base) changes the vectors: it is not left at a default."""
    rewrite_config(nomic_dir, TRANSFORMERS_KEYS, rotary_emb_base=10_000)
    got = Embedder.load(nomic_dir, device="cpu").embed(list(SENTENCES))
    assert cosine(got, golden(CASE)["vectors"]).min() < 0.9999


@pytest.mark.parametrize(
    "key, value",
    [
        ("qkv_proj_bias", True),
        ("mlp_fc1_bias", True),
        ("prenorm", True),
        ("rotary_emb_interleaved", True),
        ("rotary_emb_fraction", 0.5),
        ("rotary_scaling_factor", 2.0),
        ("activation_function", "relu"),
    ],
)
def test_hub_options_that_do_not_run_are_refused_by_name(nomic_dir, key, value):
    rewrite_config(nomic_dir, TRANSFORMERS_KEYS if key == "activation_function" else (), **{key: value})
    with pytest.raises(UnsupportedError, match=key if key != "activation_function" else "relu"):
        Embedder.load(nomic_dir, device="cpu")


def test_rope_scaling_in_transformers_spelling_is_refused(nomic_dir):
    rewrite_config(nomic_dir, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1000.0})
    with pytest.raises(UnsupportedError, match="dynamic"):
        Embedder.load(nomic_dir, device="cpu")


@pytest.mark.parametrize("outtype", ["f32", "f16", "q8_0"])
def test_gguf_nomic_bert_equals_sentence_transformers(backend, outtype):
    """A GGUF alone: its WordPiece vocabulary, mean pooling and L2 normalisation from the file, the context
    length as the input limit; Q8_0 stays packed."""
    want = families(CASE)
    model = Embedder.load(GGUF / f"{CASE}_{outtype}.gguf", device=backend)
    assert model.checkpoint.config["architectures"] == ["NomicBertModel"]
    assert (model.task, model.dimension, model.max_seq_length) == ("embed", 64, 8192)
    assert model.modules.pooling == ("mean",) and model.modules.normalize
    assert model.tokenize(list(SENTENCES)) == [list(x) for x in want["ids"]]
    assert cosine(model.embed(list(SENTENCES)), want["vectors"]).min() >= COSINE[outtype]
