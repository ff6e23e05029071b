"""What a run returns: :class:`RunResult` (torch-free: ``advcli stats`` describes a file with one too).

Every result of the library calls (:class:`RunResult` here; the results of ``advcli.stats``, ``audit`` and
``compare`` in :mod:`advcli.results.notebook`) is :class:`Shown`: in Jupyter it shows its report page (the summary
cards, diagnostics and plots of ``--report x.html``) in a frame of its own, so the page's styles stay out
of the notebook's; ``repr()`` is one line of the figures that matter; ``.table`` (Arrow) and
``.to_pandas()`` give its rows; ``.report`` is the dict ``--json`` prints; ``.log(...)`` sends it to an
experiment tracker as ``--log`` does.
"""
from __future__ import annotations

import html as _html
from dataclasses import dataclass, field
from typing import Any

FRAME_HEIGHT = 640  # px: the notebook frame of a report page (it scrolls within)


def notebook_frame(page: str, title: str) -> str:
    """A whole HTML page shown inside a notebook: an ``<iframe srcdoc>`` (the page's CSS and scripts apply
    to it alone)."""
    return (f'<iframe title="{_html.escape(title)}" srcdoc="{_html.escape(page, quote=True)}" '
            f'style="width:100%;height:{FRAME_HEIGHT}px;border:1px solid #e2e2e6;border-radius:6px" '
            'sandbox="allow-scripts"></iframe>')


class Shown:
    """What the library's results share: a report dict (``report``), its HTML page (``html()``),
    ``_repr_html_`` for Jupyter, ``table``/``to_pandas()``, ``log()``. A subclass defines ``report``,
    ``html`` and ``table``."""
    title = "advcli"

    @property
    def report(self) -> dict:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def html(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @property
    def table(self):  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return notebook_frame(self.html(), self.title)

    def to_pandas(self):
        """``table`` as a pandas DataFrame. A frame of pyarrow-backed dtypes (``dtype_backend="pyarrow"``)
        comes back with them: pandas' metadata names them, and only ``pd.ArrowDtype`` restores them (a plain
        ``to_pandas()`` of such a table raises "data type 'list<...>[pyarrow]' not understood")."""
        table = self.table
        if b"[pyarrow]" in ((table.schema.metadata or {}).get(b"pandas") or b""):
            import pandas as pd

            return table.to_pandas(types_mapper=pd.ArrowDtype)
        return table.to_pandas()

    def log(self, tracker: str, *, project: str | None = None, name: str | None = None, step_offset: int = 0) -> str:
        """Send the report to an experiment tracker as ``--log`` does: ``"wandb"`` (or ``"wandb:DIR"``) or
        ``"tensorboard:DIR"``; returns where it went (how to ``wandb sync`` an offline run)."""
        from .tracker import log_report, parse_targets

        return "\n".join(log_report(self.report, parse_targets([tracker], project, name, step_offset)))


@dataclass(repr=False)
class RunResult(Shown):
    inputs: list[str]
    outputs: list[str]
    rows: int
    tokens: int | None  # None: a dump without token data
    valid_tokens: int | None
    seconds: float
    config: dict
    metrics: dict[str, Any] = field(default_factory=dict)
    per_step: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    histograms: dict[str, Any] = field(default_factory=dict)  # advcli.figures (module docstring)
    diagnostics: list[dict] = field(default_factory=list)  # advcli.pipeline.diagnostics (module docstring)
    group_health: dict | None = None  # advcli.figures.group_health (runs with groups)
    by_position: dict | None = None  # advcli.figures.positions: the advantage per token position, when asked for
    from_dump: list[str] = field(default_factory=list)  # settings a trainer dump implied (advcli.runs.resolution)
    release: dict | None = None  # the flavor's upstream release that ran (advcli.flavors.release_dict)
    flavor: str | None = None  # the flavor (NAME[@RELEASE]) and the native settings given, for the report
    settings: dict = field(default_factory=dict)
    # the estimator chosen from the dump when none was named ("verl grpo (the dump has prompt_id)"; None when
    # the user chose one), the flavor's line on why the estimator runs under another name, what a --config
    # file gave, and the groups the curation filter dropped (advcli.runs.runner.run_dump sets them)
    chosen: str | None = None
    estimator_note: str | None = None
    config_file: dict | None = None
    curation: dict | None = None
    no_token_data: str | None = None  # why token figures are absent (a dump without token data; advcli.formats)
    device: str | None = None  # where the math ran and why ("cpu (--device auto: no CUDA device here)")
    output_table: Any = None  # the rows written, kept in memory (advcli.run on an in-memory table, output=None)

    title = "advcli run report"

    @property
    def report(self) -> dict:
        """The report dict (:mod:`advcli.report`): what ``advcli run --json`` prints."""
        from ..report import build_report

        extra = {"seconds": round(self.seconds, 3)}
        if self.flavor:
            extra["estimator_note"] = self.estimator_note
        rep = build_report(self, flavor=self.flavor, native=self.settings, command="run", note=self.chosen,
                           extra=extra)
        if self.config_file:
            rep["config_file"] = self.config_file
        if self.curation is not None:
            rep["filter"] = self.curation
        if self.device:
            rep["device"] = self.device
        return rep

    def html(self) -> str:
        """The report page (``advcli run --report x.html``)."""
        from ..report import to_html

        return to_html(self.report)

    @property
    def table(self):
        """The rows the run wrote (the input plus the new columns, or the sidecar's) as a pyarrow.Table: read
        from the output file(s), or held in memory when the input was an in-memory table and no output
        was given."""
        if self.output_table is not None:
            return self.output_table
        if not self.outputs:
            from ..errors import AdvcliError

            raise AdvcliError("this run wrote no rows (output=None): its figures are in .metrics and .per_step",
                              hint="give output='out.parquet', or pass the input as a pyarrow.Table or pandas "
                                   "DataFrame to get the rows back in memory")
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ..io.reader import expand_inputs

        files = expand_inputs(list(self.outputs))
        return pa.concat_tables([pq.read_table(f) for f in files]) if len(files) > 1 else pq.read_table(files[0])

    def __repr__(self) -> str:
        from ..report import fmt_num, key_metrics

        what = " ".join(x for x in (self.flavor, (self.config or {}).get("estimator", {}).get("name")) if x)
        figures = ", ".join(f"{k}={fmt_num(v)}" for k, v in key_metrics(self.report)[:4])
        noted = sum(1 for d in self.diagnostics if d.get("count"))
        where = f"; output {', '.join(self.outputs)}" if self.outputs else ""
        tokens = f"{self.valid_tokens:,} mask=1 tokens" if self.valid_tokens is not None else "no token data"
        return (f"<RunResult {what or 'run'}: {self.rows:,} rows, {tokens}, "
                f"{len(self.per_step)} step(s); {figures}; {noted} diagnostic(s) found{where}>")
