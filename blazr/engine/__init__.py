"""The inference engine: requests and sampling params, the paged-KV block pool and prefix cache, the
continuous-batching scheduler / runner / update split, the synchronous Engine and the thread-backed AsyncEngine."""

from blazr.engine.async_engine import AsyncEngine, EngineStoppedError
from blazr.engine.block_pool import BlockPool, OutOfBlocksError
from blazr.engine.engine import Engine
from blazr.engine.kv_cache import KVCacheManager
from blazr.engine.request import FinishReason, Request, RequestOutput, SamplingParams, TokenLogprob
from blazr.engine.scheduler import QueueFullError

__all__ = [
    "AsyncEngine",
    "BlockPool",
    "Engine",
    "EngineStoppedError",
    "FinishReason",
    "KVCacheManager",
    "OutOfBlocksError",
    "QueueFullError",
    "Request",
    "RequestOutput",
    "SamplingParams",
    "TokenLogprob",
]
