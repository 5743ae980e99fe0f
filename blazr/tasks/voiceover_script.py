"""A voiceover script: the parts to speak, each with its voice, speed, seed and the pause after it.

Two forms (docs/cli.md, "blazr speak"):

* plain text (any file not named .yaml, .yml or .json): one part per line; blank lines and lines whose first
  character (after spaces) is "#" are skipped;
* a manifest (.yaml / .yml, or .json): a mapping with `parts` and optional defaults `voice`, `speed`, `pause`
  (seconds after each part) and `seed`; each part a string (its text) or a mapping with `text` and optional
  `voice`, `speed`, `pause_after` and `seed`. A bare list of parts is a manifest with no defaults.

A part's setting comes from the part, else the manifest's default, else the command's flag. Every problem is a
ConfigError (exit 2) that names the file, and the part or line at fault.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blazr.errors import ConfigError
from blazr.tasks.speak import MAX_SPEED, MIN_SPEED

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_PAUSE = 60.0  # seconds; a longer pause is a typo (ms for s)
MAX_SEED = 2**32 - 1
PART_KEYS = ("text", "voice", "speed", "pause_after", "seed")
TOP_KEYS = ("parts", "voice", "speed", "pause", "seed")


@dataclass(frozen=True)
class Defaults:
    """What a part gets when neither it nor the manifest says: the command's flags."""

    voice: str | None = None
    speed: float = 1.0
    pause: float = 0.3
    seed: int = 0


@dataclass(frozen=True)
class Part:
    text: str
    voice: str | None  # None: the model's default voice
    speed: float
    pause_after: float  # seconds of silence after this part (none after the last part of a voiceover)
    seed: int  # take k is synthesized with seed + k
    line: int | None = None  # the line in a plain-text script


def read_script(path: Path, defaults: Defaults) -> list[Part]:
    """The parts of the script at `path`; ConfigError (naming the file) when it is missing, unreadable, empty
    or a bad manifest."""
    if not path.exists():
        raise ConfigError(f"{path}: no such script file")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a script file")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror})") from None
    if path.suffix.lower() in MANIFEST_SUFFIXES:
        parts = parse_manifest(_load_manifest(path, text), path, defaults)
    else:
        parts = parse_text(text, defaults)
    if not parts:
        raise ConfigError(f"{path}: the script has no parts to speak")
    return parts


def parse_text(text: str, defaults: Defaults) -> list[Part]:
    """One part per non-blank line that is not a # comment."""
    parts = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            parts.append(Part(line, defaults.voice, defaults.speed, defaults.pause, defaults.seed, number))
    return parts


def _load_manifest(path: Path, text: str) -> Any:
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except ValueError as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{path}: not valid YAML{where} ({problem})") from None


def parse_manifest(data: Any, path: Path, defaults: Defaults) -> list[Part]:
    """The parts of a loaded manifest (see the module docstring)."""
    if isinstance(data, list):
        data = {"parts": data}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a manifest is a mapping with 'parts' (or a list of parts)")
    _check_keys(data, TOP_KEYS, path, "the manifest")
    if "parts" not in data:
        raise ConfigError(f"{path}: the manifest has no 'parts' list")
    if not isinstance(data["parts"], list):
        raise ConfigError(f"{path}: 'parts' must be a list")
    top = Defaults(
        voice=_voice(data, "voice", path, "the manifest", defaults.voice),
        speed=_speed(data, "speed", path, "the manifest", defaults.speed),
        pause=_pause(data, "pause", path, "the manifest", defaults.pause),
        seed=_seed(data, "seed", path, "the manifest", defaults.seed),
    )
    return [_part(item, i, path, top) for i, item in enumerate(data["parts"], 1)]


def _part(item: Any, index: int, path: Path, top: Defaults) -> Part:
    where = f"part {index}"
    if isinstance(item, str):
        item = {"text": item}
    if not isinstance(item, dict):
        raise ConfigError(f"{path}: {where} must be a string or a mapping with 'text'")
    _check_keys(item, PART_KEYS, path, where)
    text = item.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{path}: {where} needs a non-empty 'text'")
    return Part(
        text=" ".join(text.split()),
        voice=_voice(item, "voice", path, where, top.voice),
        speed=_speed(item, "speed", path, where, top.speed),
        pause_after=_pause(item, "pause_after", path, where, top.pause),
        seed=_seed(item, "seed", path, where, top.seed),
    )


def _check_keys(data: dict, known: tuple[str, ...], path: Path, where: str) -> None:
    unknown = [str(k) for k in data if k not in known]
    if unknown:
        raise ConfigError(f"{path}: {where}: unknown key {unknown[0]!r} (known: {', '.join(known)})")


def _number(data: dict, key: str, path: Path, where: str, default: float, low: float, high: float) -> float:
    if key not in data or data[key] is None:
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{path}: {where}: {key} must be a number, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{path}: {where}: {key} {value} is out of range [{low:g}, {high:g}]")
    return float(value)


def _speed(data: dict, key: str, path: Path, where: str, default: float) -> float:
    return _number(data, key, path, where, default, MIN_SPEED, MAX_SPEED)


def _pause(data: dict, key: str, path: Path, where: str, default: float) -> float:
    return _number(data, key, path, where, default, 0.0, MAX_PAUSE)


def _seed(data: dict, key: str, path: Path, where: str, default: int) -> int:
    if key not in data or data[key] is None:
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ConfigError(f"{path}: {where}: seed must be a whole number in [0, {MAX_SEED}], got {value!r}")
    return value


def _voice(data: dict, key: str, path: Path, where: str, default: str | None) -> str | None:
    if key not in data or data[key] is None:
        return default
    if not isinstance(data[key], str) or not data[key].strip():
        raise ConfigError(f"{path}: {where}: voice must be a voice name, got {data[key]!r}")
    return data[key].strip()
