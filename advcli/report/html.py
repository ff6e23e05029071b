"""The self-contained HTML rendering of a report: CSS inline, plots as inline SVG (advcli.report.charts), no
script, no network asset. Besides the whole page (:func:`to_html`), the parts a notebook shows on their own,
each an HTML fragment carrying its own scoped style: :func:`summary_html` (cards, what ran, diagnostics),
:func:`plot_svgs` / :func:`plots_html` (every plot) and :func:`fragment` (any of these wrapped to stand alone).
"""
from __future__ import annotations

import json

from . import health
from .charts import svg_histogram, svg_lines
from .content import flat_step, headline, metric_sections, step_columns, step_label
from .primitives import CSS, FRAGMENT_CSS, esc, fmt_num, html_table, is_num, short_examples


def _step_plots(steps: list[dict]) -> list[str]:
    """A curve per step for each figure the catalog shows by step (``step_plot``, :mod:`advcli.report.catalog`),
    its value axis titled with the figure's unit; with domains (ROLL's entries per step and domain) one curve
    per domain."""
    from .catalog import FIGURES

    if len(steps) < 2:
        return []
    cols = [c for c in step_columns(steps) if c not in ("step", "domain")]
    chosen = [c for c in cols if c in FIGURES and "step_plot" in FIGURES[c].shown]
    chosen = [c for c in chosen if sum(is_num(s.get(c)) for s in steps) >= 1][:8]
    domains = list(dict.fromkeys(s.get("domain") for s in steps if s.get("domain") is not None))
    xs = list(dict.fromkeys(s.get("step") if is_num(s.get("step")) else i for i, s in enumerate(steps)))
    out = []
    for c in chosen:
        if domains:
            at = {(s.get("step"), s.get("domain")): s.get(c) for s in steps}
            series = {str(d): [at.get((x, d)) for x in xs] for d in domains}
        else:
            series = {c: [s.get(c) for s in steps]}
        out.append(svg_lines(xs, series, f"{c} by step", "step", ylabel=FIGURES[c].axis))
    return out


def _hist_axes(name: str, h: dict) -> tuple[str, str, bool]:
    """(x axis title, y axis title, whole numbers on x) of the report histogram ``name``: its catalog entry's
    (``histograms/NAME``, :mod:`advcli.report.catalog`) unit, what it counts."""
    from .catalog import lookup

    fig = lookup(f"histograms/{name}")
    return (fig.unit if fig else name), h.get("over") or "count", bool(fig and fig.whole)


def plot_svgs(report: dict) -> list[str]:
    """Every plot of the report's figures (histograms, advantage by position, per-step curves, group
    health), each a standalone ``<svg>``."""
    plots = []
    for name, h in (report.get("histograms") or {}).items():
        xlabel, ylabel, whole = _hist_axes(name, h)
        plots.append(svg_histogram(h.get("edges") or [], h.get("counts") or [], f"histogram: {name}",
                                   xlabel=xlabel, ylabel=ylabel, integer_x=whole))
    bp = report.get("by_position")
    if bp and bp.get("positions") and bp.get("mean"):  # value axes titled with the catalog entries' units
        from .catalog import FIGURES

        band = (bp["lo"], bp["hi"]) if bp.get("lo") and bp.get("hi") else None
        plots.append(svg_lines(bp["positions"], {"mean advantage": bp["mean"]},
                               "advantage by token position" + (f" ({bp.get('band', 'band')})" if band else " (mean)"),
                               "token position", band=band, ylabel=FIGURES["by_position/mean"].axis,
                               band_label=bp.get("band", "band")))
        if bp.get("count"):
            plots.append(svg_lines(bp["positions"], {"valid tokens": bp["count"]}, "valid tokens by position",
                                   "token position", ylabel=FIGURES["by_position/count"].axis))
    plots += _step_plots([flat_step(s) for s in report.get("per_step") or []])
    plots += health.plot_svgs(report.get("group_health"))
    return [p for p in plots if p]


def fragment(*parts: str) -> str:
    """HTML parts wrapped to stand alone (in a notebook cell, another page): the report's scoped style
    with them."""
    return f'<div class="advcli"><style>{FRAGMENT_CSS}</style>' + "".join(parts) + "</div>"


def plots_html(report: dict) -> str:
    """Every plot of the report as one standalone HTML fragment ("" when it has none)."""
    plots = plot_svgs(report)
    return fragment('<div class="grid">' + "".join(plots) + "</div>") if plots else ""


