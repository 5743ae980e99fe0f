"""What the CPU kernels are compiled for: the features numba targets (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES or
the host's), read the way numba reads them, so a kernel picks only instructions that code may use."""

from __future__ import annotations

import platform

import llvmlite.binding as llb
from numba.core import config


def target_features() -> set[str]:
    """The CPU features numba compiles for: those of its CPU name (the host's unless NUMBA_CPU_NAME says
    otherwise; another name counts as none, to be safe), changed by NUMBA_CPU_FEATURES' +/- entries."""
    host = llb.get_host_cpu_features()
    features = {name for name, on in host.items() if on} if config.CPU_NAME in (None, "host") else set()
    for entry in (config.CPU_FEATURES or "").split(","):
        if entry[:1] == "+":
            features.add(entry[1:])
        elif entry[:1] == "-":
            features.discard(entry[1:])
    return features


FEATURES = target_features()
X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
# An IEEE half converts in one instruction on ARM and with x86's F16C; without F16C, LLVM calls a runtime
# library routine (__extendhfsf2) that numba's JIT may not find: a call through a null pointer.
NATIVE_HALF = not X86 or "f16c" in FEATURES
