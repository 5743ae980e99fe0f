"""First start (CPU-speed issue, target 4): with an empty kernel cache, a model's warm-up compiles every kernel
path its requests take, so a chat and a batch of sampled requests after it compile nothing; and a second
process finds every kernel in the cache. Each run is a fresh process with its own NUMBA_CACHE_DIR, the cold
path of a fresh install. Not timed (docs/performance.md has the times)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from blazr.backends.cpu import HAS_NUMBA

pytestmark = pytest.mark.skipif(not HAS_NUMBA, reason="numba compiles nothing without numba")

# Counts numba's compilations (events fire on compiling only, not on loading from the cache) during the
# warm-up and during the requests after it.
SCRIPT = r"""
import json, sys
from numba.core import event

compiled = []

class Count(event.Listener):
    def on_start(self, ev):
        pass

    def on_end(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__qualname__)

event.register("numba:compile", Count())
import blazr
from blazr.engine import SamplingParams

llm = blazr.load(sys.argv[1], max_seqs=16)
llm.warm_up()
warm = len(compiled)
llm.chat([{"role": "user", "content": "What is the capital of France?"}], max_tokens=4, temperature=0)
for i in range(16):  # more sequences than the warm-up ran, sampled, prompts of several lengths
    prompt = llm.tokenize("Tell me a story about the number %d and its friends" % i)[: 4 + i]
    llm.engine.add_request(f"r{i}", prompt, SamplingParams(max_tokens=3, temperature=0.8, seed=i))
while llm.engine.has_unfinished():
    llm.engine.step()
print(json.dumps({"warm_up": compiled[:warm], "after": compiled[warm:]}))
"""


def _run(model, cache_dir) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(model)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_warm_up_compiles_every_path_and_a_second_start_reads_the_cache(smollm2_gguf, tmp_path):
    cache = tmp_path / "kernels"
    first = _run(smollm2_gguf, cache)
    assert first["warm_up"], "the cache was empty, so the warm-up must have compiled the kernels"
    assert first["after"] == [], f"the warm-up missed these kernel paths: {first['after']}"
    assert any(cache.rglob("*.nbi")), "numba wrote no cache index"
    second = _run(smollm2_gguf, cache)
    assert second == {"warm_up": [], "after": []}, f"a second start compiled again: {second}"
