"""numba's compile time per test, for CI's budget (BLAZR_TESTS_COMPILE_REPORT=1; tests/conftest.py calls these).

A fresh CI machine compiles every kernel the suite runs, once per pytest process and ISA level: on a 2-core
AMD EPYC of the Zen 1 class, 800 of the host suite's 2120 s. This says which tests pay it (the first test to
need a kernel pays for everyone after it) and prints the totals at the end of the run. Only outermost compiles are
counted: numba compiles a kernel's callees inside its own compile event. Loads from the on-disk cache fire
no event and cost nothing here."""

from __future__ import annotations

import time
from collections import defaultdict

_state = {"test": "(collection)", "depth": 0, "start": 0.0}
_by_test: dict[str, float] = defaultdict(float)
_by_kernel: dict[str, list] = defaultdict(lambda: [0, 0.0])  # qualname -> [signatures compiled, seconds]
_wall_by_file: dict[str, float] = defaultdict(float)  # test file -> seconds of setup, call and teardown


def install() -> None:
    from numba.core import event

    class _Timer(event.Listener):
        def on_start(self, ev):
            if _state["depth"] == 0:
                _state["start"] = time.perf_counter()
            _state["depth"] += 1

        def on_end(self, ev):
            _state["depth"] -= 1
            if _state["depth"] == 0:
                seconds = time.perf_counter() - _state["start"]
                _by_test[_state["test"]] += seconds
                kernel = _by_kernel[ev.data["dispatcher"].py_func.__qualname__]
                kernel[0] += 1
                kernel[1] += seconds

    event.register("numba:compile", _Timer())


def set_test(nodeid: str) -> None:
    _state["test"] = nodeid


def add_wall(nodeid: str, seconds: float) -> None:
    _wall_by_file[nodeid.split("::")[0]] += seconds


def summary(top: int = 25) -> list[str]:
    by_file: dict[str, float] = defaultdict(float)
    for nodeid, seconds in _by_test.items():
        by_file[nodeid.split("::")[0]] += seconds
    lines = [f"numba compile time: {sum(_by_test.values()):.0f} s in all"]
    lines += [f"{s:8.1f} s  {f}" for f, s in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]]
    lines += ["wall time by file (setup, call and teardown; compiles included):"]
    walls = sorted(_wall_by_file.items(), key=lambda kv: -kv[1])[:top]
    lines += [f"{s:8.1f} s  {f}" for f, s in walls]
    lines += ["by kernel (signatures compiled, seconds):"]
    kernels = sorted(_by_kernel.items(), key=lambda kv: -kv[1][1])[:top]
    lines += [f"{s:8.1f} s  {n:3d}  {name}" for name, (n, s) in kernels]
    lines += ["by test:"]
    lines += [f"{s:8.1f} s  {t}" for t, s in sorted(_by_test.items(), key=lambda kv: -kv[1])[:top]]
    return lines
