"""The input edge of the commands: Parquet inputs as they are, trainer dumps converted into a temporary
directory (removed when the process exits), and messages naming a converted row rewritten to name the
dump's file and line."""
from __future__ import annotations

import atexit
import itertools
import json
import os
import re
import shutil
from typing import TYPE_CHECKING

from ..errors import AdvcliError
from ..io.temps import scratch_prefix, sweep_stale
from ._common import where_in_dump
from .discovery import is_dump
from .records import RESERVED
from .registry import FORMATS, Context, get, load

if TYPE_CHECKING:
    from .conversion import ImportInfo

_TMP: dict[str, str] = {}
_CONVERTED: dict[tuple, ImportInfo] = {}
_SERIAL = itertools.count()  # the temporary sub-directories' names
IMPORTED: dict[str, ImportInfo] = {}  # canonical Parquet path -> how it was made


def _tmpdir() -> str:
    if "dir" not in _TMP:
        import tempfile  # here: a Parquet input, the common case, needs no temporary directory

        sweep_stale()  # what killed runs left in TMPDIR
        d = tempfile.mkdtemp(prefix=scratch_prefix("import"))
        _TMP["dir"] = d
        atexit.register(shutil.rmtree, d, True)
    return _TMP["dir"]


def _tmp_path(name: str) -> str:
    """A fresh path named ``name`` in the temporary directory (one sub-directory per conversion, so the
    name a command shows is the dump's own)."""
    d = os.path.join(_tmpdir(), str(next(_SERIAL)))
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def open_inputs(inputs: list[str], source: str | None = None, *, synth_mask: bool = True,
                read_ahead: bool = True) -> list[str]:
    """The input edge of every command: Parquet inputs as they are; each trainer dump (recognised from
    its file names and keys, or the format ``source`` names: ``--from``) streamed into canonical
    Parquet in a temporary directory, whose path replaces it. ``synth_mask``: response-level dumps
    get a one-token mask (for run/validate/compare; inspect and convert leave it out). ``read_ahead``:
    the resulting files are handed to the kernel's readahead (:mod:`advcli.io.readahead`), so that a
    cold page cache fills while the command imports torch; inspect, which reads footers, does not."""
    from ..config import column_roles
    from ..io import readahead
    from .registry import dump_like_hint

    column_roles.DUMP_HINT = dump_like_hint  # a missing column of a trainer's dump renamed: the hint names --from
    paths = _open(inputs, source, synth_mask)
    if read_ahead:
        readahead.start(paths)
    return paths


def _open(inputs: list[str], source: str | None, synth_mask: bool) -> list[str]:
    if source in (None, "", "auto"):
        forced = None
    elif source == "parquet":
        return list(inputs)
    else:
        forced = get(source)
    out = []
    for spec in inputs:
        given = spec
        local = _remote_dump(spec, forced)
        if local is not None:  # a trainer's dump on object storage: its files copied down, read as a local dump
            spec = local
        if forced is None and not is_dump(spec):
            files = _converted_files(spec)
            out += [_converted_input(p, synth_mask) if level else p for p, level in files] if files else [spec]
            continue
        key = (os.path.realpath(spec), forced.name if forced else None, synth_mask)
        _forget_if_changed(key, spec)
        if key not in _CONVERTED:
            stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(os.path.normpath(spec))) or "dump"
            target = _tmp_path(f"{stem}.parquet")
            from .conversion import convert  # the streaming, loaded when a dump is converted

            info = convert(spec, target, forced, synth_mask=synth_mask)
            info.source = given  # (a copied dump: its URI)
            _record(target, info)
            _CONVERTED[key] = info
        out.append(_CONVERTED[key].output)
    return out


def _remote_dump(spec: str, forced) -> str | None:
    """A trainer's dump on object storage (``s3://b/verl/``, ``s3://b/verl/1.jsonl``, ``--from FORMAT`` with a URI)
    copied into the temporary directory (:mod:`.remote_dump`): the local path standing for it; None for any other
    input (a local path, a Parquet input read in place)."""
    from ..io import remote

    if not remote.is_uri(spec):
        return None
    from .remote_dump import mirror

    d = os.path.join(_tmpdir(), str(next(_SERIAL)))
    return mirror(spec, forced, d)


