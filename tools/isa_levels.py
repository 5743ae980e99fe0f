"""Run a command with numba's kernels compiled for each x86 ISA level this CPU can execute.

blazr's CPU kernels pick their SIMD instructions from the features numba compiles for (blazr.quant.cpu_gemm_simd
reads NUMBA_CPU_NAME / NUMBA_CPU_FEATURES the same way numba does), so one machine can run the code paths of
older or other CPUs: a test that passes only with this machine's summation order fails here under another
level, as it would on that CPU. Levels, from the most capable:

    host            what numba picks by itself (e.g. AVX-512 with VNNI on Zen 5 and Sapphire Rapids)
    avx512-novnni   AVX-512 (F/BW/VL) without VNNI: vpmaddubsw + vpmaddwd on 512-bit registers (Skylake-SP)
    avx2            AVX2 + FMA, no AVX-512 and no AVX-VNNI (Haswell .. Zen 3, most laptops)
    generic         no SIMD beyond SSE2: no int8 GEMM, so float32 activations by default (e.g. ARM's code path)

A level that needs features this CPU lacks is skipped, and says so (an AVX-512 level on an AVX2-only machine),
as is a level that would turn off nothing this CPU has (avx2 on an AVX2-only machine: the host level already
ran exactly that code).

    python tools/isa_levels.py list
    python tools/isa_levels.py run [--levels avx2,generic] -- python -m pytest -q tests/test_quant_int8.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

LEVELS = ("host", "avx512-novnni", "avx2", "generic")
VNNI = ("avx512vnni", "avxvnni", "avxvnniint8", "avxvnniint16", "amx-int8")
NEEDS = {
    "host": set(),
    "avx512-novnni": {"avx512f", "avx512bw", "avx512vl"},
    "avx2": {"avx2", "fma"},
    "generic": set(),
}


def _dropped(level: str, feature: str) -> bool:
    """Whether `level` turns off this host feature."""
    if level == "avx512-novnni":
        return feature in VNNI or feature.startswith("amx")
    if level == "avx2":  # everything AVX-512 or VNNI, under any of LLVM's names for it
        return feature.startswith(("avx512", "avx10", "avxvnni", "amx", "evex512")) or feature in VNNI
    return False


def host_features() -> dict[str, bool]:
    import llvmlite.binding as llb

    return dict(llb.get_host_cpu_features().items())


def level_env(level: str) -> dict[str, str] | None:
    """The environment variables that compile numba's kernels for `level`, or None where this CPU can't run it."""
    host = host_features()
    if not NEEDS[level] <= {name for name, enabled in host.items() if enabled}:
        return None
    if level == "host":
        return {}
    if level == "generic":
        return {"NUMBA_CPU_NAME": "generic", "NUMBA_CPU_FEATURES": ""}
    if not _turned_off(level):
        return None  # the host's own level
    # the host's CPU name keeps its tuning; an explicit full feature list turns the level's extensions off
    features = ",".join(
        f"{'+' if enabled and not _dropped(level, name) else '-'}{name}" for name, enabled in host.items()
    )
    return {"NUMBA_CPU_FEATURES": features}


def _turned_off(level: str) -> list[str]:
    """The host features `level` turns off (none: the level is the host's own)."""
    return sorted(name for name, enabled in host_features().items() if enabled and _dropped(level, name))


def describe(level: str, env: dict[str, str] | None) -> str:
    if env is None:
        missing = NEEDS[level] - {name for name, enabled in host_features().items() if enabled}
        if not missing:
            return f"{level}: skipped, it is this CPU's own level (the host run covers it)"
        return f"{level}: skipped, this CPU lacks {sorted(NEEDS[level])}"
    if not env:
        return f"{level}: numba's own choice for this CPU"
    off = _turned_off(level)
    return f"{level}: NUMBA_CPU_NAME={env.get('NUMBA_CPU_NAME', 'host')}" + (
        f", off: {' '.join(off)}" if off else ""
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["list", "run"])
    parser.add_argument(
        "--levels", default=",".join(LEVELS), help="comma-separated, from: " + ", ".join(LEVELS)
    )
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1 :]
    levels = [name.strip() for name in args.levels.split(",") if name.strip()]
    unknown = [name for name in levels if name not in LEVELS]
    if unknown:
        parser.error(f"--levels: unknown {unknown}; known: {', '.join(LEVELS)}")
    if args.action == "run" and not command:
        parser.error("run needs a command after --")
    failed = []
    for level in levels:
        env = level_env(level)
        print(f"== ISA level {describe(level, env)}", flush=True)
        if args.action == "list" or env is None:
            continue
        start = time.perf_counter()
        code = subprocess.call(command, env={**os.environ, **env})
        print(f"== ISA level {level}: exit {code} in {time.perf_counter() - start:.0f} s", flush=True)
        if code != 0:
            failed.append(level)
    if failed:
        print(f"== failed at ISA levels: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
