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
