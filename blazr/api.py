"""The public Python API: `LLM.load(model)` then `generate`, `stream` and `chat`.

    import blazr
    llm = blazr.load("smollm2")
    print(llm.generate("The capital of France is", max_tokens=8, temperature=0))

Calls are synchronous and drive the engine on the caller's thread; for many concurrent requests wrap
`llm.engine` in `blazr.engine.AsyncEngine`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blazr.engine.engine import Engine
from blazr.engine.request import SamplingParams
from blazr.engine.warm_up import FILLER_TEXT, warm_engine
from blazr.errors import UnsupportedError

DEFAULT_NUM_CTX = 2048


@dataclass
class GenerationStats:
    """Counts and timings of the last generate / stream / chat call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    prefill_seconds: float = 0.0  # until the first generated token
    decode_seconds: float = 0.0  # from the first generated token to the end
    finish_reason: str | None = None

    @property
    def decode_tokens_per_second(self) -> float:
        tokens = self.completion_tokens - 1  # the first token comes out of the prefill
        return tokens / self.decode_seconds if tokens > 0 and self.decode_seconds > 0 else 0.0


class LLM:
    """A loaded text model with its tokenizer, backend and engine."""

    task = "generate"  # what blazr.load gave: an LLM generates; an Embedder (blazr.tasks.embed) embeds

    def __init__(
        self, checkpoint: Any, tokenizer: Any, model: Any, backend: Any, engine: Engine, chat_template=None
    ):
        self.checkpoint = checkpoint
        self.tokenizer = tokenizer
        self.model = model
        self.backend = backend
        self.engine = engine
        self.chat_template = (
            chat_template  # a --chat-template spec overriding the model's own; None: the model's
        )
        self.last_stats = GenerationStats()
        self._active: str | None = None  # the request of the stream being read, if any
        self.default_adapter: str | None = (
            None  # the LoRA adapter calls use unless they name one (lora_adapter)
        )

    @classmethod
    def load(
        cls,
        model: str | Path | Any,
        device: str = "cpu",
        dtype: str | None = None,
        num_ctx: int | None = None,
        chat_template: str | None = None,
        max_seqs: int = 1,
        speculative: str | None = None,
        num_speculative_tokens: int = 5,
        draft_model: str | Path | None = None,
        kv_cache_mb: int | None = None,
        kv_cache_type: str | None = None,
        lora: str | Path | None = None,
        on_progress: Any = None,
    ) -> LLM:
        """Load a model by path or name (catalog models are pulled on first use), or an opened Checkpoint, onto `device`.
        num_ctx defaults to min(2048, the model's context length). speculative="ngram" turns on prompt-lookup
        speculative decoding; draft_model (a path or name of a smaller model with the same vocabulary)
        turns on draft-model speculative decoding. kv_cache_mb sizes the paged KV pool (default: room for
        max_seqs full contexts, on the CPU at most a quarter of the RAM available at load); kv_cache_type
        ("f32", "f16", default auto: f16 where the CPU rounds activations to int8) is its element type. lora (a PEFT
        adapter directory or a llama.cpp GGUF adapter) is loaded as "default" and applied to every call that
        names no other adapter, like llama.cpp's --lora. on_progress(done, total) follows the weights' load."""
        from blazr.backends import get_backend
        from blazr.loaders import open_model
        from blazr.models import build_model, model_task, wrong_task
        from blazr.tokenizer import load_tokenizer

        checkpoint = open_model(model)
        task = model_task(checkpoint.config, checkpoint.gguf_metadata, checkpoint.directory)
        if task != "generate":
            raise UnsupportedError(wrong_task(checkpoint.path, task, "generate"))
        backend = get_backend(device)
        net = build_model(checkpoint, backend, dtype, on_progress=on_progress)
        tokenizer = load_tokenizer(checkpoint)
        num_ctx = num_ctx or min(DEFAULT_NUM_CTX, net.args.max_position_embeddings)
        draft = None
        if draft_model is not None:
            draft = build_model(open_model(draft_model), backend, dtype)
        engine = Engine(
            net,
            tokenizer,
            backend,
            num_ctx=num_ctx,
            max_seqs=max_seqs,
            speculative=speculative,
            num_speculative_tokens=num_speculative_tokens,
            draft_model=draft,
            kv_cache_bytes=kv_cache_mb * 2**20 if kv_cache_mb else None,
            kv_cache_type=kv_cache_type,
        )
        llm = cls(checkpoint, tokenizer, net, backend, engine, chat_template)
        if lora is not None:
            llm.load_lora("default", lora)
            llm.default_adapter = "default"
        return llm

    def load_lora(self, name: str, path: str | Path) -> None:
        """Load a LoRA adapter (PEFT directory or GGUF) as `name`: calls pick it with lora_adapter=name."""
        from blazr.loaders.lora import read_lora

        args = self.model.args
        heads = {"q_proj": args.num_attention_heads, "k_proj": args.num_key_value_heads}
        self.engine.loras.load(name, read_lora(path, heads))

    # ---- text ----------------------------------------------------------------------------------------------

    def generate(self, prompt: str | list[int], **sampling: Any) -> str:
        """The completion of a prompt (text, or token ids used as they are). Keyword arguments are
        SamplingParams fields: max_tokens, temperature, top_p, top_k, seed, stop, ..."""
        return "".join(self.stream(prompt, **sampling))

    def stream(self, prompt: str | list[int], **sampling: Any) -> Iterator[str]:
        """The completion as text pieces, yielded as they are decoded; stopping early aborts the request."""
        params = self._params(sampling)
        ids = self.tokenize(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        return self._run(ids, params)

    def chat(
        self,
        messages: list[dict[str, Any]],
        stream: bool = False,
        tools: list[dict[str, Any]] | None = None,
        **sampling,
    ) -> str | Iterator[str]:
        """The assistant's reply to a conversation ([{"role": ..., "content": ...}, ...]), rendered with the
        model's chat template (or the `chat_template` given to load). stream=True yields text pieces."""
        params = self._params(sampling)
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tools=tools, template=self.chat_template
        )
        ids = self.tokenizer.encode(
            text, add_special_tokens=True
        )  # BOS only when the template did not add it
        pieces = self._run(ids, params)
        return pieces if stream else "".join(pieces)

    def tokenize(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def warm_up(self) -> None:
        """Run each kernel path once (long and short prompts, one and several sequences decoding), so that
        the first request finds its kernels compiled (blazr.engine.warm_up)."""
        warm_engine(self.engine, self.tokenize(FILLER_TEXT, add_special_tokens=False))

    def detokenize(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    # ---- the loop ------------------------------------------------------------------------------------------

    def _params(self, sampling: dict[str, Any]) -> SamplingParams:
        if self.default_adapter is not None:
            sampling = {"lora_adapter": self.default_adapter} | sampling
        return SamplingParams.from_kwargs(**sampling)

    def _run(self, prompt_ids: list[int], params: SamplingParams) -> Iterator[str]:
        """Add the request now (so errors raise at the call), then step the engine as the caller iterates."""
        if self._active is not None:
            self.engine.abort(self._active)  # a stream the caller dropped without reading to the end
        request_id = uuid.uuid4().hex
        self.engine.add_request(request_id, prompt_ids, params)
        self._active = request_id
        self.last_stats = GenerationStats(prompt_tokens=len(prompt_ids))
        return self._drive(request_id, self.last_stats)

    def _drive(self, request_id: str, stats: GenerationStats) -> Iterator[str]:
        start, first, done = time.perf_counter(), None, False
        try:
            while not done:
                for out in self.engine.step():
                    if out.request_id != request_id:
                        continue  # e.g. the abort report of an earlier, dropped stream
                    now = time.perf_counter()
                    first = first if first is not None else now
                    stats.prefill_seconds, stats.decode_seconds = first - start, now - first
                    stats.completion_tokens = out.completion_tokens
                    stats.finish_reason = out.finish_reason.value if out.finish_reason else None
                    done = out.finished
                    if out.text:
                        yield out.text
        finally:
            if not done:
                self.engine.abort(request_id)
            if self._active == request_id:
                self._active = None

    def __repr__(self) -> str:
        return f"LLM({self.checkpoint.path}, device={self.backend.name}, num_ctx={self.engine.num_ctx})"
