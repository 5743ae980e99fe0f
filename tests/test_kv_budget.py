"""The paged KV pool is sized from a memory budget when one is given (LLM.load kv_cache_mb)."""

import pytest

from blazr.api import LLM
from blazr.errors import ConfigError
from tests.server.conftest import write_tiny_gguf


def test_kv_cache_budget_sizes_the_block_pool(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    default = LLM.load(path, num_ctx=64, max_seqs=4)
    capped = LLM.load(path, num_ctx=64, max_seqs=4, kv_cache_mb=1)
    block_bytes = 1 * 2**20 // capped.engine.pool.num_blocks
    assert capped.engine.pool.num_blocks != default.engine.pool.num_blocks
    assert capped.engine.pool.num_blocks * block_bytes <= 2**20
    assert capped.generate([1, 2, 3], temperature=0, max_tokens=4) == default.generate(
        [1, 2, 3], temperature=0, max_tokens=4
    )


def test_a_budget_below_one_context_is_refused(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    with pytest.raises(ConfigError, match="KV cache"):
        LLM.load(path, num_ctx=64, kv_cache_mb=1e-3)
