"""Conversion: a dump streamed into canonical Parquet, in batches of :data:`BATCH_ROWS` rows (or
:data:`BATCH_VALUES` token values), written to a temporary file renamed into place when complete."""
from __future__ import annotations

import json
import os
from dataclasses import field

from ..errors import AdvcliError
from ..records import record
from ._common import arrow_type, where_in_dump
from .discovery import discover
from .registry import Context, Format, get

BATCH_ROWS = 2048  # rows per Arrow batch handed to the writer
BATCH_VALUES = 1 << 20  # ... or fewer rows when their token lists hold this many values in all
LAST_STEP_KEY = "advcli.last_step_estimators"  # footer key: ImportInfo.last_step_estimators, as JSON
GROUP_SIZES_KEY = "advcli.group_sizes"  # {size: number of groups} of the dump, written by convert
SHOWN_KEY = "advcli.shown_settings"  # ImportInfo.shown_settings, as JSON


def import_footer(group_sizes: dict, shown_settings: dict, last_step_estimators=()) -> dict[str, str]:
    """The footer keys a file of the dump's rows carries for a later run (``advcli convert`` writes them, ``filter``
    keeps them, :func:`advcli.formats.input_edge` reads them back into an :class:`ImportInfo`): the dump's group
    sizes, the settings its records showed, its last-step estimators."""
    out = {GROUP_SIZES_KEY: json.dumps(group_sizes), SHOWN_KEY: json.dumps(shown_settings)}
    if last_step_estimators:
        out[LAST_STEP_KEY] = json.dumps(list(last_step_estimators))
    return out


@record
class ImportInfo:
    """What converting a trainer dump into canonical Parquet read and wrote (its format, files and rows)."""

    format: str
    title: str
    level: str
    group_rule: str
    source: str
    files: list[str]
    skipped: list[str]
    rows: int
    output: str
    notes: list[str]
    logged: str | None
    groups: int = 0
    group_sizes: dict = field(default_factory=dict)  # size -> number of groups
    starts: list = field(default_factory=list)  # (first canonical row, file) of every file read
    # the synthetic mask of every row spans its response (Format.mask_length): token-weighted statistics hold
    token_lengths: bool = False
    # every row gives its response's token count (Format.mask_length), whether or not a mask was made of it (inspect
    # opens dumps without one): what a run that makes the mask can weigh by tokens
    lengths_known: bool = False
    # estimators that run on the is_last_step rows and give each session's value to all its rows
    # (grouping.trajectories=last_step; verl's GRPO on multi-output agent loops), set by a format in
    # ctx.state["last_step_estimators"] and kept in the Parquet footer under LAST_STEP_KEY
    last_step_estimators: tuple = ()
    # which reward the rows carry where the dump holds several (AReaL's raw original_reward beside the
    # normalised one, prime-rl's shaped training reward): one line each, set by a format with
    # records.reward_note; also a table's response_length column not taken as token counts (input_edge);
    # run's summary shows them (advcli.runs.resolution.from_dump)
    reward_notes: tuple = ()
    # the decimals the dump may round its logged advantages to (prime-rl's float_decimals, 4), set by a format in
    # ctx.state["logged_decimals"]: the audit's default tolerance follows it
    logged_decimals: int | None = None
    padding: int = 0  # synthetic padding rows (is_padding: verl's V1 trainer): in the batch, in no figure
    # the configuration the run saved beside the dump (Format.run_config), flattened to dotted keys, and its path;
    # kept in the converted Parquet's footer, so a converted dump runs with the same settings
    run_config: dict = field(default_factory=dict)
    run_config_path: str = ""
    # native settings of the trainer's flavor that the records themselves show (records.shown_setting), kept in
    # the converted Parquet's footer under SHOWN_KEY
    shown_settings: dict = field(default_factory=dict)
    unread: list = field(default_factory=list)  # the data files left out (discovery.Found.unread), "path (why)"
    # what the reader met that makes some values not the trainer's (records.tally_note: sampled tokens without a
    # log-prob, traces without a score) or left data out (fields first seen after the first batch): notes that
    # run's and validate's warnings repeat
    warnings: tuple = ()
    converted: bool = False  # the input is a file advcli convert wrote (read back as its dump), not the dump itself

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("format", "title", "level", "group_rule", "source", "files",
                                              "skipped", "rows", "groups", "group_sizes", "notes", "logged",
                                              "converted")}


