"""The self-contained HTML rendering of a report: CSS inline, plots as inline SVG, no network assets."""
from __future__ import annotations

import json

from . import health
from .content import flat_step, headline, key_metrics, metric_sections, step_columns, step_label
from .primitives import CSS, esc, fmt_num, html_table, is_num, short_examples, svg_histogram, svg_lines


def _step_plots(steps: list[dict]) -> list[str]:
    if len(steps) < 2:
        return []
    xs = [s.get("step") if is_num(s.get("step")) else i for i, s in enumerate(steps)]
    cols = [c for c in step_columns(steps) if c not in ("step", "domain")]
    chosen = [c for c in cols if c.endswith("/mean") or c in ("kl_coef", "kl", "actor/reward_kl_penalty",
                                                              "actor/reward_kl_penalty_coeff")]
    chosen = [c for c in chosen if sum(is_num(s.get(c)) for s in steps) >= 1][:8]
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
         f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>",
         f"<h1>{esc(title)}</h1>",
         f'<div class="sub">advcli {esc(report.get("advcli_version", ""))} · {esc(report.get("created", ""))}</div>',
         '<div class="cards">' + "".join(f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}'
                                         f"</div></div>" for k, v in cards) + "</div>",
         html_table(None, [[a, b] for a, b in headline(report)])]
    diags = report.get("diagnostics") or []
    warns = report.get("warnings") or []
    if diags or warns:
        H.append("<h2>Diagnostics and warnings</h2>")
        for w in warns:
            H.append(f'<div class="warn">{esc(str(w))}</div>')
        for d in diags:
            if not d.get("count"):
                continue
            ex = ""
            if d.get("examples"):
                shown = d["examples"][:3]
                more = f" (first {len(shown)} of {len(d['examples'])} listed)" if len(d["examples"]) > 3 else ""
                ex = (f"<details><summary>examples: {esc(short_examples(d['examples'], 3))}{esc(more)}</summary>"
                      f"<pre>{esc(json.dumps(shown, indent=1, default=str, ensure_ascii=False))}</pre></details>")
            unit = f" {d['unit']}" if d.get("unit") else ""
            H.append(f'<div class="diag"><b>{esc(d.get("kind", ""))}</b>: {esc(d.get("count"))}{esc(unit)}. '
                     f'{esc(d.get("explanation", ""))}{ex}</div>')
        clean = [d.get("kind", "") for d in diags if not d.get("count")]
        if clean:
            H.append(f'<p class="ok">checked, none found: {esc(", ".join(clean))}</p>')
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
