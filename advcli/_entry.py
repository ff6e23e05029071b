"""The ``advcli`` command's entry point.

First, where ``advcli server start`` left a server for this installation (:mod:`advcli.server`), the
command is handed to it and this process only waits for its status: no torch import here. Otherwise
it imports the CLI inside a guard, so that a Ctrl-C during the first fraction of a second (the imports
of typer, rich, pyarrow) ends like one during a run — a one-line message and exit status 130 — instead
of a Python traceback."""
from __future__ import annotations

import os
import sys

from .server import INTERRUPTED_AT_START


def _served() -> int | None:
    """The exit status of the command run by the server; None to run it in this process."""
    mode = os.environ.get("ADVCLI_SERVER", "auto").lower()
    if mode in ("off", "0", "no", "false") or sys.argv[1:2] == ["server"]:
        return None
    required = mode == "require"
    if not required:  # the common case costs one stat: is there a socket at all?
        from .server import ServerDirError, socket_path

        try:
            if not os.path.exists(socket_path()):
                return None
        except ServerDirError:
            return None
    from .server.client import hand_over

    return hand_over(sys.argv, required)


def _std_streams_open() -> None:
    """A standard stream the command was started without (``advcli run ... >&-``, ``2>&-``) is /dev/null: the
    file descriptor filled, so that no file the command opens takes its number (a Parquet output on fd 1 would
    receive what is printed), and ``sys.stdout`` / ``sys.stderr`` (None then) made writable; what would have
    been printed there is dropped, as where a reader has gone."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one, unless a lower is also free
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - for the whole process
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    if sys.stdin is None:
        sys.stdin = open(0, closefd=False)  # noqa: SIM115


def main() -> None:
    _std_streams_open()
    try:
        code = _served()
        if code is not None:
            sys.exit(code)
        from .cli import main as cli_main
    except KeyboardInterrupt:
        _interrupted_at_start()
    except Exception as e:
        from .errors import caused_by_interrupt

        if not caused_by_interrupt(e):  # Python wraps a Ctrl-C that lands while a class is built
            raise
        _interrupted_at_start()
    cli_main()
    _finished()


def _interrupted_at_start() -> None:
    sys.stderr.write(INTERRUPTED_AT_START)
    sys.exit(130)


def _finished() -> None:
    """The command has ended well (a run's outputs are in place): a Ctrl-C or SIGTERM during the interpreter's
    shutdown (torch's threads can make it last) is too late to stop anything, and must not end the process
    with a signal's status, as if nothing had been written (docs/errors.md)."""
    import signal

    for s in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(s, signal.SIG_IGN)
        except (ValueError, OSError):
            pass
