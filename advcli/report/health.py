"""The group-health part of a report (``report["group_health"]``, advcli.figures.group_health) as
terminal lines, Markdown and HTML (tables and inline SVG plots). Like the rest of advcli.report, no numpy or
torch: plain dicts to strings."""
from __future__ import annotations

from typing import Any

from .catalog import FIGURES, at_path
from .charts import svg_bars, svg_histogram, svg_lines
from .primitives import esc, html_table, md_table

# the two reward figures (advcli.figures.group_health): the mean over groups of the group's mean reward, and
# the share of rows with reward > 0 — named apart everywhere, never "solve rate"
# (their catalog entries' labels, the table's headers)
MEAN_LABEL = FIGURES["group_health/overall/group_mean_reward"].label
SOLVED_LABEL = FIGURES["group_health/overall/solved_share"].label
# the per-component table's figures, headed by their catalog labels
COMPONENT_COLS = ("uniform_groups", "uniform_share", "group_mean_reward", "solved_share")


def block_cols() -> list[tuple[str, str]]:
    """(key, header) of the group-health table's columns: the catalog's ``group_table`` figures
    (:mod:`advcli.report.catalog`, ``group_health/overall/KEY``), in its order."""
    return [(f.at[-1], f.label or f.at[-1]) for f in at_path(("group_health", "overall")) if "group_table" in f.shown]


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
    n = o.get("groups", 0)
    parts = [f"{n:,} group{'' if n == 1 else 's'}, {o.get('uniform_groups', 0):,} uniform "
             f"({_pct(o.get('uniform_share'))}: {meaning})"]
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
    cols = [(k, n) for k, n in block_cols() if k in o]
    rows = [["all"] + [_cell(k, o.get(k)) for k, _ in cols]]
    for key, label in (("per_step", "step"), ("per_source", "source")):
        for e in h.get(key) or []:
            rows.append([f"{label} {e[label]}"] + [_cell(k, e.get(k)) for k, _ in cols])
    out.append(("Per step and data source", [""] + [n for _, n in cols], rows))
    comps = h.get("per_component") or []
    if comps:
        out.append(("Group health per reward component",
                    ["component"] + [FIGURES[f"group_health/overall/{k}"].label for k in COMPONENT_COLS],
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


def plot_svgs(h: dict | None) -> list[str]:
    """The group-health plots, each a standalone ``<svg>``: mean reward histogram, group sizes, uniform
    share by step and by source, length by outcome."""
    if not h:
        return []
    plots = []
    hist = h.get("group_mean_reward_histogram")
    if hist:
        plots.append(svg_histogram(hist["edges"], hist["counts"], f"groups by {hist['note']}",
                                   xlabel=MEAN_LABEL, ylabel="groups"))
    gs = h.get("group_sizes")
    if gs and len(gs["sizes"]) > 0:
        plots.append(svg_histogram([s - 0.5 for s in range(1, gs["max"] + 1)] + [gs["max"] + 0.5],
                                   [dict(zip(gs["sizes"], gs["counts"])).get(s, 0) for s in range(1, gs["max"] + 1)],
                                   "groups by size (rows per group)", xlabel="rows per group", ylabel="groups",
                                   integer_x=True))
    steps = h.get("per_step") or []
    if len(steps) > 1:
        xs = [e["step"] for e in steps]
        series = {"uniform groups": [e.get("uniform_share") for e in steps]}
        title = "share of uniform groups by step"
        if any(e.get("zero_adv_token_share") is not None for e in steps):
            series["zero-adv tokens"] = [e.get("zero_adv_token_share") for e in steps]
            title = "share of uniform groups (and zero-advantage tokens) by step"
        plots.append(svg_lines(xs, series, title, "step",
                               ylabel="share", percent=True))
    srcs = h.get("per_source") or []
    if srcs:
        plots.append(svg_bars([e["source"] for e in srcs], [e.get("uniform_share") or 0.0 for e in srcs],
                              "share of uniform groups by source", xlabel="uniform groups (share of the source's)",
                              percent=True))
    lbo = h.get("length_by_outcome") or {}
    if lbo and all((lbo.get(k) or {}).get("mean") is not None for k in ("solved", "unsolved")):
        plots.append(svg_bars(["solved", "unsolved"], [lbo["solved"]["mean"], lbo["unsolved"]["mean"]],
                              "mean response length by outcome", xlabel="mean response length (tokens)"))
    return [p for p in plots if p]


def html_parts(h: dict | None) -> list[str]:
    if not h:
        return []
    H = ["<h2>Group health</h2>", f"<p>{esc(headline(h))}</p>"]
    plots = plot_svgs(h)
    if plots:
        H.append('<div class="grid">' + "".join(plots) + "</div>")
    for title, header, rows in tables(h):
        H.append(f"<h3>{esc(title)}</h3>" + '<div class="scroll">' + html_table(header, rows) + "</div>")
    return H
