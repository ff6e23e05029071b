"""Asking the kernel to read the inputs while the process is still starting.

A run spends its first seconds importing torch before the first pass opens an input. With a cold
page cache (a fresh machine, a network volume, an input written by another job) the passes then wait
on the disk as well. :func:`start` hands each
local input to ``posix_fadvise(POSIX_FADV_WILLNEED)`` on a daemon thread at the start of the
command: the kernel queues the reads and fills the page cache while the interpreter imports, so
the disk time overlaps the start-up instead of adding to it. It costs nothing when the files are
already cached, changes no result, and never fails a run: any error (a missing file, a filesystem
without fadvise, an object-storage URI, which is read over the network by pyarrow) just skips that
input, and the command's own reading reports real problems with its usual messages.

The bytes asked for are bounded by :data:`MAX_FRACTION` of the memory the kernel reports available,
so a dump larger than memory does not push out the page cache it is about to need (the passes read
the rest as they go).
"""
from __future__ import annotations

import os
import threading

from ..errors import AdvcliError
from . import remote

MAX_FRACTION = 0.5  # of MemAvailable: the most bytes asked for, over all inputs


def local_files(specs: list[str]) -> list[str]:
    """The local files ``specs`` name (:func:`advcli.io.reader.expand_inputs`); URIs and specs that
    name nothing are left out (the command's reader reports those)."""
    from .reader import expand_inputs

    out: list[str] = []
    for spec in specs:
        if remote.is_uri(remote.local_path(str(spec))):
            continue
        try:
            out.extend(expand_inputs([spec]))
        except AdvcliError:
            continue
    return out


def available_bytes() -> int | None:
    """``MemAvailable`` from /proc/meminfo (Linux), else None."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def advise(paths: list[str], budget: int | None) -> int:
    """``POSIX_FADV_WILLNEED`` on each file, in order, until ``budget`` bytes (None: no bound) are
    asked for; returns the bytes asked for. Files that cannot be opened are skipped."""
    asked = 0
    for path in paths:
        if budget is not None and asked >= budget:
            break
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            length = size if budget is None else min(size, budget - asked)
            os.posix_fadvise(fd, 0, length, os.POSIX_FADV_WILLNEED)
            asked += length
        except OSError:
            pass
        finally:
            os.close(fd)
    return asked


def start(specs: list[str]) -> threading.Thread | None:
    """Start reading the local inputs into the page cache in the background (see the module
    docstring); returns the thread (tests join it), or None where the platform has no fadvise."""
    if not hasattr(os, "posix_fadvise"):
        return None
    avail = available_bytes()
    budget = None if avail is None else int(avail * MAX_FRACTION)

    def work() -> None:
        try:
            advise(local_files(specs), budget)
        except Exception:  # noqa: BLE001 - a hint to the kernel must never fail a run
            pass

    t = threading.Thread(target=work, name="advcli-readahead", daemon=True)
    t.start()
    return t
