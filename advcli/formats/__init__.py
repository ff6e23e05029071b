"""Trainer dumps as advcli input: the rollout files that verl, NeMo RL, TRL, ROLL, slime, AReaL, SkyRL
and prime-rl already write (``../shared/spec/dumps.md``), read as they are.

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

Errors name the file and line, exit 2, and nothing is written (a conversion writes to a temporary
file renamed into place only when complete).
"""
from __future__ import annotations

import atexit
import importlib
import json
import os
import pkgutil
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import AdvcliError, did_you_mean

BATCH_ROWS = 2048  # rows per Arrow batch handed to the writer
BATCH_VALUES = 1 << 20  # ... or fewer rows when their token lists hold this many values in all
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".pt", ".pkl", ".dp", ".pth")
SKIPPED_DIRS = {"wandb": "wandb run folder", "tensorboard": "TensorBoard folder", "tb_logs": "TensorBoard folder",
                ".git": "git folder", "__pycache__": "Python cache", ".ipynb_checkpoints": "notebook checkpoints"}
# output columns of a run: a dump field of the same name is kept under logged_<name>
RESERVED = ("advantages", "returns", "token_level_rewards")


@dataclass
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
        where = f"{self.path}:{line}" if line else self.path
        return AdvcliError(f"{where}: {msg}", hint=hint)


@dataclass(frozen=True, eq=False)
class Format:
    """One trainer dump format.

    ``pattern``: a regex searched in the file's path (``/`` separators) that names this format's data
    files; group ``step`` (when present) gives the training step. ``sniff(record)``: whether a first
    record (a dict: a JSON line, a Parquet schema's names as keys, a loaded .pt object) is this
    format. ``read(path, ctx)`` yields ``(line, row)`` with canonical keys plus the dump's other
    fields. ``columns``: the canonical columns and their Arrow types (the rest are inferred from the
    first batch). ``key(path)``: what must be unique among the files (duplicate step files are an
    error); ``companions``: regexes of files trainers write beside their dumps, skipped with a note.
    """

    name: str
    title: str
    pattern: str
    level: str  # "token" (mask + per-token columns) or "response" (one reward per response)
    group_rule: str
    columns: dict
    read: Callable[[str, Context], Iterator[tuple[int, dict]]]
    sniff: Callable[[dict], bool]
    example: str  # the command that reads it (docs/formats.md)
    companions: tuple[str, ...] = ()
    key: Callable[[str], Any] | None = None
    required: tuple[str, ...] = ()  # keys every record must have (for the messages)
    logged: str | None = None  # column holding the trainer's own advantages, if the dump has them
    refuse: Callable[[str], str | None] | None = None  # a reason this file cannot be read (pickles)
    first_record: Callable[[str], dict | None] | None = None  # default: first JSON line

    def step_of(self, path: str) -> int | None:
        m = re.search(self.pattern, _norm(path))
        if m and "step" in m.groupdict() and m.group("step") is not None:
            return int(m.group("step"))
        return None

    def matches(self, path: str) -> bool:
        return re.search(self.pattern, _norm(path)) is not None


FORMATS: dict[str, Format] = {}


def _norm(path: str) -> str:
    return os.path.abspath(path).replace(os.sep, "/")


def _load() -> None:
    if FORMATS:
        return
    for mod in pkgutil.iter_modules(__path__):
        if mod.name.startswith("_"):
            continue
        m = importlib.import_module(f"{__name__}.{mod.name}")
        fmt = getattr(m, "FORMAT", None)
        if fmt is not None:
            FORMATS[fmt.name] = fmt


def names() -> list[str]:
    _load()
    return list(FORMATS)


def get(name: str) -> Format:
    _load()
    if name not in FORMATS:
        raise AdvcliError(f"--from {name!r}: unknown format.{did_you_mean(name, FORMATS)} "
                          f"Known: {', '.join(FORMATS)}, parquet")
    return FORMATS[name]


