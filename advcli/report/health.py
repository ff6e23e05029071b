"""The group-health part of a report (``report["group_health"]``, advcli.figures.group_health) as
terminal lines, Markdown and HTML (tables and inline SVG plots). Like the rest of advcli.report, no numpy or
torch: plain dicts to strings."""
from __future__ import annotations

from typing import Any

from .primitives import PALETTE, esc, html_table, md_table, nice, svg_histogram, svg_lines

# the two reward figures (advcli.figures.group_health): the mean over groups of the group's mean reward, and
# the share of rows with reward > 0 — named apart everywhere, never "solve rate"
MEAN_LABEL, SOLVED_LABEL = "mean group reward", "solved rows"
BLOCK_COLS = [("groups", "groups"), ("rows", "rows"), ("uniform_share", "uniform"), ("zero_adv_token_share",
              "zero-adv tokens"), ("group_mean_reward", MEAN_LABEL), ("solved_share", SOLVED_LABEL),
              ("singleton_groups", "singletons"), ("partial_groups", "partial")]


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def _cell(key: str, v: Any):
    if key.endswith("_share"):
        return _pct(v)
    if key == "group_mean_reward":
        return "–" if v is None else f"{v:.3f}"
    return v


def headline(h: dict) -> str:
    """One line: groups, uniform groups (and whether they mean a zero advantage for this run's estimator),
    zero-advantage tokens, the mean group reward, the solved share, flags."""
    o = h.get("overall") or {}
    zero = h.get("uniform_zero_advantage")  # True/False for a run (its estimator); absent: a dump's statistics
    meaning = ("every reward equal: advantage 0, no learning signal" if zero is True else
               "every reward equal" if zero is False else
               "every reward equal: no learning signal for group-relative estimators")
    parts = [f"{o.get('groups', 0):,} groups, {o.get('uniform_groups', 0):,} uniform ({_pct(o.get('uniform_share'))}:"
             f" {meaning})"]
    if o.get("zero_adv_token_share") is not None:
        parts.append(f"{_pct(o['zero_adv_token_share'])} of valid tokens with advantage 0")
    if o.get("group_mean_reward") is not None:
        parts.append(f"{MEAN_LABEL} {o['group_mean_reward']:.3f}")
    if o.get("solved_share") is not None:
        parts.append(f"{SOLVED_LABEL} (reward > 0) {_pct(o['solved_share'])}")
    parts += (h.get("group_sizes") or {}).get("flags") or []
    return "; ".join(parts)


def tables(h: dict) -> list[tuple[str, list[str], list[list[Any]]]]:
    """(title, header, rows) of every group-health table."""
    out = []
    o = h.get("overall") or {}
    cols = [(k, n) for k, n in BLOCK_COLS if k in o]
    rows = [["all"] + [_cell(k, o.get(k)) for k, _ in cols]]
    for key, label in (("per_step", "step"), ("per_source", "source")):
        for e in h.get(key) or []:
            rows.append([f"{label} {e[label]}"] + [_cell(k, e.get(k)) for k, _ in cols])
    out.append(("Per step and data source", [""] + [n for _, n in cols], rows))
    comps = h.get("per_component") or []
    if comps:
        out.append(("Group health per reward component",
                    ["component", "uniform groups", "uniform", MEAN_LABEL, SOLVED_LABEL],
                    [[c["component"], c["uniform_groups"], _pct(c["uniform_share"]),
                      _cell("group_mean_reward", c.get("group_mean_reward")), _pct(c.get("solved_share"))]
                     for c in comps]))
    gs = h.get("group_sizes")
    if gs:
        out.append(("Group sizes", ["rows per group", "groups"], [[s, c] for s, c in zip(gs["sizes"], gs["counts"])]))
    lbo = h.get("length_by_outcome")
    if lbo:
        out.append(("Response length by outcome", ["", "rows", "mean length", "median length"],
                    [[k, v["rows"], v["mean"], v["median"]] for k, v in lbo.items()]))
    return out


