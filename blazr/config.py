"""User settings: built-in defaults, then ~/.blazr/config.yaml, then BLAZR_* environment variables, then CLI
flags; each later source wins. Every value is checked where it enters, and an error names that source
(the file and key, the environment variable, or the flag)."""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from blazr.errors import ConfigError

CONFIG_ENV = "BLAZR_CONFIG"  # points at another config file (tests, several setups)
DEFAULT_CONFIG_PATH = Path("~/.blazr/config.yaml")
DEFAULT_MODEL_DIR = Path("~/.blazr/models")


@dataclass
class GenerationSettings:
    """Sampling defaults for run/generate/chat and the server (each request may override them)."""

    max_tokens: int = 2048
    temperature: float = 0.7  # 0 = greedy
    top_p: float = 0.9
    top_k: int = 0  # 0 = disabled
    min_p: float = 0.05
    repeat_penalty: float = 1.0  # as llama.cpp since 2024: 1.1 derails small models on short prompts
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None  # (optional) a seed does not make sampling greedy
    stop: list[str] = field(default_factory=list)


@dataclass
class InferenceSettings:
    """How a model is loaded and run."""

    dtype: str | None = (
        None  # (optional) f32|f16|bf16|q8; unset: f32 activations, q8 dots for packed weights on cpu
    )
    chat_template: str | None = None  # (optional) built-in template name or a template file
    kv_cache_mb: int | None = (
        None  # (optional) KV-cache memory budget; unset: every sequence's num_ctx, <= 1/4 of free RAM on cpu
    )
    kv_cache_type: str = (
        "auto"  # f32 | f16 | auto: f16 where the cpu rounds activations to int8 (packed weights)
    )
    task: str | None = None  # (optional) rerank: serve a causal LM as a yes/no reranker (Qwen3-Reranker)
    # speculative decoding in serve (engine/spec/); in YAML also inference: {speculative: {method: ngram, ...}}
    speculative_method: str | None = None  # (optional) ngram (prompt lookup) | draft (needs a draft model)
    speculative_draft_model: str | None = None  # (optional) a smaller model with the same vocabulary
    speculative_num_speculative_tokens: int = 5  # draft tokens per step, 1..32


@dataclass
class ServerSettings:
    """`blazr serve` settings."""

    port: int = 8080
    host: str = "127.0.0.1"  # loopback unless asked: the server runs code paths any client can reach
    api_key: str | None = None  # (optional) also BLAZR_API_KEY; --api-key may repeat
    api_key_file: str | None = None  # (optional) one key per line; blank and # lines skipped
    tls_cert: str | None = None  # (optional) PEM certificate chain
    tls_key: str | None = None  # (optional) PEM private key
    max_concurrent_requests: int = 16  # sequences each loaded model decodes together (engine max_seqs)
    max_queued_requests: int = 64  # generation requests waiting beyond those; more get 429
    max_loaded_models: int = 1  # least recently used idle models are unloaded above this
    keep_alive_secs: float = -1.0  # idle seconds before an unused model unloads; negative: never
    request_timeout_secs: int = 300
    shutdown_grace_secs: float = 30.0  # SIGTERM: in-flight requests get this long to finish
    cors_enabled: bool = True
    cors_origins: list[str] = field(default_factory=list)  # empty = any origin
    request_logging: bool = True
    max_body_size: int = 10 * 1024 * 1024
    max_audio_body_size: int = 25 * 1024 * 1024  # /v1/audio/* bodies: OpenAI takes 25 MB audio files
    max_speech_input_chars: int = 4096  # /v1/audio/speech `input` (OpenAI's limit), else 400
    max_inflight_tokens: int = 0  # 0 = unlimited; prompt + max_tokens of admitted requests, else 503
    max_embedding_inputs: int = 2048  # inputs one embedding request may hold (OpenAI's limit), else 400
    reasoning_field: str = "reasoning_content"  # chat replies' reasoning key: reasoning_content | reasoning
    slot_save_path: str | None = None  # (optional) folder of /slots save / restore files (llama.cpp's flag)
    # latency SLO targets in ms (server/slo.py); unset ones are not checked. In YAML also as a mapping,
    # server: {slo: {ttft_p95_ms: 500}}
    slo_ttft_p50_ms: float | None = None
    slo_ttft_p95_ms: float | None = None
    slo_ttft_p99_ms: float | None = None
    slo_itl_p50_ms: float | None = None
    slo_itl_p95_ms: float | None = None
    slo_itl_p99_ms: float | None = None
    slo_e2e_p50_ms: float | None = None
    slo_e2e_p95_ms: float | None = None
    slo_e2e_p99_ms: float | None = None


