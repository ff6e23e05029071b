"""What an output holds (``--output-mode``), checked before any work (and before numpy, pyarrow and torch
are imported: :mod:`advcli.io.writer` writes what is chosen here)."""
from __future__ import annotations

from ..errors import AdvcliError, did_you_mean

OUTPUT_MODES = ("full", "sidecar")  # the input plus the new columns; the new columns plus the row keys


def check_output_mode(output_mode: str) -> None:
    """``--output-mode``: full or sidecar."""
    if output_mode not in OUTPUT_MODES:
        raise AdvcliError(f"--output-mode {output_mode!r}: expected full or sidecar."
                          f"{did_you_mean(output_mode, list(OUTPUT_MODES))}")


def refuse_empty_output(target: str | None) -> None:
    """Refuse ``-o ''`` (an unset shell variable) before any work: a run staged it, computed everything and
    then failed to put its output 'in place'."""
    if target is not None and not str(target).strip():
        raise AdvcliError("the output path is empty (an unset shell variable in -o \"$OUT\"?)",
                          hint="give the output file's path: -o out.parquet")


def missing_directory(target: str, directory: str, what: str = "the output directory") -> AdvcliError:
    """The refusal for an output whose ``directory`` is not one: where a part of its path is a file
    (``-o notes.txt/out.parquet``) that part is named, since ``mkdir -p`` would fail on it; else the
    ``mkdir -p`` that creates it."""
    import os

    part = directory
    while part and not os.path.exists(part) and os.path.dirname(part) != part:
        part = os.path.dirname(part)
    if os.path.exists(part) and not os.path.isdir(part):
        return AdvcliError(f"{target}: {part} is a file, not a directory", hint="choose another output path")
    return AdvcliError(f"{target}: {what} {directory} does not exist", hint=f"create it: mkdir -p {directory}")
