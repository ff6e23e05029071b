"""Reports of a run or of a file's statistics: JSON, Markdown, self-contained HTML, and the terminal summary.

Everything here works on one plain, JSON-able **report dict** (built by :func:`build_report` from a
:class:`advcli.pipeline.RunResult`, or by ``advcli stats`` from a file), so the four renderings show the
same figures::

    {"report": "advcli/1", "advcli_version", "created", "command": "run" | "stats",
     "flavor", "settings" (the native keys given), "estimator" (name + parameters),
     "from_dump": [str],                 # what a trainer dump told the flavor (group size, settings)
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

Fields a producer does not have are left out; every renderer copes. This package imports neither
torch nor numpy: writing a report costs nothing but the string building.

Files are written atomically (a temporary file beside the target, renamed into place), like the
Parquet outputs. The HTML page has no network assets and no script: CSS inline, plots as inline SVG. Its
parts render on their own as HTML fragments (a notebook's display): :func:`summary_html`,
:func:`plots_html`, :func:`plot_svgs`, :func:`fragment`.

The modules, each importing only those listed before it:

- ``primitives``: numbers and examples as text, Markdown/HTML tables, the CSS;
- ``charts``: the SVG plots and their axis rule (nice ticks, zero-based value axes);
- ``content``: the report dict (:func:`build_report`) and the views of it the renderings share;
- ``health``: the group-health sections (terminal line, Markdown, HTML);
- ``terminal``, ``markdown``, ``html``: the three renderings;
- ``output``: the report path checks, :func:`render`, :func:`write_report`, :func:`emit`.

Their public names are importable from ``advcli.report`` itself.
"""
from .charts import Axis, position_axis, svg_bars, svg_histogram, svg_lines, value_axis
from .content import build_report, flat_step, headline, key_metrics, metric_sections, step_columns
from .html import fragment, plot_svgs, plots_html, summary_html, to_html
from .markdown import to_markdown
from .output import FORMATS, check_report_path, emit, render, report_format, write_report
from .primitives import (
    CSS,
    FRAGMENT_CSS,
    PALETTE,
    esc,
    fmt_examples,
    fmt_num,
    html_table,
    is_num,
    md_table,
    short_examples,
)
from .terminal import print_summary

__all__ = [
    "CSS", "FORMATS", "FRAGMENT_CSS", "PALETTE", "Axis", "build_report", "check_report_path", "emit",
    "esc", "flat_step", "fmt_examples", "fmt_num", "fragment", "headline", "html_table", "is_num", "key_metrics",
    "md_table", "metric_sections", "plot_svgs", "plots_html", "position_axis", "print_summary", "render",
    "report_format", "short_examples", "step_columns", "summary_html", "svg_bars", "svg_histogram", "svg_lines",
    "to_html", "to_markdown", "value_axis", "write_report",
]