# the one line that says how many synthetic padding rows were set aside (verl's V1 trainer,
# verl/trainer/ppo/padding_utils.py upsample_batch_to_divisible_size @1dda039b and 0.9.1)
PADDING_NOTE = ("{n} synthetic padding row(s) set aside (verl's V1 trainer pads a batch to its DP/mini-batch "
                "multiple: uid pad<hex>_<i>_0, empty input and output, score 0): kept in the batch for the "
                "advantages, as verl computes them, and out of every figure, filter and group count")


def convert(spec: str, output: str, fmt: str | Format | None = None, *, synth_mask: bool = False,
            batch_rows: int = BATCH_ROWS, keys_in_schema: bool = False) -> ImportInfo:
    """Stream the dump at ``spec`` into canonical Parquet at ``output`` (written to a temporary file
    renamed into place when complete: an error leaves nothing). ``synth_mask``: give a response-level
    dump a one-token ``response_mask`` per row, so the token pipeline runs it at response level.
    ``keys_in_schema`` (``advcli convert``'s file, which a user may read back as a table): the footer keys
    (:func:`import_footer`), known when the last row is read, also in the Arrow schema's metadata, which
    ``pq.read_table`` keeps where it drops the footer's other keys (:func:`_keys_into_schema`)."""
    import pyarrow.parquet as pq

    from ..io.writer import temp_path_for

    forced = get(fmt) if isinstance(fmt, str) else fmt
    found = discover(spec, forced)
    real = os.path.realpath(output)
    if any(os.path.realpath(p) == real for p in [spec, *found.files]):  # a directory's files too
        raise AdvcliError(f"{output}: is a file of the input dump; advcli never writes over its input",
                          hint="choose an --output path outside the dump")
    f = found.fmt
    ctx = Context(fmt=f, files=found.files)
    saved_path, saved = saved_run_config(f, found.files)
    tmp = temp_path_for(output)  # .NAME.advcli-tmp-PID: two conversions to one output never share a file
    writer = None
    schema = None
    rows_total = 0
    steps: list = []  # each non-padding row's step and prompt_id: grouped once at the end (advcli.ops.grouprule)
    pids: list = []
    starts: list[tuple[int, str]] = []  # (first canonical row, file): where a row came from, for messages
    dropped: set = set()
    padding = 0  # synthetic padding rows (is_padding): rows of the batch, in no group count
    short = 0  # rows without a usable Format.mask_length (their synthetic mask is one token)
    try:
        buf: list[dict] = []
        where: list[tuple[str, int]] = []
        values = 0

        def flush():
            nonlocal writer, schema, buf, where, values
            if not buf:
                return
            if schema is None:
                schema = _schema(f, buf, synth_mask, {"run_config": saved, "run_config_path": saved_path}
                                 if saved_path else {})
            for r in buf:
                for k, v in r.items():  # a field null in every row so far holds nothing to lose
                    if v is not None and k not in schema.names and k not in dropped:
                        dropped.add(k)
            batch = _to_batch(buf, where, schema, synth_mask, f.mask_length, set(f.columns), f.field_names)
            if writer is None:
                writer = pq.ParquetWriter(tmp, schema, compression="zstd")
            writer.write_batch(batch)
            buf, where, values = [], [], 0

        for path in found.files:
            ctx.path, ctx.step = path, f.step_of(path)
            starts.append((len(pids) + padding, path))
            for line, row in f.read(path, ctx):
                buf.append(row)
                where.append((path, line))
                if row.get("is_padding"):
                    padding += 1
                else:
                    steps.append(row.get("step"))
                    pids.append(row.get("prompt_id"))
                for v in row.values():  # token lists are Python objects here (~32 bytes a value)
                    if isinstance(v, list):
                        values += len(v)
                if f.mask_length:
                    length = row.get(f.mask_length)
                    if isinstance(length, int) and length >= 1:
                        values += length  # the synthetic mask it will get
                    else:
                        short += 1
                if len(buf) >= batch_rows or values >= BATCH_VALUES:
                    flush()
        flush()
        if writer is None:
            raise AdvcliError(f"{spec}: the dump holds no rows")
        # the dump's group sizes, as the trainer formed the groups: a run on the converted file takes the group
        # size from them as it does from the dump (runs.resolution.from_dump)
        hist = _group_size_counts(steps, pids)
        footer = import_footer(hist, ctx.state.get("shown_settings", {}), ctx.state.get("last_step_estimators", ()))
        writer.add_key_value_metadata(footer)
        writer.close()
        writer = None
        if keys_in_schema:
            _keys_into_schema(tmp, footer)
        rows_total = len(pids) + padding
        try:
            os.replace(tmp, output)
        except OSError as e:
            raise AdvcliError(f"{output}: cannot put the converted file in place ({e.strerror or e}); the output "
                              "path holds what it held before",
                              hint="check the output directory's permissions and free space") from None
    except BaseException as e:
        if writer is not None:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the original error matters
                pass
        if os.path.exists(tmp):
            os.remove(tmp)
        from ..errors import disk_full, is_disk_full

        if is_disk_full(e):  # the directory (the output's, or TMPDIR at a run's input edge) and its free space
            raise disk_full(os.path.dirname(os.path.abspath(output)), "the converted dump") from None
        raise
    notes = list(ctx.notes)
    warnings = [notes[s] for s in ctx.state.get("warning_slots", [])]
    if padding:
        notes.append(PADDING_NOTE.format(n=padding))
    if dropped:
        notes.append(f"field(s) {', '.join(sorted(dropped))} first appear after the first {batch_rows} rows and "
                     "were left out")
        warnings.append(notes[-1])
    return ImportInfo(format=f.name, title=f.title, level=f.level, group_rule=f.group_rule, source=spec,
                      files=found.files, skipped=found.skipped, unread=found.unread, rows=rows_total, output=output,
                      notes=notes,
                      logged=f.logged, groups=sum(hist.values()), group_sizes=hist, starts=starts,
                      token_lengths=bool(synth_mask and f.mask_length and not short),
                      lengths_known=bool(f.mask_length and not short),
                      last_step_estimators=tuple(ctx.state.get("last_step_estimators", ())),
                      reward_notes=tuple(ctx.state.get("reward_notes", ())),
                      shown_settings=dict(ctx.state.get("shown_settings", {})),
                      logged_decimals=ctx.state.get("logged_decimals"), padding=padding, run_config=saved,
                      run_config_path=saved_path, warnings=tuple(warnings))


