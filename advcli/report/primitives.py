"""The rendering primitives every part of a report shares: numbers and examples as text, Markdown and HTML
tables, the page's CSS (the plots are advcli.report.charts). Plain values to strings; this module
imports nothing else of advcli, and the modules above it (charts, content, health, terminal, markdown, html,
output) import it, never the other way round."""
from __future__ import annotations

import html as _html
import json
import math
from typing import Any


def point_at_devnull(stream) -> None:
    """The reader of ``stream`` (stdout, stderr) has gone: its file descriptor now writes to /dev/null, so that
    nothing more (later messages, the interpreter's last flush) fails on it."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def finite_json(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float written as the string ``"nan"``, ``"inf"``, ``"-inf"``: strict JSON
    has no such numbers, and Python's ``Infinity`` literal is refused by strict parsers (an audit whose logged value
    is NaN has an infinite difference)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def to_json(obj: Any, indent: int | None = None) -> str:
    """A report as strict JSON (:func:`finite_json`; anything else JSON lacks as its ``str``)."""
    return json.dumps(finite_json(obj), indent=indent, default=str)


def fmt_num(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-4):
            return f"{v:.4e}"
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt_num(x) for x in v) + "]"
    return str(v)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def short_examples(ex: Any, n: int = 2) -> str:
    """A one-line hint of a diagnostic's examples: their group ids or row numbers."""
    if not isinstance(ex, list) or not ex:
        return ""
    out = []
    for e in ex[:n]:
        if isinstance(e, dict):
            if e.get("group") is not None:
                g = str(e["group"])
                out.append(f"group {g[:13] + '…' if len(g) > 14 else g}")
            elif e.get("row") is not None:
                out.append(f"row {e['row']}")
            elif e.get("rows"):
                out.append(f"rows {fmt_examples(e['rows'], 3)}")
        else:
            out.append(str(e)[:40])
    more = f", … {len(ex)} listed" if len(ex) > n else ""
    return ", ".join(out) + more if out else ""


def fmt_examples(ex: Any, n: int = 5) -> str:
    if isinstance(ex, list):
        items = [json.dumps(e, default=str) if isinstance(e, (dict, list)) else str(e) for e in ex[:n]]
        return ", ".join(items) + (f", … ({len(ex)} listed)" if len(ex) > n else "")
    return str(ex)


# ------------------------------------------------------------------------------------- markdown
def _md_cell(v: Any) -> str:
    """A value as a Markdown table cell: ``|`` escaped, a newline a space, and ``<`` as ``&lt;`` (a dump's prompt
    text such as ``<script>`` is shown, never taken as HTML by a renderer)."""
    return (v if isinstance(v, str) else fmt_num(v)).replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A Markdown table; header cells escaped as the body's are (a header ``mean |A−B|`` split into cells)."""
    out = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out


# ----------------------------------------------------------------------------------------- html
PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"]


def esc(x: Any) -> str:
    return _html.escape(x if isinstance(x, str) else fmt_num(x))


# Every rule but the page's own (body, main) is scoped under .advcli, so a fragment of the report (a summary
# block, a plot: advcli.report.html) shows the same inside a notebook's page without touching the rest.
FRAGMENT_CSS = """
.advcli{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#111}
.advcli .scroll{overflow-x:auto;max-width:100%}.advcli .scroll td,.advcli .scroll th{white-space:nowrap}
.advcli details{margin-top:4px}.advcli summary{cursor:pointer;font-size:12px;color:#555}
.advcli h1{font-size:22px;margin:0 0 4px}
.advcli h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid #ddd;padding-bottom:4px}
.advcli .sub{color:#666;margin-bottom:16px}
.advcli .cards{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}
.advcli .card{background:#fff;border:1px solid #e2e2e6;border-radius:8px;padding:10px 14px;min-width:140px}
.advcli .card .v{font-size:20px;font-weight:600;font-variant-numeric:tabular-nums}
.advcli .card .k{color:#666;font-size:12px}.advcli .card .r{color:#444;font-size:12px;font-variant-numeric:tabular-nums}
.advcli table{border-collapse:collapse;background:#fff;border:1px solid #e2e2e6;font-size:13px}
.advcli td,.advcli th{padding:4px 10px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
.advcli th{background:#f0f0f3;font-weight:600}.advcli td.n{text-align:right;font-variant-numeric:tabular-nums}
.advcli .grid{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}
.advcli .plot{border:1px solid #e2e2e6;border-radius:6px;max-width:100%;height:auto}
.advcli .plot .hov:hover{fill-opacity:.07}.advcli .plot .bar:hover{fill-opacity:.75}
.advcli .diag{border-left:4px solid;padding:8px 12px;margin:8px 0}
.advcli .diag.warning{background:#fff7ed;border-color:#ea580c}
.advcli .diag.info{background:#f1f5f9;border-color:#94a3b8}
.advcli .badge{display:inline-block;font-size:11px;font-weight:600;text-transform:uppercase;letter-spacing:.03em;
border-radius:3px;padding:0 5px;margin-right:6px}
.advcli .warning .badge{background:#ea580c;color:#fff}.advcli .info .badge{background:#cbd5e1;color:#1e293b}
.advcli .warn{background:#fefce8;border-left:4px solid #ca8a04;padding:8px 12px;margin:8px 0}
.advcli .ok{color:#16a34a}
.advcli pre{background:#fff;border:1px solid #e2e2e6;padding:10px;overflow:auto;font-size:12px}
.advcli .cols{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
"""
# the whole page's: the fragment rules and the page around them (<main class="advcli">)
CSS = """
body{margin:0;background:#f7f7f8}
main{max-width:1200px;margin:0 auto;padding:24px;overflow-wrap:anywhere}
""" + FRAGMENT_CSS


def html_table(header: list[str] | None, rows: list[list[Any]]) -> str:
    out = ["<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
    for r in rows:
        out.append("<tr>" + "".join(f'<td class="n">{esc(c)}</td>' if not isinstance(c, str) else f"<td>{esc(c)}</td>"
                                    for c in r) + "</tr>")
    out.append("</table>")
    return "".join(out)
