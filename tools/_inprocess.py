"""``advcli ARGV`` inside this process, for the tools that run many commands (one torch import for all)."""
from __future__ import annotations

import contextlib
import io
import sys


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``advcli ARGV`` in this process (advcli.cli.main): (exit code, the last line it printed to stderr)."""
    from advcli.cli import main

    old, err = sys.argv, io.StringIO()
    sys.argv = ["advcli", *argv]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    lines = [ln.strip() for ln in err.getvalue().splitlines() if ln.strip()]
    return code, lines[-1] if lines else ""
