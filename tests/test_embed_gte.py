"""GTE ("new" on the hub) beyond the shared tiny-encoder tests of tests/test_embed.py, which run the cases with
transformers' config spelling: the hub's spelling (model_type new, NewModel, rope_theta and its fixed-NTK
rope_scaling, as gte-base-en-v1.5 / gte-large-en-v1.5 / gte-multilingual ship them) gives the same vectors and
scores, a reranker saved by transformers (encoder under "gte.") reads, and hub options that change the network
are refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blazr.errors import UnsupportedError
from blazr.tasks.embed import Embedder
from tests.test_embed import golden
from tests.tiny_encoders import GTE_NTK, QUERY, SENTENCES, write_case


def rewrite_config(root, drop=(), **changes) -> None:
    config = json.loads((root / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in drop} | changes
    (root / "config.json").write_text(json.dumps(config))


def hub_spelling(root, architecture: str, **changes) -> None:
    rewrite_config(root, ("rope_parameters",), model_type="new", architectures=[architecture], **changes)


@pytest.mark.parametrize("case", ["gte_cls_normalize", "gte_ntk_cls"])
def test_hub_config_gives_the_transformers_vectors(tmp_path, case):
    """gte_ntk_cls's reference ran transformers' linear-rope equivalent of the hub's {"type": "ntk", "factor": 2}
    on rope_theta 500000; here blazr reads the hub's own keys."""
    root = write_case(case, tmp_path)
    hub_spelling(root, "NewModel", **({"rope_scaling": GTE_NTK} if case == "gte_ntk_cls" else {}))
    model = Embedder.load(root, device="cpu")
    np.testing.assert_allclose(model.embed(list(SENTENCES)), golden(case)["vectors"], rtol=1e-4, atol=1e-5)


def test_the_ntk_scaling_changes_the_vectors(tmp_path):
    """Without its rope_scaling the NTK case's vectors are not the reference's: the scaling is read, not dropped."""
    root = write_case("gte_ntk_cls", tmp_path)
    hub_spelling(root, "NewModel")
    got = Embedder.load(root, device="cpu").embed(list(SENTENCES))  # (9, 64)
    assert np.abs(got - golden("gte_ntk_cls")["vectors"]).max() > 1e-3


@pytest.mark.parametrize("saved_by", ["hub", "transformers"])
def test_reranker_from_the_hub_or_transformers(tmp_path, saved_by):
    """The hub's NewForSequenceClassification nests the encoder under "new."; transformers 5.24's save_pretrained
    of GteForSequenceClassification writes "new.gte." before the encoder and "new." before the classifier."""
    from safetensors.numpy import load_file, save_file

    root = write_case("gte_reranker", tmp_path)
    if saved_by == "hub":
        hub_spelling(root, "NewForSequenceClassification")
    else:
        path = str(root / "model.safetensors")
        tensors = {
            ("new.gte." + k[4:] if k.startswith("new.") else "new." + k): v
            for k, v in load_file(path).items()
        }
        save_file(tensors, path)
    model = Embedder.load(root, device="cpu")
    assert model.task == "rerank"
    np.testing.assert_allclose(
        model.rerank(QUERY, list(SENTENCES)), golden("gte_reranker")["scores"], atol=1e-4
    )


@pytest.mark.parametrize(
    "key, value",
    [
        ("logn_attention_scale", True),
        ("layer_norm_type", "rms_norm"),
        ("pack_qkv", False),
        ("position_embedding_type", "absolute"),
        ("rope_scaling", {"type": "ntk", "factor": 2.0, "mixed_b": 0.5}),
        ("rope_scaling", {"type": "dynamic", "factor": 2.0}),
        ("hidden_act", "swish_gate"),
    ],
)
def test_hub_options_that_do_not_run_are_refused_by_name(tmp_path, key, value):
    root = write_case("gte_cls_normalize", tmp_path)
    hub_spelling(root, "NewModel", **{key: value})
    with pytest.raises(UnsupportedError, match=key):
        Embedder.load(root, device="cpu")
