"""Reports made of sections (``advcli audit``, ``advcli filter``): one list of sections, rendered as
JSON (the report dict itself), Markdown or a self-contained HTML page in the style of advcli.report.

A section is ``(title, kind, payload)``: ``kv`` [(label, value)], ``table`` (header, rows), ``text``
[lines], ``svg`` [svg strings] (HTML only).
"""
from __future__ import annotations

from collections.abc import Callable

from ..report.sections import Section, render_sections  # noqa: F401  (the commands render with them)
from ..version import stamp  # noqa: F401  (re-exported: the commands stamp their reports)


def write(path: str, report: dict, sections_of: Callable[[dict], tuple[str, list[Section]]]) -> None:
    from ..report import write_report

    def renderer(rep: dict, fmt: str) -> str:
        title, sections = sections_of(rep)
        return render_sections(rep, fmt, title, sections)

    write_report(path, report, renderer)


def emit(rep: dict, command: str, report: str | None, json_out: bool, quiet: bool,
         sections_of: Callable[[dict], tuple[str, list[Section]]], show: Callable[[dict], None]) -> dict:
    """What audit and filter do with their result: stamp it, write ``--report``, then print it as JSON
    (``--json``) or as a summary (``show``) unless ``--quiet``. Returns the stamped report."""

    import typer

    rep = stamp(rep, command)
    if report:
        write(report, rep, sections_of)
    if json_out:
        from ..report.primitives import to_json

        typer.echo(to_json(rep))
    elif not quiet:
        show(rep)
        if report:
            typer.echo(f"report: {report}", err=True)
    return rep