# ------------------------------------------------------------------------------------- reading
def iter_json_lines(path: str, ctx: Context) -> Iterator[tuple[int, dict]]:
    """(line number, object) of a JSON Lines file, read line by line with Python's json (which accepts
    the NaN / Infinity literals these writers emit). A line that does not parse is an error naming
    the file and line (a last line without its newline is reported as truncated)."""
    try:
        fh = open(path, "rb")
    except OSError as e:
        raise AdvcliError(f"{path}: cannot open it ({e.strerror})") from None
    with fh:
        for i, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError as e:
                cut = not raw.endswith(b"\n")
                raise ctx.error(i, ("truncated line (the file ends inside a record)" if cut else "invalid JSON")
                                + f": {getattr(e, 'msg', str(e))} at column {getattr(e, 'colno', '?')}",
                                hint="the writer may have been stopped mid-write; remove or repair that line") \
                    from None
            if not isinstance(obj, dict):
                raise ctx.error(i, f"expected one JSON object per line, got {type(obj).__name__}")
            yield i, obj


def first_json_record(path: str) -> dict | None:
    """The first JSON object of a file, or None when the file is empty or its first line is no object."""
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                if raw.strip():
                    try:
                        obj = json.loads(raw)
                    except ValueError:
                        return None
                    return obj if isinstance(obj, dict) else None
    except OSError:
        return None
    return None


def require(ctx: Context, line: int, rec: dict, keys) -> None:
    missing = [k for k in keys if k not in rec]
    if missing:
        raise ctx.error(line, f"missing field(s) {', '.join(repr(k) for k in missing)} of a {ctx.fmt.name} record"
                        f" (fields present: {', '.join(list(rec)[:12])}{' ...' if len(rec) > 12 else ''})",
                        hint=f"is this a {ctx.fmt.title} file? force another format with --from")


