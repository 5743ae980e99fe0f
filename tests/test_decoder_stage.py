"""Pipeline stages (blazr/models/decoder_stage.py, blazr/distributed/pipeline.py) in one process: a model cut
into stages, each holding only its layers' weights and KV cache, gives the whole model's greedy tokens through
the engine (the stages called directly here; tests/distributed/test_pipeline.py runs them as Ray actors)."""

from __future__ import annotations

import threading

import pytest

from blazr.api import LLM
from blazr.backends import get_backend
from blazr.config import Settings
from blazr.distributed.pipeline import BLOCK_SIZE, LocalStages, PipelinedModel, StageWorker, pipeline_lanes
from blazr.engine.engine import Engine
from blazr.engine.runner import kv_pool_blocks
from blazr.errors import ConfigError, UnsupportedError
from blazr.loaders import load_checkpoint
from blazr.models import build_model
from blazr.models.decoder_stage import stage_layers
from blazr.tokenizer import load_tokenizer
from tests.server.conftest import write_tiny_gguf
from tests.tiny_models import write_safetensors

PROMPTS = ["hello there", "the quick brown fox jumps over the lazy dog " * 3, "a"]


def pipelined(path, count: int) -> LLM:
    checkpoint = load_checkpoint(path)
    backend = get_backend("cpu")
    first = build_model(checkpoint, backend, stage=(0, count))
    stages = [StageWorker(str(path), Settings(), index, count) for index in range(1, count)]
    model = PipelinedModel(first, LocalStages(stages))
    tokenizer = load_tokenizer(checkpoint)
    return LLM(
        checkpoint, tokenizer, model, backend, Engine(model, tokenizer, backend, num_ctx=256, max_seqs=4)
    )


@pytest.mark.parametrize("name, count", [("llama", 2), ("qwen2", 2), ("gemma3", 3)])
def test_stages_give_the_whole_models_greedy_tokens(tmp_path, name, count):
    path = write_tiny_gguf(tmp_path / f"{name}.gguf", name)
    whole = LLM.load(path, num_ctx=256)
    split = pipelined(path, count)
    for prompt in PROMPTS:
        expected = whole.generate(prompt, max_tokens=24, temperature=0)
        assert split.generate(prompt, max_tokens=24, temperature=0) == expected


def test_each_stage_holds_only_its_layers_and_weights(tmp_path):
    path = write_tiny_gguf(tmp_path / "gemma3.gguf", "gemma3")  # 6 layers, tied head
    checkpoint = load_checkpoint(path)
    backend = get_backend("cpu")
    stages = [build_model(checkpoint, backend, stage=(i, 3)) for i in range(3)]
    assert [(m.layer_offset, len(m.layers)) for m in stages] == [(0, 2), (2, 2), (4, 2)]
    names = [set(m.weight_shapes()) for m in stages]
    assert not names[0] & names[1] and not names[1] & names[2]  # no layer weight held twice
    assert any("embed_tokens" in n for n in names[0]) and not any("embed_tokens" in n for n in names[1])
    assert any("embed_tokens" in n for n in names[2])  # the tied head reads the embeddings
    assert any(n.startswith("model.norm.") for n in names[2]) and not any(
        n.startswith("model.norm.") for n in names[0]
    )
    assert len(stages[1].make_cache(4, 16)) == 2  # KV arrays for its own two layers only


def test_stage_bounds_and_refusals(tmp_path):
    assert [stage_layers(24, i, 5) for i in range(5)] == [(0, 4), (4, 9), (9, 14), (14, 19), (19, 24)]
    with pytest.raises(ConfigError, match="at most one stage a layer"):
        stage_layers(2, 0, 3)
    path = write_safetensors("mamba", tmp_path / "mamba")
    with pytest.raises(UnsupportedError, match="do not split into pipeline stages"):
        build_model(load_checkpoint(path), get_backend("cpu"), stage=(0, 2))


def test_lanes_share_the_stages_and_split_the_pool_and_give_the_whole_models_tokens(tmp_path):
    """A pipeline replica's lanes (one engine per stage): each its own scheduler and KV pool (half of what one
    engine would take), each later stage a KV cache per lane; lanes running at once give one process's tokens."""
    path = write_tiny_gguf(tmp_path / "llama.gguf", "llama")
    whole = LLM.load(path, num_ctx=256)
    checkpoint = load_checkpoint(path)
    backend = get_backend("cpu")
    stage = StageWorker(str(path), Settings(), 1, 2)
    model = PipelinedModel(build_model(checkpoint, backend, stage=(0, 2)), LocalStages([stage]))
    settings = Settings()
    settings.num_ctx = 256
    lanes = pipeline_lanes(checkpoint, model, backend, settings, lanes=2)
    assert sorted(stage.caches) == [0, 1] and [llm.model.lane for llm in lanes] == [0, 1]
    one_engine = kv_pool_blocks(model.first, 256, BLOCK_SIZE, settings.server.max_concurrent_requests)
    assert [llm.engine.pool.num_blocks for llm in lanes] == [one_engine // 2] * 2
    assert lanes[0].engine.scheduler is not lanes[1].engine.scheduler

    out: dict[int, list[str]] = {}

    def run(lane):  # a lane's synchronous API belongs to one thread; the two lanes run side by side
        out[lane] = [lanes[lane].generate(p, max_tokens=24, temperature=0) for p in PROMPTS[lane:] + PROMPTS]

    threads = [threading.Thread(target=run, args=(lane,)) for lane in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for lane in (0, 1):
        expected = [whole.generate(p, max_tokens=24, temperature=0) for p in PROMPTS[lane:] + PROMPTS]
        assert out[lane] == expected
