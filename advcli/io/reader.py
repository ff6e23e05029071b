"""Reading Parquet inputs in chunks: one file, several files, a directory or a glob.

Memory: files are opened with ``pre_buffer=False`` and a bounded read buffer (:data:`READ_BUFFER`),
so a column chunk is streamed page by page instead of being loaded whole (a row group of a big dump
can hold hundreds of MB per column). :meth:`InputSet.iter_batches` decodes the next batch on a
background thread while the caller computes on the current one (pyarrow releases the GIL).
"""
from __future__ import annotations

import glob
import os
import queue
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import AdvcliError
from ..records import record
from . import remote

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

# input path -> what it stands for to the user: a trainer dump converted into a temporary Parquet file
# (advcli.formats) is named by the dump the user gave wherever a path is recorded (the output's provenance)
SHOWN_AS: dict[str, str] = {}
# input path -> the local files the user gave, where it is a temporary file standing for them (a converted dump's
# source and files, a converted response-level file, the kept rows of a filter): none of them is ever an output
GIVEN_FILES: dict[str, tuple[str, ...]] = {}


def given_files(path: str) -> tuple[str, ...]:
    """``path`` and the files the user gave that it stands for (:data:`GIVEN_FILES`): what an output must not be."""
    return (path, *GIVEN_FILES.get(path, ()))


def shown_name(path: str) -> str:
    """The name an input is recorded under: the trainer dump it was converted from (the library's in-memory
    table, ``<pyarrow.Table>``, where that was the table's temporary file), else its file name."""
    seen = {path}
    while path in SHOWN_AS and SHOWN_AS[path] not in seen:  # a converted table: its file, then the table
        path = SHOWN_AS[path]
        seen.add(path)
        if path not in SHOWN_AS:
            return path
    return SHOWN_AS[path] if path in SHOWN_AS else path.rsplit("/", 1)[-1] if "://" in path else os.path.basename(path)


def not_a_regular_file(path: str) -> AdvcliError | None:
    """Why the local ``path`` cannot be read as an input file, or None when it can: a symbolic link whose
    target is gone (opening it raised FileNotFoundError), or a FIFO, socket or device (reading a FIFO waits
    for a writer forever)."""
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return AdvcliError(f"{path}: a broken symbolic link: its target {os.readlink(path)} does not exist",
                               hint="restore the target, or remove the link")
        return AdvcliError(f"{path}: no such file")
    except OSError as e:  # a link loop (ELOOP), a component that is not a directory: said as the system says it
        return AdvcliError(f"{path}: cannot be read ({e.strerror or e})")
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
            else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a special file")
    return AdvcliError(f"{path}: not a regular file: it is {kind}; advcli reads inputs from regular files",
                       hint="remove it or move it out, or write the data to a file and give that")


def is_glob(spec: str) -> bool:
    """A local pattern (``dumps/*.jsonl``), not a path that exists (a file named ``x[1].parquet`` is a file) nor an
    object-storage address (expanded by :mod:`advcli.io.remote`)."""
    return any(ch in spec for ch in "*?[") and not os.path.exists(spec) and not remote.is_uri(spec)


def refuse_missing_inputs(specs: list[str]) -> None:
    """An input path that names nothing (not a URI, not a glob) is refused first, as :func:`expand_inputs`
    refuses it: before the output is looked at, whose 'already exists' would otherwise be the message."""
    for spec in specs:
        spec = remote.local_path(str(spec))
        if not remote.is_uri(spec) and not is_glob(spec) and not os.path.lexists(spec):
            raise AdvcliError(f"{spec}: no such file",
                              hint="check the path; INPUT may be a file, a directory or a glob")


