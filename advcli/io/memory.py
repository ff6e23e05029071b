"""Giving freed heap memory back to the operating system between chunks.

torch allocates CPU tensors with the C library's ``malloc``. glibc keeps what a chunk freed in its
heaps (one per thread that allocates: the compute thread and the statistics thread here) for
reuse, and its dynamic mmap threshold moves chunk-sized blocks (4-16 MB) from ``mmap`` onto those
heaps after the first free. Over a long stream, fragmentation makes the retained part grow with
the number of chunks, not the chunk size; ``malloc_trim(0)`` returns it (docs/performance.md).

Serving every large block by ``mmap`` instead (``M_MMAP_THRESHOLD``) bounds it as well but costs
a page fault per page of every new tensor, seconds of system time on a large dump. Trimming every
few chunks costs a few milliseconds each.
"""
from __future__ import annotations

import ctypes
import sys

_libc = None
if sys.platform.startswith("linux"):
    try:
        try:  # glibc's soname first: find_library("c") asks ldconfig, milliseconds at every start
            _lib = ctypes.CDLL("libc.so.6")
        except OSError:
            import ctypes.util  # imports tempfile: only where the soname differs

            _lib = ctypes.CDLL(ctypes.util.find_library("c"))
        if hasattr(_lib, "malloc_trim"):  # glibc (musl has none)
            _libc = _lib
    except OSError:  # pragma: no cover
        _libc = None


def trim() -> bool:
    """Return the free pages of every malloc heap to the OS (glibc); False where unavailable."""
    if _libc is None:
        return False
    _libc.malloc_trim(0)
    return True


# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 8 << 20  # above every per-chunk tensor of a 512k-token chunk (2-4 MiB)
TRIM_THRESHOLD = 64 << 20


def tune_for_streaming() -> bool:
    """Fixed malloc thresholds for a streaming run (glibc; False where unavailable).

    By default glibc serves a chunk-sized tensor by ``mmap`` until the first one is freed, then
    from the heap, and gives the heap's top back to the OS whenever more than twice that is free:
    every chunk's temporaries are faulted in page by page again. With blocks up to 8 MiB always
    from the heap and automatic trimming only above 64 MiB free, they are reused, at no cost in peak
    memory (the periodic :func:`trim` still bounds it; docs/performance.md). Process-wide, so only
    the ``advcli`` command calls it, not the library."""
    if _libc is None or not hasattr(_libc, "mallopt"):
        return False
    ok = _libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return bool(_libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok)
