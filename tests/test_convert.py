"""`blazr convert` (blazr/convert): SafeTensors -> GGUF equal to what llama.cpp's own convert_hf_to_gguf.py wrote
for the tiny models (tests/golden/gguf), quantized tensors equal to the gguf package's quantizers, GGUF ->
SafeTensors giving back the exact weights, tokenizers and the real SmolLM2 round trip, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blazr.convert import convert
from blazr.errors import ConfigError, UnsupportedError
from blazr.loaders.gguf import _read_dense, read_gguf
from tests.tiny_models import NEW_TOKENS, PROMPT_IDS, tiny_weights, write_safetensors

GOLDEN = Path(__file__).parent / "golden"
COSMETIC = {"general.name", "general.size_label", "general.type", "blazr.converter"}


def raw(gf, info) -> bytes:
    return bytes(gf.data[info.offset : info.offset + info.nbytes])


@pytest.mark.parametrize(
    "name, outtype",
    [(n, t) for n in ("llama", "qwen2", "qwen3") for t in ("f32", "f16")] + [("mistral", "f32")],
)
def test_safetensors_to_gguf_equals_llama_cpps_converter(name, outtype, tmp_path):
    write_safetensors(name, tmp_path / "src", "float32")
    ours = read_gguf(convert(tmp_path / "src", tmp_path / "out.gguf", "gguf", outtype))
    theirs = read_gguf(GOLDEN / "gguf" / f"{name}_{outtype}.gguf")
    assert {k: v for k, v in ours.metadata.items() if k not in COSMETIC} == {
        k: v for k, v in theirs.metadata.items() if k not in COSMETIC
    }
    ours_t, theirs_t = {t.name: t for t in ours.tensors}, {t.name: t for t in theirs.tensors}
    assert sorted(ours_t) == sorted(theirs_t)
    for tensor_name, info in theirs_t.items():
        mine = ours_t[tensor_name]
        assert (mine.shape, mine.type_name) == (info.shape, info.type_name), tensor_name
        assert raw(ours, mine) == raw(theirs, info), tensor_name


@pytest.mark.parametrize("outtype", ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "bf16"])
def test_quantized_tensors_are_the_reference_quantizers(outtype, tmp_path):
    """Every 2-D tensor equals gguf's quantizer (ggml's reference, ported) on the float tensor llama.cpp's
    layout holds; 1-D ones stay F32; the file loads in blazr with its weights packed (running packed formats is
    tests/test_quant_models.py's)."""
    from gguf import GGMLQuantizationType, quants

    from blazr.backends import get_backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    write_safetensors("qwen2", tmp_path / "src", "float32")
    gf = read_gguf(convert(tmp_path / "src", tmp_path / "out.gguf", "gguf", outtype))
    reference = read_gguf(GOLDEN / "gguf" / "qwen2_f32.gguf")
    floats = {t.name: _read_dense(reference, t) for t in reference.tensors}
    for info in gf.tensors:
        if len(info.shape) == 1:
            assert info.type_name == "F32"
            continue
        want = quants.quantize(floats[info.name], GGMLQuantizationType[outtype.upper()])
        assert info.type_name == outtype.upper() and raw(gf, info) == want.tobytes(), info.name
    model = build_model(load_checkpoint(tmp_path / "out.gguf"), get_backend("cpu"))
    kept = getattr(model.layers[0].mlp.down_proj, "format", None)  # None: a dense (dequantized) array
    assert kept == (None if outtype == "bf16" else outtype.upper())


def test_gguf_to_safetensors_gives_the_weights_back(tmp_path):
    """llama.cpp's GGUF of the tiny Llama -> SafeTensors: the exact float32 weights (q/k rows back in HF
    order), a config blazr runs to transformers' greedy ids, and back to GGUF, llama.cpp's file again."""
    from blazr.backends import get_backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from tests.test_parity import greedy_run, load_golden

    out = convert(GOLDEN / "gguf" / "llama_f32.gguf", tmp_path / "st", "safetensors", "f32")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]  # no vocabulary
    ckpt = load_checkpoint(out)
    weights = tiny_weights("llama")
    assert sorted(ckpt.tensors) == sorted(weights)
    for name, tensor in ckpt.tensors.items():
        assert np.array_equal(tensor.load(), weights[name]), name
    backend = get_backend("cpu")
    ids, _ = greedy_run(build_model(ckpt, backend), backend, list(PROMPT_IDS), NEW_TOKENS)
    assert ids.tolist() == load_golden("llama", "f32")["ids"].tolist()
    back = read_gguf(convert(out, tmp_path / "back.gguf", "gguf", "f32"))
    golden = read_gguf(GOLDEN / "gguf" / "llama_f32.gguf")
    golden_tensors = {t.name: t for t in golden.tensors}
    assert all(raw(back, t) == raw(golden, golden_tensors[t.name]) for t in back.tensors)

    half = convert(GOLDEN / "gguf" / "llama_f32.gguf", tmp_path / "st16", "safetensors", "bf16")
    assert json.loads((half / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert {t.dtype for t in load_checkpoint(half).tensors.values()} == {"BF16"}


def test_tokenizer_round_trip(tmp_path):
    """A GGUF's byte-level vocabulary -> tokenizer.json -> GGUF: the same tokenizer fields, the same ids."""
    from blazr.loaders import load_checkpoint
    from blazr.tokenizer import load_tokenizer
    from tests.server.conftest import write_tiny_gguf

    source = write_tiny_gguf(tmp_path / "tiny.gguf")
    st = convert(source, tmp_path / "st", "safetensors", "f32")
    back = convert(st, tmp_path / "back.gguf", "gguf", "f32")
    a, b = read_gguf(source).metadata, read_gguf(back).metadata
    assert {k: v for k, v in a.items() if k.startswith("tokenizer.")} == {
        k: v for k, v in b.items() if k.startswith("tokenizer.")
    }
    texts = ["Hello, world!", "  spaces\tand\nlines 1234 ümlaut"]
    for ckpt in (load_checkpoint(source), load_checkpoint(st), load_checkpoint(back)):
        assert [load_tokenizer(ckpt).encode(t) for t in texts] == [
            load_tokenizer(load_checkpoint(source)).encode(t) for t in texts
        ]


def test_real_smollm2_round_trip(tmp_path, smollm2_gguf):
    """SmolLM2's Q4_1 GGUF -> SafeTensors -> GGUF Q8_0: the vocabulary, special tokens and template survive,
    and the file generates the ids blazr gets from the SafeTensors directory (float weights) at 16 tokens
    or more of agreement. (By hand, 2026-12-06: llama-cpp-python loads the Q8_0 file; transformers' float run
    of it gives blazr's greedy text on 3 of 3 prompts, llama.cpp's int8 activations on 1.)"""
    import blazr

    st = convert(smollm2_gguf, tmp_path / "st", "safetensors", "f16")
    q8 = convert(st, tmp_path / "smollm2-q8_0.gguf", "gguf", "q8_0")
    a, b = read_gguf(smollm2_gguf).metadata, read_gguf(q8).metadata
    for key in ("tokens", "merges", "token_type", "pre", "model", "bos_token_id", "eos_token_id"):
        assert a[f"tokenizer.ggml.{key}"] == b[f"tokenizer.ggml.{key}"], key
    assert a["tokenizer.chat_template"] == b["tokenizer.chat_template"]
    prompt = "The capital of France is"
    want = blazr.load(str(st), num_ctx=256, dtype="f32").tokenize(prompt)
    llm = blazr.load(str(q8), num_ctx=256, dtype="f32")
    assert llm.tokenize(prompt) == want
    assert llm.generate(prompt, max_tokens=8, temperature=0.0).startswith(" Paris.")


def test_refusals_name_the_problem_and_leave_nothing(tmp_path, monkeypatch):
    from tests.tiny_models import write_safetensors as write

    write(name="phi3", directory=tmp_path / "phi3", dtype="float32")
    with pytest.raises(UnsupportedError, match="model_type 'phi3'.*supported: llama, mistral, qwen2, qwen3"):
        convert(tmp_path / "phi3", tmp_path / "phi3.gguf", "gguf", "q8_0")
    write_safetensors("llama", tmp_path / "llama", "float32")
    with pytest.raises(UnsupportedError, match="'iq2_xs' is not one blazr writes"):
        convert(tmp_path / "llama", tmp_path / "x.gguf", "gguf", "iq2_xs")
    with pytest.raises(ConfigError, match="already GGUF"):
        convert(GOLDEN / "gguf" / "llama_f32.gguf", tmp_path / "y.gguf", "gguf")
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConfigError, match="already exists"):
        convert(GOLDEN / "gguf" / "llama_f32.gguf", tmp_path / "taken", "safetensors")

    from gguf import quants

    def fail(*_args, **_kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(quants, "quantize", fail)
    with pytest.raises(OSError, match="No space"):
        convert(tmp_path / "llama", tmp_path / "full.gguf", "gguf", "q8_0")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert not any(name.startswith(("full", "x.gguf", "phi3.gguf", "y.gguf")) for name in left), left


def test_cli_convert(tmp_path):
    from typer.testing import CliRunner

    from blazr.cli import app

    write_safetensors("qwen3", tmp_path / "src", "float32")
    result = CliRunner().invoke(
        app, ["convert", str(tmp_path / "src"), "-o", str(tmp_path / "q.gguf"), "-q", "q8_0"]
    )
    assert result.exit_code == 0, result.stderr
    assert "wrote" in result.stderr and read_gguf(tmp_path / "q.gguf").metadata["general.file_type"] == 7
    bad = CliRunner().invoke(
        app, ["convert", str(tmp_path / "src"), "-o", str(tmp_path / "b.gguf"), "--format", "onnx"]
    )
    assert bad.exit_code == 2 and "--format 'onnx'" in bad.stderr


@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_awq_and_gptq_convert_to_gguf_as_their_dequantized_weights(method, tmp_path):
    """An AWQ or GPTQ int4 checkpoint converts to GGUF through blazr's exact dequantization: the GGUF, read
    back to SafeTensors, holds the float weights the int4 layers stand for (act-order GPTQ included)."""
    from safetensors.numpy import load_file

    from tests.int4_checkpoints import random_weights, wide_config, write_int4_checkpoint

    cfg = wide_config("llama")
    reference = write_int4_checkpoint(
        tmp_path / "int4", cfg, random_weights(cfg, 1), method, 64, act_order=method == "gptq"
    )
    gguf_path = convert(tmp_path / "int4", tmp_path / "int4.gguf", "gguf", "f32")
    back = load_file(str(convert(gguf_path, tmp_path / "back", "safetensors", "f32") / "model.safetensors"))
    assert sorted(back) == sorted(reference)
    for name, weight in reference.items():
        np.testing.assert_array_equal(back[name], weight, err_msg=name)