def markdown_lines(h: dict | None) -> list[str]:
    if not h:
        return []
    L = ["", "## Group health", "", headline(h)]
    for title, header, rows in tables(h):
        L += ["", f"### {title}", ""] + md_table(header, rows)
    hist = h.get("group_mean_reward_histogram")
    if hist:
        L += ["", f"### Histogram: {hist['note']}", ""]
        e, c = hist["edges"], hist["counts"]
        top = max(c) or 1
        L += md_table(["bin", "groups", ""], [[f"[{e[i]:.3g}, {e[i + 1]:.3g}{']' if i == len(c) - 1 else ')'}", n,
                                                "█" * round(20 * n / top)] for i, n in enumerate(c)])
    return L


def html_parts(h: dict | None) -> list[str]:
    if not h:
        return []
    H = ["<h2>Group health</h2>", f"<p>{esc(headline(h))}</p>"]
    plots = []
    hist = h.get("group_mean_reward_histogram")
    if hist:
        plots.append(svg_histogram(hist["edges"], hist["counts"], f"groups by {hist['note']}"))
    gs = h.get("group_sizes")
    if gs and len(gs["sizes"]) > 0:
        plots.append(svg_histogram([s - 0.5 for s in range(1, gs["max"] + 1)] + [gs["max"] + 0.5],
                                   [dict(zip(gs["sizes"], gs["counts"])).get(s, 0) for s in range(1, gs["max"] + 1)],
                                   "groups by size (rows per group)"))
    steps = h.get("per_step") or []
    if len(steps) > 1:
        xs = [e["step"] for e in steps]
        series = {"uniform groups": [e.get("uniform_share") for e in steps]}
        if any(e.get("zero_adv_token_share") is not None for e in steps):
            series["zero-adv tokens"] = [e.get("zero_adv_token_share") for e in steps]
        plots.append(svg_lines(xs, series, "share of uniform groups (and zero-advantage tokens) by step", "step"))
    srcs = h.get("per_source") or []
    if srcs:
        names = [e["source"] for e in srcs]
        plots.append(_svg_bars(names, [e.get("uniform_share") or 0.0 for e in srcs],
                               "share of uniform groups by source"))
    lbo = h.get("length_by_outcome") or {}
    if lbo and all((lbo.get(k) or {}).get("mean") is not None for k in ("solved", "unsolved")):
        plots.append(_svg_bars(["solved", "unsolved"], [lbo["solved"]["mean"], lbo["unsolved"]["mean"]],
                               "mean response length by outcome"))
    plots = [p for p in plots if p]
    if plots:
        H.append('<div class="grid">' + "".join(plots) + "</div>")
    for title, header, rows in tables(h):
        H.append(f"<h3>{esc(title)}</h3>" + '<div class="scroll">' + html_table(header, rows) + "</div>")
    return H


def _svg_bars(labels: list[str], values: list[float], title: str, w: int = 560, h: int = 220) -> str:
    """A bar chart of one value per label (inline SVG, no scripts)."""
    if not labels:
        return ""
    top = max([v for v in values if v is not None] + [0.0]) or 1.0
    x0, x1, y0, y1 = 48, w - 12, h - 34, 26
    bw = (x1 - x0) / len(labels)
    out = [f'<svg class="plot" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{esc(title)}">',
           f'<text x="{w / 2}" y="16" class="t">{esc(title)}</text>',
           f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" class="ax"/>',
           f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" class="ax"/>',
           f'<text x="{x0 - 4}" y="{y1 + 8}" class="l" text-anchor="end">{esc(nice(top))}</text>',
           f'<text x="{x0 - 4}" y="{y0}" class="l" text-anchor="end">0</text>']
    for i, (lab, v) in enumerate(zip(labels, values)):
        v = v or 0.0
        bh = (y0 - y1) * v / top
        x = x0 + i * bw + bw * 0.15
        out.append(f'<rect x="{x:.1f}" y="{y0 - bh:.1f}" width="{bw * 0.7:.1f}" height="{bh:.1f}" fill="{PALETTE[0]}">'
                   f"<title>{esc(str(lab))}: {esc(nice(v))}</title></rect>")
        out.append(f'<text x="{x + bw * 0.35:.1f}" y="{y0 + 14}" class="l" text-anchor="middle">'
                   f"{esc(str(lab)[:14])}</text>")
    out.append("</svg>")
    return "".join(out)