def _cards(report: dict) -> list[tuple[str, str, str]]:
    """(label, value, detail) cards: counts, speed, each card figure of the catalog with its min and max."""
    from .catalog import shown_in

    t = report.get("timings") or {}
    m = report.get("metrics") or {}
    cards = [("rows", fmt_num(report.get("rows")), "")]
    if report.get("tokens") is not None:  # absent for a dump without token data
        cards += [("tokens", fmt_num(report.get("tokens")), ""),
                  ("valid tokens", fmt_num(report.get("valid_tokens")), "")]
    else:
        cards.append(("tokens", "n/a", "the dump holds no token data"))
    if t.get("seconds"):
        cards.append(("time", f"{t['seconds']:.2f} s", ""))
    if t.get("tokens_per_s"):  # a small file's stats in M tok/s would read 0.00
        tps = t["tokens_per_s"]
        cards.append(("throughput", f"{tps / 1e6:.2f} M tok/s" if tps >= 1e5 else f"{tps:,.0f} tok/s", ""))
    for f in shown_in("card"):  # the catalog's card figures, with their family's min and max beside them
        if f.name in m:
            rng = " · ".join(f"{k} {fmt_num(m[f'{f.family}/{k}'])}" for k in ("min", "max") if f"{f.family}/{k}" in m)
            cards.append((f.name, fmt_num(m[f.name]), rng))
    counted = [d for d in report.get("diagnostics") or [] if d.get("count")]
    nwarn = sum(1 for d in counted if d.get("severity") == "warning")
    cards.append(("diagnostics", str(len(counted)), f"{nwarn} warning{'s' if nwarn != 1 else ''}" if counted else ""))
    return cards


def _diagnostics(report: dict) -> list[str]:
    """Warnings, then each diagnostic found: a warning (orange) or information (grey) by its severity."""
    diags = report.get("diagnostics") or []
    warns = report.get("warnings") or []
    if not diags and not warns:
        return []
    H = ["<h2>Diagnostics and warnings</h2>"]
    for w in warns:
        H.append(f'<div class="warn">{esc(str(w))}</div>')
    for d in sorted((d for d in diags if d.get("count")), key=lambda d: d.get("severity") != "warning"):
        ex = ""
        if d.get("examples"):
            shown = d["examples"][:3]
            more = f" (first {len(shown)} of {len(d['examples'])} listed)" if len(d["examples"]) > 3 else ""
            ex = (f"<details><summary>examples: {esc(short_examples(d['examples'], 3))}{esc(more)}</summary>"
                  f"<pre>{esc(json.dumps(shown, indent=1, default=str, ensure_ascii=False))}</pre></details>")
        unit = f" {d['unit']}" if d.get("unit") else ""
        level = "warning" if d.get("severity") == "warning" else "info"
        H.append(f'<div class="diag {level}"><span class="badge">{level}</span><b>{esc(d.get("kind", ""))}</b>: '
                 f'{esc(d.get("count"))}{esc(unit)}. {esc(d.get("explanation", ""))}{ex}</div>')
    clean = [d.get("kind", "") for d in diags if not d.get("count")]
    if clean:
        H.append(f'<p class="ok">checked, none found: {esc(", ".join(clean))}</p>')
    return H


def _summary_parts(report: dict) -> list[str]:
    cards = "".join(f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div>'
                    + (f'<div class="r">{esc(r)}</div>' if r else "") + "</div>" for k, v, r in _cards(report))
    return [f'<div class="cards">{cards}</div>', html_table(None, [[a, b] for a, b in headline(report)])]


def summary_html(report: dict) -> str:
    """The summary block as a standalone HTML fragment: the cards, what ran on what, the diagnostics."""
    return fragment(*_summary_parts(report), *_diagnostics(report))


def to_html(report: dict) -> str:
    is_stats = report.get("command") == "stats"
    title = "advcli statistics" if is_stats else "advcli run report"
    H = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
         "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">",
         f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main class=\"advcli\">",
         f"<h1>{esc(title)}</h1>",
         f'<div class="sub">advcli {esc(report.get("advcli_version", ""))} · {esc(report.get("created", ""))}</div>']
    H += _summary_parts(report) + _diagnostics(report)
    plots = [p for p in plot_svgs({k: v for k, v in report.items() if k != "group_health"}) if p]
    if plots:
        H.append("<h2>Plots</h2><div class=\"grid\">" + "".join(plots) + "</div>")
    steps = [flat_step(s) for s in report.get("per_step") or []]
    H += health.html_parts(report.get("group_health"))
    metrics = report.get("metrics") or {}
    if metrics:
        H.append("<h2>Metrics</h2><div class=\"cols\">")
        for sec, items in metric_sections(metrics):
            H.append(html_table([sec, ""], [[k, v] for k, v in items]))
        H.append("</div>")
    groups = report.get("groups")
    if groups:
        H.append("<h2>Groups</h2>" + html_table(["figure", "value"], [[k, v] for k, v in groups.items()
                                                                        if not isinstance(v, (dict, list))]))
    if steps:
        cols = step_columns(steps)
        if len(steps) <= 12:  # one column per step reads better
            head = ["step"] + [step_label(s) for s in steps]
            body = [[c] + [s.get(c) for s in steps] for c in cols if c not in ("step", "domain")]
            H.append('<h2>Per step</h2><div class="scroll">' + html_table(head, body) + "</div>")
        else:
            H.append('<h2>Per step</h2><div class="scroll">'
                     + html_table(cols, [[s.get(c) for c in cols] for s in steps]) + "</div>")
    if report.get("config"):
        H.append("<h2>Resolved configuration</h2><pre>" + esc(json.dumps(report["config"], indent=2, default=str))
                 + "</pre>")
    H.append("</main></body></html>\n")
    return "\n".join(H)