def saved_run_config(f: Format, files: list[str]) -> tuple[str, dict]:
    """(path, flattened values) of the configuration the run saved beside the dump's files
    (``Format.run_config``), or ("", {}) when the format names none or none is there. Only numbers, strings,
    booleans, nulls and lists are kept (what a flavor key can take)."""
    from ..config import load_config_file

    if f.run_config is None:
        return "", {}
    for path in dict.fromkeys(p for p in (f.run_config(x) for x in files) if p):
        flat = load_config_file(path)
        return path, {k: v for k, v in flat.items() if v is None or isinstance(v, (int, float, str, bool, list))}
    return "", {}


def _schema(f: Format, rows: list[dict], synth_mask: bool, extra: dict | None = None):
    import pyarrow as pa

    fields = []
    names = []
    for name, typ in f.columns.items():  # the logged advantages' column is kept when null in the first batch: the
        if name == f.logged or any(r.get(name) is not None for r in rows):  # traces prime-rl ships come later
            fields.append(pa.field(name, arrow_type(typ)))
            names.append(name)
    extra_names = []
    for r in rows:
        for k, v in r.items():  # a field null in every row of the batch has no type yet: left out (and said, in
            if v is not None and k not in f.columns and k not in extra_names:  # convert, if a value comes later)
                extra_names.append(k)
    for k in extra_names:
        first = next((r[k] for r in rows if r.get(k) is not None), None)  # the first record's type rules
        try:
            typ = pa.array([first]).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            typ = pa.string()
        if pa.types.is_integer(typ) and any(isinstance(r.get(k), float) for r in rows):
            typ = pa.float64()  # 1 and 0.5 in one field: a float field
        if pa.types.is_floating(typ):
            typ = pa.float64()
        fields.append(pa.field(k, typ))
    if synth_mask and f.level == "response" and "response_mask" not in names:
        fields.append(pa.field("response_mask", pa.list_(pa.int8())))
    return pa.schema(fields, metadata={b"advcli.import": json.dumps({"format": f.name, "level": f.level,
                                                                      "synthetic_mask": bool(synth_mask and
                                                                                             f.level == "response"),
                                                                      **(extra or {})}).encode()})


