"""Reports of a run or of a file's statistics: JSON, Markdown, self-contained HTML, and the terminal summary.

Everything here works on one plain, JSON-able **report dict** (built by :func:`build_report` from a
:class:`advcli.pipeline.RunResult`, or by ``advcli stats`` from a file), so the four renderings show the
same figures::

    {"report": "advcli/1", "advcli_version", "created", "command": "run" | "stats",
     "flavor", "settings" (the native keys given), "estimator" (name + parameters),
     "config" (the resolved canonical configuration),
     "inputs", "outputs", "rows", "tokens", "valid_tokens",
     "timings": {"seconds", "rows_per_s", "tokens_per_s", ...},
     "metrics": {name: number},          # verl names: critic/advantages/mean, response_length/max, ...
     "per_step": [{"step": s, name: number, ...}],
     "histograms": {name: {"edges": [...], "counts": [...]}},
     "by_position": {"positions": [...], "mean": [...], "std": [...], "lo": [...], "hi": [...],
                     "count": [...], "band": "mean ± 1 std"},   # advantage by token position
     "groups": {...},                    # group-level figures, when the run had groups
     "diagnostics": [{"kind", "count", "examples", "explanation"}],
     "warnings": [str]}

Fields a producer does not have are left out; every renderer copes. This module imports neither
torch nor numpy: writing a report costs nothing but the string building.

Files are written atomically (a temporary file beside the target, renamed into place), like the
Parquet outputs. The HTML page has no network assets: CSS inline, plots as inline SVG.
"""
from __future__ import annotations

import datetime as _dt
import html as _html
import json
import math
import os
from collections.abc import Iterable
from typing import Any

from . import __version__, report_health
from .errors import AdvcliError, did_you_mean

FORMATS = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}

# the figures the terminal summary and the headline of each report show, in order, when present
KEY_METRICS = [
    "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean", "critic/advantages/min",
    "critic/advantages/max", "critic/returns/mean", "critic/values/mean", "response_length/mean",
    "actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff",
    "rollout_corr/kl", "rollout_corr/chi2_token", "rollout_corr/rollout_is_mean",
    "rollout_corr/rollout_rs_masked_fraction",
]


# ------------------------------------------------------------------------------------- building
def _jsonable(x: Any) -> Any:
    """Plain JSON values: tensors/arrays to lists, numpy scalars to numbers, NaN/inf to strings."""
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "tolist"):  # numpy / torch
        return _jsonable(x.tolist())
    if hasattr(x, "item"):
        return _jsonable(x.item())
    if hasattr(x, "__dataclass_fields__"):
        return _jsonable(vars(x))
    return str(x)


