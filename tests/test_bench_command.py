"""`blazr bench` on a tiny random-weight Llama with a word-level tokenizer: the report, the JSON file, the
per-step device counters on wgpu, and user errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from typer.testing import CliRunner

from blazr.cli import app
from blazr.config import env_name, known_keys
from tests.conftest import AVAILABLE_BACKENDS
from tests.tiny_models import write_safetensors

WORDS = ["<unk>", "The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "."]


@pytest.fixture
def tiny_model(tmp_path, monkeypatch):
    for key in known_keys():
        monkeypatch.delenv(env_name(key), raising=False)
    monkeypatch.setenv("BLAZR_CONFIG", str(tmp_path / "config.yaml"))
    directory = tmp_path / "tiny"
    write_safetensors("llama", directory)
    inner = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    inner.pre_tokenizer = Whitespace()
    inner.save(str(directory / "tokenizer.json"))
    return directory


def run_bench(*args: str):
    return CliRunner().invoke(app, ["bench", *args])


@pytest.mark.parametrize("device", AVAILABLE_BACKENDS)
def test_bench_reports_speed_and_writes_json(tiny_model, tmp_path, device):
    out = tmp_path / "bench.json"
    args = [str(tiny_model), "--device", device, "--prompt-tokens", "5", "--prompt-tokens", "21"]
    result = run_bench(*args, "--decode-tokens", "6", "--runs", "2", "--num-ctx", "64", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "decode" in result.stdout and "TTFT" in result.stdout
    report = json.loads(out.read_text())
    assert report["bandwidth"]["copy_bytes_per_sec"] > 1e8 and "bandwidth floor" in result.stdout
    assert report["decode_tokens"] == 6 and report["measurement_runs"] == 2 and report["num_ctx"] == 64
    assert report["kv_cache_type"] == "f32" and "KV cache f32" in result.stdout  # a float32 model: exact
    assert [r["prompt_tokens"] for r in report["results"]] == [5, 21]
    for r in report["results"]:
        assert len(r["ttft_ms"]["samples"]) == 2 and r["decode_tok_per_sec"]["median"] > 0
        assert r["prefill_tok_per_sec"]["median"] > 0 and r["itl_ms"]["count"] == 2 * 5
        assert 0 < r["bandwidth_floor_fraction"] < 1  # a tiny model is nowhere near moving-weights bound
        if device.startswith("wgpu"):
            step = r["per_decode_step"]
            assert step["submits"] == 1  # one submit per decode step: the sampled id's read-back
            assert step["bytes_read"] == 4  # greedy: only the token id comes back
            assert 0 < step["dispatches"] < 12 * 2 + 8
            assert "dispatches" in result.stdout and "host encode" in result.stdout
            assert step["encode_ns"] > 0
        else:
            assert "per_decode_step" not in r


def test_bench_refuses_a_context_too_small(tiny_model):
    result = run_bench(str(tiny_model), "--prompt-tokens", "40", "--decode-tokens", "30", "--num-ctx", "64")
    assert result.exit_code != 0 and "--num-ctx 64 is too small" in result.stderr


def test_bench_refuses_zero_runs(tiny_model):
    result = run_bench(str(tiny_model), "--runs", "0")
    assert result.exit_code != 0 and "--runs must be at least 1" in result.stderr


def test_weight_bytes_count_every_weight_once_and_skip_an_untied_embedding_table(tiny_model):
    from blazr.backends import get_backend
    from blazr.commands.bench_floor import weight_bytes
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    checkpoint = load_checkpoint(tiny_model)
    model = build_model(checkpoint, get_backend("cpu"))
    tensors = checkpoint.tensors
    total = sum(4 * int(np.prod(t.shape)) for t in tensors.values())  # the tiny checkpoint is F32
    embed = 4 * int(np.prod(tensors["model.embed_tokens.weight"].shape))
    assert "lm_head.weight" in tensors  # untied: a token reads one row of the table, all of the head
    assert weight_bytes(model) == total - embed + model.inv_freq.nbytes  # + the rope table the model builds


def test_weight_bytes_count_a_tied_embedding_table_whole(tmp_path):
    """A tied table is the LM head too: every decode step reads all of it."""
    from blazr.backends import get_backend
    from blazr.commands.bench_floor import weight_bytes
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from tests.tiny_models import tiny_config, write_safetensors

    assert tiny_config("qwen2")["tie_word_embeddings"]
    checkpoint = load_checkpoint(write_safetensors("qwen2", tmp_path).parent)
    model = build_model(checkpoint, get_backend("cpu"))
    total = sum(4 * int(np.prod(t.shape)) for t in checkpoint.tensors.values())  # F32, no lm_head stored
    assert weight_bytes(model) == total + model.inv_freq.nbytes  # + the rope table the model builds


def test_bench_prompt_is_filled_when_the_vocabulary_cannot_spell_the_text():
    # it once doubled the text forever (a 2 GB string, then the OOM killer) for such a vocabulary
    from blazr.commands.bench import bench_prompt

    class OneUnknownId:
        vocab_size = 50

        def encode(self, text, add_special_tokens=True):
            return [1, 0]  # BOS, then the whole text as one unknown token

    ids = bench_prompt(OneUnknownId(), 40)
    assert len(ids) == 40 and ids[:2] == [1, 0] and all(3 <= i < 50 for i in ids[2:])
