"""Command-line options that ``advcli run`` and ``advcli validate`` declare alike (one definition:
the same flag, metavar and help in both commands)."""
from __future__ import annotations

import typer

INPUTS = typer.Argument(..., metavar="INPUT", help="Input Parquet file(s), a directory or a glob.", show_default=False)
SET = typer.Option(None, "--set", "-s", metavar="KEY=VALUE", help="A flavor key, VALUE parsed as YAML. Repeatable.")
CONFIG = typer.Option(None, "--config", "-c", help="YAML or TOML file of the same keys.")
FROM = typer.Option(None, "--from", metavar="FORMAT", help="Read INPUT as this trainer dump format (default: "
                    "recognised from file names and keys; docs/formats.md).")
COLUMN = typer.Option(None, "--column", metavar="ROLE=NAME", help="Read a role from another column, e.g. reward=score.")