def expand_inputs(specs: list[str]) -> list[str]:
    """Files from paths, directories (their *.parquet, sorted) and globs, in the order given. A broken
    symbolic link or a file that is not a regular file (a FIFO, a socket) among them is refused, naming it."""
    out: list[str] = []
    for spec in specs:
        spec = remote.local_path(str(spec))
        if remote.is_uri(spec):  # object storage: s3://, gs://, hdfs://, ... (advcli.io.remote)
            out.extend(remote.expand(spec))
        elif os.path.isdir(spec):
            found = sorted(glob.glob(os.path.join(glob.escape(spec), "*.parquet")))
            if not found:
                nested = sorted(glob.glob(os.path.join(glob.escape(spec), "**", "*.parquet"), recursive=True))
                if nested:
                    first = os.path.relpath(nested[0], spec)
                    depth = first.count(os.sep)
                    pattern = os.path.join(spec, *["*"] * depth, "*.parquet")
                    raise AdvcliError(f"{spec}: no *.parquet files directly in this directory; {len(nested)} in its "
                                      f"subdirectories (first: {first})",
                                      hint=f"give them with a glob: '{pattern}' (quoted); advcli reads columns, "
                                           "not key=value directory names")
                raise AdvcliError(f"{spec}: no input files in this directory: no *.parquet files, and no file "
                                  "under it that a trainer dump format reads (a step file's name says its format)",
                                  hint="give the directory the trainer wrote its dumps into, or the files "
                                       "themselves; docs/formats.md lists the dumps advcli reads")
            out.extend(found)
        elif is_glob(spec):
            found = sorted(glob.glob(spec))
            if not found:
                raise AdvcliError(f"{spec}: no file matches this pattern")
            out.extend(found)
        elif not os.path.exists(spec) and not os.path.islink(spec):
            raise AdvcliError(f"{spec}: no such file",
                              hint="check the path; INPUT may be a file, a directory or a glob")
        else:
            out.append(spec)
    seen = set()
    uniq = []
    for p in out:
        if not remote.is_uri(p):
            refused = not_a_regular_file(p)
            if refused is not None:
                raise refused
        key = p if remote.is_uri(p) else os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            uniq.append(p)
    return uniq


# tokens a chunk holds: every command sizes its chunks by tokens as well as rows, so that its memory does not
# grow with the length of the responses (8,192 rows of 16k-token responses are 134M tokens)
CHUNK_TOKENS = 1 << 19  # each float32 column of a chunk stays around 2 MiB


def list_tokens(metadata: pq.FileMetaData, column: str) -> int:
    """Σ list lengths of ``column`` in one file, from its Parquet metadata alone (an empty or null list counts
    1: an upper bound, exact for dumps without them); 0 when the file has no such column."""
    idx = [i for i in range(metadata.num_columns) if metadata.schema.column(i).path.split(".")[0] == column]
    if not idx:
        return 0
    return sum(metadata.row_group(g).column(idx[0]).num_values for g in range(metadata.num_row_groups))


def rows_for_tokens(num_rows: int, num_tokens: int, chunk_rows: int | None,
                    chunk_tokens: int | None = CHUNK_TOKENS) -> int:
    """Rows per chunk: ``chunk_rows`` (None: no bound), lowered so that a chunk holds about ``chunk_tokens``
    of the ``num_tokens`` tokens of ``num_rows`` rows on average (None: no token bound). Never below 1."""
    rows = chunk_rows or max(num_rows, 1)
    if chunk_tokens and num_rows and num_tokens > 0:
        rows = min(rows, max(1, int(chunk_tokens * num_rows // num_tokens)))
    return rows


def file_chunk_rows(f: pq.ParquetFile, columns: list[str], chunk_rows: int,
                    chunk_tokens: int | None = CHUNK_TOKENS) -> int:
    """:func:`rows_for_tokens` of an open file read for ``columns``: their longest list column sets the
    tokens."""
    md = f.metadata
    return rows_for_tokens(md.num_rows, max([list_tokens(md, c) for c in columns] or [0]), chunk_rows, chunk_tokens)


READ_BUFFER = 1 << 22  # bytes read from a column chunk at a time (0 would read whole column chunks)
PREFETCH = 1  # batches decoded ahead of the consumer


def open_parquet(path: str, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
    """``path`` opened for streaming reads; ``metadata``: its footer, already read (not read again)."""
    import pyarrow as pa  # here: a run's first footer is read without it, before torch (advcli.io.footer)
    import pyarrow.parquet as pq

    if remote.is_uri(path):
        source = remote.open_input(path)  # ranged reads on the store, never a whole download
        try:
            f = pq.ParquetFile(source, metadata=metadata, pre_buffer=False, buffer_size=READ_BUFFER)
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
            source.close()
            raise AdvcliError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0]})",
                              hint=unreadable_hint(path)) from None
        refuse_duplicate_columns(path, f.schema_arrow.names)
        return f
    if os.path.isdir(path):
        raise AdvcliError(f"{path}: is a directory, expected a Parquet file")
    try:
        f = pq.ParquetFile(path, metadata=metadata, pre_buffer=False, buffer_size=READ_BUFFER)
        refuse_duplicate_columns(path, f.schema_arrow.names)
        return f
    except PermissionError:
        raise AdvcliError(f"{path}: permission denied", hint="check the file's read permissions") from None
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        first = str(e).splitlines()[0]
        if "Too many open files" in first:  # EMFILE: the process, not the file
            raise AdvcliError(f"{path}: cannot open it: too many open files in this process",
                              hint="raise the limit (ulimit -n) or run on fewer inputs at once") from None
        raise AdvcliError(f"{path}: not a readable Parquet file ({first})", hint=unreadable_hint(path)) from None