@dataclass
class Settings:
    """Every setting blazr reads, after merging all sources. `sources` maps a dotted key to where its value
    came from ("default" when absent)."""

    default_model: str | None = None  # (optional) used when a command names no model
    device: str = "cpu"  # cpu | cuda[:N] | wgpu[:N]
    num_ctx: int | None = None  # (optional) initial KV cache size in tokens; unset: the engine's default
    model_dir: str | None = None  # (optional) unset: ~/.blazr/models
    voice_dir: str | None = None  # (optional) more Kokoro voice packs; unset: the model's own voices/
    inference: InferenceSettings = field(default_factory=InferenceSettings)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    sources: dict[str, str] = field(default_factory=dict, repr=False)

    def source_of(self, key: str) -> str:
        return self.sources.get(_canonical(key), "default")

    def set(self, key: str, value: Any, source: str) -> None:
        """Set a dotted key ("device", "inference.dtype", or an alias like "temperature") from `source`,
        converting and checking the value. Raises ConfigError naming `source`."""
        key = _canonical(key)
        target, name = self._field_owner(key, source)
        hint = typing.get_type_hints(type(target))[name]
        try:
            converted = _convert(value, hint)
            converted = VALIDATORS.get(key, _accept)(converted)
        except ValueError as e:
            raise ConfigError(f"{source}: {e}") from None
        setattr(target, name, converted)
        self.sources[key] = source

    def _field_owner(self, key: str, source: str) -> tuple[Any, str]:
        section, _, name = key.rpartition(".")
        target = getattr(self, section) if section in SECTIONS else self
        if key not in known_keys() or name == "sources":
            raise ConfigError(f"{source}: unknown setting '{key}'; known settings: {', '.join(known_keys())}")
        return target, name


SECTIONS = {"inference": InferenceSettings, "generation": GenerationSettings, "server": ServerSettings}
# Top-level shorthands kept from the original config file format.
ALIASES = {
    "temperature": "generation.temperature",
    "max_tokens": "generation.max_tokens",
    "port": "server.port",
}
ENV_ALIASES = {"BLAZR_API_KEY": "server.api_key"}


def _canonical(key: str) -> str:
    return ALIASES.get(key, key)


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def known_keys() -> list[str]:
    """Every dotted key the config file accepts, aliases included."""
    top = [n for n in _field_names(Settings) if n not in SECTIONS and n != "sources"]
    nested = [f"{s}.{n}" for s, cls in SECTIONS.items() for n in _field_names(cls)]
    return top + list(ALIASES) + nested


def env_name(key: str) -> str:
    """The environment variable for a dotted key: "inference.dtype" -> "BLAZR_INFERENCE_DTYPE"."""
    return "BLAZR_" + key.replace(".", "_").upper()


# ---- value conversion and checks -------------------------------------------------------------------------


def _convert(value: Any, hint: Any) -> Any:
    """Convert a YAML or environment value to the field's type; raise ValueError saying what was expected."""
    args = typing.get_args(hint)
    if type(None) in args:  # Optional[X]
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
            return None
        return _convert(value, next(a for a in args if a is not type(None)))
    if typing.get_origin(hint) is list:
        return _convert_list(value)
    converter = _SCALARS.get(hint)
    if converter is None:
        raise ValueError(f"unsupported setting type {hint}")
    return converter(value)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _to_int(value: Any) -> int:
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError(f"expected an integer, got {value!r}")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"expected an integer, got {value!r}") from None


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        return float(str(value).strip())
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None


def _to_str(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected a string, got {value!r}")
    return str(value)


def _convert_list(value: Any) -> list[str]:
    if isinstance(value, str):
        parsed = yaml.safe_load(value) if value.strip().startswith("[") else [value]
        value = parsed
    if not isinstance(value, list):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return [_to_str(v) for v in value]


_SCALARS: dict[Any, Callable[[Any], Any]] = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}

DTYPE_NAMES = {
    "f32": "f32",
    "float32": "f32",
    "f16": "f16",
    "float16": "f16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "q8": "q8",
    "int8": "q8",
}
_DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?|wgpu(:\d+)?)$")


def normalize_dtype(value: str | None) -> str | None:
    """Canonical dtype name (F16 and float16 both give f16); None stays None. Case does not matter."""
    if value is None:
        return None
    name = DTYPE_NAMES.get(value.strip().lower())
    if name is None:
        raise ValueError(
            f"'{value}' is not a dtype; use f32, f16, bf16 or q8 (or float32, float16, bfloat16, int8)"
        )
    return name


def normalize_device(value: str) -> str:
    text = value.strip().lower()
    if not _DEVICE_RE.match(text):
        raise ValueError(f"'{value}' is not a device; use cpu, cuda, cuda:N, wgpu or wgpu:N")
    return text


