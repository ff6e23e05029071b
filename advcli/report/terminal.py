"""The terminal summary of a report (rich, on stderr)."""
from __future__ import annotations

from . import health
from .content import headline, key_metrics, steps_line
from .primitives import fmt_num, short_examples


def stdout_console(**kwargs):
    """A rich Console on stdout whose closed reader (``advcli inspect X | head -1``) raises
    BrokenPipeError, which the entry point ends quietly like any other command (rich's own way is a
    silent exit 1)."""
    from rich.console import Console

    class _PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    kwargs.setdefault("emoji", False)  # user text (a path:100:) is never an emoji code
    return _PipeConsole(**kwargs)


def print_summary(report: dict, console=None) -> None:
    """The rich summary on stderr: what ran, counts, speed, key metrics, diagnostics and warnings."""
    from rich.console import Console
    from rich.table import Table

    con = console or Console(stderr=True, highlight=False, emoji=False)
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold cyan", no_wrap=True)
    t.add_column(overflow="fold")
    for label, text in headline(report):
        t.add_row(_rich_escape(label), _rich_escape(text))
    km = key_metrics(report)
    if km:
        t.add_row("", "")
        for k, v in km:
            t.add_row(_rich_escape(k), fmt_num(v))
    steps = steps_line(report.get("per_step") or [])
    if steps:
        t.add_row("steps", _rich_escape(steps))
    if report.get("group_health"):
        t.add_row("group health", _rich_escape(health.headline(report["group_health"])))
    for d in report.get("diagnostics") or []:  # each once: a warning by its severity, with its meaning
        count = d.get("count")
        if not count:
            continue
        ex = short_examples(d.get("examples"))
        unit = f" {d['unit']}" if d.get("unit") else ""
        meaning = f": {d['meaning']}" if d.get("meaning") else ""
        label = "[yellow]warning[/]" if d.get("severity") == "warning" else "[magenta]diagnostic[/]"
        t.add_row(label, _rich_escape(f"{d.get('kind')}: {fmt_num(count)}{unit}{meaning}"
                                      + (f" (e.g. {ex})" if ex else "")))
    for w in report.get("warnings") or []:
        t.add_row("[yellow]warning[/]", _rich_escape(str(w)))
    con.print(t)


def _rich_escape(s: str) -> str:
    from rich.markup import escape

    return escape(s)
