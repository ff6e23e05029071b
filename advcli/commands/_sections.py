"""Reports made of sections (``advcli audit``, ``advcli filter``): one list of sections, rendered as
JSON (the report dict itself), Markdown or a self-contained HTML page in the style of advcli.report.

A section is ``(title, kind, payload)``: ``kv`` [(label, value)], ``table`` (header, rows), ``text``
[lines], ``svg`` [svg strings] (HTML only).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..version import stamp  # noqa: F401  (re-exported: the commands stamp their reports)

Section = tuple[str, str, Any]


def render_sections(report: dict, fmt: str, title: str, sections: list[Section]) -> str:
    from ..report import CSS, esc, html_table, md_table

    if fmt == "json":
        return json.dumps(report, indent=2, default=str) + "\n"
    if fmt == "md":
        L = [f"# {title}", "", f"advcli {report.get('advcli_version', '')} · {report.get('created', '')}"]
        for name, kind, payload in sections:
            if kind == "svg" or not payload:
                continue
            L += ["", f"## {name}", ""]
            if kind == "kv":
                L += md_table(["", ""], [[a, b] for a, b in payload])
            elif kind == "table":
                L += md_table(payload[0], payload[1])
            else:
                L += [f"- {x}" for x in payload]
        return "\n".join(L) + "\n"
    H = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
         "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">",
         f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main class=\"advcli\">",
         f"<h1>{esc(title)}</h1>",
         f'<div class="sub">advcli {esc(report.get("advcli_version", ""))} · {esc(report.get("created", ""))}</div>']
    for name, kind, payload in sections:
        if not payload:
            continue
        H.append(f"<h2>{esc(name)}</h2>")
        if kind == "kv":
            H.append(html_table(None, [[a, b] for a, b in payload]))
        elif kind == "table":
            H.append('<div class="scroll">' + html_table(payload[0], payload[1]) + "</div>")
        elif kind == "svg":
            H.append('<div class="grid">' + "".join(p for p in payload if p) + "</div>")
        else:
            H.append("".join(f"<p>{esc(x)}</p>" for x in payload))
    H.append("</main></body></html>\n")
    return "\n".join(H)


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
    import json

    import typer

    rep = stamp(rep, command)
    if report:
        write(report, rep, sections_of)
    if json_out:
        typer.echo(json.dumps(rep, default=str))
    elif not quiet:
        show(rep)
        if report:
            typer.echo(f"report: {report}", err=True)
    return rep