def refuse_duplicate_columns(path: str, names: list[str]) -> None:
    """Refuse a file with two columns of one name: columns are found by name, and Arrow finds neither."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise AdvcliError(f"{path}: the column name {name!r} is given twice (columns {seen[name]} and {i}, "
                              "from 0): columns are read by name, so neither can be read",
                              hint="rename one of them where the file is written (pyarrow: "
                                   "table.rename_columns([...]); pandas: df.columns = [...])")
        seen[name] = i


def unreadable_hint(path: str) -> str:
    """What to do about a file Parquet cannot read, from its first bytes: a Parquet file cut short, JSON
    lines, or something else."""
    tail = b""
    try:
        if remote.is_uri(path):  # an object: its first bytes and last four by ranged reads
            fs, key = remote.filesystem_of(path)
            with fs.open_input_file(key) as fh:
                head = fh.read(4096)
                if head.startswith(b"PAR1"):
                    fh.seek(max(0, fh.size() - 4))
                    tail = fh.read(4)
        else:
            with open(path, "rb") as fh:
                head = fh.read(4096)
                if head.startswith(b"PAR1"):
                    fh.seek(max(0, os.fstat(fh.fileno()).st_size - 4))
                    tail = fh.read(4)
    except Exception:  # noqa: BLE001 - no bytes to tell from (a store's error is said by the caller's message)
        head = b""
    if head.startswith(b"PAR1") and tail == b"PAR1":  # both magic numbers there: the footer itself is damaged
        return ("it is Parquet, whole in length, but its footer (the schema and where the data lies) is damaged: "
                "the file was changed after it was written (a disk or copy error); copy or write it again")
    if head.startswith(b"PAR1"):
        return ("it starts as Parquet but its footer is missing: the file was cut short (a copy or a write that "
                "did not finish); copy or write it again")
    if head.lstrip()[:1] in (b"{", b"["):
        return ("it holds JSON: advcli reads the trainers' own JSONL dumps (docs/formats.md) under their own file "
                "names, or with --from FORMAT")
    if head and b"\0" not in head and b"," in head:
        return ("it holds text (CSV?): advcli reads Parquet and the trainers' own dumps (docs/formats.md); convert "
                "a table with pandas: pd.read_csv(IN).to_parquet(OUT)")
    return "advcli reads Parquet and the trainers' own dumps (docs/formats.md); check that this is the file meant"


def identity(path: str) -> tuple:
    """What tells one version of an input from another: a local file's device, inode, size and
    modification time (ns); an object's size and modification time (the store's FileInfo)."""
    if remote.is_uri(path):
        info = remote.file_info(path)
        return ("object", info.size, info.mtime_ns)
    try:
        st = os.stat(path)
    except OSError as e:
        raise changed_error(path, f"it can no longer be read ({e.strerror})") from None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def changed_error(path: str, how: str) -> AdvcliError:
    return AdvcliError(f"{path}: the input changed during the run: {how}; nothing was written",
                       hint="advcli reads an input in several passes and needs one version of it throughout: "
                            "let whatever writes the file finish (or copy it) and run again")


def check_unchanged(path: str, expected: tuple | None) -> None:
    """Refuses (exit 2) an input whose identity is no longer ``expected`` (recorded when the run
    opened it): replaced by another file, overwritten or truncated in place, deleted."""
    if expected is None:
        return
    now = identity(path)
    if now != expected:
        how = ("it was replaced by another file" if len(now) == 4 and now[:2] != expected[:2] else
               f"its size went from {expected[-2]} to {now[-2]} bytes" if now[-2] != expected[-2] else
               "it was modified")
        raise changed_error(path, how)


HIVE_PART = re.compile(r"^(?P<key>step|prompt_id)=(?P<value>[^/]*)$")


def check_partition_keys(path: str, schema) -> None:
    """A hive-partitioned dataset (``DIR/step=3/part-0.parquet``) holds its step in the directory's name;
    advcli reads columns only, so a file without that column would run with the other steps as one batch
    (whitening across steps, groups joined across steps): refused, naming the directory."""
    for part in path.replace("\\", "/").split("/")[:-1]:
        m = HIVE_PART.match(part)
        if m and m.group("key") not in schema.names:
            key = m.group("key")
            raise AdvcliError(f"{path}: its directory {part} says {key} {m.group('value')}, but the file has no "
                              f"{key!r} column; advcli reads columns, not directory names, so the {key}s would run "
                              "as one", hint=f"write {key} into the files (pyarrow: ds.dataset(DIR, partitioning="
                                             "'hive').to_table() holds it as a column), or run each directory's "
                                             "files on their own")


def check_same_schema(first: str, schema, path: str, other) -> None:
    """Inputs read as one: the same columns, in the same order, of the same types and nullability (each
    output file is the input's pages under the first file's footer); a difference named, with the file."""
    hint = (f"rewrite {path} with {first}'s schema (pyarrow: pq.write_table(pq.read_table(B).select(NAMES)"
            ".cast(SCHEMA_OF_A), B2)), or run the files one at a time")
    for field in schema:
        if field.name in other.names and not other.field(field.name).type.equals(field.type):
            raise AdvcliError(f"{path}: column {field.name!r} has type {other.field(field.name).type} "
                              f"but {first} has {field.type}; all inputs must share one schema", hint=hint)
    missing = [n for n in schema.names if n not in other.names]
    if missing:
        raise AdvcliError(f"{path}: lacks column(s) {missing} that {first} has; all inputs must share one schema",
                          hint=hint)
    extra = [n for n in other.names if n not in schema.names]
    if extra:
        raise AdvcliError(f"{path}: has column(s) {extra} that {first} lacks; all inputs must share one schema",
                          hint=hint)
    if other.names != schema.names:
        raise AdvcliError(f"{path}: its columns are in another order than {first}'s ({', '.join(other.names)} "
                          f"vs {', '.join(schema.names)}); all inputs must share one schema", hint=hint)
    def said(f) -> str:
        return "nullable" if f.nullable else "not null"

    for field in schema:
        theirs = other.field(field.name)
        if theirs.nullable != field.nullable:
            raise AdvcliError(f"{path}: column {field.name!r} is {said(theirs)} but {first} marks it {said(field)}; "
                              "all inputs must share one schema", hint=hint)


@record
class InputSet:
    """The input files with one common schema: their paths and footers. No file stays open between
    reads (each pass opens one file at a time), so a directory of thousands of shards needs no more
    descriptors than one file."""

    paths: list[str]
    metadata: list[pq.FileMetaData]
    schema: pa.Schema
    # each file's identity when its footer was read (:func:`identity`): every later pass checks the
    # file is still that version when it opens it and once it has read it (an input replaced or
    # rewritten between passes would mix two versions in one output)
    identities: list[tuple | None] | None = None

    @staticmethod
    def open(specs: list[str]) -> InputSet:
        paths = expand_inputs(specs)
        metadata, schemas, identities = [], [], []
        for p in paths:
            before = identity(p) if os.path.exists(p) or remote.is_uri(p) else None
            f = open_parquet(p)
            try:
                metadata.append(f.metadata)
                schemas.append(f.schema_arrow)
            finally:
                f.close(force=True)
            check_unchanged(p, before)  # the footer read is of the version recorded
            identities.append(before)
        schema = schemas[0]
        for p, other in zip(paths[1:], schemas[1:]):
            check_same_schema(paths[0], schema, p, other)
        for p in paths:
            check_partition_keys(p, schema)
        return InputSet(paths, metadata, schema, identities)

    @property
    def num_rows(self) -> int:
        return sum(md.num_rows for md in self.metadata)

    def file_rows(self) -> list[int]:
        return [md.num_rows for md in self.metadata]

    def list_tokens(self, column: str) -> int:
        """Σ list lengths of ``column`` over every file, from the Parquet metadata alone (an empty or
        null list counts 1: an upper bound, exact for dumps without them)."""
        return sum(list_tokens(md, column) for md in self.metadata)

    def chunk_rows(self, chunk_rows: int | None, columns: list[str] | None = None,
                   chunk_tokens: int | None = CHUNK_TOKENS) -> int:
        """Rows per chunk of a pass reading ``columns`` (None: every column): at most ``chunk_rows``, and about
        ``chunk_tokens`` tokens of their longest list column (:func:`rows_for_tokens`)."""
        names = self.schema.names if columns is None else columns
        return rows_for_tokens(self.num_rows, max([self.list_tokens(c) for c in names] or [0]), chunk_rows,
                               chunk_tokens)

    def iter_batches(self, columns: list[str], batch_rows: int,
                     prefetch: int | None = None) -> Iterator[tuple[int, int, pa.RecordBatch]]:
        """(file index, first row of the batch in that file, batch) over every file in order.

        The next ``prefetch`` batches (default :data:`PREFETCH`; 0: none) are read and decoded on a
        background thread while the caller works on the current one."""
        it = self._iter_batches(columns, batch_rows)
        depth = PREFETCH if prefetch is None else prefetch
        return prefetched(it, depth) if depth > 0 else it

    def identity_of(self, fi: int) -> tuple | None:
        return self.identities[fi] if self.identities else None

    def _iter_batches(self, columns: list[str], batch_rows: int) -> Iterator[tuple[int, int, pa.RecordBatch]]:
        import pyarrow as pa

        for fi, (path, md) in enumerate(zip(self.paths, self.metadata)):
            row = 0
            expected = self.identity_of(fi)
            f = open_parquet(path, md)  # one file open at a time, its footer read once by open()
            try:
                # opened, then checked: the file open is the version whose footer open() read
                check_unchanged(path, expected)
                for batch in f.iter_batches(batch_size=batch_rows, columns=columns, use_threads=True):
                    if batch.num_rows == 0:
                        continue
                    yield fi, row, batch
                    row += batch.num_rows
                # read to its end: not overwritten in place meanwhile (what this pass read is that version)
                check_unchanged(path, expected)
            except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
                check_unchanged(path, expected)  # a file truncated or rewritten under the reader: say so
                raise AdvcliError(f"{path}: cannot read rows after row {row} ({str(e).splitlines()[0]}); "
                                  "the file may be truncated or corrupt") from None
            finally:
                f.close(force=True)


def parquet_batches(f, path: str, **kwargs) -> Iterator:
    """``f.iter_batches(**kwargs)`` of an open ``pyarrow.parquet.ParquetFile``, a page that cannot be read
    (a truncated or corrupt file) said as every other read says it, naming the file and the row it stopped
    at (the format readers and converters that read a Parquet dump themselves)."""
    import pyarrow as pa

    row = 0
    try:
        for batch in f.iter_batches(**kwargs):
            yield batch
            row += batch.num_rows
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise AdvcliError(f"{path}: cannot read rows after row {row} ({str(e).splitlines()[0]}); "
                          "the file may be truncated or corrupt") from None


_END = object()


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


def prefetched(it: Iterator, depth: int) -> Iterator:
    """``it``'s items, produced ``depth`` ahead on a daemon thread. An exception in the producer is
    re-raised in the consumer at the same place in the sequence; a consumer that stops early (an
    error in its loop, ``break``) stops the producer, which closes ``it`` (a generator's cleanup, such as
    another prefetcher's thread, runs then, not when it is garbage-collected)."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in it:  # a stopped consumer: no further item is produced (a chunk decoded for nothing)
                if not put(item) or stop.is_set():
                    return
            put(_END)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put(_Failed(e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    t = threading.Thread(target=produce, name="advcli-reader", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        stop.set()
        try:  # a producer blocked on the full queue returns at once, not at its next poll
            while True:
                q.get_nowait()
        except queue.Empty:
            pass
        t.join()
