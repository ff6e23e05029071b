"""The results of ``advcli.stats``, ``advcli.audit`` and ``advcli.compare``: each holds the report dict that
the command's ``--json`` prints (``.report``; ``result["metrics"]`` reads it like the dict) and shows
itself as :class:`advcli.results.RunResult` does (:class:`advcli.results.Shown`): its report page in
Jupyter, one line as ``repr()``, its rows as ``.table`` (Arrow) and ``.to_pandas()``.

``.table`` is, by result: :class:`StatsResult` the figures per step (one row per step: ``step`` and the
verl metric names); :class:`AuditResult` the worst rows (where, step, group, position, logged,
recomputed, abs_diff ...); :class:`CompareResult` the groups that differ most (prompt_id, size,
mean_abs_diff, sign_agreement, spread_a, spread_b), or the rows whose sign flips when there are no groups;
:class:`FilterResult` the kept rows.
"""
from __future__ import annotations

from . import Shown


def _table_of(rows: list[dict], columns: list[str] | None = None):
    """A pyarrow.Table of plain dicts (columns in first-seen order; values a column lacks are null)."""
    import pyarrow as pa

    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    return pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows]) if rows else \
        pa.table({c: pa.array([], pa.null()) for c in columns})


class ReportResult(Shown):
    """A command's report dict with the notebook's views of it."""

    def __init__(self, report: dict):
        self._report = report

    @property
    def report(self) -> dict:
        return self._report

    def __getitem__(self, key):
        return self._report[key]

    def __contains__(self, key) -> bool:
        return key in self._report

    def keys(self):
        return self._report.keys()


class StatsResult(ReportResult):
    """``advcli.stats``: the figures of a dump or an advcli output."""
    title = "advcli statistics"

    @property
    def metrics(self) -> dict:
        return self._report.get("metrics") or {}

    @property
    def per_step(self) -> list[dict]:
        return self._report.get("per_step") or []

    @property
    def diagnostics(self) -> list[dict]:
        return self._report.get("diagnostics") or []

    def html(self) -> str:
        from ..report import to_html

        return to_html(self._report)

    @property
    def table(self):
        """One row per step: ``step`` (and ``domain`` per step and domain), ``rows`` and the figures."""
        from ..report import flat_step, step_columns

        steps = [flat_step(e) for e in self.per_step]
        return _table_of(steps, step_columns(steps) if steps else ["step"])

    def __repr__(self) -> str:
        from ..report import fmt_num, key_metrics

        figures = ", ".join(f"{k}={fmt_num(v)}" for k, v in key_metrics(self._report)[:4])
        return (f"<StatsResult {', '.join(self._report.get('inputs') or [])}: {self._report.get('rows', 0):,} rows, "
                f"{len(self.per_step)} step(s); {figures}>")


class AuditResult(ReportResult):
    """``advcli.audit``: the logged advantages against the recomputation."""
    title = "advcli audit report"

    @property
    def agree(self) -> bool:
        return bool(self._report.get("agree"))

    def html(self) -> str:
        from ..report.sections import audit_sections, render_sections

        return render_sections(self._report, "html", *audit_sections(self._report))

    @property
    def table(self):
        """The worst rows (largest |logged − recomputed| first)."""
        return _table_of([{k: (str(v) if k == "group" else v) for k, v in e.items() if k != "prompt"}
                          for e in self._report.get("worst") or []])

    def __repr__(self) -> str:
        r = self._report
        what = (f"{r.get('tokens_disagreeing', 0):,} of {r.get('valid_tokens', 0):,} mask=1 tokens"
                if "valid_tokens" in r else f"{r.get('rows_disagreeing', 0):,} of {r.get('rows', 0):,} rows")
        return (f"<AuditResult {'agree' if self.agree else 'DISAGREE'}: {what} disagree; max |logged − recomputed| "
                f"{r.get('max_abs_diff', 0):.3g}; recomputed with {r.get('ran')}>")


class CompareResult(ReportResult):
    """``advcli.compare``: two sets of advantages compared; or, with ``estimators=``, every pair of several
    (``.pairs``)."""
    title = "advcli comparison"

    @property
    def pairs(self) -> list[dict]:
        """Each pair's comparison (i < j) of ``compare(dump, estimators=[...])``; [] for the two-set forms."""
        return self._report.get("pairs") or []

    def html(self) -> str:
        from ..report.sections import compare_sections, estimators_sections, render_sections

        sections_of = estimators_sections if "pairs" in self._report else compare_sections
        return render_sections(self._report, "html", *sections_of(self._report))

    @property
    def table(self):
        """The groups that differ most; the rows whose sign flips when the rows have no groups; with
        ``estimators=``, one row a pair (its figures side by side, as ``advcli compare --estimators``)."""
        if "pairs" in self._report:
            from ..report.sections import PAIR_FIGURES

            return _table_of([{"a": p["a"]["label"], "b": p["b"]["label"], **{label: get(p) for label, get, _ in
                                                                               PAIR_FIGURES}} for p in self.pairs])
        groups = (self._report.get("groups") or {}).get("most_different")
        if groups is not None:
            return _table_of([{k: v for k, v in g.items() if k not in ("a", "b", "rewards")} for g in groups],
                             ["prompt_id", "size", "mean_abs_diff", "sign_agreement", "spread_a", "spread_b"])
        return _table_of(self._report.get("row_level", {}).get("flip_examples") or [])

    def __repr__(self) -> str:
        r = self._report
        if "pairs" in r:
            return f"<CompareResult {len(r['runs'])} estimators ({', '.join(x['label'] for x in r['runs'])}): " \
                   f"{len(r['pairs'])} pairs>"
        tk, rw = r.get("tokens") or {}, r.get("row_level") or {}
        from ..report import fmt_num

        return (f"<CompareResult A={r['a']['label']} B={r['b']['label']}: token correlation "
                f"{fmt_num(tk.get('pearson'))}, sign agreement {fmt_num(tk.get('sign_agreement'))}, "
                f"{rw.get('sign_flips', 0):,} rows flip sign>")


class FilterResult(ReportResult):
    """``advcli.filter``: what the group filter kept and dropped (``.summary``, the report ``--json`` prints) and
    the kept rows (``.table``)."""
    title = "advcli filter report"

    def __init__(self, report: dict, kept=None):
        super().__init__(report)
        self._kept = kept

    @property
    def summary(self) -> dict:
        return self._report

    def html(self) -> str:
        from ..figures.curate import filter_sections
        from ..report.sections import render_sections

        return render_sections(self._report, "html", *filter_sections(self._report))

    @property
    def table(self):
        """The kept rows (every input column, in input order): held in memory, or read from the output file."""
        if self._kept is not None:
            return self._kept
        import pyarrow.parquet as pq

        return pq.read_table(self._report["output"])

    def log(self, tracker: str, **_) -> str:
        from ..errors import AdvcliError

        raise AdvcliError("a filter's report holds no figures to log (as `advcli filter` takes no --log)",
                          hint="log the run on the kept rows: advcli.run(result.table, ...).log(TRACKER)")

    def __repr__(self) -> str:
        r = self._report
        return (f"<FilterResult {r.get('groups_kept', 0):,} of {r.get('groups', 0):,} groups kept "
                f"({r.get('rows_kept', 0):,} of {r.get('rows', 0):,} rows)>")
