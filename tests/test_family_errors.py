"""Load-time errors of the OLMo 2, Granite, SmolLM3, Command-R and InternLM2 families: one message that names
the key or tensor, before any weight is used."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from blazr.errors import BlazrError, CheckpointError, UnsupportedError
from blazr.loaders import load_checkpoint
from blazr.models import build_model
from tests.test_models import checkpoint
from tests.tiny_models import tiny_config, tiny_weights

GGUF_DIR = Path(__file__).parent / "golden" / "gguf"


def build(config: dict, weights: dict[str, np.ndarray]):
    from blazr.backends import get_backend

    return build_model(checkpoint(config, weights), get_backend("cpu"))


def test_cohere_with_qk_norm_names_the_key():
    with pytest.raises(UnsupportedError, match="use_qk_norm"):
        build(tiny_config("cohere") | {"use_qk_norm": True}, tiny_weights("cohere"))


def test_smollm3_no_rope_layers_of_the_wrong_length_names_the_key():
    with pytest.raises(UnsupportedError, match="no_rope_layers"):
        build(tiny_config("smollm3") | {"no_rope_layers": [1, 1]}, tiny_weights("smollm3"))


def test_smollm3_nope_layers_follow_the_config():
    model = build(tiny_config("smollm3") | {"no_rope_layers": [1, 0, 1, 1]}, tiny_weights("smollm3"))
    assert [layer.self_attn.inv_freq is None for layer in model.layers] == [False, True, False, False]


def test_internlm2_wqkv_with_the_wrong_rows_names_the_tensor():
    weights = tiny_weights("internlm2")
    name = "model.layers.1.attention.wqkv.weight"
    weights[name] = weights[name][:-16]
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        build(tiny_config("internlm2"), weights)


def test_internlm2_missing_tensor_is_named_in_its_own_spelling():
    weights = tiny_weights("internlm2")
    del weights["model.layers.0.feed_forward.w3.weight"]
    with pytest.raises(CheckpointError, match=r"feed_forward\.w3\.weight"):
        build(tiny_config("internlm2"), weights)


def _without_key(src, dst, key: str) -> None:
    """Copy GGUF file src to dst, dropping metadata key `key`."""
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        name = field.name
        if name == key or name.startswith("GGUF.") or name == "general.architecture":
            continue
        writer.add_key_value(
            name, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None
        )
    for t in reader.tensors:
        writer.add_tensor(
            t.name, np.array(t.data), raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize(
    "name, key", [("granite", "granite.logit_scale"), ("cohere", "command-r.attention.layer_norm_epsilon")]
)
def test_gguf_without_a_required_hparam_names_the_key(name, key, tmp_path):
    dst = tmp_path / f"{name}.gguf"
    _without_key(GGUF_DIR / f"{name}_f32.gguf", dst, key)
    with pytest.raises(BlazrError, match=key.replace(".", r"\.")):
        load_checkpoint(dst)