def number(ctx: Context, line: int, value, what: str, allow_none: bool = False) -> float | None:
    """A JSON number (NaN/Infinity literals included) as a float; booleans count 0/1."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    raise ctx.error(line, f"field {what!r} is {value!r}; expected a number")


def extras(rec: dict, skip) -> dict:
    """The dump's other fields as columns: scalars as they are, lists and objects as JSON text; a field
    named like an output column is kept as logged_<name>."""
    out = {}
    for k, v in rec.items():
        if k in skip:
            continue
        if isinstance(v, (dict, list)):
            v = json.dumps(v, ensure_ascii=False, default=str)
        out[f"logged_{k}" if k in RESERVED else k] = v
    return out


# ------------------------------------------------------------------------------------ discovery
@dataclass
class Found:
    fmt: Format
    files: list[str]
    skipped: list[str]  # "path (why)"


def _companion(path: str) -> str | None:
    _load()
    p = _norm(path)
    for fmt in FORMATS.values():
        for c in fmt.companions:
            if re.search(c, p):
                return f"written by {fmt.title} beside its dumps"
    base = os.path.basename(p)
    if base.startswith("events.out.tfevents"):
        return "TensorBoard event file"
    return None


def _sniff(path: str, fmt: Format) -> bool:
    try:
        rec = (fmt.first_record or first_json_record)(path)
    except AdvcliError:
        return False
    return rec is not None and bool(fmt.sniff(rec))


def _classify(path: str, forced: Format | None) -> Format | None:
    """The format of one data file: by name, confirmed by content (name ambiguity settled by content)."""
    _load()
    cands = [f for f in FORMATS.values() if f.matches(path)]
    if forced is not None:
        return forced
    if not cands:
        return None
    if len(cands) == 1:
        return cands[0]
    for f in cands:
        if _sniff(path, f):
            return f
    return cands[0]


# framework pickles: loading them runs the framework's classes; refused with how to export them
PICKLES = (
    (r"(^|/)gen_batch\.dp$|\.dp$", "a verl RolloutSkip cache (pickle of verl's DataProto)",
     "in an environment with verl installed: b = pickle.load(open(P, 'rb')); write b.batch's tensors and "
     "b.non_tensor_batch to Parquet (one row per response: response_mask, rewards, ...), or rerun with "
     "trainer.rollout_data_dir=DIR to get {step}.jsonl files advcli reads (--from verl-jsonl)"),
    (r"(^|/)dumped_data/global_step_\d+_training_input\.pkl$", "a SkyRL training batch (pickle of "
     "TrainingInputBatch; it holds no rewards)", "in an environment with skyrl installed, load it and write its "
     "tensors to Parquet; for rewards use the eval dumps (dumped_evals/, --from skyrl-evals)"),
    (r"(^|/)step_\d+\.pkl$", "a ROLL rollout-mock dump (pickle of ROLL's DataProto)",
     "in an environment with roll installed, load it and write response_mask / scores to Parquet, or set "
     "rollout_dump_dir=/abs/path to get rollout_dump_data.step_N.jsonl files (--from roll-dump)"),
    (r"\.pkl$", "a Python pickle", "advcli never unpickles arbitrary classes; export the data to Parquet or "
     "JSON Lines where the producing framework is installed"),
)


def _pickle_refusal(path: str) -> AdvcliError | None:
    p = _norm(path)
    for pat, what, how in PICKLES:
        if re.search(pat, p):
            return AdvcliError(f"{path}: {what}; loading it would run the framework's own classes, which advcli "
                               "never does", hint=f"export it: {how}")
    return None


def discover(spec: str, forced: Format | None = None) -> Found:
    """The dump files under ``spec`` (a file or a directory, walked recursively, sorted by step),
    their format, and the files skipped (companions, wandb/TensorBoard folders) with the reason."""
    _load()
    if not os.path.exists(spec):
        raise AdvcliError(f"{spec}: no such file or directory")
    skipped: list[str] = []
    if os.path.isdir(spec):
        candidates = []
        for root, dirs, files in os.walk(spec):
            keep = []
            for d in sorted(dirs):
                why = SKIPPED_DIRS.get(d)
                if why:
                    skipped.append(f"{os.path.join(root, d)}/ ({why})")
                else:
                    keep.append(d)
            dirs[:] = keep
            for fname in sorted(files):
                p = os.path.join(root, fname)
                why = _companion(p)
                if why:
                    skipped.append(f"{p} ({why})")
                elif fname.endswith(DATA_SUFFIXES):
                    candidates.append(p)
        if not candidates:
            raise AdvcliError(f"{spec}: no dump files found (looked for {', '.join(DATA_SUFFIXES)} files)"
                              + (f"; skipped {len(skipped)}" if skipped else ""))
    else:
        candidates = [spec]
    for p in candidates:
        refused = _pickle_refusal(p)
        if refused is not None:
            raise refused
    by_file = [(p, _classify(p, forced)) for p in candidates]
    chosen = forced
    if chosen is None:
        known = [f for _, f in by_file if f is not None]
        if not known:
            p = candidates[0]
            raise AdvcliError(f"{p}: not a dump format advcli recognises by its name",
                              hint=f"force one with --from FORMAT ({', '.join(FORMATS)}); "
                                   "docs/formats.md shows each format's file names")
        chosen = max(set(known), key=lambda f: (sum(1 for g in known if g is f), -list(FORMATS).index(f.name)))
    files = []
    for p, f in by_file:
        if f is None and forced is None:  # a file no format names (notes, configs): not read, reported
            skipped.append(f"{p} (not a {chosen.title} file name)")
            continue
        if f is not None and f is not chosen:
            raise AdvcliError(f"{p}: a {f.title} file among the {chosen.name} dumps of {spec}",
                              hint="one run reads one format: move it out, or point advcli at one dump directory")
        if chosen.refuse is not None:
            why = chosen.refuse(p)
            if why:
                raise AdvcliError(f"{p}: {why}")
        first = (chosen.first_record or first_json_record)(p)
        if first is None:
            if os.path.getsize(p) == 0:
                skipped.append(f"{p} (empty)")
                continue
            raise AdvcliError(f"{p}:1: not a {chosen.title} file (its first record does not parse)",
                              hint=None if forced else "force the format with --from FORMAT")
        if not chosen.sniff(first):
            raise AdvcliError(f"{p}:1: not a {chosen.title} record"
                              + (f": expected the fields {', '.join(chosen.required)}" if chosen.required else "")
                              + f" (fields present: {', '.join(list(first)[:12])})",
                              hint="a file of another format among the dumps? force the format with --from")
        files.append(p)
    if not files:
        raise AdvcliError(f"{spec}: every dump file is empty")
    key = chosen.key or chosen.step_of
    seen: dict = {}
    for p in files:
        k = key(p)
        if k is None:
            continue
        if k in seen:
            raise AdvcliError(f"{p}: duplicate step file: {seen[k]} holds the same step ({k})",
                              hint="two runs (or a rerun) share this directory; point advcli at one of them")
        seen[k] = p
    files.sort(key=lambda p: (chosen.step_of(p) if chosen.step_of(p) is not None else -1, _norm(p)))
    return Found(chosen, files, skipped)


def is_dump(spec: str) -> bool:
    """Whether ``spec`` is a trainer dump rather than advcli's own Parquet: a file whose name or suffix
    says so (a Parquet file only when a format's name and columns match), or a directory holding one
    (walked until the first hit). Anything else goes to the Parquet reader and its own messages."""
    _load()
    if os.path.isfile(spec):
        if spec.endswith(".parquet"):
            fmt = _classify(spec, None)
            return fmt is not None and _sniff(spec, fmt)
        return spec.endswith(DATA_SUFFIXES) or _classify(spec, None) is not None
    if os.path.isdir(spec):
        for root, dirs, files in os.walk(spec):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            for fname in files:
                p = os.path.join(root, fname)
                if fname.endswith(".parquet"):
                    fmt = _classify(p, None)
                    if fmt is not None and _sniff(p, fmt):
                        return True
                elif fname.endswith(DATA_SUFFIXES) and (_classify(p, None) is not None
                                                        or _pickle_refusal(p) is not None):
                    return True
    return False


# ------------------------------------------------------------------------------------ conversion
@dataclass
class ImportInfo:
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

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("format", "title", "level", "group_rule", "source", "files",
                                              "skipped", "rows", "groups", "group_sizes", "notes", "logged")}


def convert(spec: str, output: str, fmt: str | Format | None = None, *, synth_mask: bool = False,
            batch_rows: int = BATCH_ROWS) -> ImportInfo:
    """Stream the dump at ``spec`` into canonical Parquet at ``output`` (written to a temporary file
    renamed into place when complete: an error leaves nothing). ``synth_mask``: give a response-level
    dump a one-token ``response_mask`` per row, so the token pipeline runs it at response level."""
    import pyarrow.parquet as pq

    forced = get(fmt) if isinstance(fmt, str) else fmt
    found = discover(spec, forced)
    f = found.fmt
    ctx = Context(fmt=f, files=found.files)
    tmp = output + ".advcli-tmp"
    writer = None
    schema = None
    rows_total = 0
    sizes: dict = {}
    starts: list[tuple[int, str]] = []  # (first canonical row, file): where a row came from, for messages
    dropped: set = set()
    try:
        buf: list[dict] = []
        where: list[tuple[str, int]] = []
        values = 0

        def flush():
            nonlocal writer, schema, buf, where, values
            if not buf:
                return
            if schema is None:
                schema = _schema(f, buf, synth_mask)
            for r in buf:
                for k in r:
                    if k not in schema.names and k not in dropped:
                        dropped.add(k)
            batch = _to_batch(buf, where, schema, synth_mask)
            if writer is None:
                writer = pq.ParquetWriter(tmp, schema, compression="zstd")
            writer.write_batch(batch)
            buf, where, values = [], [], 0

        for path in found.files:
            ctx.path, ctx.step = path, f.step_of(path)
            starts.append((sum(sizes.values()), path))
            for line, row in f.read(path, ctx):
                buf.append(row)
                where.append((path, line))
                key = (row.get("step"), row.get("prompt_id"))
                sizes[key] = sizes.get(key, 0) + 1
                for v in row.values():  # token lists are Python objects here (~32 bytes a value)
                    if isinstance(v, list):
                        values += len(v)
                if len(buf) >= batch_rows or values >= BATCH_VALUES:
                    flush()
        flush()
        if writer is None:
            raise AdvcliError(f"{spec}: the dump holds no rows")
        writer.close()
        writer = None
        rows_total = sum(sizes.values())
        os.replace(tmp, output)
    except BaseException:
        if writer is not None:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the original error matters
                pass
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    notes = list(ctx.notes)
    if dropped:
        notes.append(f"field(s) {', '.join(sorted(dropped))} first appear after the first {batch_rows} rows and "
                     "were left out")
    hist: dict = {}
    for n in sizes.values():
        hist[n] = hist.get(n, 0) + 1
    return ImportInfo(format=f.name, title=f.title, level=f.level, group_rule=f.group_rule, source=spec,
                      files=found.files, skipped=found.skipped, rows=rows_total, output=output, notes=notes,
                      logged=f.logged, groups=len(sizes), group_sizes=dict(sorted(hist.items())), starts=starts)


def _schema(f: Format, rows: list[dict], synth_mask: bool):
    import pyarrow as pa

    fields = []
    names = []
    for name, typ in f.columns.items():
        if any(r.get(name) is not None for r in rows):
            fields.append(pa.field(name, typ))
            names.append(name)
    extra_names = []
    for r in rows:
        for k in r:
            if k not in f.columns and k not in extra_names:
                extra_names.append(k)
    for k in extra_names:
        first = next((r[k] for r in rows if r.get(k) is not None), None)  # the first record's type rules
        try:
            typ = pa.array([first]).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            typ = pa.string()
        if pa.types.is_null(typ):
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
                                                                                             f.level == "response")
                                                                      }).encode()})


def _to_batch(rows: list[dict], where: list[tuple[str, int]], schema, synth_mask: bool):
    import numpy as np
    import pyarrow as pa

    cols = []
    for fld in schema:
        if fld.name == "response_mask" and all("response_mask" not in r for r in rows[:1]):
            offs = np.arange(len(rows) + 1, dtype=np.int32)
            cols.append(pa.ListArray.from_arrays(pa.array(offs), pa.array(np.ones(len(rows), np.int8))))
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
                    at = f"{path}:{line}" if str(path).endswith((".jsonl", ".json")) else f"{path}, record {line}"
                    raise AdvcliError(f"{at}: field {fld.name!r} is {shown}, but earlier records give it "
                                      f"type {fld.type}") from None
            raise
    return pa.RecordBatch.from_arrays(cols, schema=schema)


# -------------------------------------------------------------------------------- the input edge
_TMP: dict[str, str] = {}
_CONVERTED: dict[tuple, ImportInfo] = {}
IMPORTED: dict[str, ImportInfo] = {}  # canonical Parquet path -> how it was made


def _tmpdir() -> str:
    if "dir" not in _TMP:
        d = tempfile.mkdtemp(prefix="advcli-import-")
        _TMP["dir"] = d
        atexit.register(shutil.rmtree, d, True)
    return _TMP["dir"]


def _tmp_path(name: str) -> str:
    """A fresh path named ``name`` in the temporary directory (one sub-directory per conversion, so the
    name a command shows is the dump's own)."""
    d = os.path.join(_tmpdir(), str(len(_CONVERTED)))
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def open_inputs(inputs: list[str], source: str | None = None, *, synth_mask: bool = True) -> list[str]:
    """The input edge of every command: Parquet inputs as they are; each trainer dump (recognised from
    its file names and keys, or the format ``source`` names: ``--from``) streamed into canonical
    Parquet in a temporary directory, whose path replaces it. ``synth_mask``: response-level dumps
    get a one-token mask (for run/validate/compare; inspect and convert leave it out)."""
    if source in (None, "", "auto"):
        forced = None
    elif source == "parquet":
        return list(inputs)
    else:
        forced = get(source)
    out = []
    for spec in inputs:
        if forced is None and not is_dump(spec):
            out.append(_with_mask(spec, synth_mask) if _converted_level(spec) == "response" else spec)
            continue
        key = (os.path.realpath(spec), forced.name if forced else None, synth_mask)
        if key not in _CONVERTED:
            stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(os.path.normpath(spec))) or "dump"
            target = _tmp_path(f"{stem}.parquet")
            info = convert(spec, target, forced, synth_mask=synth_mask)
            _CONVERTED[key] = info
            IMPORTED[target] = info
        out.append(_CONVERTED[key].output)
    return out


def _converted_level(spec: str) -> str | None:
    """The level recorded in a Parquet file that ``advcli convert`` wrote (None for any other input)."""
    if not (os.path.isfile(spec) and spec.endswith(".parquet")):
        return None
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(spec).metadata or {}
        rec = json.loads(meta.get(b"advcli.import", b"null"))
    except Exception:  # noqa: BLE001 - not ours: the Parquet reader will say what is wrong
        return None
    return rec.get("level") if isinstance(rec, dict) and not rec.get("synthetic_mask") else None


def _with_mask(spec: str, synth_mask: bool) -> str:
    """A converted response-level Parquet file (``advcli convert``'s output), recorded as an import; with
    ``synth_mask``, copied into the temporary directory with the one-token mask a run needs (the file
    itself is left as it is)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    key = (os.path.realpath(spec), "converted", synth_mask)
    if key in _CONVERTED:
        return _CONVERTED[key].output
    f = pq.ParquetFile(spec)
    old = f.schema_arrow
    if "response_mask" in old.names:
        return spec
    rec = json.loads(old.metadata[b"advcli.import"])
    target = spec
    if synth_mask:
        rec["synthetic_mask"] = True
        meta = dict(old.metadata)
        meta[b"advcli.import"] = json.dumps(rec).encode()
        # scalar advantages/returns of a response-level run's output read back as one-token lists, like the mask
        scalars = [n for n in RESERVED if n in old.names and not pa.types.is_list(old.field(n).type)]
        fields = [pa.field(fl.name, pa.list_(fl.type)) if fl.name in scalars else fl for fl in old]
        schema = pa.schema(fields + [pa.field("response_mask", pa.list_(pa.int8()))], metadata=meta)
        target = _tmp_path(os.path.basename(spec))
        with pq.ParquetWriter(target, schema, compression="zstd") as w:
            for b in f.iter_batches(batch_size=65536):
                offs = pa.array(range(b.num_rows + 1), pa.int32())
                cols = [pa.ListArray.from_arrays(offs, b.column(n)) if n in scalars else b.column(n)
                        for n in old.names]
                mask = pa.ListArray.from_arrays(offs, pa.array([1] * b.num_rows, pa.int8()))
                w.write_batch(pa.RecordBatch.from_arrays(cols + [mask], schema=schema))
    _load()
    fmt = FORMATS.get(rec.get("format"))
    info = ImportInfo(format=rec.get("format", "?"), title=fmt.title if fmt else "converted", level="response",
                      group_rule=fmt.group_rule if fmt else "", source=spec, files=[spec], skipped=[],
                      rows=f.metadata.num_rows, output=target, notes=[], logged=fmt.logged if fmt else None)
    _CONVERTED[key] = info
    IMPORTED[target] = info
    return target


def locate(info: ImportInfo, row: int) -> str:
    """``FILE:LINE`` of canonical row ``row`` of a converted dump (the file is read again up to that row:
    this runs only when a message names a row)."""
    first, path = max(((a, p) for a, p in info.starts if a <= row), default=(0, info.source))
    if not info.starts:
        return info.source
    fmt = FORMATS[info.format]
    ctx = Context(fmt=fmt, path=path, step=fmt.step_of(path), files=[p for _, p in info.starts])
    for k, (line, _) in enumerate(fmt.read(path, ctx)):
        if k == row - first:
            return f"{path}:{line}" if path.endswith((".jsonl", ".json")) else f"{path}, record {line}"
    return path


def explain(message: str) -> str:
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
        message = message.replace(tmp, info.source)
    return message


def info_for(path: str) -> ImportInfo | None:
    return IMPORTED.get(path)


# ------------------------------------------------------------------------- response-level runs
# token-level estimators whose result is one value per row in these settings: the return of a reward
# placed at the last token with γ = 1 is that reward at every token; a reward placed on every token and
# passed through is that reward
ROW_CONSTANT = {
    "reinforce_plus_plus": lambda cfg: float(cfg["estimator"].get("gamma", 1.0)) == 1.0
    and cfg["reward"].get("placement") in ("last", "last_valid"),
    "token_rewards": lambda cfg: cfg["reward"].get("placement") == "all",
}
LENGTH_ESTIMATORS = {"opo": "the response lengths (OPO weights each response by its token count)"}


def check_config(inputs: list[str], cfg: dict) -> None:
    """Refuse, before anything is read, a configuration that needs token data the imported dump lacks."""
    infos = [IMPORTED[p] for p in inputs if p in IMPORTED and IMPORTED[p].level == "response"]
    if not infos:
        return
    info = infos[0]
    from ..config import get_path
    from ..estimators import get as get_estimator

    name = get_path(cfg, "estimator.name")
    spec = get_estimator(name)
    missing = None
    row_constant = ROW_CONSTANT.get(name)
    if spec.level == "token" and not (row_constant and row_constant(cfg)):
        needs = ["response_mask"] + [r for r in spec.needs]
        missing = f"estimator {name} works on token data ({', '.join(needs)})"
    elif name in LENGTH_ESTIMATORS:
        missing = f"estimator {name} needs {LENGTH_ESTIMATORS[name]}"
    elif get_path(cfg, "kl.in_reward"):
        missing = ("KL in the reward needs the policy and reference log-probs per token (old_log_probs, "
                   "ref_log_probs); set its coefficient to 0 (e.g. TRL rloo: --set beta=0.0)")
    elif get_path(cfg, "advantage.whiten") or get_path(cfg, "reward.whiten_tokens"):
        missing = "whitening over tokens needs each response's token mask (response_mask)"
    if missing:
        raise AdvcliError(f"{info.source}: a {info.title} dump holds one reward per response and no token data; "
                          f"{missing}, which this dump lacks",
                          hint="response-level estimators work: GRPO, RLOO, Dr.GRPO, GPG, ... "
                               "(`advcli inspect DUMP` lists them)")


def name_sources(result) -> None:
    """A RunResult whose inputs name the dumps rather than their temporary Parquet (for its summary)."""
    if result is not None and getattr(result, "inputs", None):
        result.inputs = [IMPORTED[p].source if p in IMPORTED else p for p in result.inputs]


def finish_outputs(inputs: list[str], outputs: list[str], result=None) -> None:
    """A response-level run's outputs: ``advantages``/``returns`` (one-token lists) become float32
    scalars and the one-token mask is dropped, file by file (rewritten through a temporary file).
    ``result`` (a RunResult): its inputs name the dumps rather than their temporary Parquet."""
    name_sources(result)
    flags = [p in IMPORTED and IMPORTED[p].level == "response" for p in inputs]
    if not any(flags):
        return
    targets = outputs if len(outputs) == len(inputs) else outputs if all(flags) else []
    for i, out in enumerate(targets):
        if len(outputs) == len(inputs) and not flags[i]:
            continue
        paths = [out]
        if os.path.isdir(out):
            paths = sorted(os.path.join(out, n) for n in os.listdir(out) if n.endswith(".parquet"))
        for p in paths:
            _scalarize(p)


def _scalarize(path: str) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    old = f.schema_arrow
    lists = [n for n in RESERVED if n in old.names and pa.types.is_list(old.field(n).type)]
    drop = {"response_mask"} if "response_mask" in old.names else set()
    fields = [pa.field(fl.name, pa.float32()) if fl.name in lists else fl for fl in old if fl.name not in drop]
    meta = dict(old.metadata or {})
    if b"advcli.import" in meta:  # the one-token mask is gone: reading this file back adds it again
        rec = json.loads(meta[b"advcli.import"])
        rec["synthetic_mask"] = False
        meta[b"advcli.import"] = json.dumps(rec).encode()
    schema = pa.schema(fields, metadata=meta)
    tmp = path + ".advcli-tmp"
    w = pq.ParquetWriter(tmp, schema, compression="zstd")
    try:
        for batch in f.iter_batches(batch_size=65536):
            cols = []
            for fl in schema:
                col = batch.column(fl.name)
                if fl.name in lists:
                    col = pc.list_element(col, 0).cast(pa.float32())
                cols.append(col)
            w.write_batch(pa.RecordBatch.from_arrays(cols, schema=schema))
        w.close()
        f.close()
        os.replace(tmp, path)
    except BaseException:
        w.close()
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def estimator_support(info: ImportInfo, columns: list[str]) -> dict[str, dict]:
    """name -> {ok, missing} of every registered estimator, for a dump of this kind (what inspect says)."""
    from ..commands.inspect import estimator_requirements

    out = {}
    for name, req in estimator_requirements().items():
        missing = []
        if info.level == "response":
            if req["level"] == "token" and name not in ROW_CONSTANT:
                missing.append("token data (" + ", ".join(["response_mask", *req["needs"]]) + ")")
            elif name in LENGTH_ESTIMATORS:
                missing.append("response lengths")
        else:
            missing += [r for r in req["needs"] if r not in columns]
        if req.get("uses_groups") and "prompt_id" not in columns:
            missing.append("prompt_id")
        out[name] = {"ok": not missing, "missing": missing}
    return out


def describe(data: dict, inputs: list[str]) -> dict:
    """``advcli inspect``'s data for an imported dump: which format was seen, the files read and skipped,
    how the rows were grouped, and (response-level dumps) which estimators the data can feed."""
    infos = [IMPORTED[p] for p in inputs if p in IMPORTED]
    if not infos:
        return data
    info = infos[0]
    data["dump"] = info.as_dict()
    data["dump"]["example"] = FORMATS[info.format].example if info.format in FORMATS else None
    data["inputs"] = [i.source for i in infos] + [p for p in inputs if p not in IMPORTED]
    if info.level == "response":
        cols = [c["column"] for c in data.get("schema", [])]
        for name, e in estimator_support(info, cols).items():
            if name in data.get("estimators", {}):
                data["estimators"][name].update(ok=e["ok"], missing=e["missing"])
                if name in ROW_CONSTANT:
                    data["estimators"][name]["note"] = ("at response level: only as one value per response "
                                                        "(γ = 1, reward on the last token; token_rewards: "
                                                        "reward.placement=all), without KL or whitening")
    return data


def print_dump(data: dict) -> None:
    d = data.get("dump")
    if not d:
        return
    import typer

    sizes = ", ".join(f"{c}×{n}" for n, c in d["group_sizes"].items())
    typer.echo(f"format          {d['format']} ({d['title']}), {len(d['files'])} file(s), {d['rows']:,} rows, "
               f"{'token-level' if d['level'] == 'token' else 'response-level (no token data)'}")
    typer.echo(f"grouped by      {d['group_rule']}")
    if d["groups"]:  # (a converted file read back: inspect's own group figures follow)
        typer.echo(f"groups          {d['groups']:,} (sizes: {sizes})")
    if len(d["group_sizes"]) == 1:
        n = next(iter(d["group_sizes"]))
        typer.echo(f"group size      {n} in every group: for a flavor that groups by position give it, e.g. "
                   f"--flavor trl --set num_generations={n}, --flavor roll --set "
                   f"actor_infer.generating_args.num_return_sequences={n}")
    if d.get("example"):
        typer.echo(f"read it with    {d['example']}")
    if d.get("logged"):
        typer.echo(f"trainer's own   {d['logged']} (the advantages the trainer computed, kept for comparison)")
    for s in d["skipped"]:
        typer.echo(f"skipped         {s}")
    for n in d["notes"]:
        typer.echo(f"note            {n}")


__all__ = ["describe", "print_dump", "Format", "Context", "FORMATS", "get", "names", "discover", "convert",
           "open_inputs", "check_config", "finish_outputs", "name_sources", "explain", "info_for", "estimator_support",
           "iter_json_lines", "first_json_record", "require", "number", "extras", "ImportInfo"]
