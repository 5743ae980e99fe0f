"""blazr.backends.host_memory: glibc told to keep freed memory for speech networks (where glibc is the C
library); a no-op returning False elsewhere."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path


def test_glibc_thresholds_are_set_once_in_a_process():
    code = "from blazr.backends.host_memory import keep_freed_host_memory as k; print(k(), k())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert out.stdout.split() == (["True", "True"] if glibc else ["False", "False"]), out.stderr


def test_a_synthesizer_sets_them():
    """Loading a voice (the tiny random VitsModel of tests/test_vits_model.py) sets them."""
    voice = Path(__file__).parent / "data" / "tiny_vits" / "speakers"
    code = (
        f"import blazr; blazr.load(r'{voice}', device='cpu');"
        "from blazr.backends import host_memory; print(host_memory._done)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert out.stdout.split()[-1:] == [str(glibc)], out.stderr[-2000:]
