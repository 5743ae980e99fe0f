"""`blazr pull owner/name`: download a Hugging Face model repo into the model directory.

Files go through huggingface_hub, so they land in the shared Hugging Face cache (HF_HOME, HF_TOKEN and
HF_HUB_OFFLINE work as usual); the model directory gets links to the cached files, not second copies.
Only what blazr reads is fetched: config and tokenizer files plus one set of weights.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blazr.errors import DownloadError

SIDE_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "LICENSE",
    "LICENSE.txt",
    "LICENSE.md",
)
SAFETENSORS_INDEX = "model.safetensors.index.json"
# GGUF quant preference when a repo holds several GGUF files and --file names none
GGUF_PREFERENCE = ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S", "Q8_0", "Q6_K", "Q3_K_M", "Q2_K")
CACHED_PATTERNS = [*SIDE_FILES, "*.safetensors", "*.safetensors.index.json", "*.gguf"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
SOURCE = "the Hugging Face Hub"


def pull_hf(repo_id: str, dest_dir: Path, file: str | None = None) -> Path:
    """Download `repo_id` (or only `file` from it) and link it into `dest_dir/<repo basename>/`.

    Returns that directory, or the single file when `file` is given. Raises DownloadError naming the repo."""
    check_repo_id(repo_id)
    target = Path(dest_dir) / repo_id.rsplit("/", 1)[1]
    if file is not None:
        cached = Path(_hub_call(repo_id, lambda hub: hub.hf_hub_download(repo_id, file), file))
        link_file(cached, target / file)
        return target / file
    snapshot = Path(_download_snapshot(repo_id))
    link_tree(snapshot, target)
    return target


def pull_hf_tag(repo_id: str, dest_dir: Path, tag: str) -> Path:
    """Ollama's `<hub host>/owner/name:QUANT`: the repo's one GGUF file whose name ends in that quant (Q4_K_M),
    linked into `dest_dir/<repo basename>/`. DownloadError naming the GGUF files there when none matches."""
    check_repo_id(repo_id)
    files = _hub_call(repo_id, lambda hub: hub.list_repo_files(repo_id))
    ggufs = [f for f in files if "/" not in f and f.endswith(".gguf")]
    match = [g for g in ggufs if re.search(rf"[.\-_]{re.escape(tag)}\.gguf$", g, re.IGNORECASE)]
    if len(match) != 1:
        listed = ", ".join(sorted(ggufs)) or "none"
        raise DownloadError(
            f"Hugging Face repo {repo_id} has no single {tag} GGUF file (its GGUF files: {listed})"
        )
    return pull_hf(repo_id, dest_dir, match[0])


def split_hub_name(name: str) -> tuple[str, str | None] | None:
    """(repo id, quant tag or None) for Ollama's `<hub host>/owner/name[:TAG]` (a first segment with a dot is
    the host Ollama's names carry) or a bare `owner/name[:TAG]`; None for anything else (a catalog or model
    directory name)."""
    parts = name.split("/")
    bare = "/".join(parts[1:]) if len(parts) == 3 and "." in parts[0] else name
    repo, _, tag = bare.partition(":")
    if not _REPO_ID.match(repo) or ".." in repo:
        return None
    return repo, (tag if tag and tag.lower() != "latest" else None)


def check_repo_id(repo_id: str) -> None:
    if not _REPO_ID.match(repo_id) or ".." in repo_id:
        raise DownloadError(f"{repo_id!r} is not a Hugging Face repo id; expected owner/name")


def _download_snapshot(repo_id: str) -> str:
    """The snapshot folder in the HF cache, holding the side files and one set of weights."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return _cached_snapshot(repo_id)
    files = _hub_call(repo_id, lambda hub: hub.list_repo_files(repo_id))
    wanted = [f for f in SIDE_FILES if f in files] + choose_weights(repo_id, files)
    return _hub_call(repo_id, lambda hub: hub.snapshot_download(repo_id, allow_patterns=wanted))


