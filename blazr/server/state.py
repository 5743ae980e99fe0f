"""Server state: the loaded models (lazy load, LRU eviction, keep_alive) and request admission.

Model names from requests are looked up only inside the model directory; the served default model may be
any path the operator gave on the command line."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from quart import current_app

from blazr.config import Settings
from blazr.engine.async_engine import AsyncEngine
from blazr.errors import BlazrError
from blazr.model_dir import ModelEntry, find_in_model_dir, list_models, resolve_model
from blazr.modelfile import SUFFIX as MODELFILE_SUFFIX
from blazr.server.errors import ApiError, api_error_from_blazr
from blazr.server.lora_adapters import ServedAdapters
from blazr.server.metrics import Metrics
from blazr.server.model_loading import load_for_serving  # noqa: F401 (the default loader; tests import it here)

log = logging.getLogger("blazr.server")
RETRY_AFTER_LOADING = "5"  # seconds a client should wait while a model loads
OPENAI_ASR_ALIAS = "whisper-1"  # the model OpenAI clients send for transcriptions: the default ASR model
OPENAI_TTS_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # what they send for speech: the default voice


@dataclass
class LoadedModel:
    """A model in memory with its engine thread. `active` counts requests using it (never evicted then)."""

    name: str
    llm: Any  # blazr.api.LLM, an Embedder (encoder), a Transcriber (Whisper) or a Synthesizer (a voice)
    engine: Any  # AsyncEngine, an EmbedWorker, a TranscribeWorker or a SpeakWorker
    path: Path
    loaded_at: float
    expires_at: float | None
    size_bytes: int
    manager: ModelManager | None = field(default=None, repr=False)
    active: int = 0
    keep_alive: float = -1.0  # idle seconds before unloading; negative: never
    last_used: float = field(default_factory=time.monotonic)

    @property
    def task(self) -> str:
        """ "generate" (a causal LM), "embed" (a sentence embedder), "rerank" (a cross-encoder), "transcribe"
        (Whisper) or "speak" (a text-to-speech voice)."""
        return self.llm.task

    @property
    def num_ctx(self) -> int:
        return self.llm.engine.num_ctx if self.task == "generate" else self.llm.max_seq_length

    @property
    def vocab_size(self) -> int:
        return self.llm.engine.vocab_size if self.task == "generate" else self.llm.vocab_size

    def require(self, *tasks: str, route: str) -> None:
        """400 unless the model does one of `tasks`: an embedding model asked to chat, and so on."""
        if self.task not in tasks:
            kind = {
                "generate": "a text generation",
                "embed": "an embedding",
                "rerank": "a reranker",
                "transcribe": "a speech recognition",
                "speak": "a text-to-speech",
            }[self.task]
            serves = {
                "generate": "chat, completions and embeddings",
                "embed": "/v1/embeddings, /api/embed and /v1/rerank",
                "rerank": "/v1/rerank",
                "transcribe": "/v1/audio/transcriptions and /v1/audio/translations",
                "speak": "/v1/audio/speech and /v1/audio/voices",
            }[self.task]
            raise ApiError(
                400, f"model '{self.name}' is {kind} model: it serves {serves}, not {route}", param="model"
            )


class Admission:
    """Bounds admitted generation requests (running + queued) and, optionally, their token budget."""

    def __init__(self, max_running: int, max_queued: int, max_tokens: int, metrics: Metrics):
        self.limit = max_running + max_queued
        self.max_running = max_running
        self.max_tokens = max_tokens  # 0: unlimited
        self.in_flight = 0
        self.tokens = 0
        self.metrics = metrics

    def admit(self, tokens: int) -> None:
        """Count a request in, or raise 429 (queue full) / 503 (token budget) with Retry-After."""
        if self.in_flight >= self.limit:
            raise ApiError(
                429,
                f"the server queue is full ({self.in_flight} requests in flight, limit {self.limit}); retry",
                type="rate_limit_error",
                code="queue_full",
                headers={"Retry-After": "1"},
            )
        if self.max_tokens and self.tokens + tokens > self.max_tokens and self.in_flight:
            raise ApiError(
                503,
                f"server overloaded: the in-flight token budget ({self.max_tokens}) is spent; retry shortly",
                type="overloaded_error",
                code="server_overloaded",
                headers={"Retry-After": "5"},
            )
        self.in_flight += 1
        self.tokens += tokens
        self._report()

    def release(self, tokens: int) -> None:
        self.in_flight -= 1
        self.tokens -= tokens
        self._report()

    def _report(self) -> None:
        self.metrics.queue_depth.set(max(0, self.in_flight - self.max_running))


def warm_up(llm: Any) -> None:
    """Pay first-run costs (numba compiling each kernel path, page faults) before the first request: a
    generation model runs long and short prompts and a batch of decodes, an encoder a short and a long text
    (LLM.warm_up, Embedder.warm_up). Run on the engine's own thread: numba's OpenMP pool serves later steps
    ~20% slower when its parallel regions were first opened from another thread (measured on SmolLM2 Q4_1
    decode)."""
    if llm.task in ("transcribe", "speak"):
        return  # one window is seconds on a large Whisper; loading it already read and checked each weight
    llm.warm_up()


def start_runner(llm: Any) -> Any:
    """The thread that runs a loaded model's work: the engine's step loop, an encoder's EmbedWorker, a
    Whisper model's TranscribeWorker or a voice's SpeakWorker; a swarm's model brings its own (its replicas)."""
    own_runner = getattr(llm, "start_runner", None)
    if own_runner is not None:
        return own_runner()
    if llm.task == "generate":
        return AsyncEngine(llm.engine)
    if llm.task == "speak":
        from blazr.server.speak_worker import SpeakWorker

        return SpeakWorker(llm)
    if llm.task == "transcribe":
        from blazr.server.transcribe_worker import TranscribeWorker

        return TranscribeWorker(llm)
    from blazr.server.embed_worker import EmbedWorker

    return EmbedWorker(llm)