def _dump_identity(spec: str) -> tuple:
    """What a conversion read of a local dump: (path within it, size, modification time) of each of its files
    (a file, every file under a directory, or a glob's matches); () for a remote dump (converted once per
    process)."""
    import glob

    from ..io import remote

    if remote.is_uri(spec):
        return ()
    root = os.path.realpath(spec)
    if os.path.isdir(root):
        files = sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names)
    else:
        files = [root] if os.path.isfile(root) else sorted(glob.glob(spec))
    out = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:  # gone while listed: the next listing says so
            continue
        out.append((f, st.st_size, st.st_mtime_ns))
    return tuple(out)


_IDENTITY: dict[tuple, tuple] = {}  # conversion key -> the dump's identity when it was converted


def _forget_if_changed(key: tuple, spec: str) -> None:
    """Drop a conversion of ``spec`` made in this process when the dump has changed since (a step file added
    or rewritten as the trainer writes: a notebook polling a live run must see it), removing its temporary
    file; a conversion of the same files is reused (an audit's several configurations read one dump)."""
    now = _dump_identity(spec)
    info = _CONVERTED.get(key)
    if info is not None and _IDENTITY.get(key) != now:
        release_inputs([info.output])
    _IDENTITY[key] = now


def release_inputs(paths: list[str]) -> None:
    """Forget the conversions whose canonical Parquet is among ``paths`` and remove their temporary files
    (a follower, ``--follow``, converts one step after another: what a step left is gone before the next)."""
    from ..io.reader import GIVEN_FILES, SHOWN_AS

    gone = set(paths)
    for key, info in list(_CONVERTED.items()):
        if info.output in gone:
            del _CONVERTED[key]
            IMPORTED.pop(info.output, None)
            SHOWN_AS.pop(info.output, None)
            GIVEN_FILES.pop(info.output, None)
            d = os.path.dirname(info.output)
            if os.path.dirname(d) == _TMP.get("dir"):
                shutil.rmtree(d, ignore_errors=True)


def _converted_files(spec: str) -> list[tuple[str, str | None]]:
    """(file, level) of each Parquet file of ``spec`` (a file, a directory or a glob) when one of them is a
    file ``advcli convert`` wrote (:func:`_converted_level`: a response-level run's output among them);
    empty otherwise, ``spec`` then read as it is."""
    from ..io import remote
    from ..io.reader import expand_inputs

    if os.path.isfile(spec) and not remote.is_uri(spec):
        files = [spec]
    else:
        try:
            files = expand_inputs([spec])
        except AdvcliError:  # nothing there: the reader says so
            return []
    levels = [(p, _converted_level(p)) for p in files]
    if any(level == TABLE for _, level in levels) and not all(level == TABLE for _, level in levels):
        # a table of one value a response among token-level files (a summary beside the rollouts): not a
        # response-level input, read as it is (the reader names its missing response_mask)
        levels = [(p, None if level == TABLE else level) for p, level in levels]
    return levels if any(level for _, level in levels) else []


TABLE = "table"  # _converted_level of a plain Parquet table with one value a response in every column
TABLE_TITLE = "response-level table"  # its ImportInfo.title: "a response-level table dump holds one reward ..."
TABLE_LENGTHS = "response_length"  # a table's column of each response's token count (an integer), when it has one


def _converted_level(spec: str) -> str | None:
    """The level recorded in a Parquet file that ``advcli convert`` wrote, ``response`` or ``token``; ``table``
    for a Parquet table of one value a row in every column (no token lists: a table of rewards a CSV or a
    DataFrame was saved as), which runs as a response-level dump does; None for any other input."""
    from ..io import remote

    if not os.path.isfile(spec) and not remote.is_uri(spec):  # (any name: a converted file renamed x.pq is still one)
        return None
    from ..io.footer import schema_facts

    try:
        facts = schema_facts(spec)
        rec = json.loads(facts.metadata.get(b"advcli.import", b"null"))
    except Exception:  # noqa: BLE001 - not ours: the Parquet reader will say what is wrong
        return None
    if rec is None:
        return TABLE if _one_value_a_row(spec, facts) else None
    return rec.get("level") if isinstance(rec, dict) and not rec.get("synthetic_mask") else None


