"""Keep freed numpy temporaries in the heap (glibc ``mallopt``), so each timestamp does not page-fault.

A batch of 2,000 runs allocates temporaries of a few MB at every timestamp (a group history of
runs × w values, its masks). glibc serves blocks above its mmap threshold with fresh ``mmap`` and
returns them with ``munmap`` when freed, so every timestamp touches new pages (PeGaSus's deviation
of a (2000, 120) footprint pays for it at every timestamp).
:func:`keep_freed_memory` raises the mmap threshold to its maximum (32 MiB) and the trim threshold
to 512 MiB for the benchmark's process. Elsewhere (not glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 * 2**20, 512 * 2**20


@functools.cache
def keep_freed_memory() -> bool:
    """Tune glibc's allocator once per process; True when it took effect."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS libc)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