def build_report(result, *, flavor: str | None = None, native: dict | None = None, command: str = "run",
                 note: str | None = None, extra: dict | None = None) -> dict:
    """The report dict of a :class:`~advcli.pipeline.RunResult` (fields read defensively)."""
    g = lambda name, default=None: getattr(result, name, default)  # noqa: E731
    cfg = g("config") or {}
    seconds = float(g("seconds", 0.0) or 0.0)
    rows, tokens = int(g("rows", 0) or 0), int(g("tokens", 0) or 0)
    timings = {"seconds": round(seconds, 4),
               "rows_per_s": round(rows / seconds, 1) if seconds > 0 else None,
               "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None}
    timings.update(dict(g("timings", None) or {}))
    rep = {
        "report": "advcli/1", "advcli_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command, "flavor": flavor, "settings": native or {}, "note": note,
        "estimator": cfg.get("estimator") if isinstance(cfg, dict) else None, "config": cfg,
        "inputs": list(g("inputs", []) or []), "outputs": list(g("outputs", []) or []),
        "rows": rows, "tokens": tokens, "valid_tokens": int(g("valid_tokens", 0) or 0),
        "timings": timings,
        "metrics": dict(g("metrics", None) or {}),
        "per_step": list(g("per_step", None) or []),
        "histograms": dict(g("histograms", None) or {}),
        "diagnostics": list(g("diagnostics", None) or []),
        "warnings": list(g("warnings", None) or []),
    }
    for name in ("by_position", "groups", "group_health"):
        if g(name) is not None:
            rep[name] = g(name)
    if extra:
        rep.update(extra)
    return _jsonable({k: v for k, v in rep.items() if v is not None})


# ------------------------------------------------------------------------------------- writing
def report_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise AdvcliError(f"--report {path}: unknown report format {ext or '(no extension)'!r}."
                          f"{did_you_mean(ext, ['.json', '.md', '.html'])}",
                          hint="name the file .json (every figure), .md (Markdown) or .html (a page with plots)")
    return FORMATS[ext]


def check_report_path(path: str, taken: Iterable[str] = ()) -> str:
    """Refuse a report path before any work: bad extension, missing directory, or an input/output path."""
    fmt = report_format(path)
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise AdvcliError(f"--report {path}: directory {d} does not exist")
    real = os.path.realpath(path)
    for p in taken:
        if p and os.path.realpath(p) == real:
            raise AdvcliError(f"--report {path}: is also an input or output of this run; choose another name")
    return fmt


def render(report: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(report, indent=2, sort_keys=False, default=str) + "\n"
    if fmt == "md":
        return to_markdown(report)
    if fmt == "html":
        return to_html(report)
    raise AdvcliError(f"unknown report format {fmt!r}")


def write_report(path: str, report: dict, renderer=None) -> str:
    """Write ``report`` to ``path`` in the format its extension names; atomically. Returns the format.
    ``renderer(report, fmt) -> str``: another command's own rendering (default :func:`render`)."""
    fmt = report_format(path)
    text = (renderer or render)(report, fmt)
    d, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(d, f".{name}.advcli-tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise AdvcliError(f"--report {path}: cannot write ({e.strerror or e})") from None
    return fmt


# ----------------------------------------------------------------------------------- formatting
def emit(report: dict, path: str | None, json_out: bool, show: bool) -> None:
    """What `run` and `stats` do with a finished report: write PATH, print JSON on stdout, or the summary."""
    if path:
        write_report(path, report)
    if json_out:
        print(json.dumps(report, default=str))
    elif show:
        import sys

        print_summary(report)
        if path:
            print(f"report: {path}", file=sys.stderr)


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


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def flat_step(entry: dict) -> dict:
    """A per-step entry with a nested ``metrics`` dict flattened into it."""
    out = {k: v for k, v in entry.items() if k != "metrics"}
    out.update(entry.get("metrics") or {})
    return out


def metric_sections(metrics: dict) -> list[tuple[str, list[tuple[str, Any]]]]:
    """Metrics grouped by their prefix (``critic/advantages/mean`` → section ``critic/advantages``)."""
    sections: dict[str, list] = {}
    for k, v in metrics.items():
        head, _, tail = k.rpartition("/")
        sections.setdefault(head or "other", []).append((tail or k, v))
    return list(sections.items())


def _step_columns(steps: list[dict]) -> list[str]:
    """The numeric per-step fields, in first-seen order, leaving out those that are None everywhere."""
    cols: list[str] = []
    for e in steps:
        for k, v in e.items():
            if k not in cols and (v is None or _is_num(v)):
                cols.append(k)
    return [c for c in cols if c == "step" or any(_is_num(e.get(c)) for e in steps)]


def headline(report: dict) -> list[tuple[str, str]]:
    """(label, text) pairs: what ran, on what, how fast."""
    est = report.get("estimator") or {}
    what = report.get("note") or " ".join(x for x in (report.get("flavor"), est.get("name")) if x)
    t = report.get("timings") or {}
    out = []
    if what:
        out.append(("ran", what))
    if report.get("settings"):
        out.append(("settings", ", ".join(f"{k}={json.dumps(v)}" for k, v in report["settings"].items())))
    out.append(("input", ", ".join(report.get("inputs") or []) or "–"))
    if report.get("outputs"):
        out.append(("output", ", ".join(report["outputs"])))
    out.append(("rows", f"{report.get('rows', 0):,}  ({report.get('tokens', 0):,} tokens, "
                        f"{report.get('valid_tokens', 0):,} with mask=1)"))
    if t.get("seconds"):
        rate = ""
        if t.get("rows_per_s"):
            rate = f"  ({t['rows_per_s']:,.0f} rows/s, {t.get('tokens_per_s', 0) / 1e6:,.2f} M tokens/s)"
        out.append(("time", f"{t['seconds']:.2f} s{rate}"))
    return out


def key_metrics(report: dict) -> list[tuple[str, Any]]:
    m = report.get("metrics") or {}
    keys = [k for k in KEY_METRICS if k in m]
    if not keys:  # older / minimal producers
        keys = [k for k in m if k.startswith("advantages/") or k.startswith("critic/")][:8]
    return [(k, m[k]) for k in keys]


# ------------------------------------------------------------------------------------- terminal
def print_summary(report: dict, console=None) -> None:
    """The rich summary on stderr: what ran, counts, speed, key metrics, diagnostics and warnings."""
    from rich.console import Console
    from rich.table import Table

    con = console or Console(stderr=True, highlight=False)
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold cyan", no_wrap=True)
    t.add_column(overflow="fold")
    for label, text in headline(report):
        t.add_row(label, _rich_escape(text))
    km = key_metrics(report)
    if km:
        t.add_row("", "")
        for k, v in km:
            t.add_row(k, fmt_num(v))
    steps = report.get("per_step") or []
    if len(steps) > 1:
        t.add_row("steps", f"{len(steps)} (per-step figures in --report or --json)")
    if report.get("group_health"):
        t.add_row("group health", _rich_escape(report_health.headline(report["group_health"])))
    for d in report.get("diagnostics") or []:
        count = d.get("count")
        if not count:
            continue
        ex = short_examples(d.get("examples"))
        unit = f" {d['unit']}" if d.get("unit") else ""
        t.add_row("[magenta]diagnostic[/]", _rich_escape(f"{d.get('kind')}: {fmt_num(count)}{unit}"
                                                         + (f" (e.g. {ex})" if ex else "")))
    for w in report.get("warnings") or []:
        t.add_row("[yellow]warning[/]", _rich_escape(str(w)))
    con.print(t)


def _rich_escape(s: str) -> str:
    from rich.markup import escape

    return escape(s)


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


def _md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out


def to_markdown(report: dict) -> str:
    title = "advcli statistics" if report.get("command") == "stats" else "advcli run report"
    L = [f"# {title}", "", f"advcli {report.get('advcli_version')} · {report.get('created', '')}", ""]
    L += _md_table(["", ""], [[a, b] for a, b in headline(report)])
    km = key_metrics(report)
    if km:
        L += ["", "## Key figures", ""] + _md_table(["metric", "value"], [[k, v] for k, v in km])
    metrics = report.get("metrics") or {}
    if metrics:
        L += ["", "## All metrics", ""]
        L += _md_table(["metric", "value"], [[k, v] for k, v in metrics.items()])
    steps = [flat_step(s) for s in report.get("per_step") or []]
    if steps:
        cols = _step_columns(steps)
        L += ["", "## Per step", ""] + _md_table(cols, [[s.get(c) for c in cols] for s in steps])
    groups = report.get("groups")
    if groups:
        L += ["", "## Groups", ""] + _md_table(["figure", "value"], [[k, v] for k, v in groups.items()
                                                                      if not isinstance(v, (dict, list))])
    L += report_health.markdown_lines(report.get("group_health"))
    for name, h in (report.get("histograms") or {}).items():
        edges, counts = h.get("edges") or [], h.get("counts") or []
        if not counts:
            continue
        L += ["", f"## Histogram: {name}", ""]
        top = max(counts) or 1
        rows = [[f"[{fmt_num(edges[i])}, {fmt_num(edges[i + 1])})", c, "█" * round(20 * c / top)]
                for i, c in enumerate(counts) if i + 1 < len(edges)]
        L += _md_table(["bin", "count", ""], rows)
    bp = report.get("by_position")
    if bp and bp.get("positions"):
        L += ["", "## Advantage by position", ""]
        cols = [c for c in ("mean", "std", "count") if bp.get(c)]
        idx = _thin(len(bp["positions"]), 24)
        L += _md_table(["position"] + cols, [[bp["positions"][i]] + [bp[c][i] for c in cols] for i in idx])
    diags = report.get("diagnostics") or []
    if diags:
        L += ["", "## Diagnostics", ""]
        for d in diags:
            L.append(f"- **{d.get('kind')}**: {fmt_num(d.get('count'))}. {d.get('explanation', '')}".rstrip())
            if d.get("examples"):
                L.append(f"  - examples: {fmt_examples(d['examples'])}")
    if report.get("warnings"):
        L += ["", "## Warnings", ""] + [f"- {w}" for w in report["warnings"]]
    if report.get("config"):
        L += ["", "## Resolved configuration", "", "```json", json.dumps(report["config"], indent=2, default=str),
              "```"]
    return "\n".join(L) + "\n"


def _thin(n: int, k: int) -> list[int]:
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


# ----------------------------------------------------------------------------------------- html
PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"]


def _e(x: Any) -> str:
    return _html.escape(x if isinstance(x, str) else fmt_num(x))


def _nice(v: float) -> str:
    return f"{v:.3g}"


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
             f'aria-label="{_e(title)}">',
             f'<text x="{w / 2}" y="16" class="t">{_e(title)}</text>',
             f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" class="ax"/>',
             f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" class="ax"/>']
    for i in range(n):
        c = counts[i]
        if not c:
            continue
        bx, bw = sx(edges[i]), max(sx(edges[i + 1]) - sx(edges[i]) - 0.6, 0.8)
        bh = (y0 - y1) * c / top
        parts.append(f'<rect x="{bx:.2f}" y="{y0 - bh:.2f}" width="{bw:.2f}" height="{bh:.2f}" fill="{PALETTE[0]}">'
                     f'<title>[{_e(edges[i])}, {_e(edges[i + 1])}): {c:,}</title></rect>')
    if lo < 0 < hi:
        zx = sx(0)
        parts.append(f'<line x1="{zx:.2f}" y1="{y0}" x2="{zx:.2f}" y2="{y1}" class="zero"/>')
    parts += [f'<text x="{x0}" y="{y0 + 14}" class="l" text-anchor="start">{_nice(lo)}</text>',
              f'<text x="{x1}" y="{y0 + 14}" class="l" text-anchor="end">{_nice(hi)}</text>',
              f'<text x="{x0 - 4}" y="{y1 + 8}" class="l" text-anchor="end">{top:,}</text>',
              f'<text x="{x0 - 4}" y="{y0}" class="l" text-anchor="end">0</text>', "</svg>"]
    return "".join(parts)


def svg_lines(xs: list, series: dict[str, list], title: str, xlabel: str = "", w: int = 560, h: int = 220,
              band: tuple[list, list] | None = None) -> str:
    """Line chart of each series over ``xs`` (None values break the line); optional shaded band."""
    pts_all = [float(y) for ys in series.values() for y in ys if _is_num(y)]
    if band:
        pts_all += [float(y) for ys in band for y in ys if _is_num(y)]
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
             f'aria-label="{_e(title)}">',
             f'<text x="{w / 2}" y="16" class="t">{_e(title)}</text>',
             f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" class="ax"/>',
             f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" class="ax"/>']
    if ylo < 0 < yhi:
        parts.append(f'<line x1="{x0}" y1="{sy(0):.2f}" x2="{x1}" y2="{sy(0):.2f}" class="zero"/>')
    if band:
        lo_ys, hi_ys = band
        up = [(sx(x), sy(y)) for x, y in zip(xs, hi_ys) if _is_num(y)]
        dn = [(sx(x), sy(y)) for x, y in zip(xs, lo_ys) if _is_num(y)]
        if up and dn:
            poly = " ".join(f"{a:.2f},{b:.2f}" for a, b in up + dn[::-1])
            parts.append(f'<polygon points="{poly}" fill="{PALETTE[0]}" fill-opacity="0.15" stroke="none"/>')
    for si, (name, ys) in enumerate(series.items()):
        color = PALETTE[si % len(PALETTE)]
        segs, cur = [], []
        for x, y in zip(xs, ys):
            if _is_num(y):
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
                if _is_num(y):
                    parts.append(f'<circle cx="{sx(x):.2f}" cy="{sy(y):.2f}" r="2.5" fill="{color}">'
                                 f'<title>{_e(name)} @ {_e(x)}: {_e(y)}</title></circle>')
        if len(series) > 1:
            parts.append(f'<text x="{x0 + 8}" y="{y1 + 14 + 13 * si}" class="l" fill="{color}" '
                         f'text-anchor="start">{_e(name)}</text>')
    parts += [f'<text x="{x0}" y="{y0 + 14}" class="l" text-anchor="start">{_nice(xlo)}</text>',
              f'<text x="{x1}" y="{y0 + 14}" class="l" text-anchor="end">{_nice(xhi)}</text>',
              f'<text x="{(x0 + x1) / 2}" y="{y0 + 26}" class="l">{_e(xlabel)}</text>',
              f'<text x="{x0 - 4}" y="{y1 + 8}" class="l" text-anchor="end">{_nice(yhi)}</text>',
              f'<text x="{x0 - 4}" y="{y0}" class="l" text-anchor="end">{_nice(ylo)}</text>', "</svg>"]
    return "".join(parts)


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


def _html_table(header: list[str] | None, rows: list[list[Any]]) -> str:
    out = ["<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>")
    for r in rows:
        out.append("<tr>" + "".join(f'<td class="n">{_e(c)}</td>' if not isinstance(c, str) else f"<td>{_e(c)}</td>"
                                    for c in r) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _step_plots(steps: list[dict]) -> list[str]:
    if len(steps) < 2:
        return []
    xs = [s.get("step") if _is_num(s.get("step")) else i for i, s in enumerate(steps)]
    cols = [c for c in _step_columns(steps) if c != "step"]
    chosen = [c for c in cols if c.endswith("/mean") or c in ("kl_coef", "kl", "actor/reward_kl_penalty",
                                                              "actor/reward_kl_penalty_coeff")]
    chosen = [c for c in chosen if sum(_is_num(s.get(c)) for s in steps) >= 1][:8]
    out = []
    for c in chosen:
        out.append(svg_lines(xs, {c: [s.get(c) for s in steps]}, f"{c} by step", "step"))
    return [p for p in out if p]


def to_html(report: dict) -> str:
    is_stats = report.get("command") == "stats"
    title = "advcli statistics" if is_stats else "advcli run report"
    t = report.get("timings") or {}
    cards = [("rows", fmt_num(report.get("rows"))), ("tokens", fmt_num(report.get("tokens"))),
             ("valid tokens", fmt_num(report.get("valid_tokens")))]
    if t.get("seconds"):
        cards.append(("time", f"{t['seconds']:.2f} s"))
    if t.get("tokens_per_s"):
        cards.append(("throughput", f"{t['tokens_per_s'] / 1e6:.2f} M tok/s"))
    for k, v in key_metrics(report)[:4]:
        cards.append((k, fmt_num(v)))
    ndiag = sum(1 for d in report.get("diagnostics") or [] if d.get("count"))
    cards.append(("diagnostics", str(ndiag)))
    H = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
         "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">",
         f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>",
         f"<h1>{_e(title)}</h1>",
         f'<div class="sub">advcli {_e(report.get("advcli_version", ""))} · {_e(report.get("created", ""))}</div>',
         '<div class="cards">' + "".join(f'<div class="card"><div class="v">{_e(v)}</div><div class="k">{_e(k)}'
                                         f"</div></div>" for k, v in cards) + "</div>",
         _html_table(None, [[a, b] for a, b in headline(report)])]
    diags = report.get("diagnostics") or []
    warns = report.get("warnings") or []
    if diags or warns:
        H.append("<h2>Diagnostics and warnings</h2>")
        for w in warns:
            H.append(f'<div class="warn">{_e(str(w))}</div>')
        for d in diags:
            if not d.get("count"):
                continue
            ex = ""
            if d.get("examples"):
                shown = d["examples"][:3]
                more = f" (first {len(shown)} of {len(d['examples'])} listed)" if len(d["examples"]) > 3 else ""
                ex = (f"<details><summary>examples: {_e(short_examples(d['examples'], 3))}{_e(more)}</summary>"
                      f"<pre>{_e(json.dumps(shown, indent=1, default=str, ensure_ascii=False))}</pre></details>")
            unit = f" {d['unit']}" if d.get("unit") else ""
            H.append(f'<div class="diag"><b>{_e(d.get("kind", ""))}</b>: {_e(d.get("count"))}{_e(unit)}. '
                     f'{_e(d.get("explanation", ""))}{ex}</div>')
        clean = [d.get("kind", "") for d in diags if not d.get("count")]
        if clean:
            H.append(f'<p class="ok">checked, none found: {_e(", ".join(clean))}</p>')
    plots = []
    for name, h in (report.get("histograms") or {}).items():
        plots.append(svg_histogram(h.get("edges") or [], h.get("counts") or [], f"histogram: {name}"))
    bp = report.get("by_position")
    if bp and bp.get("positions") and bp.get("mean"):
        band = (bp["lo"], bp["hi"]) if bp.get("lo") and bp.get("hi") else None
        plots.append(svg_lines(bp["positions"], {"mean advantage": bp["mean"]},
                               "advantage by token position" + (f" ({bp.get('band', 'band')})" if band else " (mean)"),
                               "token position", band=band))
        if bp.get("count"):
            plots.append(svg_lines(bp["positions"], {"valid tokens": bp["count"]}, "valid tokens by position",
                                   "token position"))
    steps = [flat_step(s) for s in report.get("per_step") or []]
    plots += _step_plots(steps)
    plots = [p for p in plots if p]
    if plots:
        H.append("<h2>Plots</h2><div class=\"grid\">" + "".join(plots) + "</div>")
    H += report_health.html_parts(report.get("group_health"))
    metrics = report.get("metrics") or {}
    if metrics:
        H.append("<h2>Metrics</h2><div class=\"cols\">")
        for sec, items in metric_sections(metrics):
            H.append(_html_table([sec, ""], [[k, v] for k, v in items]))
        H.append("</div>")
    groups = report.get("groups")
    if groups:
        H.append("<h2>Groups</h2>" + _html_table(["figure", "value"], [[k, v] for k, v in groups.items()
                                                                        if not isinstance(v, (dict, list))]))
    if steps:
        cols = _step_columns(steps)
        if len(steps) <= 12:  # one column per step reads better
            head = ["step"] + [fmt_num(s.get("step")) for s in steps]
            body = [[c] + [s.get(c) for s in steps] for c in cols if c != "step"]
            H.append('<h2>Per step</h2><div class="scroll">' + _html_table(head, body) + "</div>")
        else:
            H.append('<h2>Per step</h2><div class="scroll">'
                     + _html_table(cols, [[s.get(c) for c in cols] for s in steps]) + "</div>")
    if report.get("config"):
        H.append("<h2>Resolved configuration</h2><pre>" + _e(json.dumps(report["config"], indent=2, default=str))
                 + "</pre>")
    H.append("</main></body></html>\n")
    return "\n".join(H)
