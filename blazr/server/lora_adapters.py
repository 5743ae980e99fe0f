"""LoRA adapters served on the server's models: which adapter files each model has, bound while it is loaded.

The store remembers adapters by model (its resolved path), so a model evicted and loaded again gets them back;
`serve --lora NAME=PATH` registers them for the default model before it loads. A request picks one with
`lora_adapter` or with `model: "base:adapter"` (vLLM's served adapter names; an adapter name alone means the
default model's). Adapters added over HTTP (POST /v1/lora) are read from inside the model directory only, as
model names are: a client cannot make the server open arbitrary files.
"""

from __future__ import annotations

import asyncio
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from blazr.engine.lora_registry import check_adapter_name
from blazr.errors import BlazrError, LoraLoadError, LoraNotFoundError
from blazr.loaders.lora import read_lora
from blazr.server.errors import ApiError, api_error_from_blazr

if TYPE_CHECKING:
    from blazr.server.state import LoadedModel, ModelManager


def model_key(path: Path) -> str:
    return str(Path(path).resolve())


class ServedAdapters:
    def __init__(self, model_dir: Path):
        self.model_dir = Path(model_dir)
        self._paths: dict[str, dict[str, Path]] = {}  # model key -> adapter name -> file or directory

    def register(self, model_path: Path, name: str, path: Path) -> None:
        """Serve adapter `name` from `path` on the model at `model_path` (bound when that model loads)."""
        check_adapter_name(name)
        self._paths.setdefault(model_key(model_path), {})[name] = Path(path).expanduser()

    def names(self, model_path: Path) -> list[str]:
        return sorted(self._paths.get(model_key(model_path), {}))

    def listing(self, model_path: Path, loaded: LoadedModel | None) -> list[dict[str, Any]]:
        """GET /v1/lora: each adapter's name and path, with format and rank once its model has bound it."""
        bound = {a.name: a.info() for a in _registry(loaded).adapters()} if _takes_adapters(loaded) else {}
        paths = self._paths.get(model_key(model_path), {})
        return [bound.get(name, {"name": name, "path": str(paths[name])}) for name in sorted(paths)]

    def split(self, name: str | None, manager: ModelManager) -> tuple[str | None, str] | None:
        """(base model name, adapter) when `name` is "base:adapter" or an adapter of the default model."""
        if not name:
            return None
        base, colon, adapter = name.rpartition(":")
        candidates = [(base, adapter)] if colon and base else []
        candidates.append((None, name))
        for model_name, adapter_name in candidates:
            try:
                path, _ = manager.resolve(model_name)
            except ApiError:
                continue
            if adapter_name in self.names(path):
                return model_name, adapter_name
        return None

    async def bind_all(self, model: LoadedModel) -> None:
        """Bind every adapter registered for a model that has just loaded."""
        for name in self.names(model.path):
            await self._bind(model, name, self._paths[model_key(model.path)][name])

    async def add(self, model: LoadedModel, name: str, raw_path: str) -> dict[str, Any]:
        """POST /v1/lora: read `raw_path` (inside the model directory), bind it as `name`, remember it."""
        path = self._inside_model_dir(raw_path)
        info = await self._bind(model, name, path)
        self._paths.setdefault(model_key(model.path), {})[name] = path
        return info

    async def remove(self, model_path: Path, loaded: LoadedModel | None, name: str) -> None:
        """DELETE /v1/lora/{name}: forget it, and unbind it if its model is loaded; 404 unless it is served."""
        if name not in self.names(model_path):
            raise api_error_from_blazr(
                LoraNotFoundError(f"LoRA adapter {name!r} is not loaded on this model")
            )
        if _takes_adapters(loaded):
            registry = _registry(loaded)
            await loaded.engine.run(lambda: registry.unload(name) if name in registry.names() else None)
        del self._paths[model_key(model_path)][name]

    async def _bind(self, model: LoadedModel, name: str, path: Path) -> dict[str, Any]:
        try:
            check_adapter_name(name)
            if not _takes_adapters(model):
                raise LoraLoadError(
                    f"model '{model.name}' is not a text generation model: it takes no LoRA adapters"
                )
            args = model.llm.engine.model.args
            heads = {"q_proj": args.num_attention_heads, "k_proj": args.num_key_value_heads}
            lora = await asyncio.to_thread(read_lora, path, heads)
            registry = _registry(model)
            adapter = await model.engine.run(lambda: registry.load(name, lora))  # between engine steps
        except BlazrError as error:
            raise api_error_from_blazr(error) from None
        return adapter.info()

    def _inside_model_dir(self, raw: str) -> Path:
        parts = PurePath(raw).parts
        if not raw or raw.startswith("~") or ".." in parts or "\\" in raw:
            raise ApiError(
                400,
                f"adapter path {raw!r} is not allowed: adapters are read from inside the model directory "
                "(a path relative to it; no '..', '~' or backslashes)",
                param="path",
            )
        path = (self.model_dir / raw).resolve()
        if not path.is_relative_to(self.model_dir.resolve()):
            raise ApiError(400, f"adapter path {raw!r} is outside the model directory", param="path")
        return path


def _takes_adapters(model: LoadedModel | None) -> bool:
    return (
        model is not None
        and model.task == "generate"
        and hasattr(model.llm, "engine")
        and _registry(model).supported
    )


def _registry(model: LoadedModel):
    return model.llm.engine.loras
