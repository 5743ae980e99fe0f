"""blazr.numba_cache: numba's on-disk cache written by several processes at once stays correct (each signature
keeps its own machine code), because saves take an exclusive lock beside the index and loads a shared one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

pytest.importorskip("numba")
fcntl = pytest.importorskip("fcntl")  # POSIX: on Windows the module keeps numba's own behaviour


def test_installed_once_by_the_kernel_modules():
    from numba.core.caching import IndexDataCacheFile

    import blazr.backends.cpu_ops  # noqa: F401 (a kernel module: importing it installs the locks)
    from blazr import numba_cache

    assert IndexDataCacheFile._blazr_locked
    save = IndexDataCacheFile.save
    numba_cache.install()
    assert IndexDataCacheFile.save is save  # not wrapped twice


def test_a_save_waits_while_another_writer_holds_the_lock(tmp_path):
    from numba.core.caching import IndexDataCacheFile

    from blazr import numba_cache

    numba_cache.install()
    cache = IndexDataCacheFile(str(tmp_path), "kernel-1.py311", "stamp")
    saved = threading.Event()

    def save():
        cache.save(("sig",), b"machine code")
        saved.set()

    with numba_cache.index_lock(cache._index_path, exclusive=True):  # another process's save, as it were
        writer = threading.Thread(target=save)
        writer.start()
        time.sleep(0.3)
        assert not saved.is_set() and not (tmp_path / "kernel-1.py311.nbi").exists()
    writer.join(timeout=10)
    assert saved.is_set() and cache.load(("sig",)) == b"machine code"


KERNEL = """
from numba import njit

from blazr import numba_cache  # noqa: F401

@njit(cache=True)
def twice(x):
    return x * 2
"""
CALLER = """
import sys
sys.path.insert(0, sys.argv[1])
import kernel
for arg in sys.argv[2:]:
    value = int(arg) if arg.isdigit() else float(arg)
    print(repr(kernel.twice(value)))
"""


@pytest.mark.parametrize("round_", range(3))
def test_two_processes_compiling_other_signatures_at_once_keep_both(tmp_path, round_):
    """Two processes compile `twice` for int64 and float64 into one fresh cache at the same moment; a third
    then loads both from the cache and gets each signature's own result."""
    (tmp_path / "kernel.py").write_text(textwrap.dedent(KERNEL))
    run = [sys.executable, "-c", CALLER, str(tmp_path)]
    procs = [subprocess.Popen([*run, arg], stdout=subprocess.PIPE, text=True) for arg in ("3", "1.5")]
    assert [p.communicate(timeout=120)[0].split() for p in procs] == [["6"], ["3.0"]]
    out = subprocess.run([*run, "3", "1.5"], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["6", "3.0"], out.stderr[-2000:]
    assert list(tmp_path.glob("__pycache__/kernel.twice-*.nbi"))  # the cache was written
