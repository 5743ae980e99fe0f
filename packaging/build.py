"""Build this OS's single-file archive of the `blazr` command into dist/, with its SHA256SUMS.

    python packaging/build.py            # needs `pip install pyinstaller` in the environment that has blazr

The archive holds the PyInstaller one-file `blazr` binary (CPU and WGSL backends, server, speech; the bundled
pip serves `blazr pull`), LICENSE and THIRD-PARTY-LICENSES.txt (every installed distribution's name, version,
licence fields and licence files, read from its metadata). Names follow features.md: blazr-linux-x64.tar.gz,
blazr-linux-arm64.tar.gz, blazr-macos-arm64.tar.gz, blazr-macos-x64.tar.gz, blazr-windows-x64.zip (no version).
numba compiles its kernels on first use into ~/.cache/numba (its user-wide cache, as the bundled sources are
not beside a writable folder), so a second start finds them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DIST = REPO / "dist"
# packages whose code or data PyInstaller's import analysis cannot see (lazy imports, native libraries, data)
COLLECT_ALL = ("numba", "llvmlite", "wgpu", "espeakng_loader", "soundfile", "llguidance", "tokenizers", "pip")
COLLECT_SUBMODULES = ("blazr", "quart", "hypercorn")  # blazr's routes and commands load by name


def archive_name() -> str:
    system = {"Linux": "linux", "Darwin": "macos", "Windows": "windows"}[platform.system()]
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}[
        platform.machine().lower()
    ]
    return f"blazr-{system}-{machine}" + (".zip" if system == "windows" else ".tar.gz")


def build_binary(work: Path) -> Path:
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--onefile", "--name", "blazr"]
    cmd += ["--paths", str(REPO), "--collect-data", "blazr", "--copy-metadata", "blazr"]
    cmd += ["--add-data", f"{REPO / 'shaders'}{os.pathsep}blazr/shaders"]  # blazr/shaders links to it
    cmd += [arg for name in COLLECT_ALL for arg in ("--collect-all", name)]
    cmd += [arg for name in COLLECT_SUBMODULES for arg in ("--collect-submodules", name)]
    # `blazr swarm` runs Ray's own processes (`python -m ray.scripts.scripts start`), which a one-file binary
    # cannot start: the archive leaves Ray out (~100 MB of binaries) and its swarm says to pip install it
    cmd += ["--exclude-module", "ray"]
    # Kokoro's readers (blazr[kokoro]) stay out: misaki's Japanese and Chinese dictionaries are ~600 MB, and misaki
    # with phonemizer (segments -> csvw -> rdflib, babel) made the archive 13 MiB larger even without them (241
    # against 228 MiB, built here) and then failed on data files PyInstaller does not collect (language_tags'
    # index.json); a Kokoro voice in the archive says to install blazr with pip instead (Piper voices read through
    # espeak-ng, which is in)
    for name in (
        "misaki",
        "phonemizer",
        "pyopenjtalk",
        "fugashi",
        "unidic_lite",
        "sudachipy",
        "jieba",
        "pypinyin",
    ):
        cmd += ["--exclude-module", name]
    # numba's and llvmlite's own test suites come in with --collect-all and are never imported at run time
    cmd += ["--exclude-module", "numba.tests", "--exclude-module", "numba.cuda.tests"]
    cmd += ["--exclude-module", "llvmlite.tests"]
    cmd += ["--distpath", str(work / "dist"), "--workpath", str(work / "build"), "--specpath", str(work)]
    # zlib level 6 for the archive's entries, not PyInstaller's default 9: the PKG step took 29 s at level 6 on an
    # idle 2-core AMD EPYC (Zen 1 class), 103 s at level 9 in CI beside two test processes; CI's archive went from
    # 195 to 192 MiB with this and the test suites above left out
    env = {
        **os.environ,
        "PYINSTALLER_ZLIB_COMPRESSION_LEVEL": os.environ.get("PYINSTALLER_ZLIB_COMPRESSION_LEVEL", "6"),
    }
    subprocess.run([*cmd, str(REPO / "packaging" / "entry.py")], check=True, env=env)
    return work / "dist" / ("blazr.exe" if platform.system() == "Windows" else "blazr")


def third_party_licenses() -> str:
    """Each installed distribution: name, version, licence metadata and the text of its licence files."""
    parts = []
    for dist in sorted(importlib.metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower()):
        meta = dist.metadata
        name = meta["Name"]
        if not name or name.lower() == "blazr":
            continue
        licence = meta.get("License-Expression") or meta.get("License") or ""
        classifiers = [
            c.split(" :: ", 1)[1] for c in meta.get_all("Classifier") or [] if c.startswith("License ::")
        ]
        lines = [
            f"== {name} {meta['Version']}",
            f"License: {licence.splitlines()[0] if licence else ''}".rstrip(),
        ]
        lines += [f"Classifier: {c}" for c in classifiers]
        for file in dist.files or []:
            if Path(str(file)).name.upper().startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE")):
                path = Path(file.locate())
                text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
                lines += [f"--- {file}", text.strip()]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def main() -> None:
    DIST.mkdir(exist_ok=True)
    name = archive_name()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        binary = build_binary(work)
        stage = work / "blazr"
        stage.mkdir()
        shutil.copy2(binary, stage / binary.name)
        shutil.copy2(REPO / "LICENSE", stage / "LICENSE")
        (stage / "THIRD-PARTY-LICENSES.txt").write_text(third_party_licenses(), encoding="utf-8")
        target = DIST / name
        if name.endswith(".zip"):
            with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
                for path in sorted(stage.iterdir()):
                    z.write(path, f"blazr/{path.name}")
        else:
            # gzip level 1: the binary inside is zlib-compressed already, level 9 only spends time
            with tarfile.open(target, "w:gz", compresslevel=1) as t:
                t.add(stage, arcname="blazr")
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    (DIST / "SHA256SUMS").write_text(f"{digest}  {name}\n", encoding="utf-8")
    print(f"{target} ({target.stat().st_size / 2**20:.0f} MiB), sha256 {digest}")


if __name__ == "__main__":
    main()
