"""Giving freed heap memory back to the operating system between chunks.

torch allocates CPU tensors with the C library's ``malloc``. glibc keeps what a chunk freed in its
heaps (one per thread that allocates: the compute thread and the statistics thread here) for
reuse, and its dynamic mmap threshold moves chunk-sized blocks (4-16 MB) from ``mmap`` onto those
heaps after the first free. Over a long stream, fragmentation makes the retained part grow with
the number of chunks, not the chunk size: measured on the 140M-token dump, the row pass alone
retained ~190 MB that ``malloc_trim(0)`` returned (docs/performance.md).

Serving every large block by ``mmap`` instead (``M_MMAP_THRESHOLD``) bounds it as well but costs
a page fault per page of every new tensor: +4 s of system time on the 17M-token dump. Trimming
every few chunks costs a few milliseconds each.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

_libc = None
if sys.platform.startswith("linux"):
    try:
        _lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
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
