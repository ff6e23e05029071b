"""Temporary outputs: the tag in their names and whether the run that wrote one is still alive.

Every output is written under a temporary name ``.NAME.advcli-tmp-PID`` (beside a local target, or as
a key beside an object-storage target) and renamed or copied into place only when complete. A later run
to the same target removes the temporary files of runs whose process is gone.
"""
from __future__ import annotations

import os

TMP_TAG = ".advcli-tmp-"


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
    probe = os.path.join(d, f".advcli-probe{TMP_TAG}{os.getpid()}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise AdvcliError(f"{what}: {d} is not writable ({e.strerror})",
                          hint="choose another path or fix its permissions") from None