def _one_value_a_row(spec: str, facts) -> bool:
    """Whether the Parquet file ``spec`` holds no token data: no response_mask column and no column of numbers per
    token (a nested column, a list of strings, a struct, is checked by its type; pyarrow only then)."""
    if not facts.names or "response_mask" in facts.names:
        return False
    from .discovery import named_but_lacking

    if named_but_lacking(spec, list(facts.names)) is not None:  # a trainer's file that lost a column: said so
        return False
    if not facts.nested:
        return True
    from ..config.columns import is_list_type, is_numeric
    from ..io.reader import open_parquet

    f = open_parquet(spec)
    try:
        schema = f.schema_arrow
    finally:
        f.close(force=True)
    return not any(is_list_type(fl.type) and is_numeric(fl.type.value_type) for fl in schema
                   if fl.name in facts.nested)


def _converted_input(spec: str, synth_mask: bool) -> str:
    """A Parquet file ``advcli convert`` wrote, recorded as an import of its dump's format (a run on it takes the
    trainer's flavor, the group sizes and the settings the dump showed, as on the dump itself); a response-level
    one, with ``synth_mask``, copied into the temporary directory with the one-token mask a run needs (the file
    itself is left as it is)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..io import remote
    from ..io.reader import open_parquet, parquet_batches
    from .conversion import GROUP_SIZES_KEY, LAST_STEP_KEY, SHOWN_KEY, ImportInfo, synthetic_mask

    key = (spec if remote.is_uri(spec) else os.path.realpath(spec), "converted", synth_mask)
    _forget_if_changed(key, spec)
    if key in _CONVERTED:
        return _CONVERTED[key].output
    f = open_parquet(spec)  # (a file on object storage: read with ranged reads, its copy made here)
    old = f.schema_arrow
    table = b"advcli.import" not in (old.metadata or {})  # a plain table of one value a row (_converted_level)
    rec = {"format": TABLE, "level": "response"} if table else json.loads(old.metadata[b"advcli.import"])
    token_level = "response_mask" in old.names  # a token-level dump's conversion: read as it is
    footer = f.metadata.metadata or {}
    last_step = tuple(json.loads(footer.get(LAST_STEP_KEY.encode(), b"[]")))
    sizes = {int(k): int(v) for k, v in json.loads(footer.get(GROUP_SIZES_KEY.encode(), b"{}")).items()}
    shown = json.loads(footer.get(SHOWN_KEY.encode(), b"{}"))
    target = spec
    load()
    fmt = FORMATS.get(rec.get("format"))
    lengths = fmt.mask_length if fmt and fmt.mask_length in old.names else None
    notes = []
    if table and TABLE_LENGTHS in old.names and pa.types.is_integer(old.field(TABLE_LENGTHS).type):
        lengths = TABLE_LENGTHS  # each response's token count: the mask spans it, token-weighted figures hold
    longest = 1
    if lengths:
        bad, longest = _length_check(f, lengths)
        if bad is not None and (table or longest > MAX_RESPONSE_TOKENS):
            # (a trainer's file keeps its rows without a count as one token, said as the token counts unknown)
            notes.append(f"column {lengths!r} not taken as the token counts: {bad}; one token a row")
            lengths, longest = None, 1
    short = 0
    if synth_mask and not token_level:
        rec["synthetic_mask"] = True
        meta = dict(old.metadata or {})
        meta[b"advcli.import"] = json.dumps(rec).encode()
        # scalar advantages/returns of a response-level run's output read back as one-token lists, like the mask
        scalars = [n for n in RESERVED if n in old.names and not pa.types.is_list(old.field(n).type)
                   and (pa.types.is_floating(old.field(n).type) or pa.types.is_integer(old.field(n).type))]
        fields = [pa.field(fl.name, pa.list_(fl.type)) if fl.name in scalars else fl for fl in old]
        schema = pa.schema(fields + [pa.field("response_mask", pa.list_(pa.int8()))], metadata=meta)
        target = _tmp_path(os.path.basename(spec))
        with pq.ParquetWriter(target, schema, compression="zstd") as w:
            # rows a batch: its mask's int32 offsets hold its tokens
            for b in parquet_batches(f, spec, batch_size=max(1, min(65536, (2**31 - 1) // longest))):
                offs = pa.array(range(b.num_rows + 1), pa.int32())
                if lengths:  # the response's own token count (Format.mask_length), as a direct import does
                    given = b.column(lengths).to_pylist()
                    short += sum(1 for x in given if not (isinstance(x, int) and x >= 1))
                    mask = synthetic_mask(given)
                    offs = mask.offsets
                else:
                    mask = pa.ListArray.from_arrays(offs, pa.array([1] * b.num_rows, pa.int8()))
                cols = [(_spread(b.column(n), n, offs) if lengths else pa.ListArray.from_arrays(offs, b.column(n)))
                        if n in scalars else b.column(n) for n in old.names]
                w.write_batch(pa.RecordBatch.from_arrays(cols + [mask], schema=schema))
    title = fmt.title if fmt else TABLE_TITLE if rec.get("format") == TABLE else "converted"
    info = ImportInfo(format=rec.get("format", "?"), title=title,
                      level="token" if token_level else "response",
                      group_rule=fmt.group_rule if fmt else "", source=spec, files=[spec], skipped=[],
                      rows=f.metadata.num_rows, output=target, notes=notes, reward_notes=tuple(notes),
                      logged=fmt.logged if fmt else None,
                      token_lengths=bool(synth_mask and lengths and not short and not token_level),
                      lengths_known=bool(not token_level and lengths
                                         and not (short if synth_mask else _short_lengths(f, lengths))),
                      last_step_estimators=last_step, run_config=rec.get("run_config") or {},
                      groups=sum(sizes.values()), group_sizes=sizes, shown_settings=shown,
                      run_config_path=rec.get("run_config_path", ""), converted=rec.get("format") != TABLE)
    if token_level:  # read in place, under the name given now (a library session may give it otherwise later)
        _record(spec, info)
        return spec
    _CONVERTED[key] = info
    _record(target, info)
    return target


MAX_RESPONSE_TOKENS = 1 << 24  # a response-length column's largest count taken as tokens (more: no token count)


def _length_check(f, lengths: str) -> tuple[str | None, int]:
    """(what makes the Parquet file ``f``'s column ``lengths`` no token count of every row: its first row whose
    value is null, below 1 or over :data:`MAX_RESPONSE_TOKENS`, None when every row holds one; the largest value
    taken) of a response-length column."""
    import numpy as np

    col = f.read(columns=[lengths]).column(0).combine_chunks()
    values = np.asarray(col.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    wrong = (values < 1) | (values > MAX_RESPONSE_TOKENS)
    if col.null_count:
        wrong |= np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool)
    if wrong.any():
        row = int(np.argmax(wrong))
        value = col[row].as_py()
        return f"row {row} holds {value!r}, not a count of 1 to {MAX_RESPONSE_TOKENS:,}", 1
    return None, int(values.max()) if values.size else 1


def _short_lengths(f, lengths: str) -> int:
    """Rows of the Parquet file ``f`` whose response-length column ``lengths`` gives no count >= 1 (a null, a
    zero): their synthetic mask would be one token, as :func:`_converted_input` counts them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = f.read(columns=[lengths]).column(0)
    if not pa.types.is_integer(col.type):
        return len(col)
    return len(col) - int(pc.sum(pc.greater_equal(col, 1)).as_py() or 0)