def _cached_snapshot(repo_id: str) -> str:
    return _hub_call(
        repo_id,
        lambda hub: hub.snapshot_download(repo_id, allow_patterns=CACHED_PATTERNS, local_files_only=True),
    )


def choose_weights(repo_id: str, files: list[str]) -> list[str]:
    """One set of weights: model.safetensors, else the shards of the index, else every top-level
    .safetensors, else one GGUF (by GGUF_PREFERENCE)."""
    top = [f for f in files if "/" not in f]
    if "model.safetensors" in top:
        return ["model.safetensors"]
    if SAFETENSORS_INDEX in top:
        return [SAFETENSORS_INDEX, *_index_shards(repo_id)]
    safetensors = [f for f in top if f.endswith(".safetensors")]
    if safetensors:
        return safetensors
    return [choose_gguf(repo_id, [f for f in top if f.endswith(".gguf")])]


def choose_gguf(repo_id: str, ggufs: list[str]) -> str:
    if len(ggufs) == 1:
        return ggufs[0]
    for quant in GGUF_PREFERENCE:
        match = [g for g in ggufs if re.search(rf"[.\-_]{quant}\.gguf$", g, re.IGNORECASE)]
        if match:
            return match[0]
    if not ggufs:
        raise DownloadError(
            f"Hugging Face repo {repo_id} has no .safetensors or .gguf weights at its top level"
        )
    raise DownloadError(
        f"Hugging Face repo {repo_id} holds several GGUF files ({', '.join(sorted(ggufs))}); "
        f"pick one with `blazr pull {repo_id} --file NAME`"
    )


def _index_shards(repo_id: str) -> list[str]:
    index_path = _hub_call(
        repo_id, lambda hub: hub.hf_hub_download(repo_id, SAFETENSORS_INDEX), SAFETENSORS_INDEX
    )
    try:
        weight_map = json.loads(Path(index_path).read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DownloadError(f"{repo_id}: {SAFETENSORS_INDEX} has no readable weight_map ({e})") from None
    return sorted(set(weight_map.values()))


def _hub_call(repo_id: str, call: Callable[[Any], Any], file: str | None = None) -> Any:
    """Run one huggingface_hub call; turn its errors into a DownloadError naming the repo and the source."""
    import huggingface_hub as hub
    from huggingface_hub import errors

    what = f"{repo_id}/{file}" if file else repo_id
    try:
        return call(hub)
    except (errors.OfflineModeIsEnabled, errors.LocalEntryNotFoundError):
        raise DownloadError(
            f"cannot download {what} from {SOURCE}: offline (HF_HUB_OFFLINE is set, or no network) "
            "and it is not in the Hugging Face cache"
        ) from None
    except errors.GatedRepoError:
        raise DownloadError(
            f"{repo_id} on {SOURCE} is gated: accept its terms on the Hub, then set HF_TOKEN"
        ) from None
    except errors.RepositoryNotFoundError:
        raise DownloadError(f"{repo_id} not found on {SOURCE} (if it is private, set HF_TOKEN)") from None
    except errors.EntryNotFoundError:
        raise DownloadError(f"{repo_id} on {SOURCE} has no file {file!r}") from None
    except Exception as e:  # the Hub client raises its HTTP library's errors, whose classes vary by version
        raise DownloadError(
            f"could not download {what} from {SOURCE}: {type(e).__name__}: {e}; check the network, HF_TOKEN"
        ) from None


def link_tree(snapshot: Path, target: Path) -> None:
    """Link every file of a cached snapshot into `target`, keeping sub-folders."""
    for source in sorted(snapshot.rglob("*")):
        if source.is_file() and ".cache" not in source.relative_to(snapshot).parts:
            link_file(source, target / source.relative_to(snapshot))


def link_file(cached: Path, dest: Path) -> None:
    """Symlink `dest` to the cached blob; copy where links are not allowed (some Windows setups)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    blob = Path(os.path.realpath(cached))
    if dest.is_symlink() or dest.exists():
        dest.unlink()
    try:
        dest.symlink_to(blob)
    except OSError:
        shutil.copy2(blob, dest)
