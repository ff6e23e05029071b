"""The report dict (see :mod:`advcli.report`): :func:`build_report` makes it from a run's result, and the
views of it every rendering shares (the headline, the key metrics, per-step columns, metric sections)."""
from __future__ import annotations

import datetime as _dt
import json
import math
from typing import Any

from ..version import __version__
from .primitives import fmt_num, is_num


def key_figure_names() -> list[str]:
    """The figures the terminal summary and the headline of each report show, in order, when present: the
    catalog's ``summary`` figures (:mod:`advcli.report.catalog`)."""
    from .catalog import shown_in

    return [f.name for f in shown_in("summary")]


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
    rows = int(g("rows", 0) or 0)
    counted = not g("no_token_data")  # a dump without token data: no token count (advcli.formats)
    tokens = int(g("tokens", 0) or 0) if counted else None
    timings = {"seconds": round(seconds, 4),
               "rows_per_s": round(rows / seconds, 1) if seconds > 0 else None,
               "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 and counted else None}
    if not counted:
        del timings["tokens_per_s"]
    timings.update(dict(g("timings", None) or {}))
    rep = {
        "report": "advcli/1", "advcli_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command, "flavor": str(flavor) if flavor else flavor, "settings": native or {}, "note": note,
        "estimator": cfg.get("estimator") if isinstance(cfg, dict) else None, "config": cfg,
        "inputs": list(g("inputs", []) or []), "outputs": list(g("outputs", []) or []),
        "rows": rows, "tokens": tokens, "valid_tokens": int(g("valid_tokens", 0) or 0) if counted else None,
        "no_token_data": g("no_token_data"),
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
    if g("release"):  # the flavor's upstream release that ran (advcli.flavors.release_dict)
        rep["release"] = g("release")
    if g("from_dump"):  # what a trainer dump told the flavor (advcli.runs.resolution)
        rep["from_dump"] = list(g("from_dump"))
    if extra:
        rep.update(extra)
    return _jsonable({k: v for k, v in rep.items() if v is not None})


# ---------------------------------------------------------------------------------------- views
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


def step_columns(steps: list[dict]) -> list[str]:
    """The numeric per-step fields, in first-seen order, leaving out those that are None everywhere; with
    ``domain`` after ``step`` when the entries are per step and domain (ROLL)."""
    cols: list[str] = []
    for e in steps:
        for k, v in e.items():
            if k not in cols and (v is None or is_num(v)):
                cols.append(k)
    cols = [c for c in cols if c == "step" or any(is_num(e.get(c)) for e in steps)]
    if any(e.get("domain") is not None for e in steps):
        cols.insert(cols.index("step") + 1 if "step" in cols else 0, "domain")
    return cols


def step_label(entry: dict) -> str:
    """A per-step entry's name: its step, and its domain when the entries are per step and domain."""
    step = fmt_num(entry.get("step"))
    return f"{step} {entry['domain']}" if entry.get("domain") is not None else step


def steps_line(steps: list[dict]) -> str | None:
    """The terminal's count of the per-step entries: the distinct steps, and the domains apart when the
    entries are per step and domain (ROLL: 2 steps × 2 domains are 4 entries, "2 steps, 2 domains");
    None for a single entry."""
    if len(steps) < 2:
        return None
    n = len(dict.fromkeys(repr(e.get("step")) for e in steps))
    domains = list(dict.fromkeys(str(e["domain"]) for e in steps if e.get("domain") is not None))
    text = f"{n} step{'s' if n != 1 else ''}"
    if domains:
        shown = ", ".join(domains[:6]) + (f", … {len(domains)} in all" if len(domains) > 6 else "")
        text += f", {len(domains)} domain{'s' if len(domains) != 1 else ''} ({shown})"
        return text + " (figures per step and domain in --report or --json)"
    return text + " (per-step figures in --report or --json)"


def headline(report: dict) -> list[tuple[str, str]]:
    """(label, text) pairs: what ran, on what, how fast."""
    est = report.get("estimator") or {}
    what = report.get("note") or " ".join(x for x in (report.get("flavor"), est.get("name")) if x)
    t = report.get("timings") or {}
    out = []
    if what:
        out.append(("ran", what))
    if (report.get("release") or {}).get("label"):  # which upstream release's semantics ran
        out.append(("release", report["release"]["label"]))
    if report.get("estimator_note"):  # the flavor runs the estimator the user named under another name
        out.append(("why", report["estimator_note"]))
    for line in report.get("from_dump") or []:  # settings a trainer dump implied (advcli.runs.resolution)
        out.append(("from dump", line))
    if report.get("settings"):
        out.append(("settings", ", ".join(f"{k}={json.dumps(v)}" for k, v in report["settings"].items())))
    if (report.get("config_file") or {}).get("note"):
        out.append(("config", report["config_file"]["note"]))
    out.append(("input", ", ".join(report.get("inputs") or []) or "–"))
    if report.get("outputs"):
        out.append(("output", ", ".join(report["outputs"])))
    if report.get("no_token_data"):  # a dump without token data: no token count to give
        out.append(("rows", f"{report.get('rows', 0):,}"))
        out.append(("token data", f"none: {report['no_token_data']}"))
    else:
        out.append(("rows", f"{report.get('rows', 0):,}  ({report.get('tokens', 0):,} tokens, "
                            f"{report.get('valid_tokens', 0):,} with mask=1)"))
    if t.get("seconds"):
        rate = ""
        if t.get("rows_per_s") and t.get("tokens_per_s") is not None:
            rate = f"  ({t['rows_per_s']:,.0f} rows/s, {t['tokens_per_s'] / 1e6:,.2f} M tokens/s)"
        elif t.get("rows_per_s"):
            rate = f"  ({t['rows_per_s']:,.0f} rows/s)"
        out.append(("time", f"{t['seconds']:.2f} s{rate}"))
    if report.get("device"):  # where the math ran, and why there (--device auto's rule)
        out.append(("device", report["device"]))
    return out


def key_metrics(report: dict) -> list[tuple[str, Any]]:
    m = report.get("metrics") or {}
    keys = [k for k in key_figure_names() if k in m]
    if not keys:  # older / minimal producers
        keys = [k for k in m if k.startswith("advantages/") or k.startswith("critic/")][:8]
    return [(k, m[k]) for k in keys]
