"""`blazr devices` and the wgpu backend's errors when there is no adapter."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from blazr.cli import app
from tests.conftest import AVAILABLE_BACKENDS


def test_devices_lists_cpu_and_says_what_to_install_without_an_adapter(monkeypatch):
    pytest.importorskip("wgpu")
    from blazr.backends import get_backend, wgpu_device
    from blazr.errors import UnsupportedError

    monkeypatch.setattr(wgpu_device, "list_adapters", lambda: [])
    result = CliRunner().invoke(app, ["devices", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [d["device"] for d in listed["devices"]] == ["cpu"]
    assert "install a Vulkan driver" in listed["wgpu_problem"]
    with pytest.raises(UnsupportedError, match="no WebGPU adapter found: install a Vulkan driver"):
        get_backend("wgpu")


@pytest.mark.skipif("wgpu" not in AVAILABLE_BACKENDS, reason="no WebGPU adapter here")
def test_devices_lists_each_adapter_with_its_index_limits_and_features():
    from blazr.backends import get_backend
    from blazr.errors import ConfigError

    result = CliRunner().invoke(app, ["devices", "--json"])
    assert result.exit_code == 0, result.output
    adapters = [d for d in json.loads(result.stdout)["devices"] if d["device"].startswith("wgpu:")]
    assert adapters and adapters[0]["device"] == "wgpu:0"
    assert adapters[0]["limits"]["max-storage-buffer-binding-size"] >= 2**27  # 128 MiB, the WebGPU default
    text = CliRunner().invoke(app, ["devices"]).stdout
    assert "wgpu:0" in text and adapters[0]["backend"] in text
    with pytest.raises(ConfigError, match=f"--device wgpu:{len(adapters)}: there are only"):
        get_backend(f"wgpu:{len(adapters)}")