def _at_least(low: float, what: str = "") -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is not None and value < low:
            raise ValueError(f"must be at least {low}{what}, got {value}")
        return value

    return check


def _between(low: float, high: float) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, got {value}")
        return value

    return check


def _one_of(*allowed: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, got {value!r}")
        return value

    return check


def _accept(value: Any) -> Any:
    return value


VALIDATORS: dict[str, Callable[[Any], Any]] = {
    "device": normalize_device,
    "num_ctx": _at_least(1),
    "inference.dtype": normalize_dtype,
    "inference.kv_cache_mb": _at_least(1),
    "inference.kv_cache_type": _one_of("auto", "f32", "f16"),
    "inference.task": _one_of("embed", "rerank"),
    "inference.speculative_method": _one_of("ngram", "draft"),
    "inference.speculative_num_speculative_tokens": _between(1, 32),
    "generation.max_tokens": _at_least(1),
    "generation.temperature": _between(0, 2),
    "generation.top_p": _between(0, 1),
    "generation.top_k": _at_least(0, " (0 disables top-k)"),
    "generation.min_p": _between(0, 1),
    "generation.repeat_penalty": _at_least(0),
    "generation.repeat_last_n": _at_least(0),
    "server.port": _between(1, 65535),
    "server.max_concurrent_requests": _at_least(1),
    "server.request_timeout_secs": _at_least(1),
    "server.max_queued_requests": _at_least(0),
    "server.max_loaded_models": _at_least(1),
    "server.shutdown_grace_secs": _at_least(0),
    "server.max_body_size": _at_least(1),
    "server.max_audio_body_size": _at_least(1),
    "server.max_speech_input_chars": _at_least(1),
    "server.max_inflight_tokens": _at_least(0, " (0 means unlimited)"),
    "server.max_embedding_inputs": _at_least(1),
    "server.reasoning_field": _one_of("reasoning_content", "reasoning"),
}


# ---- sources --------------------------------------------------------------------------------


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """The config file: $BLAZR_CONFIG, else ~/.blazr/config.yaml."""
    env = os.environ if env is None else env
    return Path(env.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH).expanduser()


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's key/values flattened to dotted keys; {} when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: {_describe_yaml_error(e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config file must be a mapping of keys to values")
    return _flatten(data, path)


def _describe_yaml_error(e: yaml.YAMLError) -> str:
    """Where and what: `line L, column C: <problem> (<context> at line L0)`, lines counted from 1."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context, context_mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    started = f" ({context} at line {context_mark.line + 1})" if context and context_mark is not None else ""
    return f"{where}cannot parse config: {problem}{started}"


def _flatten(data: dict[str, Any], path: Path) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: section '{key}' must be a mapping, got {value!r}")
            for k, v in value.items():
                if isinstance(
                    v, dict
                ):  # a mapping inside a section: server.slo.ttft_p95_ms -> server.slo_ttft_p95_ms
                    flat.update({f"{key}.{k}_{kk}": vv for kk, vv in v.items()})
                else:
                    flat[f"{key}.{k}"] = v
        else:
            flat[str(key)] = value
    return flat


def read_environment(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Dotted key -> (value, variable name) for every BLAZR_* variable that names a setting."""
    found: dict[str, tuple[str, str]] = {}
    for key in known_keys():
        name = env_name(key)
        if name in env:
            found[_canonical(key)] = (env[name], name)
    for name, key in ENV_ALIASES.items():
        if name in env:
            found[key] = (env[name], name)
    return found


def load_settings(path: Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Defaults, then the config file, then the environment. Flags are applied by the caller with
    `Settings.set(key, value, "--flag")`. Raises ConfigError naming the file and key or the variable."""
    env = os.environ if env is None else env
    path = config_path(env) if path is None else path
    settings = Settings()
    file_values = read_config_file(path)
    # Shorthands last, so a top-level `temperature` wins over `generation.temperature` in the same file.
    for key in sorted(file_values, key=lambda k: k in ALIASES):
        settings.set(key, file_values[key], f"{path}: key '{key}'")
    for key, (value, name) in read_environment(env).items():
        settings.set(key, value, name)
    return settings


def apply_flags(settings: Settings, flags: Mapping[str, tuple[Any, str]]) -> Settings:
    """Apply CLI flags given as dotted key -> (value, flag name); a None value means "not given"."""
    for key, (value, flag) in flags.items():
        if value is not None:
            settings.set(key, value, flag)
    return settings


def resolve_model_dir(settings: Settings, flag: str | Path | None = None) -> Path:
    """--model-dir flag > BLAZR_MODEL_DIR > config `model_dir` > ~/.blazr/models."""
    chosen = flag if flag is not None else settings.model_dir
    return Path(chosen if chosen else DEFAULT_MODEL_DIR).expanduser()
