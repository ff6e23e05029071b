"""The rendering primitives every part of a report shares: numbers and examples as text, Markdown and HTML
tables, the page's CSS, and the inline SVG plots (histogram, lines). Plain values to strings; this module
imports nothing else of advcli, and the modules above it (content, health, terminal, markdown, html,
output) import it, never the other way round."""
from __future__ import annotations

import html as _html
import json
import math
from typing import Any


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
    return (v if isinstance(v, str) else fmt_num(v)).replace("|", "\\|").replace("\n", " ")


def md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out


# ----------------------------------------------------------------------------------------- html
PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"]


def esc(x: Any) -> str:
    return _html.escape(x if isinstance(x, str) else fmt_num(x))


def nice(v: float) -> str:
    return f"{v:.3g}"


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;color:#111;
background:#f7f7f8}
main{max-width:1200px;margin:0 auto;padding:24px;overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}.scroll td,.scroll th{white-space:nowrap}
details{margin-top:4px}summary{cursor:pointer;font-size:12px;color:#555}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666;margin-bottom:16px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}
.card{background:#fff;border:1px solid #e2e2e6;border-radius:8px;padding:10px 14px;min-width:140px}
.card .v{font-size:20px;font-weight:600}.card .k{color:#666;font-size:12px}
table{border-collapse:collapse;background:#fff;border:1px solid #e2e2e6;font-size:13px}
td,th{padding:4px 10px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
th{background:#f0f0f3;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.grid{display:flex;flex-wrap:wrap;gap:14px}
.plot{background:#fff;border:1px solid #e2e2e6;border-radius:6px}
.plot .t{font-size:13px;font-weight:600;text-anchor:middle}.plot .l{font-size:11px;fill:#555;text-anchor:middle}
.plot .ax{stroke:#888;stroke-width:1}.plot .zero{stroke:#999;stroke-dasharray:3 3}
.diag{background:#fff7ed;border-left:4px solid #ea580c;padding:8px 12px;margin:8px 0}
.warn{background:#fefce8;border-left:4px solid #ca8a04;padding:8px 12px;margin:8px 0}
.ok{color:#16a34a}
pre{background:#fff;border:1px solid #e2e2e6;padding:10px;overflow:auto;font-size:12px}
.cols{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
"""


def html_table(header: list[str] | None, rows: list[list[Any]]) -> str:
    out = ["<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
    for r in rows:
        out.append("<tr>" + "".join(f'<td class="n">{esc(c)}</td>' if not isinstance(c, str) else f"<td>{esc(c)}</td>"
                                    for c in r) + "</tr>")
    out.append("</table>")
    return "".join(out)


# ------------------------------------------------------------------------------------------ svg
def svg_histogram(edges: list, counts: list, title: str, w: int = 560, h: int = 220) -> str:
    """A bar chart of ``counts`` over ``edges`` (len(edges) = len(counts) + 1), as inline SVG."""
    n = min(len(counts), len(edges) - 1)
    if n <= 0:
        return ""
    x0, x1, y0, y1 = 48, w - 12, h - 34, 26
    lo, hi = float(edges[0]), float(edges[n])
    span = (hi - lo) or 1.0
    top = max(max(counts[:n]), 1)
    sx = lambda v: x0 + (float(v) - lo) / span * (x1 - x0)  # noqa: E731
    parts = [f'<svg class="plot" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
             f'aria-label="{esc(title)}">',
             f'<text x="{w / 2}" y="16" class="t">{esc(title)}</text>',
             f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" class="ax"/>',
             f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" class="ax"/>']
    for i in range(n):
        c = counts[i]
        if not c:
            continue
        bx, bw = sx(edges[i]), max(sx(edges[i + 1]) - sx(edges[i]) - 0.6, 0.8)
        bh = (y0 - y1) * c / top
        parts.append(f'<rect x="{bx:.2f}" y="{y0 - bh:.2f}" width="{bw:.2f}" height="{bh:.2f}" fill="{PALETTE[0]}">'
                     f'<title>[{esc(edges[i])}, {esc(edges[i + 1])}): {c:,}</title></rect>')
    if lo < 0 < hi:
        zx = sx(0)
        parts.append(f'<line x1="{zx:.2f}" y1="{y0}" x2="{zx:.2f}" y2="{y1}" class="zero"/>')
    parts += [f'<text x="{x0}" y="{y0 + 14}" class="l" text-anchor="start">{nice(lo)}</text>',
              f'<text x="{x1}" y="{y0 + 14}" class="l" text-anchor="end">{nice(hi)}</text>',
              f'<text x="{x0 - 4}" y="{y1 + 8}" class="l" text-anchor="end">{top:,}</text>',
              f'<text x="{x0 - 4}" y="{y0}" class="l" text-anchor="end">0</text>', "</svg>"]
    return "".join(parts)


def svg_lines(xs: list, series: dict[str, list], title: str, xlabel: str = "", w: int = 560, h: int = 220,
              band: tuple[list, list] | None = None) -> str:
    """Line chart of each series over ``xs`` (None values break the line); optional shaded band."""
    pts_all = [float(y) for ys in series.values() for y in ys if is_num(y)]
    if band:
        pts_all += [float(y) for ys in band for y in ys if is_num(y)]
    if not xs or not pts_all:
        return ""
    x0, x1, y0, y1 = 56, w - 12, h - 34, 26
    xlo, xhi = float(min(xs)), float(max(xs))
    ylo, yhi = min(pts_all), max(pts_all)
    if yhi == ylo:
        ylo, yhi = ylo - 0.5, yhi + 0.5
    xspan = (xhi - xlo) or 1.0
    sx = lambda v: x0 + (float(v) - xlo) / xspan * (x1 - x0)  # noqa: E731
    sy = lambda v: y0 - (float(v) - ylo) / (yhi - ylo) * (y0 - y1)  # noqa: E731
    parts = [f'<svg class="plot" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
             f'aria-label="{esc(title)}">',
             f'<text x="{w / 2}" y="16" class="t">{esc(title)}</text>',
             f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" class="ax"/>',
             f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" class="ax"/>']
    if ylo < 0 < yhi:
        parts.append(f'<line x1="{x0}" y1="{sy(0):.2f}" x2="{x1}" y2="{sy(0):.2f}" class="zero"/>')
    if band:
        lo_ys, hi_ys = band
        up = [(sx(x), sy(y)) for x, y in zip(xs, hi_ys) if is_num(y)]
        dn = [(sx(x), sy(y)) for x, y in zip(xs, lo_ys) if is_num(y)]
        if up and dn:
            poly = " ".join(f"{a:.2f},{b:.2f}" for a, b in up + dn[::-1])
            parts.append(f'<polygon points="{poly}" fill="{PALETTE[0]}" fill-opacity="0.15" stroke="none"/>')
    for si, (name, ys) in enumerate(series.items()):
        color = PALETTE[si % len(PALETTE)]
        segs, cur = [], []
        for x, y in zip(xs, ys):
            if is_num(y):
                cur.append(f"{sx(x):.2f},{sy(y):.2f}")
            elif cur:
                segs.append(cur)
                cur = []
        if cur:
            segs.append(cur)
        for seg in segs:
            if len(seg) == 1:
                cx, cy = seg[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>')
            else:
                parts.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{color}" stroke-width="1.8"/>')
        if len(xs) <= 40:
            for x, y in zip(xs, ys):
                if is_num(y):
                    parts.append(f'<circle cx="{sx(x):.2f}" cy="{sy(y):.2f}" r="2.5" fill="{color}">'
                                 f'<title>{esc(name)} @ {esc(x)}: {esc(y)}</title></circle>')
        if len(series) > 1:
            parts.append(f'<text x="{x0 + 8}" y="{y1 + 14 + 13 * si}" class="l" fill="{color}" '
                         f'text-anchor="start">{esc(name)}</text>')
    parts += [f'<text x="{x0}" y="{y0 + 14}" class="l" text-anchor="start">{nice(xlo)}</text>',
              f'<text x="{x1}" y="{y0 + 14}" class="l" text-anchor="end">{nice(xhi)}</text>',
              f'<text x="{(x0 + x1) / 2}" y="{y0 + 26}" class="l">{esc(xlabel)}</text>',
              f'<text x="{x0 - 4}" y="{y1 + 8}" class="l" text-anchor="end">{nice(yhi)}</text>',
              f'<text x="{x0 - 4}" y="{y0}" class="l" text-anchor="end">{nice(ylo)}</text>', "</svg>"]
    return "".join(parts)
