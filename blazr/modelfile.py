"""Ollama Modelfiles: a derived model is a base model plus a default system prompt and sampling parameters.

`blazr create NAME -f Modelfile` and Ollama's POST /api/create write `<model dir>/<NAME>.modelfile` (the
normalised Modelfile); the model directory then knows NAME like any other model. Loading it loads FROM's model
(with PARAMETER num_ctx as its context when given) and carries the rest: SYSTEM is the system message a chat
gets when it sends none, each PARAMETER a default the request's own fields override.

Read: FROM (a model name in the model directory or the catalog), SYSTEM, PARAMETER (Ollama's names below),
TEMPLATE (an Ollama Go template, blazr/tokenizer/ollama_template.py: it replaces the base model's chat
template on every route), MESSAGE (system/user/assistant turns that open every conversation, as Ollama puts
them before the request's), ADAPTER (one LoRA adapter: a PEFT directory or a GGUF adapter, applied to every
request as lora_adapter "modelfile"; stored as an absolute path), LICENSE (kept), comments (#). Any other
instruction is refused by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blazr.errors import ConfigError, TemplateError

SUFFIX = ".modelfile"
ADAPTER_NAME = "modelfile"  # the name a derived model's ADAPTER is loaded under on its engine
# Ollama's PARAMETER names -> the request field each sets (protocol.sampling_params' names); num_ctx loads
PARAMETERS = {
    "num_predict": "max_tokens",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "seed": "seed",
    "stop": "stop",
    "repeat_penalty": "repeat_penalty",
    "repeat_last_n": "repeat_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "typical_p": "typical_p",
    "mirostat": "mirostat",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
}
INTEGERS = {"num_predict", "top_k", "seed", "repeat_last_n", "mirostat", "num_ctx"}
MESSAGE_ROLES = ("system", "user", "assistant")


@dataclass
class Modelfile:
    base: str  # FROM
    system: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)  # Ollama name -> value (stop: a list)
    license: str | None = None
    adapter: str | None = None  # ADAPTER: a LoRA adapter's path
    template: str | None = None  # TEMPLATE: an Ollama Go template's source
    messages: list[dict[str, str]] = field(default_factory=list)  # MESSAGE lines: {"role", "content"}

    def __post_init__(self) -> None:
        if self.template is not None:
            check_template(self.template)
        for message in self.messages:
            check_message(message.get("role"), message.get("content"))

    @property
    def num_ctx(self) -> int | None:
        return self.parameters.get("num_ctx")

    def request_defaults(self) -> dict[str, Any]:
        """The PARAMETERs as request fields (num_ctx is the model's, not a request's), and the ADAPTER."""
        out = {PARAMETERS[k]: v for k, v in self.parameters.items() if k in PARAMETERS}
        return out | ({"lora_adapter": ADAPTER_NAME} if self.adapter is not None else {})

    def render(self) -> str:
        """The normalised Modelfile text (what is stored)."""
        lines = [f"FROM {self.base}"] + ([f"ADAPTER {self.adapter}"] if self.adapter is not None else [])
        for name, value in self.parameters.items():
            for item in value if isinstance(value, list) else [value]:
                lines.append(f"PARAMETER {name} {_quote(item) if isinstance(item, str) else item}")
        if self.template is not None:
            lines.append(f'TEMPLATE """{self.template}"""')
        if self.system is not None:
            lines.append(f'SYSTEM """{self.system}"""')
        for message in self.messages:
            lines.append(f'MESSAGE {message["role"]} """{message["content"]}"""')
        if self.license is not None:
            lines.append(f'LICENSE """{self.license}"""')
        return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_INSTRUCTION = re.compile(r"^\s*([A-Za-z]+)\s*(.*)$", re.S)


def parse(text: str) -> Modelfile:
    """A Modelfile's text -> Modelfile; ConfigError naming the line for anything it cannot take."""
    base, system, license_text, adapter, template, parameters = None, None, None, None, None, {}
    messages: list[dict[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _INSTRUCTION.match(line)
        if match is None:
            raise ConfigError(f"Modelfile line {number}: {line.strip()!r} is not an instruction")
        word, rest = match.group(1).upper(), match.group(2).lstrip()
        role = None
        if word == "MESSAGE":
            role, _, rest = rest.partition(" ")
            role, rest = role.strip().lower(), rest.lstrip()
        if rest.startswith('"""'):  # a triple-quoted value may span lines
            body = rest[3:]
            while '"""' not in body and i < len(lines):
                body += "\n" + lines[i]
                i += 1
            if '"""' not in body:
                raise ConfigError(f'Modelfile line {number}: {word}\'s """ is never closed')
            value = rest = body[: body.index('"""')]  # as written, spaces and newlines included
        else:
            rest = rest.rstrip()
            value = _unquote(rest)
        if word == "FROM":
            base = rest
        elif word == "SYSTEM":
            system = value
        elif word == "LICENSE":
            license_text = value
        elif word == "ADAPTER":
            if adapter is not None:
                raise ConfigError(f"Modelfile line {number}: a second ADAPTER; a derived model takes one")
            adapter = value
            if not adapter:
                raise ConfigError(f"Modelfile line {number}: ADAPTER has no path")
        elif word == "TEMPLATE":
            template = value
            try:
                check_template(template)
            except ConfigError as error:
                raise ConfigError(f"Modelfile line {number}: TEMPLATE: {error}") from None
        elif word == "MESSAGE":
            try:
                messages.append(check_message(role, value))
            except ConfigError as error:
                raise ConfigError(f"Modelfile line {number}: {error}") from None
        elif word == "PARAMETER":
            name, value = _parameter(rest, number)
            if name == "stop":
                parameters.setdefault("stop", []).append(value)
            else:
                parameters[name] = value
        else:
            raise ConfigError(f"Modelfile line {number}: unknown instruction {word!r}")
    if not base:
        raise ConfigError("Modelfile: FROM is missing (the model this one is made from)")
    return Modelfile(base, system, parameters, license_text, adapter, template, messages)


def check_template(source: Any) -> str:
    """An Ollama template's source, parsed to find its errors now; ConfigError naming what is wrong."""
    from blazr.tokenizer.ollama_template import cached_template  # the Go template engine loads on demand

    if not isinstance(source, str):
        raise ConfigError("the template must be a string")
    if '"""' in source:
        raise ConfigError('a template cannot hold """ (the Modelfile could not quote it)')
    try:
        cached_template(source)
    except TemplateError as error:
        raise ConfigError(str(error)) from None
    return source


def check_message(role: Any, content: Any) -> dict[str, str]:
    if role not in MESSAGE_ROLES:
        raise ConfigError(f"MESSAGE role {role!r} is not one of {', '.join(MESSAGE_ROLES)}")
    if not isinstance(content, str) or '"""' in content:
        raise ConfigError(f'MESSAGE {role}: the text must be a string without """')
    return {"role": role, "content": content}


def _unquote(text: str) -> str:
    """A one-line value's text: "quoted" with escapes, or as written."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
    return text


def _parameter(rest: str, number: int) -> tuple[str, Any]:
    name, _, raw = rest.partition(" ")
    name, raw = name.strip().lower(), raw.strip()
    if name not in PARAMETERS and name != "num_ctx":
        known = ", ".join(sorted([*PARAMETERS, "num_ctx"]))
        raise ConfigError(f"Modelfile line {number}: PARAMETER {name!r} is not one blazr reads ({known})")
    if not raw:
        raise ConfigError(f"Modelfile line {number}: PARAMETER {name} has no value")
    if name == "stop":
        return name, _unquote(raw)
    try:
        return name, int(raw) if name in INTEGERS else float(raw)
    except ValueError:
        kind = "an integer" if name in INTEGERS else "a number"
        raise ConfigError(f"Modelfile line {number}: PARAMETER {name} must be {kind}, got {raw!r}") from None


def parameter_value(name: str, value: Any) -> Any:
    """A PARAMETER given as JSON (/api/create's "parameters"): its checked value; ConfigError naming it."""
    if name not in PARAMETERS and name != "num_ctx":
        raise ConfigError(
            f"parameter {name!r} is not one blazr reads ({', '.join(sorted([*PARAMETERS, 'num_ctx']))})"
        )
    if name == "stop":
        items = value if isinstance(value, list) else [value]
        if any(not isinstance(item, str) or not item for item in items):
            raise ConfigError("parameter 'stop' must be a string or a list of non-empty strings")
        return list(items)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"parameter {name!r} must be a number, got {value!r}")
    if name in INTEGERS and value != int(value):
        raise ConfigError(f"parameter {name!r} must be an integer, got {value!r}")
    return int(value) if name in INTEGERS else float(value)


def read(path: Path) -> Modelfile:
    try:
        return parse(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"{path}: cannot read it ({error.strerror})") from None


# ---- what a loaded derived model changes in a request (the server's routes) -----------------------------


def defaults_of(llm: Any) -> dict[str, Any]:
    """A loaded model's Modelfile PARAMETERs as request fields ({} for a plain model); the request's own win."""
    spec = getattr(llm, "modelfile", None)
    return spec.request_defaults() if spec is not None else {}


def with_system(llm: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages after the Modelfile's MESSAGE turns, with its SYSTEM first unless the conversation brings
    its own system message (Ollama's order: system, the Modelfile's messages, the request's)."""
    spec = getattr(llm, "modelfile", None)
    if spec is None:
        return messages
    out = [dict(m) for m in spec.messages] + messages
    if spec.system is None or any(m.get("role") in ("system", "developer") for m in messages):
        return out
    return [{"role": "system", "content": spec.system}, *out]


def template_of(llm: Any) -> str | None:
    """A derived model's TEMPLATE source (None: the base model's own chat template applies)."""
    spec = getattr(llm, "modelfile", None)
    return spec.template if spec is not None else None
