"""Host memory allocation tuned for networks that make large fresh arrays on every call (speech synthesis).

glibc serves an allocation above its mmap threshold (128 KB at first, growing to at most 32 MB as such blocks
are freed) with a fresh mmap, and gives heap memory above its trim threshold back to the system: a HiFi-GAN
decoder that makes 14 MB arrays for every sentence then pays first-touch page faults for each (0.18 s of a
2.3 s run of 20 sentences, Intel Xeon). onnxruntime's arena allocator keeps its memory; so does this, for
glibc: blocks up to 32 MB come from the heap and freed heap memory is kept for the next call. The cost is
resident memory that stays at its high-water mark, which a speech process reaches on its first sentence.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 1 << 30  # keep up to 1 GiB of freed heap memory

_done = False


def keep_freed_host_memory() -> bool:
    """Set glibc's mmap and trim thresholds once per process; False where the C library is not glibc (macOS,
    Windows, musl), which keep their own behaviour."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
