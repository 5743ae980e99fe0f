"""numba's on-disk kernel cache made safe for several processes compiling at once.

numba writes a cached function's index (which argument types are in which data file) and its data files
without a lock (numba issues #4807 and #10128). Two processes that compile the same function for different
argument types at the same moment (a `blazr serve` and a `blazr generate` on their first start after an
upgrade, or two test runs) can both read the index before the other's entry, both pick data file number 1,
and one signature's entry then points at the other's machine code: wrong results (NaN logits were seen) until
the cache is deleted. Here a save runs under an exclusive lock on a file beside the index (numba's save reads
the index again inside it, so the second process takes the next number) and a load under a shared one.

Every module with `@njit(cache=True)` functions imports this module, which installs the locks once. POSIX
only (fcntl); on Windows numba's own behaviour is kept.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


def install() -> None:
    """Wrap numba's IndexDataCacheFile.save and .load in file locks (idempotent)."""
    if fcntl is None:
        return
    from numba.core import caching

    cls = caching.IndexDataCacheFile
    if getattr(cls, "_blazr_locked", False):
        return
    save, load = cls.save, cls.load

    def locked_save(self, key, data):
        with index_lock(self._index_path, exclusive=True):
            return save(self, key, data)

    def locked_load(self, key):
        with index_lock(self._index_path, exclusive=False):
            return load(self, key)

    cls.save, cls.load, cls._blazr_locked = locked_save, locked_load, True


@contextlib.contextmanager
def index_lock(index_path: str, exclusive: bool) -> Iterator[None]:
    """Hold a lock on `<index>.lock` (created when missing) for the block; without one (a read-only cache
    directory, where numba writes nothing either) the block runs unlocked."""
    try:
        fd = os.open(index_path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


install()