def _spread(col, name: str, offs):
    """A scalar column of a response-level run's output as lists over the rows' mask (``offs``): the row's
    advantage and return on each of its tokens (a response-level estimator's are row-constant), its
    sequence reward (``token_level_rewards``, the row's sum) on its last token, so that every command reads
    the figures of the run that wrote it."""
    import numpy as np
    import pyarrow as pa

    o = offs.to_numpy().astype(np.int64)
    n = np.diff(o)
    v = col.to_numpy(zero_copy_only=False)
    if name == "token_level_rewards":
        flat = np.zeros(int(o[-1]), v.dtype)
        flat[o[1:] - 1] = v  # every row has at least one token (synthetic_mask)
    else:
        flat = np.repeat(v, n)
    return pa.ListArray.from_arrays(offs, pa.array(flat, col.type))


def _record(target: str, info: ImportInfo) -> None:
    """``target`` (a temporary Parquet file) stands for ``info.source``, the dump the user gave: in
    messages and reports (:func:`name_dumps`) and in the output's provenance (``SHOWN_AS``)."""
    from ..io.reader import GIVEN_FILES, SHOWN_AS

    IMPORTED[target] = info
    if target != info.source:
        SHOWN_AS[target] = info.source
        # the dump's files, and the configuration the run saved beside it (AReaL's config.yaml), which it read
        GIVEN_FILES[target] = (info.source, *info.files, *([info.run_config_path] if info.run_config_path else []))


