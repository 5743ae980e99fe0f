"""Ollama's native API shapes (wire-formats.md §9): keep_alive and options parsing, model listings
(/api/tags, /api/ps, /api/show) and the NDJSON lines of /api/chat and /api/generate.

Pure functions: routes/ollama.py parses the request, runs generation and hands the pieces here."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from blazr.server.errors import ApiError

NS_PER_SECOND = 1_000_000_000

# Ollama `options` -> the OpenAI/llama.cpp body names protocol.sampling_params reads.
OPTION_NAMES = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "stop": "stop",
    "repeat_penalty": "repeat_penalty",
    "repeat_last_n": "repeat_last_n",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "typical_p": "typical_p",
    "mirostat": "mirostat",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
    "dry_multiplier": "dry_multiplier",
    "dry_base": "dry_base",
    "dry_allowed_length": "dry_allowed_length",
    "dry_penalty_last_n": "dry_penalty_last_n",
    "dry_sequence_breakers": "dry_sequence_breakers",
}
UNLIMITED_PREDICT = 1 << 30  # num_predict <= 0 means "until EOS or the context is full"; clamped later

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


# ---- request parsing -----------------------------------------------------------------------------------


def parse_keep_alive(value: Any) -> float | None:
    """Seconds to keep a model loaded, as ModelManager.get takes it: None (absent) = the server's default,
    -1 (any negative) = forever, 0 = unload when idle. A number of seconds or a Go duration string
    ("5m", "1h30m", "30s", "0", "-1")."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _keep_alive_error(value)
    if isinstance(value, (int, float)):
        return -1.0 if value < 0 else float(value)
    if not isinstance(value, str):
        raise _keep_alive_error(value)
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = _go_duration(text)
    return -1.0 if seconds < 0 else seconds


def _go_duration(text: str) -> float:
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text)
    parts = _DURATION_PART.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise _keep_alive_error(text)
    return sign * sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def _keep_alive_error(value: Any) -> ApiError:
    return ApiError(
        400,
        f'\'keep_alive\' must be a duration such as "5m", "1h", "30s", "0" or "-1", or a number of '
        f"seconds; got {value!r}",
        param="keep_alive",
    )


def sampling_body(body: dict) -> dict:
    """The body protocol.sampling_params reads, built from Ollama's `options` (num_predict -> max_tokens)."""
    options = body.get("options")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ApiError(400, "'options' must be an object", param="options")
    mapped = {ours: options[theirs] for theirs, ours in OPTION_NAMES.items() if theirs in options}
    predict = options.get("num_predict")
    if predict is not None:
        if isinstance(predict, bool) or not isinstance(predict, int):
            raise ApiError(400, f"'options.num_predict' must be an integer, got {predict!r}", param="options")
        mapped["max_tokens"] = predict if predict > 0 else UNLIMITED_PREDICT
    return mapped


def chat_messages(messages: list) -> list[dict]:
    """Ollama chat messages -> the OpenAI-style messages chat templates read. Images are refused (no
    vision encoder); tool-call arguments stay objects, as Ollama sends them."""
    converted = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a 'role' string", param="messages")
        if message.get("images"):
            raise ApiError(
                400, f"messages[{i}].images: this server has no vision model support", param="messages"
            )
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string", param="messages")
        item: dict[str, Any] = {"role": message["role"], "content": content}
        if message.get("tool_calls"):
            item["tool_calls"] = [_template_tool_call(call) for call in message["tool_calls"]]
        if message.get("tool_name"):
            item["name"] = message["tool_name"]
        converted.append(item)
    return converted


def _template_tool_call(call: Any) -> dict:
    function = call.get("function", {}) if isinstance(call, dict) else {}
    return {"type": "function", "function": {"name": function.get("name", ""), **_arguments(function)}}


def _arguments(function: dict) -> dict:
    arguments = function.get("arguments", {})
    return {"arguments": arguments if isinstance(arguments, (dict, str)) else {}}


# ---- listings ------------------------------------------------------------------------------------------


def rfc3339(timestamp: float) -> str:
    """An RFC 3339 UTC time with microseconds, as Ollama writes created_at / modified_at."""
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def parameter_size(count: int) -> str:
    """A parameter count as Ollama shows it: "135.0M", "7.2B"."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f}{unit}"
    return str(count)


def family_of(architecture: str) -> str:
    """Ollama's family name: "LlamaForCausalLM" -> "llama"; a model_type is already one."""
    return architecture.replace("ForCausalLM", "").lower() if architecture else ""


def model_details(entry: Any) -> dict:
    """`details` of a blazr.model_dir.ModelEntry."""
    family = family_of(entry.architecture)
    return {
        "parent_model": "",
        "format": entry.format,
        "family": family,
        "families": [family] if family else None,
        "parameter_size": parameter_size(entry.parameters) if entry.parameters else "",
        "quantization_level": entry.quant,
    }


