"""Temporary outputs: the tag in their names and whether the run that wrote one is still alive.

Every output is written under a temporary name ``.NAME.advcli-tmp-PID`` (beside a local target, or as
a key beside an object-storage target) and renamed or copied into place only when complete. A later run
to the same target removes the temporary files of runs whose process is gone.
"""
from __future__ import annotations

import os
import re
import threading

TMP_TAG = ".advcli-tmp-"
# a file name is at most 255 bytes: a temporary name adds a dot, the tag, PID-TID and suffixes (up to ~90 bytes) to
# the output's name, so a long name is cut to its first bytes and a hash of the whole (:func:`temp_stem`)
LONG_NAME_BYTES = 150


def temp_stem(name: str) -> str:
    """The output's file name as its temporary names carry it: ``name`` itself, or for a name over
    :data:`LONG_NAME_BYTES` bytes its first 100 bytes, ``~`` and 12 hex digits of its hash (one name, one stem:
    the next run's sweep finds the leftovers by it)."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= LONG_NAME_BYTES:
        return name
    import hashlib

    head = raw[:100].decode("utf-8", "ignore")
    return f"{head}~{hashlib.sha256(raw).hexdigest()[:12]}"


def owner_tag() -> str:
    """What a temporary name carries after :data:`TMP_TAG`: the PID, and outside the main thread the thread's
    id too (``PID-TID``), so that two library calls in two threads of one process writing the same output
    each write a file of their own (the last to finish is the output, whole, as between two processes).
    The leading digits are the PID, by which a later run tells a dead process's leftovers."""
    if threading.current_thread() is threading.main_thread():
        return str(os.getpid())
    return f"{os.getpid()}-{threading.get_ident()}"


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_local_destination(what: str, directory: str, *, create: bool = False) -> None:
    """Refuse, before any work, a local destination that cannot be written: ``directory`` (where the
    file ``what`` names goes) must exist and take a new file; with ``create``, its nearest existing
    ancestor must (the directory is made when written, as TensorBoard's and wandb's are). A probe file
    is created and removed: ``os.access`` says yes to root even on a read-only file system or /proc."""
    from ..errors import AdvcliError

    d = os.path.abspath(directory)
    if create:
        while not os.path.exists(d) and os.path.dirname(d) != d:
            d = os.path.dirname(d)
    if not os.path.isdir(d):
        raise AdvcliError(f"{what}: {'' if create else 'the directory '}{d} "
                          f"{'is not a directory' if os.path.exists(d) else 'does not exist'}",
                          hint=f"create it: mkdir -p {d}" if not os.path.exists(d) else "choose another path")
    e = create_and_remove(os.path.join(d, f".advcli-probe{TMP_TAG}{os.getpid()}"))
    if e is not None:
        raise AdvcliError(f"{what}: {d} is not writable ({e.strerror})",
                          hint="choose another path or fix its permissions")


def create_and_remove(probe: str) -> OSError | None:
    """Create the new file ``probe`` and remove it: None when that worked, else the error. The one test
    that a directory takes a new file (``os.access`` says yes to root on a read-only file system)."""
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        return e
    return None


# advcli's own files and directories in the system's temporary directory (TMPDIR) carry the PID of the
# process that made them, so that one a killed process (SIGKILL, a lost node) left behind is recognised
# and removed by a later run (:func:`sweep_stale`): converted trainer dumps, in-memory tables written for
# a library call, the audit's and compare's scratch, the local copy of an output bound for object storage
_STALE = re.compile(r"^(?:advcli-(?:import|frames|audit|compare|ray-part)-(\d+)-|\.advcli-upload-.*"
                    + re.escape(TMP_TAG) + r"(\d+)(?:-\d+)?$)")
_swept: set[str] = set()


def scratch_prefix(kind: str) -> str:
    """``tempfile.mkdtemp(prefix=...)`` of this process's scratch directory ``kind`` (import, frames, ...)."""
    return f"advcli-{kind}-{os.getpid()}-"


def sweep_stale(directory: str | None = None) -> list[str]:
    """Remove from ``directory`` (default TMPDIR) what advcli processes that are gone left there; once
    a process. Returns the paths removed. Another user's files, or a live process's, are left alone."""
    import shutil
    import tempfile

    directory = directory or tempfile.gettempdir()
    if directory in _swept:
        return []
    _swept.add(directory)
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = _STALE.match(name)
        if m is None:
            continue
        pid = int(m.group(1) or m.group(2))
        if pid == os.getpid() or pid_alive(pid):
            continue
        path = os.path.join(directory, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
            removed.append(path)
        except OSError:  # another user's, or removed meanwhile
            pass
    return removed
