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