class ModelManager:
    """Loaded models by resolved path, least recently used first."""

    def __init__(
        self,
        settings: Settings,
        model_dir: Path,
        default_model: str | None,
        metrics: Metrics,
        loader: Any = load_for_serving,
        asr_models: dict[str, Path] | None = None,
        tts_models: dict[str, Path] | None = None,
        loras: dict[str, Path] | None = None,
    ):
        self.settings = settings
        self.model_dir = Path(model_dir)
        self.default_model = default_model  # as the operator gave it: a path, a name or a catalog name
        self.default_path: Path | None = None
        self.default_error: ApiError | None = None  # why the default model could not be loaded
        self.metrics = metrics
        self.loader = loader  # (path, settings) -> LLM; runs in a worker thread
        server = settings.server
        self.max_loaded = server.max_loaded_models
        # `serve --asr-model/--tts-model NAME=PATH`: Whisper models and voices served under NAME (any path)
        self.asr_models = {name: Path(path) for name, path in (asr_models or {}).items()}
        self.tts_models = {name: Path(path) for name, path in (tts_models or {}).items()}
        speech = len(self.asr_models) + len(self.tts_models)
        if speech and settings.source_of("server.max_loaded_models") == "default":
            # registered speech models stay loaded beside the default model unless the operator set a limit:
            # else each chat request after a transcription would reload the LLM, and the other way round
            self.max_loaded = max(self.max_loaded, 1 + speech)
        self.admission = Admission(
            server.max_concurrent_requests, server.max_queued_requests, server.max_inflight_tokens, metrics
        )
        self.ready = default_model is None
        self.closed = False
        self._loaded: dict[str, LoadedModel] = {}
        self._loading: dict[str, asyncio.Future] = {}
        self.loras = ServedAdapters(self.model_dir)  # LoRA adapters per model, bound while it is loaded
        self.default_loras = dict(loras or {})  # serve --lora NAME=PATH: the default model's adapters

    # ---- lookup ------------------------------------------------------------------------------------------

    async def get(self, name: str | None, keep_alive: float | None = None) -> LoadedModel:
        """The model named `name` (None or "": the default), loading it on first use."""
        if self.closed:
            raise ApiError(503, "the server is shutting down", headers={"Retry-After": "5"})
        path, served = self.resolve(name)
        key = str(path.resolve())
        model = self._loaded.get(key)
        if model is None:
            task = self._loading.get(key)
            if task is None:
                task = asyncio.ensure_future(self._load(key, path, served))
                self._loading[key] = task
                task.add_done_callback(lambda _: self._loading.pop(key, None))
            model = await asyncio.shield(task)  # a client that leaves does not cancel a shared load
        self._touch(key, model, keep_alive, is_default=path == self.default_path)
        return model

    async def get_adapted(
        self, name: str | None, keep_alive: float | None = None
    ) -> tuple[LoadedModel, str | None]:
        """As get(), but a name that is no model may be "base:adapter" or an adapter of the default model:
        then (the base model, the adapter's name)."""
        try:
            return await self.get(name, keep_alive), None
        except ApiError as error:
            split = self.loras.split(name, self) if error.status == 404 else None
            if split is None:
                raise
            return await self.get(split[0], keep_alive), split[1]

    def loaded_at_path(self, path: Path) -> LoadedModel | None:
        """The loaded model read from `path`, if any."""
        return self._loaded.get(str(Path(path).resolve()))

    def resolve(self, name: str | None) -> tuple[Path, str]:
        """(weights path, served name) for a request's model name."""
        for registered in (self.asr_models, self.tts_models):
            if name and name in registered:
                return registered[name], name
        if name in (OPENAI_ASR_ALIAS, *OPENAI_TTS_ALIASES) and name not in (
            self.default_model,
            self.default_name(),
        ):
            return self._default_speech(name)
        if not name or name in (self.default_model, self.default_name()):
            return self._default()
        if (
            PurePath(name).is_absolute()
            or name.startswith("~")
            or ".." in PurePath(name).parts
            or "\\" in name
        ):
            raise ApiError(
                400,
                f"model name {name!r} is not allowed: names are looked up inside the model directory "
                "(no absolute paths, '..', '~' or backslashes)",
                param="model",
            )
        bare = name.removesuffix(":latest")  # Ollama clients add the default tag
        path = find_in_model_dir(bare, self.model_dir)
        if path is None:
            path = self._catalog_file(bare)
        if path is None:
            raise ApiError(404, f"model '{name}' not found", param="model", code="model_not_found")
        if self.default_path is not None and path.resolve() == self.default_path.resolve():
            return self._default()
        return path, str(path.relative_to(self.model_dir)).removesuffix(
            MODELFILE_SUFFIX
        )  # a derived model: its name

    def _default_speech(self, alias: str) -> tuple[Path, str]:
        """What OpenAI clients' "whisper-1" ("tts-1", ...) means here: the first --asr-model (--tts-model),
        else the catalog's Whisper (voice) when `blazr pull` put it in the model directory."""
        from blazr.loaders.registry import DEFAULT_ASR_MODEL, DEFAULT_TTS_MODEL

        asr = alias == OPENAI_ASR_ALIAS
        registered, catalog = (
            (self.asr_models, DEFAULT_ASR_MODEL) if asr else (self.tts_models, DEFAULT_TTS_MODEL)
        )
        if registered:
            name = next(iter(registered))
            return registered[name], name
        path = find_in_model_dir(catalog, self.model_dir) or self._catalog_file(catalog)
        if path is None:
            kind, flag = ("speech", "--asr-model") if asr else ("text-to-speech", "--tts-model")
            raise ApiError(
                404,
                f"model '{alias}' not found: this server has no {kind} model. Start it with "
                f"`{flag} NAME=PATH`, or `blazr pull {catalog}` into its model directory",
                param="model",
                code="model_not_found",
            )
        return path, catalog

    def _catalog_file(self, name: str) -> Path | None:
        """A catalog name whose file `blazr pull` already put in the model directory (never fetched here)."""
        from blazr.loaders import registry

        entry = registry.lookup(name)
        if entry is None or not registry.is_fetched(entry, self.model_dir):
            return None
        return self.model_dir / entry.filename

    def _default(self) -> tuple[Path, str]:
        if self.default_error is not None:
            raise self.default_error
        if not self.ready:
            raise ApiError(
                503,
                f"the model {self.default_model!r} is still loading; retry shortly",
                type="unavailable_error",
                code="model_loading",
                headers={"Retry-After": RETRY_AFTER_LOADING},
            )
        if self.default_path is None:
            raise ApiError(
                400, "no 'model' was given and the server has no default model; name one", param="model"
            )
        return self.default_path, self.default_name() or self.default_path.name

    def default_name(self) -> str | None:
        """The id the default model is served under: its name in the model directory, else its file name."""
        if self.default_path is None:
            return None
        try:
            return str(self.default_path.resolve().relative_to(self.model_dir.resolve())).removesuffix(
                MODELFILE_SUFFIX
            )
        except ValueError:
            return self.default_path.name

    def _touch(self, key: str, model: LoadedModel, keep_alive: float | None, is_default: bool) -> None:
        """Mark `model` most recently used and set when it may unload."""
        self._loaded[key] = self._loaded.pop(key)  # move to the end: most recently used
        model.last_used = time.monotonic()
        if keep_alive is None:
            keep_alive = -1.0 if is_default else self.settings.server.keep_alive_secs
        model.keep_alive = keep_alive
        model.expires_at = None if keep_alive < 0 else time.time() + keep_alive

    # ---- loading and unloading ---------------------------------------------------------------------------

    async def preload(self) -> None:
        """Load the default model (the server answers 503 meanwhile); a failure is kept and reported."""
        try:
            self.default_path = await asyncio.to_thread(
                resolve_model, self.default_model, True, self.model_dir, True
            )
            key = str(self.default_path.resolve())
            for name, adapter_path in self.default_loras.items():
                self.loras.register(self.default_path, name, adapter_path)
            model = await self._load(key, self.default_path, self.default_name())
            self._touch(key, model, None, is_default=True)
        except ApiError as error:
            self.default_error = error
        except BlazrError as error:
            self.default_error = api_error_from_blazr(error)
        finally:
            self.ready = True
        if self.default_error is not None:
            log.error("cannot load the default model %r: %s", self.default_model, self.default_error.message)

    def _load_settings(self, path: Path) -> Settings:
        """The settings a model loads with: inference.task (serving a causal LM as a yes/no reranker) names what
        the default model is, so any other model a request names loads as its own checkpoint says."""
        is_default = self.default_path is not None and path.resolve() == self.default_path.resolve()
        if is_default or self.settings.inference.task is None:
            return self.settings
        inference = dataclasses.replace(self.settings.inference, task=None)
        return dataclasses.replace(self.settings, inference=inference)

    async def _load(self, key: str, path: Path, name: str) -> LoadedModel:
        start = time.monotonic()
        log.info("loading model %s from %s", name, path)
        engine = None
        try:
            llm = await asyncio.to_thread(self.loader, path, self._load_settings(path))
            engine = start_runner(llm)
            await engine.run(lambda: warm_up(llm))  # a model whose forward pass fails is refused here
        except Exception as error:  # a broken file can fail deep in a parser: report it, keep serving
            if engine is not None:
                await asyncio.to_thread(engine.shutdown)
            if isinstance(error, BlazrError):
                raise api_error_from_blazr(error) from None
            log.exception("loading model %s failed", name)
            raise ApiError(
                500,
                f"model '{name}' could not be loaded: {type(error).__name__}: {error}",
                type="server_error",
            ) from None
        model = LoadedModel(
            name=name,
            llm=llm,
            engine=engine,
            path=path,
            loaded_at=time.time(),
            expires_at=None,
            size_bytes=_size_on_disk(path),
            manager=self,
        )
        try:
            await self.loras.bind_all(model)  # the adapters it served before an eviction, or serve --lora's
        except ApiError:
            await asyncio.to_thread(engine.shutdown)
            raise
        self._loaded[key] = model
        self.metrics.model_loads_total.inc()
        log.info("loaded model %s in %.2f s", name, time.monotonic() - start)
        await self._evict_over_limit(keep=model)
        return model

    async def _evict_over_limit(self, keep: LoadedModel | None = None) -> None:
        """Unload least recently used idle models while more than max_loaded are in memory."""
        while len(self._loaded) > self.max_loaded:
            idle = [m for m in self._loaded.values() if m.active == 0 and m is not keep]
            if not idle:
                break  # every model is busy: unload one when its requests finish (release)
            await self._unload(idle[0])
            self.metrics.model_evictions_total.inc()
        self.metrics.loaded_models.set(len(self._loaded))

    async def _unload(self, model: LoadedModel) -> None:
        self._loaded = {k: m for k, m in self._loaded.items() if m is not model}
        self.metrics.loaded_models.set(len(self._loaded))
        await asyncio.to_thread(model.engine.shutdown)
        log.info("unloaded model %s", model.name)

    async def release(self, model: LoadedModel) -> None:
        """A request finished with `model`: restart its keep_alive clock and unload what is due."""
        model.active -= 1
        if model.keep_alive >= 0:
            model.expires_at = time.time() + model.keep_alive
        if model.active == 0:
            await self.reap()
        await self._evict_over_limit()

    async def reap(self) -> None:
        """Unload idle models whose keep_alive has run out."""
        now = time.time()
        for model in list(self._loaded.values()):
            if model.active == 0 and model.expires_at is not None and model.expires_at <= now:
                await self._unload(model)

    async def unload(self, name: str) -> bool:
        """Unload a model by served name now (or when its requests finish); False if it is not loaded."""
        for model in list(self._loaded.values()):
            if model.name == name or str(model.path) == name:
                model.keep_alive, model.expires_at = 0.0, time.time()
                if model.active == 0:
                    await self._unload(model)
                return True
        return False

    async def close(self) -> None:
        """Stop every engine thread (server shutdown)."""
        self.closed = True
        for model in list(self._loaded.values()):
            await self._unload(model)

    def loaded(self) -> list[LoadedModel]:
        return list(self._loaded.values())

    def available(self) -> list[ModelEntry]:
        """Models in the model directory (reads headers only)."""
        return list_models(self.model_dir)


def _size_on_disk(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class ServerState:
    """Everything a request handler needs, stored on the app as app.extensions["blazr"]."""

    def __init__(self, settings: Settings, models: ModelManager, metrics: Metrics, api_keys: list[str]):
        self.settings = settings
        self.models = models
        self.metrics = metrics
        self.api_keys = api_keys
        self.started_at = time.time()
        self.shutting_down = False
        self.app: Any = None  # the Quart app (live_config updates its body limit and timeout)

    @property
    def ready(self) -> bool:
        """False while the default model loads at startup."""
        return self.models.ready and self.models.default_error is None


def current_state() -> ServerState:
    """The state of the app handling the current request."""
    return current_app.extensions["blazr"]
