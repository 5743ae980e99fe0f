"""Which sounds `blazr sound-review DIR` reviews, and what each should be (docs/cli.md, "blazr sound-review").

Two forms:

* a manifest (`--manifest FILE`, else DIR/manifest.yaml, .yml or .json): a mapping with `sounds`, a mapping
  of file name (relative to DIR) -> its description (a string), or -> a mapping with `description` and the
  optional `duration` (seconds) and `loudness` (a LUFS target). Only the files it lists are reviewed;
* no manifest: every WAV, FLAC, OGG and MP3 file in DIR (not its subfolders), in name order; a sound's
  description is the text of the file next to it with the same stem and `.txt` (`door.wav` -> `door.txt`),
  if there is one.

Every problem is a ConfigError (exit 2) that names the file and the entry or key at fault.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blazr.errors import ConfigError

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")  # what blazr.audio reads without ffmpeg
MANIFEST_NAMES = ("manifest.yaml", "manifest.yml", "manifest.json")
ENTRY_KEYS = ("description", "duration", "loudness")
MAX_DURATION = 24 * 3600.0  # seconds; a longer expectation is a typo (ms for s)
LOUDNESS_RANGE = (-70.0, 0.0)  # LUFS: BS.1770's absolute gate to full scale


@dataclass(frozen=True)
class Sound:
    path: Path
    description: str | None  # None: nothing says what it should sound like (it cannot be ranked)
    duration: float | None = None  # expected seconds
    loudness: float | None = None  # target LUFS

    @property
    def name(self) -> str:
        return self.path.name


def find_sounds(directory: Path, manifest: Path | None = None) -> list[Sound]:
    """The sounds to review in `directory`, from `manifest` (or the directory's own), else from its audio
    files and their .txt sidecars."""
    if not directory.exists():
        raise ConfigError(f"{directory}: no such directory")
    if not directory.is_dir():
        raise ConfigError(f"{directory}: is not a directory")
    if manifest is None:
        manifest = next((directory / n for n in MANIFEST_NAMES if (directory / n).is_file()), None)
    sounds = read_manifest(manifest, directory) if manifest is not None else from_sidecars(directory)
    if not sounds:
        where = manifest if manifest is not None else directory
        raise ConfigError(f"{where}: no sounds to review ({', '.join(AUDIO_SUFFIXES)})")
    return sounds


def from_sidecars(directory: Path) -> list[Sound]:
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
    return [Sound(p, _sidecar_text(p.with_suffix(".txt"))) for p in files]


def _sidecar_text(path: Path) -> str | None:
    if not path.is_file():
        return None
    text = _read_text(path).strip()
    if not text:
        raise ConfigError(f"{path}: the description is empty")
    return " ".join(text.split())


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror})") from None


def read_manifest(path: Path, directory: Path) -> list[Sound]:
    if not path.exists():
        raise ConfigError(f"{path}: no such manifest file")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a manifest file")
    data = _parse(path, _read_text(path))
    if not isinstance(data, dict) or set(data) != {"sounds"} or not isinstance(data["sounds"], dict):
        raise ConfigError(f"{path}: a manifest is a mapping with one key, 'sounds': file name -> description")
    return [_entry(name, item, path, directory) for name, item in data["sounds"].items()]


def _parse(path: Path, text: str) -> Any:
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
        raise ConfigError(f"{path}: not valid YAML{where} ({getattr(e, 'problem', None) or e})") from None


def _entry(name: Any, item: Any, path: Path, directory: Path) -> Sound:
    where = f"{path}: sound {name!r}"
    if not isinstance(name, str) or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ConfigError(f"{where}: a sound is named by its file name inside {directory}")
    sound = directory / name
    if not sound.is_file():
        raise ConfigError(f"{where}: no such file {sound}")
    if isinstance(item, str):
        item = {"description": item}
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: give a description, or a mapping with 'description'")
    unknown = [str(k) for k in item if k not in ENTRY_KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(ENTRY_KEYS)})")
    text = item.get("description")
    if text is not None and (not isinstance(text, str) or not text.strip()):
        raise ConfigError(f"{where}: description must be a non-empty string, got {text!r}")
    return Sound(
        sound,
        " ".join(text.split()) if text is not None else None,
        _number(item, "duration", where, (0.0, MAX_DURATION), "seconds"),
        _number(item, "loudness", where, LOUDNESS_RANGE, "LUFS"),
    )


def _number(item: dict, key: str, where: str, bounds: tuple[float, float], unit: str) -> float | None:
    value = item.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: {key} must be a number of {unit}, got {value!r}")
    low, high = bounds
    inside = low < value <= high if key == "duration" else low <= value <= high  # a duration of 0 is no sound
    if not inside:
        raise ConfigError(f"{where}: {key} {value:g} {unit} is out of range ({low:g} to {high:g})")
    return float(value)
