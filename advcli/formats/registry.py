"""The format registry: what a trainer dump format is (:class:`Format`), the state of one conversion
(:class:`Context`), and the formats found among this package's modules (:data:`FORMATS`)."""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import field
from typing import Any

from ..errors import AdvcliError, did_you_mean
from ..plugins import load_modules
from ..records import record


@record
class Context:
    """State of one conversion: the current file, notes for the user, and a per-format scratch dict
    (e.g. prime-rl's first step of every group)."""

    fmt: Format
    path: str = ""
    step: int | None = None
    notes: list[str] = field(default_factory=list)
    state: dict = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def error(self, line: int | None, msg: str, hint: str | None = None) -> AdvcliError:
        """An error in this file's record (at ``line`` where given), with ``hint``, else the general one: what
        the format's writer makes, and where the formats' fields are listed."""
        where = f"{self.path}:{line}" if line else self.path
        if hint is None:
            hint = (f"{self.fmt.title} writes it otherwise: repair or remove that "
                    f"{'line' if line else 'file'} (docs/formats.md lists each format's fields)")
        return AdvcliError(f"{where}: {msg}", hint=hint)


@record(frozen=True, eq=False)
class Format:
    """One trainer dump format.

    ``pattern``: a regex searched in the file's path (``/`` separators) that names this format's data
    files; group ``step`` (when present) gives the training step. ``sniff(record)``: whether a first
    record (a dict: a JSON line, a Parquet schema's names as keys, a loaded .pt object) is this
    format. ``read(path, ctx)`` yields ``(line, row)`` with canonical keys plus the dump's other
    fields. ``columns``: the canonical columns and their Arrow types (the rest are inferred from the
    first batch). ``key(path)``: what must be unique among the files (duplicate step files are an
    error); ``companions``: regexes of files trainers write beside their dumps, skipped with a note (or
    ``(regex, the note)``).
    """

    name: str
    title: str
    pattern: str
    level: str  # "token" (mask + per-token columns) or "response" (one reward per response)
    group_rule: str
    columns: dict  # column -> type name (advcli.formats._common: "float32", "list<int8>", ...)
    read: Callable[[str, Context], Iterator[tuple[int, dict]]]
    sniff: Callable[[dict], bool]
    # the command that reads it: `advcli inspect` prints it with the path the user typed and ``{n}`` (when
    # present) replaced by the dump's group size, once the same check `run` makes accepts it
    example: str
    companions: tuple[str, ...] = ()
    # formats whose files a folder of this format's dumps may hold beside them, told apart by content (slime's
    # debugging guide writes data_{id}.pt and train_{id}.pt into one folder): skipped there, read on their own
    beside_formats: tuple[str, ...] = ()
    key: Callable[[str], Any] | None = None
    required: tuple[str, ...] = ()  # keys every record must have (for the messages)
    logged: str | None = None  # column holding the trainer's own advantages, if the dump has them
    logged_elsewhere: str = ""  # where the trainer writes its advantages when this dump lacks them (audit's hint)
    # its prompt_id numbers runs of equal prompt text, not the trainer's groups: a run may hold several groups of a
    # group size given (a prompt drawn for consecutive groups; a vision-language run's prompts, told apart by images)
    runs_hold_groups: bool = False
    # a folder laid out by the trainer -> the folder in it where the trainer writes the dump that logs them, which
    # may not exist yet (slime's --dump-details DIR: DIR/train_data beside DIR/rollout_data): audit --follow's
    logged_folder: Callable[[str], str | None] | None = None
    # the other trainer files a data file's reader opens beside it (slime's train dump: the rollout dump in
    # ../rollout_data/), which a follower copies with the step: a path -> those present
    beside: Callable[[str], list[str]] | None = None
    refuse: Callable[[str], str | None] | None = None  # a reason this file cannot be read (pickles)
    first_record: Callable[[str], dict | None] | None = None  # default: first JSON line
    # a response-level dump that gives each response's token count: the column a run's synthetic mask takes its
    # length from (AReaL: token-weighted adv_norm), instead of one token per response
    mask_length: str | None = None
    # canonical column -> the dump's own field, where the names differ (NeMo's prev_logprobs is old_log_probs): the
    # messages about a record name the field as the dump writes it
    field_names: dict = field(default_factory=dict)
    group_key: str = "prompt groups"  # the group key in a few words, for the summary ("the dump's group_index")
    flavor: str | None = None  # the writing trainer's flavor where the name's first part is not it
    # the configuration file the run saved beside a data file of this format (AReaL: the trial's config.yaml),
    # None when there is none: its values are the run's settings for the keys a user does not set
    run_config: Callable[[str], str | None] | None = None
    # where such a run saves that file, said when none is found ("AReaL saves config.yaml in the trial directory")
    run_config_where: str = ""

    def trainer_flavor(self) -> str:
        """The flavor of the trainer that writes this format: ``flavor``, else the first part of its name
        (``nemo-jsonl`` -> ``nemo``)."""
        return self.flavor or self.name.split("-", 1)[0]

    def companion(self, path: str) -> str | None:
        """What ``path`` is where it is a file this trainer writes beside its dumps (one of ``companions``), else
        None."""
        p = norm_path(path)
        for c in self.companions:  # a regex, or (regex, what the file is)
            pat, why = c if isinstance(c, tuple) else (c, f"written by {self.title} beside its dumps")
            if re.search(pat, p):
                return why
        return None

    def step_of(self, path: str) -> int | None:
        m = re.search(self.pattern, norm_path(path))
        if m and "step" in m.groupdict() and m.group("step") is not None:
            return int(m.group("step"))
        return None

    def matches(self, path: str) -> bool:
        return re.search(self.pattern, norm_path(path)) is not None


