"""Trainer dumps as advcli input: the rollout files that verl, NeMo RL, TRL, ROLL, slime, AReaL, SkyRL
and prime-rl already write (docs/formats.md), read as they are.

Each format is one module of this package defining ``FORMAT = Format(...)``: how its files are named
(a path pattern), how its first record looks (a content check), how its records become canonical
rows (one row per response, role names where a role exists: ``prompt_id``, ``reward``, ``step``,
``response_mask``, ``old_log_probs`` ...), and its group-key rule. Modules are discovered
automatically, like flavors and estimators.

The commands meet a dump at one place, :func:`open_inputs` (the input edge): a Parquet input passes
through untouched, a trainer dump (a file, or the directory the trainer wrote, every step under it)
is streamed into canonical Parquet in a temporary directory (removed when the process exits), and
the existing Parquet pipeline reads that. Memory stays bounded: rows go to the Parquet writer in
batches of :data:`BATCH_ROWS` rows (or :data:`BATCH_VALUES` token values), whatever the dump's size.

A dump without token data (``Format.level == "response"``) runs at response level: the run sees a
one-token mask per row, estimators that need token data are refused (:func:`check_config`), and
the output's ``advantages``/``returns`` are float32 scalars (:func:`finish_outputs`).

The package's modules: :mod:`.registry` (:class:`Format`, :class:`Context`, :data:`FORMATS`),
:mod:`.records` (the helpers formats read records with), :mod:`.discovery` (a dump's files and format),
:mod:`.conversion` (the streaming into canonical Parquet), :mod:`.input_edge` (:func:`open_inputs`,
:func:`name_dump_rows`), :mod:`.response_level` (:func:`check_config`, :func:`finish_outputs`) and
:mod:`.describe` (what ``advcli inspect`` shows of a dump). Any other module is a format.

Errors name the file and line, exit 2, and nothing is written (a conversion writes to a temporary
file renamed into place only when complete).
"""
from __future__ import annotations

from ..plugins import lazy_exports
from .discovery import discover
from .input_edge import info_for, locate_rows, name_dump_rows, name_dumps, open_inputs, source_of
from .records import (
    extras,
    first_json_record,
    iter_json_lines,
    number,
    number_list,
    require,
    reward_note,
    shown_setting,
    tally_note,
)
from .registry import FORMATS, Context, Format, get, names
from .response_level import (
    check_config,
    drop_token_figures,
    finish_outputs,
    implied_settings,
    name_sources,
    no_token_data,
    refusal,
    unread_files,
)

# loaded on first use: a run on advcli's own Parquet neither converts a dump nor describes one
_LAZY = {"convert": ".conversion", "ImportInfo": ".conversion", "print_dump": ".describe",
         "row_constant_note": ".describe"}  # (describe() itself: from .describe, the submodule's name)
__getattr__ = lazy_exports(__name__, globals(), _LAZY)

__all__ = ["print_dump", "Format", "Context", "FORMATS", "get", "names", "discover", "convert",
           "open_inputs", "check_config", "drop_token_figures", "no_token_data", "implied_settings", "finish_outputs",
           "name_sources", "name_dump_rows", "unread_files",
           "info_for", "source_of",
           "locate_rows", "name_dumps", "row_constant_note", "refusal", "iter_json_lines", "first_json_record",
           "require", "number", "number_list", "extras", "reward_note", "shown_setting", "tally_note", "ImportInfo"]
