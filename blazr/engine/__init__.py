"""The inference engine: requests and sampling params, the paged-KV block pool, the scheduler / runner / update
split, the synchronous Engine and the thread-backed AsyncEngine."""

from blazr.engine.async_engine import AsyncEngine, EngineStoppedError
from blazr.engine.engine import Engine
from blazr.engine.kv_cache import BlockPool, OutOfBlocksError
from blazr.engine.request import FinishReason, Request, RequestOutput, SamplingParams, TokenLogprob

__all__ = [
    "AsyncEngine",
    "BlockPool",
    "Engine",
    "EngineStoppedError",
    "FinishReason",
    "OutOfBlocksError",
    "Request",
    "RequestOutput",
    "SamplingParams",
    "TokenLogprob",
]
