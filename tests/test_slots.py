"""Slots (blazr/engine/slots.py): a conversation's KV pinned between requests, saved to a file and restored
into another engine, erased; on the tiny Llama through the Engine."""

from __future__ import annotations

import numpy as np
import pytest

from blazr.engine import Engine, SamplingParams
from blazr.engine.slots import SlotNotFoundError, model_fingerprint
from blazr.errors import ConfigError
from tests.test_lora import _IdTokenizer, base_model
from tests.tiny_models import PROMPT_IDS

BLOCK = 4
PROMPT = list(PROMPT_IDS) * 3  # 24 tokens: 6 blocks


def engine_for(model, blocks: int = 64) -> Engine:
    return Engine(
        model, _IdTokenizer(), model.be, num_ctx=128, block_size=BLOCK, max_seqs=4, num_blocks=blocks
    )


def run(engine: Engine, prompt: list[int], tokens: int = 6, **params) -> tuple[list[int], int]:
    """(greedy ids, prompt tokens found in the prefix cache)."""
    sampling = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True, **params)
    engine.add_request(f"r{np.random.randint(1 << 30)}", prompt, sampling)
    ids, cached = [], 0
    while engine.has_unfinished():
        for out in engine.step():
            ids += out.token_ids
            cached = max(cached, out.cached_tokens)
    return ids, cached


def flood(engine: Engine) -> None:
    """Enough other prompts to evict every unpinned cached block."""
    for i in range(12):
        run(engine, [(7 * i + j) % 250 + 3 for j in range(40)], tokens=2)


@pytest.fixture
def model(tmp_path):
    from blazr.backends import get_backend

    return base_model("llama", get_backend("cpu"), tmp_path)


def test_a_slot_keeps_its_kv_through_other_traffic(model):
    engine = engine_for(model)
    first, _ = run(engine, PROMPT, slot_id="chat")
    slot = engine.slots.get("chat")
    assert len(slot.token_ids) == 28 and slot.token_ids == (PROMPT + first)[:28]  # 30 tokens: 7 whole blocks
    flood(engine)
    follow_up = PROMPT + first + [5, 6, 7]
    ids, cached = run(engine, follow_up)
    assert cached == 28  # the slot's blocks were not evicted
    assert ids == run(engine_for(model), follow_up)[0]  # and give what a cold run gives

    plain = engine_for(model)
    run(plain, PROMPT)
    flood(plain)
    assert run(plain, follow_up)[1] == 0  # without a slot the flood evicted them
    engine.kv.pool.check_consistent(engine.kv.holders())


def test_save_restore_into_another_engine(model, tmp_path):
    engine = engine_for(model)
    first, _ = run(engine, PROMPT, slot_id="0")
    fingerprint = "tiny-llama"
    n, nbytes = engine.slots.save("0", tmp_path / "conv.slot", fingerprint)
    assert n == 28 and nbytes > 28 * 2 * 2 * 2 * 16 * 4  # K and V of 2 layers, 2 KV heads of 16 floats

    fresh = engine_for(model)
    assert fresh.slots.restore("7", tmp_path / "conv.slot", fingerprint) == (28, nbytes)
    follow_up = PROMPT + first + [9, 9]
    ids, cached = run(fresh, follow_up)
    assert cached == 28 and ids == run(engine_for(model), follow_up)[0]
    fresh.kv.pool.check_consistent(fresh.kv.holders())

    assert fresh.slots.erase("7") == 28 and fresh.slots.get("7").token_ids == []
    fresh.slots.remove("7")
    with pytest.raises(SlotNotFoundError):
        fresh.slots.get("7")
    with pytest.raises(ConfigError, match="another model"):
        fresh.slots.restore("1", tmp_path / "conv.slot", "other")
    (tmp_path / "junk.slot").write_bytes(b"not safetensors")
    with pytest.raises(ConfigError, match="not a readable slot file"):
        fresh.slots.restore("1", tmp_path / "junk.slot", fingerprint)


def test_restore_on_every_backend(backend, tmp_path):
    """A slot saved on the CPU restores on each backend: the continuation equals a cold run there."""
    from blazr.backends import get_backend

    cpu = engine_for(base_model("llama", get_backend("cpu"), tmp_path / "cpu"))
    first, _ = run(cpu, PROMPT, slot_id="s")
    cpu.slots.save("s", tmp_path / "s.slot", "f")
    model = base_model("llama", backend, tmp_path / "other")
    engine = engine_for(model)
    engine.slots.restore("s", tmp_path / "s.slot", "f")
    follow_up = PROMPT + first + [3]
    ids, cached = run(engine, follow_up)
    assert cached == 28 and ids == run(engine_for(model), follow_up)[0]


def test_slots_pin_at_most_half_the_pool(model):
    engine = engine_for(model, blocks=40)  # pins capped at 20 blocks
    for i in range(4):
        run(engine, [(i * 11 + j) % 250 + 3 for j in range(36)], tokens=2, slot_id=f"s{i}")  # 9 blocks each
    pinned = sum(len(engine.kv.block_table(("slot", s))) for s in engine.slots.slots)
    assert pinned <= 20
    assert engine.slots.get("s3").token_ids  # the most recent slot keeps its KV; the oldest let go
    assert engine.slots.get("s0").token_ids == []


def test_slot_with_an_adapter_is_refused(model):
    with pytest.raises(ConfigError, match="slot_id cannot be combined with lora_adapter"):
        SamplingParams(slot_id="s", lora_adapter="a").validate()


def test_fingerprint_tells_models_apart(tmp_path):
    from blazr.loaders import load_checkpoint
    from tests.gguf_writer import write_gguf
    from tests.tiny_models import tiny_config, tiny_weights

    a = write_gguf(tmp_path / "a.gguf", tiny_config("llama"), tiny_weights("llama"))
    b = write_gguf(tmp_path / "b.gguf", tiny_config("qwen2"), tiny_weights("qwen2"))
    fa, fb = model_fingerprint(load_checkpoint(a)), model_fingerprint(load_checkpoint(b))
    assert fa != fb and fa == model_fingerprint(load_checkpoint(a))
