"""``advcli ARGV`` inside this process, for the tools that run many commands (one torch import for all)."""
from __future__ import annotations

import contextlib
import io


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``advcli ARGV`` in this process (advcli.cli.main): (exit code, the last line it printed to stderr)."""
    from advcli.cli import exit_code_of

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = exit_code_of(argv)
    lines = [ln.strip() for ln in err.getvalue().splitlines() if ln.strip()]
    return code, lines[-1] if lines else ""
