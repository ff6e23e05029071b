"""The progress bars of the commands that pass over a whole dump (``run``, ``stats``)."""
from __future__ import annotations

import sys


def progress(show: bool):
    """(callback(name, rows done, rows total), stop) drawing rich progress bars on stderr.

    Only on a terminal and only for work that lasts: a bar appears after 0.5 s, shows rows done,
    rows/s, elapsed time and an ETA, and disappears when the pass ends.
    """
    if not show or not sys.stderr.isatty():
        return None, lambda: None
    import time

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from ..report.terminal import stderr_console

    prog = Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"),
                    TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"),
                    TimeRemainingColumn(), transient=True, console=stderr_console())
    tasks: dict[str, int] = {}
    t0 = time.monotonic()
    started = [False]

    def cb(name: str, done: int, total: int):
        if not started[0]:
            if time.monotonic() - t0 < 0.5 and done < total:
                return
            prog.start()
            started[0] = True
        if done >= total:  # the pass has ended: its bar goes now, not when the whole command ends
            if name in tasks:
                prog.remove_task(tasks.pop(name))
            return
        if name not in tasks:
            tasks[name] = prog.add_task(name, total=total, rate="")
        t = next(t for t in prog.tasks if t.id == tasks[name])  # (ids are not positions once bars go)
        rate = f"{t.speed:,.0f} rows/s" if t.speed else ""
        prog.update(tasks[name], completed=done, rate=rate)

    def stop():
        if started[0]:
            prog.stop()

    cb.bars = prog  # (the live bars, for tests)
    return cb, stop


def silence_stdout() -> None:
    """stdout's reader has gone: stdout now writes to /dev/null (``run`` and ``filter`` then complete and put
    their output in place)."""
    from ..report.primitives import point_at_devnull

    point_at_devnull(sys.stdout)
