"""Progress bars (blazr/commands/progress.py): on a terminal only, never with --quiet; model loading reports
every checkpoint tensor; `blazr --quiet pull` keeps pip's bar off too."""

from __future__ import annotations

import io

import pytest

from blazr.commands import progress


@pytest.fixture(autouse=True)
def not_quiet():
    progress.set_quiet(False)
    yield
    progress.set_quiet(False)


def test_model_loading_reports_every_tensor(tmp_path):
    from blazr.backends import get_backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from tests.tiny_models import write_safetensors

    write_safetensors("llama", tmp_path, "float32")
    calls = []
    build_model(
        load_checkpoint(tmp_path),
        get_backend("cpu"),
        on_progress=lambda done, total: calls.append((done, total)),
    )
    total = calls[-1][1]
    assert calls[-1] == (total, total) and len(calls) >= total - 1  # fused q/k/v count as their tensors
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_bars_show_on_a_terminal_only_and_never_when_quiet(monkeypatch):
    fake = io.StringIO()
    fake.isatty = lambda: True
    monkeypatch.setattr("sys.stderr", fake)
    assert progress.bars_enabled()
    progress.set_quiet(True)
    assert not progress.bars_enabled()
    with progress.progress_bar("x", 10, force=True) as update:  # --quiet wins over a command's --progress
        update(5)
    assert fake.getvalue() == ""
    progress.set_quiet(False)
    monkeypatch.setattr("sys.stderr", io.StringIO())  # a pipe
    assert not progress.bars_enabled()


def test_quiet_flag_reaches_pull(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from blazr.cli import app
    from blazr.commands import models

    seen = {}

    def fake_pull(entry, directory, quiet=False):
        seen["quiet"] = quiet
        path = directory / entry.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        return path

    monkeypatch.setattr(models, "pull_catalog_model", fake_pull)
    monkeypatch.setenv("BLAZR_CONFIG", str(tmp_path / "config.yaml"))
    args = ["pull", "smollm2-135m-instruct", "-o", str(tmp_path), "--no-warm-up"]
    assert CliRunner().invoke(app, ["--quiet", *args]).exit_code == 0 and seen["quiet"] is True
    assert CliRunner().invoke(app, args).exit_code == 0 and seen["quiet"] is False