def synthetic_mask(lengths, zero=None):
    """A response mask of ones, ``lengths[i]`` tokens for row i (1 where a length is missing or < 1); rows
    where ``zero[i]`` is true get zeros (a synthetic padding row: verl gives it one response token with
    response_mask 0, ``construct_minimal_padding_template``)."""
    import numpy as np
    import pyarrow as pa

    n = np.array([x if isinstance(x, int) and not isinstance(x, bool) and x >= 1 else 1 for x in lengths],
                 dtype=np.int64)
    offs = np.concatenate([[0], np.cumsum(n)]).astype(np.int32)
    values = np.ones(int(offs[-1]), np.int8)
    if zero is not None and any(zero):
        values[np.repeat(np.asarray(zero, bool), n)] = 0
    return pa.ListArray.from_arrays(pa.array(offs), pa.array(values))


def _to_batch(rows: list[dict], where: list[tuple[str, int]], schema, synth_mask: bool,
              mask_length: str | None = None, declared: set | frozenset = frozenset(), field_names=None):
    """The records as one batch of ``schema``; a value that does not fit its field's type is refused naming
    its record: a field the format declares (``declared``: ``step`` is an integer) by that type, another by
    the type the earlier records gave it; by the dump's own name of the field (``field_names``: NeMo's
    ``prev_logprobs`` for the canonical ``old_log_probs``) where it has another."""
    import pyarrow as pa

    cols = []
    for fld in schema:
        if fld.name == "response_mask" and all("response_mask" not in r for r in rows[:1]):
            cols.append(synthetic_mask([r.get(mask_length) if mask_length else 1 for r in rows],
                                       [bool(r.get("is_padding")) for r in rows]))
            continue
        vals = [r.get(fld.name) for r in rows]
        try:
            cols.append(pa.array(vals, type=fld.type, from_pandas=False))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
            for v, (path, line) in zip(vals, where):
                try:
                    pa.array([v], type=fld.type)
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
                    shown = repr(v)
                    shown = shown if len(shown) < 80 else shown[:77] + "..."
                    at = where_in_dump(str(path), line)
                    why = (f"this dump format reads it as {fld.type}" if fld.name in declared else
                           f"earlier records give it type {fld.type}")
                    own = (field_names or {}).get(fld.name)
                    named = f"{own!r} (read as {fld.name!r})" if own else repr(fld.name)
                    raise AdvcliError(f"{at}: field {named} is {shown}, but {why}",
                                      hint="repair or remove that record (docs/formats.md lists each format's "
                                           "fields and their types)") from None
            raise
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _keys_into_schema(path: str, keys: dict[str, str]) -> None:
    """Rewrite the Parquet file at ``path`` (a conversion's temporary file) with ``keys`` in its Arrow schema's
    metadata, row group by row group (bounded memory; the rows and their row groups as they were): a table read
    back with ``pq.read_table`` and given to the library then runs with the dump's group sizes and shown
    settings, as the file does. (The writer fixes the schema when it opens, before the group sizes are
    known; a Parquet-to-Parquet copy costs little beside reading the dump's records.)"""
    import pyarrow.parquet as pq

    from ..io.writer import temp_path_for

    src = pq.ParquetFile(path)
    schema = src.schema_arrow
    schema = schema.with_metadata({**(schema.metadata or {}), **{k.encode(): v.encode() for k, v in keys.items()}})
    dst = temp_path_for(path)
    try:
        with pq.ParquetWriter(dst, schema, compression="zstd") as w:
            for i in range(src.num_row_groups):
                w.write_table(src.read_row_group(i).replace_schema_metadata(schema.metadata))
        os.replace(dst, path)
    finally:
        if os.path.exists(dst):
            os.remove(dst)


def _group_size_counts(steps: list, pids: list) -> dict[int, int]:
    """{size: groups} of the imported rows' (step, prompt_id) groups, the rule the run groups them by
    (:mod:`advcli.ops.grouprule`); a missing step or id is a value of its own."""
    import numpy as np
    import pandas as pd

    from ..ops.grouprule import id_groups, size_counts

    if not pids or all(p is None for p in pids):  # no group key in the dump (slime's train dump alone): no sizes
        return {}
    step_codes = pd.factorize(pd.array(steps, dtype=object), sort=False, use_na_sentinel=False)[0]
    pid_codes = pd.factorize(pd.array(pids, dtype=object), sort=False, use_na_sentinel=False)[0]
    return size_counts(id_groups(np.asarray(step_codes, np.int64), np.asarray(pid_codes, np.int64))[0])
