"""The LoRA adapters loaded on one engine's model, by name.

Loading binds an adapter's arrays into the model's layers (blazr.models.lora); requests then pick it by name
(SamplingParams.lora_adapter) and hold the bound adapter until they end. Unloading removes the name at once (new
requests get LoraNotFoundError) but keeps the arrays until the last sequence using it has finished, so a
running stream is never switched to the base weights midway. Driven from the engine's thread only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from blazr.errors import ConfigError, LoraLoadError, LoraNotFoundError
from blazr.loaders.lora import LoraFile
from blazr.models.lora import LoraAdapter, bind_adapter, unbind_adapter

# a name that can follow the base model's in `model: "base:adapter"` and sit in a URL path
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_adapter_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"LoRA adapter name {name!r} must be 1 to 64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    return name


class LoraRegistry:
    def __init__(self, model: Any):
        self.model = model
        self._adapters: dict[str, LoraAdapter] = {}
        self._retiring: list[LoraAdapter] = []  # unloaded while sequences still used them

    @property
    def supported(self) -> bool:
        """Whether the model's forward applies adapters (decoder LMs do)."""
        return hasattr(self.model, "lora_state")

    def names(self) -> list[str]:
        return sorted(self._adapters)

    def adapters(self) -> list[LoraAdapter]:
        return [self._adapters[n] for n in self.names()]

    def get(self, name: str) -> LoraAdapter:
        adapter = self._adapters.get(name)
        if adapter is None:
            known = ", ".join(self.names()) or "none are loaded"
            raise LoraNotFoundError(f"LoRA adapter {name!r} is not loaded on this model ({known})")
        return adapter

    def load(self, name: str, lora: LoraFile) -> LoraAdapter:
        """Bind `lora` under `name`, replacing an adapter of that name (whose running sequences keep it)."""
        check_adapter_name(name)
        if not self.supported:
            raise LoraLoadError(f"this model ({type(self.model).__name__}) does not take LoRA adapters")
        adapter = bind_adapter(self.model, name, lora)
        old = self._adapters.pop(name, None)
        if old is not None:
            self._retiring.append(old)
        self._adapters[name] = adapter
        return adapter

    def unload(self, name: str) -> None:
        """Remove `name` (LoraNotFoundError if it is not loaded); its arrays go once no sequence uses it."""
        self._retiring.append(self.get(name))
        del self._adapters[name]

    def sweep(self, in_use: Iterable[LoraAdapter | None]) -> None:
        """Free the arrays of unloaded adapters that no sequence in `in_use` holds any more."""
        if not self._retiring:
            return
        held = {id(a) for a in in_use if a is not None}
        for adapter in [a for a in self._retiring if id(a) not in held]:
            unbind_adapter(self.model, adapter)
            self._retiring.remove(adapter)
