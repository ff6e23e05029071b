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


def stderr_console(**kwargs):
    """A rich Console on stderr that goes quiet when stderr's reader has gone (``advcli filter ... 2>&1 | head
    -1``): the summary is not what the command is for, so the command completes, puts its output in place and
    keeps its exit status (rich's own way is a silent exit 1, which lost filter's output). stderr is pointed
    at /dev/null, so that later messages, and the interpreter's last flush, do not fail on it."""
    import sys

    from rich.console import Console

    from .primitives import point_at_devnull

    class _QuietConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            point_at_devnull(sys.stderr)

        def _check_buffer(self) -> None:
            try:
                super()._check_buffer()
            except OSError:  # a stderr that fails otherwise (2>/dev/full: ENOSPC) is as one whose reader went
                del self._buffer[:]
                self.on_broken_pipe()

    kwargs.setdefault("emoji", False)
    return _QuietConsole(stderr=True, **kwargs)


def print_summary(report: dict, console=None) -> None:
    """The rich summary on stderr: what ran, counts, speed, key metrics, diagnostics and warnings."""
    con = console or stderr_console(highlight=False)
    head = headline(report)
    km = key_metrics(report)
    t = kv_table(con.width, [label for label, _ in head] + [k for k, _ in km])
    for label, text in head:
        t.add_row(_rich_escape(label), _rich_escape(text))
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


# --- tables that fit the terminal ----------------------------------------------------------------------
# Nothing the user reads is cut with "…": a label column takes at most a third of the width (a longer label
# wraps at its spaces, so paths and values beside it stay whole), and a table too wide for the terminal is
# shown turned (one column per row) or, when that is too wide too, as one block of "header value" pairs
# per row, wrapped at the pairs.

def kv_table(width: int, labels=()):
    """A two-column grid (label, value) for ``width`` columns: labels bold cyan, at most a third of the
    width (wrapped at spaces beyond it), or as wide as the longest word among ``labels`` up to half of it, so
    that a metric's name (``rollout_corr/rollout_rs_masked_fraction``) stays whole; values folded only when
    longer than their column."""
    from rich.table import Table

    word = max((len(w) for label in labels for w in str(label).split()), default=0)
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold cyan", overflow="fold", max_width=max(12, width // 3, min(word, width // 2)))
    t.add_column(overflow="fold")
    return t


def print_table(con, title: str, header: list[str], rows: list[list[str]]) -> None:
    """A table of plain strings (``header``, ``rows``; the first column names the row) printed whole on
    ``con``: as a table when it fits, else turned, else one wrapped block per row (see above)."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    if sum(widths) + 3 * (len(widths) - 1) + 2 <= con.width:
        t = Table(title=escape(title), title_justify="left", show_edge=False)
        for h in header:
            t.add_column(escape(h), justify="right", no_wrap=True)
        for r in rows:
            t.add_row(*map(escape, r))
        con.print(t)
        return
    turned = [max(len(header[0]), *(len(h) for h in header[1:]))] + \
        [max(len(x) for x in r) for r in rows]
    if sum(turned) + 3 * len(rows) + 2 <= con.width:
        t = Table(title=escape(title), title_justify="left", show_edge=False)
        t.add_column(escape(header[0]), justify="left", no_wrap=True, style="bold")
        for r in rows:
            t.add_column(escape(r[0]), justify="right", no_wrap=True)
        for i, h in enumerate(header[1:], start=1):
            t.add_row(escape(h), *(escape(r[i]) for r in rows))
        con.print(t)
        return
    con.print(Text(title, style="bold"))
    for r in rows:
        lines, cur = [], f"  {header[0]} {r[0]}"
        for h, x in zip(header[1:], r[1:]):
            pair = f"{h} {x}"
            if len(cur) + 2 + len(pair) > con.width:  # a pair is never split across lines
                lines.append(cur)
                cur = "      " + pair
            else:
                cur += "  " + pair
        lines.append(cur)
        for line in lines:
            con.print(Text(line), overflow="fold", crop=False)
