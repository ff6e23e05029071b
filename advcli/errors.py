"""User-facing errors: one clear message, exit code 2, never a traceback."""
from __future__ import annotations

import difflib


class AdvcliError(Exception):
    """An error in the user's input or configuration. ``str(e)`` is the whole message."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message + (f"\n  hint: {self.hint}" if self.hint else "")


def nearest(word: str, choices, n: int = 1) -> str | None:
    """The closest valid name to ``word`` (for 'did you mean ...?'), or None."""
    found = difflib.get_close_matches(str(word), [str(c) for c in choices], n=n, cutoff=0.5)
    return found[0] if found else None


def did_you_mean(word: str, choices) -> str:
    near = nearest(word, choices)
    return f" Did you mean {near!r}?" if near else ""


def is_disk_full(e: BaseException) -> bool:
    """An OSError (pyarrow's included, whose errno may be unset) saying the file system is full."""
    import errno

    return isinstance(e, OSError) and (e.errno in (errno.ENOSPC, errno.EDQUOT)
                                       or "No space left on device" in str(e) or "Disk quota exceeded" in str(e))


def disk_full(directory: str, what: str, need_bytes: int | None = None) -> AdvcliError:
    """The environment, not a bug (exit 2): ``directory`` ran out of room while advcli wrote ``what``;
    ``need_bytes``: about how much it needed there, where known."""
    import shutil

    try:
        free = f"{shutil.disk_usage(directory).free / 2**20:.0f} MiB free there now"
    except OSError:
        free = "its free space unknown"
    need = f"; about {need_bytes / 2**20:.0f} MiB were needed" if need_bytes else ""
    return AdvcliError(f"{directory}: no space left on the device while writing {what} ({free}{need}); "
                       "nothing was written", hint="free some space, or write elsewhere: -o on another file "
                                                   "system, TMPDIR=DIR for advcli's temporary files")
