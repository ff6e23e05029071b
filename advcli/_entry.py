"""The ``advcli`` command's entry point: imports the CLI inside a guard, so that a Ctrl-C during the
first fraction of a second (the imports of typer, rich, pyarrow) ends like one during a run — a
one-line message and exit status 130 — instead of a Python traceback."""
from __future__ import annotations

import sys


def main() -> None:
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("advcli: error: interrupted while starting: nothing was read or written\n")
        sys.exit(130)
    cli_main()
