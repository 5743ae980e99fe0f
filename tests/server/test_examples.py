"""The programs in examples/ run as a reader would run them, against the real SmolLM2 (the catalog's file in the
model directory, so nothing is downloaded): each exits 0 and prints the answer it is about."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        env=os.environ | env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.parametrize("name", ["generate.py", "chat_stream.py", "async_engine.py"])
def test_python_api_examples(name, smollm2_model_dir):
    out = run_example(name, BLAZR_MODEL_DIR=str(smollm2_model_dir))
    assert {"generate.py": "Paris", "chat_stream.py": "4", "async_engine.py": "Paris"}[name] in out


def test_openai_client_example(live_server, smollm2_model_dir):
    with live_server(model="smollm2", model_dir=smollm2_model_dir) as server:
        out = run_example("openai_client.py", BLAZR_URL=server.url + "/v1")
    answer, usage, streamed = out.splitlines()[:3]
    assert "4" in answer and streamed == answer  # the answer, then the same answer streamed
    assert "completion_tokens=" in usage