def tag_entry(entry: Any) -> dict:
    """One /api/tags model. No `digest`: Ollama's is a manifest hash blazr's model directory has no
    equivalent of, and hashing every weight file per listing would be slow."""
    return {
        "name": entry.name,
        "model": entry.name,
        "modified_at": rfc3339(entry.path.stat().st_mtime),
        "size": entry.size_bytes,
        "details": model_details(entry),
    }


def ps_entry(loaded: Any, details: dict, on_gpu: bool) -> dict:
    """One /api/ps model: a blazr.server.state.LoadedModel. size_vram is the weights' size on a GPU
    backend and 0 on the CPU."""
    return {
        "name": loaded.name,
        "model": loaded.name,
        "size": loaded.size_bytes,
        "expires_at": rfc3339(loaded.expires_at) if loaded.expires_at is not None else None,
        "size_vram": loaded.size_bytes if on_gpu else 0,
        "details": details,
    }


# ---- generation lines ----------------------------------------------------------------------------------


@dataclass
class Timings:
    """Wall-clock marks of one generation, turned into Ollama's nanosecond fields."""

    started: float = field(default_factory=time.perf_counter)
    load_seconds: float = 0.0
    first_token: float | None = None
    finished: float | None = None

    def mark_token(self) -> None:
        if self.first_token is None:
            self.first_token = time.perf_counter()

    def fields(self, prompt_tokens: int, completion_tokens: int) -> dict:
        end = self.finished if self.finished is not None else time.perf_counter()
        first = self.first_token if self.first_token is not None else end
        generation_start = self.started + self.load_seconds
        return {
            "total_duration": _ns(end - self.started),
            "load_duration": _ns(self.load_seconds),
            "prompt_eval_count": prompt_tokens,
            "prompt_eval_duration": _ns(first - generation_start),
            "eval_count": completion_tokens,
            "eval_duration": _ns(end - first),
        }


def _ns(seconds: float) -> int:
    return max(0, int(seconds * NS_PER_SECOND))


def chat_line(model: str, content: str = "", thinking: str = "", tool_calls: list | None = None) -> dict:
    """A /api/chat line (not yet done)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"model": model, "created_at": rfc3339(time.time()), "message": message, "done": False}


def generate_line(model: str, response: str = "", thinking: str = "") -> dict:
    """A /api/generate line (not yet done)."""
    line = {"model": model, "created_at": rfc3339(time.time()), "response": response, "done": False}
    if thinking:
        line["thinking"] = thinking
    return line


def final_fields(
    done_reason: str, timings: Timings | None, prompt_tokens: int, completion_tokens: int
) -> dict:
    """What the done:true line adds: done_reason and the nanosecond timings."""
    extra = {"done": True, "done_reason": done_reason}
    if timings is not None:
        extra.update(timings.fields(prompt_tokens, completion_tokens))
    return extra


def ollama_tool_calls(calls: list[tuple[str, str]]) -> list[dict]:
    """(name, arguments JSON) pairs -> Ollama tool_calls, whose arguments are objects."""
    result = []
    for name, arguments in calls:
        try:
            parsed = json.loads(arguments) if arguments else {}
        except ValueError:
            parsed = {}
        result.append({"function": {"name": name, "arguments": parsed if isinstance(parsed, dict) else {}}})
    return result


def done_reason(finish_reason: str | None) -> str:
    """Ollama's done_reason: "stop" for EOS or a stop string, "length" at the token limit."""
    return "length" if finish_reason == "length" else "stop"


# ---- /api/show -----------------------------------------------------------------------------------------


def model_info(entry: Any, config: dict) -> dict:
    """GGUF-style model_info keys (as Ollama names them) from a Hugging Face config dict."""
    family = family_of(entry.architecture) or str(config.get("model_type", ""))
    info: dict[str, Any] = {"general.architecture": family, "general.parameter_count": entry.parameters}
    keys = {
        "context_length": "max_position_embeddings",
        "embedding_length": "hidden_size",
        "feed_forward_length": "intermediate_size",
        "block_count": "num_hidden_layers",
        "attention.head_count": "num_attention_heads",
        "attention.head_count_kv": "num_key_value_heads",
        "vocab_size": "vocab_size",
    }
    for ours, hf in keys.items():
        if config.get(hf) is not None:
            info[f"{family}.{ours}"] = config[hf]
    return info


def parameters_text(defaults: dict) -> str:
    """Ollama's `parameters`: one "name value" line per default the server applies."""
    lines = []
    for name, value in defaults.items():
        for item in value if isinstance(value, list) else [value]:
            lines.append(f"{name:<16}{json.dumps(item) if isinstance(item, str) else item}")
    return "\n".join(lines)


def show_body(entry: Any, config: dict, template: str, capabilities: list[str], defaults: dict) -> dict:
    """The /api/show body. `template` is the model's Jinja chat template, or a derived model's Go TEMPLATE."""
    return {
        "modelfile": f"# blazr model {entry.name}\nFROM {entry.name}\n",
        "parameters": parameters_text(defaults),
        "template": template,
        "details": model_details(entry),
        "model_info": model_info(entry, config),
        "capabilities": capabilities,
        "modified_at": rfc3339(entry.path.stat().st_mtime),
    }