def locate(info: ImportInfo, row: int) -> str:
    """``FILE:LINE`` of canonical row ``row`` of a converted dump (the file is read again up to that row:
    this runs only when a message names a row)."""
    return locate_rows(info, [row]).get(row, info.source)


def locate_rows(info: ImportInfo, rows) -> dict[int, str]:
    """``FILE:LINE`` (``FILE, record N`` for a non-JSON file) of each canonical row of a converted dump in
    ``rows``: each file holding one of them is read again once, up to the last one it holds (this runs
    only when a report or a message names rows). A converted Parquet input names itself and the row."""
    want = sorted({int(r) for r in rows})
    if not info.starts:
        return {r: f"{info.source}, row {r}" for r in want}
    fmt = FORMATS[info.format]
    files = [p for _, p in info.starts]
    ends = [a for a, _ in info.starts[1:]] + [max(info.rows, want[-1] + 1 if want else 0)]
    out: dict[int, str] = {}
    for (first, path), end in zip(info.starts, ends):
        targets = {r - first for r in want if first <= r < end}
        if not targets:
            continue
        last = max(targets)
        ctx = Context(fmt=fmt, path=path, step=fmt.step_of(path), files=files)
        for k, (line, _) in enumerate(fmt.read(path, ctx)):
            if k in targets:
                out[first + k] = where_in_dump(path, line)
            if k >= last:
                break
    return out


def name_dump_rows(message: str) -> str:
    """An error message naming a converted dump's temporary Parquet, rewritten to name the dump: the file
    and line a row came from where the message names a row (``TMP: column 'reward', row 7: ...`` ->
    ``steps/3.jsonl:2: column 'reward', row 7 of the dump: ...``), else the dump's path."""
    for tmp, info in IMPORTED.items():
        if tmp == info.source or tmp not in message:
            continue
        m = re.search(re.escape(tmp) + r"([^\n]*?)\brow (\d+)\b", message)
        if m and info.starts:
            try:
                where = locate(info, int(m.group(2)))
            except AdvcliError:
                where = info.source
            message = message.replace(tmp, where, 1).replace(f"row {m.group(2)}", f"row {m.group(2)} of the dump", 1)
            message = _own_field_names(message, info.format)
        message = message.replace(tmp, info.source)
    from .remote_dump import uri_of

    return uri_of(message)  # a copied dump's files named as their objects


def _own_field_names(message: str, fmt_name: str) -> str:
    """A message about a converted dump's row, its canonical column named as the dump writes the field
    (``Format.field_names``: NeMo's prev_logprobs for old_log_probs), and a null said as what it is in a record:
    the field absent, or null."""
    from .registry import FORMATS

    fmt = FORMATS.get(fmt_name)
    for canonical, own in (fmt.field_names if fmt is not None else {}).items():
        message = message.replace(f"column {canonical!r}", f"field {own!r} (column {canonical!r})", 1)
    return message.replace(": null value", ": null value (the record lacks the field, or holds null)", 1)


def name_dumps(obj):
    """``obj`` (a report: dicts, lists, strings) with every temporary Parquet path a converted dump went
    through replaced by the dump the user gave (:func:`name_dump_rows`: the file and line where a row is named),
    for everything a command prints or writes."""
    tmpdir = _TMP.get("dir")
    if tmpdir is None:
        return obj
    if isinstance(obj, str):
        return name_dump_rows(obj) if tmpdir in obj else obj
    if isinstance(obj, dict):
        return {k: name_dumps(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(name_dumps(v) for v in obj)
    return obj


def info_for(path: str) -> ImportInfo | None:
    return IMPORTED.get(path)


def source_of(path: str) -> str:
    """The dump an input path was converted from (the path itself for a Parquet input), for messages
    and summaries that name what the user gave."""
    return IMPORTED[path].source if path in IMPORTED else path
