"""EngineReplica's methods without Ray (its class is plain Python; Ray only wraps it): the KV hand-off of
disaggregated serving end to end in one process, and the fallback when handed rows cannot be loaded."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from blazr.config import Settings
from blazr.distributed.replica import EngineReplica
from blazr.engine.request import SamplingParams

PROMPT = list(range(40, 90))  # 50 tokens: three whole blocks of 16 hand over, the last 2 tokens do not
GREEDY = SamplingParams(max_tokens=8, temperature=0.0)


@pytest.fixture(scope="module")
def tiny_path(tiny_dir):
    return str(tiny_dir / "tiny.gguf")


async def decode(replica: EngineReplica, request_id: str, kv=None) -> list:
    """Submit a request and read its outputs off the replica's outputs stream until it finishes."""
    stream = replica.outputs()
    await replica.submit(request_id, PROMPT, GREEDY, kv)
    outputs = []
    async for batch in stream:
        for rid, item in batch:
            assert rid == request_id
            assert not isinstance(item, BaseException), item
            outputs.append(item)
        if outputs and outputs[-1].finished:
            break
    await stream.aclose()
    await asyncio.sleep(0.05)  # the request's clean-up (its hand-off slot) runs on the engine thread
    return outputs


def test_prefill_rows_load_on_another_replica_and_decode_as_one_engine_would(tiny_path):
    async def run():
        prefill, decoder = EngineReplica(tiny_path, Settings()), EngineReplica(tiny_path, Settings())
        await prefill.ready()
        await decoder.ready()
        timings, rows = await prefill.prefill("r1", PROMPT)
        assert timings["tokens"] == 48 and rows["token_ids"].tolist() == PROMPT[:48]
        assert prefill.counts()["slots"] == 0 and prefill.counts()["kv_blocks_used"] == 0
        handed = await decode(decoder, "r1", rows)
        alone = await decode(EngineReplica(tiny_path, Settings()), "r2")
        assert handed[-1].cached_tokens == 48
        assert [t for o in handed for t in o.token_ids] == [t for o in alone for t in o.token_ids]
        assert decoder.counts()["slots"] == 0 and decoder.counts()["kv_blocks_used"] == 0

    asyncio.run(run())


def test_rows_that_do_not_fit_are_dropped_and_the_prompt_computed_here(tiny_path):
    async def run():
        replica = EngineReplica(tiny_path, Settings())
        await replica.ready()
        wrong = {"token_ids": np.asarray(PROMPT[:16], np.int64)}
        for layer in range(2):  # rows of another model: 3 KV heads of 5 features
            wrong[f"k.{layer}"] = wrong[f"v.{layer}"] = np.zeros((16, 3, 5), np.float32)
        handed = await decode(replica, "r1", wrong)
        alone = await decode(EngineReplica(tiny_path, Settings()), "r2")
        assert [t for o in handed for t in o.token_ids] == [t for o in alone for t in o.token_ids]
        assert replica.counts()["slots"] == 0

    asyncio.run(run())
