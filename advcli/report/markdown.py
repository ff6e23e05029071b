"""The Markdown rendering of a report."""
from __future__ import annotations

import json

from . import health
from .content import flat_step, headline, key_metrics, step_columns
from .primitives import fmt_examples, fmt_num, md_table


def to_markdown(report: dict) -> str:
    title = "advcli statistics" if report.get("command") == "stats" else "advcli run report"
    L = [f"# {title}", "", f"advcli {report.get('advcli_version')} · {report.get('created', '')}", ""]
    L += md_table(["", ""], [[a, b] for a, b in headline(report)])
    km = key_metrics(report)
    if km:
        L += ["", "## Key figures", ""] + md_table(["metric", "value"], [[k, v] for k, v in km])
    metrics = report.get("metrics") or {}
    if metrics:
        L += ["", "## All metrics", ""]
        L += md_table(["metric", "value"], [[k, v] for k, v in metrics.items()])
    steps = [flat_step(s) for s in report.get("per_step") or []]
    if steps:
        cols = step_columns(steps)
        L += ["", "## Per step", ""] + md_table(cols, [[s.get(c) for c in cols] for s in steps])
    groups = report.get("groups")
    if groups:
        L += ["", "## Groups", ""] + md_table(["figure", "value"], [[k, v] for k, v in groups.items()
                                                                      if not isinstance(v, (dict, list))])
    L += health.markdown_lines(report.get("group_health"))
    for name, h in (report.get("histograms") or {}).items():
        edges, counts = h.get("edges") or [], h.get("counts") or []
        if not counts:
            continue
        L += ["", f"## Histogram: {name}", ""]
        top = max(counts) or 1
        rows = [[f"[{fmt_num(edges[i])}, {fmt_num(edges[i + 1])})", c, "█" * round(20 * c / top)]
                for i, c in enumerate(counts) if i + 1 < len(edges)]
        L += md_table(["bin", "count", ""], rows)
    bp = report.get("by_position")
    if bp and bp.get("positions"):
        L += ["", "## Advantage by position", ""]
        cols = [c for c in ("mean", "std", "count") if bp.get(c)]
        idx = _thin(len(bp["positions"]), 24)
        L += md_table(["position"] + cols, [[bp["positions"][i]] + [bp[c][i] for c in cols] for i in idx])
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