FORMATS: dict[str, Format] = {}


def a_title(title: str) -> str:
    """A format's title with its article ("an AReaL rollout/... dump", "a TRL completions file")."""
    return ("an " if title[:1].lower() in "aeio" else "a ") + title


def norm_path(path: str) -> str:
    return os.path.abspath(path).replace(os.sep, "/")


# the package's machinery, not formats: load() does not import them (a run on advcli's own Parquet never
# converts or describes a dump)
MACHINERY = ("conversion", "describe", "discovery", "input_edge", "records", "registry", "remote_dump",
             "response_level")


def load() -> None:
    """Register the ``FORMAT`` of every module of this package that defines one (``_`` modules and
    :data:`MACHINERY` are skipped)."""
    if FORMATS:
        return
    for fmt in load_modules(__package__, [os.path.dirname(__file__)], "FORMAT", skip=MACHINERY):
        FORMATS[fmt.name] = fmt


def names() -> list[str]:
    load()
    return list(FORMATS)


def get(name: str) -> Format:
    load()
    if name == "parquet":  # advcli's own format: read as it is (run, stats ...), never converted
        raise AdvcliError("--from parquet: the file is advcli's own Parquet already; nothing to convert",
                          hint="run, stats, audit and filter read it as it is")
    if name not in FORMATS:
        raise AdvcliError(f"--from {name!r}: unknown format.{did_you_mean(name, FORMATS)} "
                          f"Known: {', '.join(FORMATS)}, parquet")
    return FORMATS[name]


def dump_like(names) -> object | None:
    """The trainer's dump format (``advcli.formats.Format``) whose every required field the columns ``names``
    hold (TRL's completions: prompt, completion, advantage; verl's JSONL records: input, output, score), where
    the input was not read as that dump (a renamed file, a table made of the dump's records); None."""
    load()
    have = set(names)
    for fmt in FORMATS.values():  # two fields or more: one generic name (ROLL's scores, slime's samples) says nothing
        if len(fmt.required) >= 2 and set(fmt.required) <= have:
            return fmt
    return None


def dump_like_hint(names) -> str:
    """The hint's words (ending ``; ``) for columns that are a trainer dump's (:func:`dump_like`), else ''."""
    fmt = dump_like(names)
    if fmt is None:
        return ""
    said = f"its columns are {fmt.title}'s ({', '.join(fmt.required)}): "
    if fmt.pattern and ".parquet" in fmt.pattern:
        return said + f"read it as that dump with --from {fmt.name}; "
    return said + ("give advcli the dump's own files (their folder) as the trainer wrote them, which it reads with "
                   "that trainer's group ids and fields; ")
