"""Atomic Parquet writing: a temporary file beside the target, renamed into place when complete.

Nothing is ever half-written at the output path: the temporary file ``.NAME.advcli-tmp-PID`` is
renamed over the target only after the writer closed and the data reached the disk. A run killed
before that leaves only its temporary file, which the next run recognises (the PID is dead) and
removes.

The writer's settings (why: docs/performance.md): zstd, dictionary encoding only on
string/binary columns, byte-stream-split on floating-point columns.
"""
from __future__ import annotations

import glob
import os
import re
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import AdvcliError, is_disk_full
from . import remote
from .lists import offsets_numpy
from .modes import missing_directory, refuse_empty_output
from .ordered import OrderedWorker
from .temps import TMP_TAG, owner_tag, pid_alive, sweep_stale, temp_stem


def temp_path_for(target: str) -> str:
    """The local temporary file an output is written to: beside the target, or for an output on
    object storage in the system's temporary directory (uploaded by :meth:`AtomicParquetWriter.commit`)."""
    if remote.is_uri(target):
        import hashlib
        import tempfile

        tag = hashlib.sha256(target.encode()).hexdigest()[:12]
        sweep_stale()  # the local copies killed runs left in TMPDIR (named with their PID)
        return os.path.join(tempfile.gettempdir(), f".advcli-upload-{tag}-{target.rsplit('/', 1)[-1]}"
                                                   f"{TMP_TAG}{owner_tag()}")
    d, name = os.path.split(os.path.abspath(target))
    return os.path.join(d, f".{temp_stem(name)}{TMP_TAG}{owner_tag()}")


def clean_stale_temps(target: str) -> list[str]:
    """Remove temporary files of earlier advcli runs for ``target`` whose process is gone."""
    if remote.is_uri(target):
        return remote.clean_stale_temps(target)
    d, name = os.path.split(os.path.abspath(target))
    removed = []
    # .NAME.advcli-tmp-PID (the output's), .NAME.advcli-tmp-PID.filter.parquet (run --drop-uniform's kept rows)
    # and ..NAME.advcli-tmp-PID.filter.parquet.advcli-tmp-PID (the writer's own file for those kept rows)
    found = [p for prefix in (".", "..")
             for p in glob.glob(os.path.join(glob.escape(d), f"{prefix}{glob.escape(temp_stem(name))}{TMP_TAG}*"))]
    for p in found:
        digits = re.match(r"\d+", p.rsplit(TMP_TAG, 1)[1])  # PID, or PID.filter.parquet (run --drop-uniform)
        if digits is None:
            continue
        pid = int(digits.group())
        if pid != os.getpid() and not pid_alive(pid):
            try:
                os.remove(p)
                removed.append(p)
            except OSError:
                pass
    return removed


def _float_columns(schema: pa.Schema) -> list[str]:
    out = []
    for f in schema:
        t = f.type
        while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            t = t.value_type
        if pa.types.is_floating(t):
            out.append(f.name)
    return out


def _dict_columns(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or pa.types.is_binary(f.type) or pa.types.is_dictionary(f.type)]


# output names that promise a format advcli does not write
OTHER_FORMATS = {".csv": "CSV", ".tsv": "TSV", ".json": "JSON", ".jsonl": "JSON lines", ".txt": "text",
                 ".arrow": "Arrow IPC", ".feather": "Feather", ".pkl": "a pickle", ".pt": "a torch file",
                 ".npy": "NumPy", ".npz": "NumPy", ".xlsx": "Excel", ".html": "HTML", ".md": "Markdown",
                 ".yaml": "YAML", ".yml": "YAML", ".toml": "TOML", ".py": "Python"}


def check_output_name(target: str) -> None:
    """Refuse an output named for another format (``o.csv``): advcli writes Parquet."""
    ext = os.path.splitext(str(target).rstrip("/"))[1].lower()
    if ext in OTHER_FORMATS:
        raise AdvcliError(f"{target}: advcli writes Parquet, not {OTHER_FORMATS[ext]}",
                          hint=f"name the output {os.path.splitext(str(target))[0]}.parquet; to get "
                               f"{OTHER_FORMATS[ext]}, read it with pandas (pd.read_parquet) and write that")


def check_output_path(target: str, inputs: list[str], force: bool) -> None:
    """Refuse outputs that are an input, in a missing or read-only directory, or exist without --force, and a
    name that says another format (``o.csv``: advcli writes Parquet)."""
    refuse_empty_output(target)
    check_output_name(target)
    if remote.is_uri(target):
        remote.check_output(target, inputs, force)
        return
    from .reader import given_files

    real_t = os.path.realpath(target)
    for p in inputs:  # the file given, also where a temporary file stands for it (a converted dump's files)
        if any(os.path.realpath(q) == real_t for q in given_files(p)):
            raise AdvcliError(f"{target}: the output path is an input file; advcli never overwrites its input",
                              hint="choose another --output path")
    bare = target.rstrip(os.sep) or target
    if bare != target and os.path.lexists(bare) and not os.path.isdir(bare):  # `-o out.parquet/`, a file there
        raise AdvcliError(f"{target}: names a directory (the trailing {os.sep}), but {bare} is a file",
                          hint=f"-o {bare} to replace that file (with --force), or give a file path")
    d = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(d):
        raise missing_directory(target, d)
    if os.path.isdir(target):
        raise AdvcliError(f"{target}: is a directory; give a file path for the output")
    if bare != target:  # `-o nd4/`, no such directory: this command writes one file
        raise AdvcliError(f"{target}: names a directory (the trailing {os.sep}); this command writes one file",
                          hint=f"give a file path, e.g. -o {os.path.join(bare, 'out.parquet')} (the directory made "
                               f"first) or -o {bare}.parquet")
    if os.path.islink(target) and not os.path.exists(target) and not force:  # a link to nowhere is still there
        raise AdvcliError(f"{target}: already exists (a symbolic link to {os.readlink(target)}, which does not "
                          "exist)", hint="pass --force to replace the link with the output, or remove it")
    refuse_special_file(target)
    if os.path.exists(target) and not force:
        raise AdvcliError(f"{target}: already exists", hint="pass --force to replace it")
    _probe_writable(target, d)


def refuse_special_file(target: str) -> None:
    """Refuse an output path that is a device, a FIFO or a socket (or a link to one), --force or not: the output
    is written aside and renamed onto the path, which would replace the node itself (``-o /dev/null --force``
    run as root would replace the system's /dev/null)."""
    import stat

    try:
        mode = os.stat(target).st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = ("a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise AdvcliError(f"{target}: is {kind}, not a file; advcli writes its output as a new file and "
                          "renames it onto the path, which would replace that node", hint="give a file path")


def _probe_writable(target: str, d: str) -> None:
    """Create and remove a file in the output directory: os.access says yes to root even on a
    read-only file system or /proc, so only a real attempt tells (before any work is done)."""
    if not os.access(d, os.W_OK):
        raise AdvcliError(f"{target}: the output directory {d} is not writable",
                          hint="choose another --output directory or fix its permissions")
    from .temps import create_and_remove

    e = create_and_remove(temp_path_for(target) + "-probe")
    if e is not None:
        raise AdvcliError(f"{target}: the output directory {d} is not writable ({e.strerror})",
                          hint="choose another --output directory or fix its permissions")


# Row groups and the pieces inside them are cut at places that depend only on the data, never on
# how the caller chunked it (--chunk-rows), so that the same input and configuration give the same
# bytes. Parquet's column writer checks the page size at the end of every array it is handed, so
# the arrays handed to it must be the same too: pieces of PIECE_ROWS consecutive rows (global row
# ranges [k·P, (k+1)·P)); a row group closes after the piece where its weight (rows + the list
# values of every list column) reaches ROW_GROUP_WEIGHT. A piece that straddles two incoming
# batches is concatenated (a copy of at most PIECE_ROWS rows); every other piece is a zero-copy slice.
PIECE_ROWS = 256
ROW_GROUP_WEIGHT = 1 << 22
DATA_PAGE_SIZE = None  # pyarrow's default (1 MiB); tests lower it to cut many pages


def _concat_batches(parts: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(parts) == 1:
        return parts[0]
    if hasattr(pa, "concat_batches"):
        return pa.concat_batches(parts)
    return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]


class _Rebatcher:
    """Cuts a stream of record batches into row groups (lists of pieces) at data-determined places."""

    def __init__(self, schema: pa.Schema, piece_rows: int | None = None, group_weight: int | None = None):
        self.piece_rows = piece_rows or PIECE_ROWS
        self.group_weight = group_weight or ROW_GROUP_WEIGHT
        self.list_cols = [i for i, f in enumerate(schema)
                          if pa.types.is_list(f.type) or pa.types.is_large_list(f.type)
                          or pa.types.is_fixed_size_list(f.type)]
        self._parts: list[pa.RecordBatch] = []  # slices making up the current piece
        self._part_rows = 0
        self._part_weight = 0
        self._pieces: list[pa.RecordBatch] = []  # complete pieces of the current row group
        self._weight = 0

    def _row_weights(self, batch: pa.RecordBatch) -> np.ndarray:
        w = np.ones(batch.num_rows, dtype=np.int64)
        for i in self.list_cols:
            arr = batch.column(i)
            if pa.types.is_fixed_size_list(arr.type):
                w += arr.type.list_size
            else:
                w += np.diff(offsets_numpy(arr))
        return w

    def add(self, batch: pa.RecordBatch) -> list[list[pa.RecordBatch]]:
        """Row groups completed by this batch."""
        done: list[list[pa.RecordBatch]] = []
        n = batch.num_rows
        if n == 0:
            return done
        csum = np.concatenate([[0], np.cumsum(self._row_weights(batch))])
        pos = 0
        while pos < n:  # a loop over pieces (PIECE_ROWS rows each), not rows
            take = min(self.piece_rows - self._part_rows, n - pos)
            self._parts.append(batch.slice(pos, take))
            self._part_rows += take
            self._part_weight += int(csum[pos + take] - csum[pos])
            pos += take
            if self._part_rows == self.piece_rows:
                group = self._close_piece()
                if group:
                    done.append(group)
        return done

    def _close_piece(self) -> list[pa.RecordBatch] | None:
        self._pieces.append(_concat_batches(self._parts))
        self._weight += self._part_weight
        self._parts, self._part_rows, self._part_weight = [], 0, 0
        if self._weight >= self.group_weight:
            group, self._pieces, self._weight = self._pieces, [], 0
            return group
        return None

    def finish(self) -> list[pa.RecordBatch] | None:
        """The last (partial) row group, if any."""
        if self._parts:
            group = self._close_piece()
            if group:  # the last piece completed a row group (and emptied self._pieces)
                return group
        group, self._pieces, self._weight = self._pieces, [], 0
        return group or None


class _FlushBehind:
    """Hands what the Parquet writers have written so far to the disk, on one daemon thread shared
    by every writer of the process (``fdatasync`` waits on the device, not the CPU, and releases the
    GIL), so that the ``fsync`` before each rename finds only the last row groups still dirty
    instead of the whole file: the durability the commit promises, without a flush of the whole
    output at the end of the run. No descriptor is held between flushes (a run with one output
    per input keeps all its writers open until the end); a file renamed or removed meanwhile is
    skipped — the commit's own fsync is what reports errors."""

    _lock = threading.Lock()
    _dirty: dict[str, None] = {}
    _wake = threading.Event()
    _thread: threading.Thread | None = None

    @classmethod
    def poke(cls, path: str) -> None:
        """More of ``path`` was written: flush it (coalesced with flushes already asked for)."""
        with cls._lock:
            cls._dirty[path] = None
            if cls._thread is None or not cls._thread.is_alive():
                cls._thread = threading.Thread(target=cls._run, name="advcli-flush", daemon=True)
                cls._thread.start()
        cls._wake.set()

    @classmethod
    def _run(cls) -> None:
        while True:
            cls._wake.wait()
            cls._wake.clear()
            with cls._lock:
                paths, cls._dirty = list(cls._dirty), {}
            for path in paths:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError:  # committed (renamed) or aborted (removed) meanwhile
                    continue
                try:
                    os.fdatasync(fd)
                except OSError:
                    pass
                finally:
                    os.close(fd)


def close_quietly(*handles) -> None:
    """Close each handle, ignoring errors (on the way out of a failed write)."""
    for h in handles:
        try:
            h.close()
        except Exception:  # noqa: BLE001
            pass


class AtomicParquetWriter:
    """Writes record batches from a background thread into a temp file; ``commit()`` renames it.

    The batches may come in any sizes: the file's row groups and pages depend only on the rows
    (see ``_Rebatcher``), so the output bytes do not depend on the caller's chunk size."""

    def __init__(self, target: str, schema: pa.Schema, threaded: bool = True):
        self._setup(target, schema, threaded)
        try:
            self._writer = pq.ParquetWriter(
                self.tmp, schema, compression="zstd",
                use_dictionary=_dict_columns(schema),
                use_byte_stream_split=_float_columns(schema) or False,
                write_statistics=False,
                data_page_size=DATA_PAGE_SIZE,
            )
        except OSError as e:  # includes pyarrow's ArrowIOError
            raise AdvcliError(f"{target}: cannot create the output ({str(e).splitlines()[0]})",
                              hint="check that the output directory exists and is writable") from None
        try:  # an interrupt from here on would leave the temporary file behind: no caller holds this writer yet
            self._rebatch = _Rebatcher(schema)
            self._worker = OrderedWorker(self._write_group, depth=2, name="advcli-writer") if threaded else None
        except BaseException:
            self._worker = None
            self.abort()
            raise

    def _setup(self, target: str, schema: pa.Schema, threaded: bool) -> None:
        """The state every writer of this module starts with."""
        self.target = target
        self.tmp = temp_path_for(target)
        self.schema = schema
        self._rows_in = 0  # rows handed to write(): the committed file must hold exactly these
        self._prepared = False
        self._flush_behind = threaded
        self._failed: BaseException | None = None  # threaded=False: the error of the work done inline
        # TEST HOOK ONLY (tests/cli/test_interrupt.py): sleep this many seconds before each batch, so
        # that a test can interrupt a run mid-write on a small dump. Never set it in production.
        self._test_delay = float(os.environ.get("ADVCLI_TEST_SLOW_WRITE") or 0)

    @property
    def _error(self) -> BaseException | None:
        return self._worker.error if self._worker is not None else self._failed

    def _inline(self, fn, *args) -> None:
        """The writer thread's work done on the caller's thread (``threaded=False``): its error kept as the
        thread's is, so that it surfaces with the same message (:meth:`_fail`) either way."""
        try:
            fn(*args)
        except Exception as e:
            self._failed = e
            raise

    def _fail(self):
        """The writing's error (the thread's, or the inline work's), raised after the temporary file is removed:
        as itself when the disk is full (the caller says how much room the output needed:
        advcli.errors.disk_full) or when it is advcli's own message, else as one message naming the output."""
        error = self._error
        self.abort()
        if is_disk_full(error) or isinstance(error, AdvcliError):
            raise error
        raise AdvcliError(f"{self.target}: writing failed: {error}")

    def _write_group(self, pieces: list[pa.RecordBatch]) -> None:
        """One row group made of exactly these pieces."""
        table = pa.Table.from_batches(pieces, schema=self.schema)
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        if self._flush_behind:
            _FlushBehind.poke(self.tmp)

    def _emit(self, group: list[pa.RecordBatch]) -> None:
        if self._worker is None:
            self._inline(self._write_group, group)
        else:
            self._worker.submit(group)

    def write(self, batch: pa.RecordBatch) -> None:
        if self._error is not None:
            self._fail()
        if self._test_delay:
            import time

            time.sleep(self._test_delay)
        try:
            self._add(batch)
        except Exception:
            if self._error is None:  # not the writing's own error
                raise
            self._fail()

    def _add(self, batch: pa.RecordBatch) -> None:
        """Count ``batch``'s rows and hand its completed row groups to the writer thread."""
        self._rows_in += batch.num_rows
        for group in self._rebatch.add(batch):
            self._emit(group)

    def _flush_last(self) -> None:
        last = self._rebatch.finish()
        if last:
            self._emit(last)

    def _drain(self, flush_last) -> None:
        """Hand the writer thread what is left (``flush_last``), wait for it, and raise (after
        removing the temp file) if it failed."""
        if self._error is None:
            try:
                flush_last()
            except BaseException:
                if self._error is None:  # not the writer thread's error (that one is reported below)
                    raise
        self._finish_thread()
        if self._error is not None:
            self._fail()

    def _finish_thread(self) -> None:
        if self._worker is not None:
            self._worker.close(raise_error=False)  # commit/abort decide what an error means

    def prepare(self) -> None:
        """Everything of :meth:`commit` but the rename: the last row group, the footer, the row-count
        check and the fsync. The encoding thread and the file are released, so a run with one
        output per input holds nothing open for the inputs it has finished; :meth:`commit` then only
        renames (all outputs at the end of the run: nothing appears before the whole run succeeded)."""
        if self._prepared:
            return
        self._drain(self._flush_last)
        self._writer.close()
        written = pq.read_metadata(self.tmp).num_rows  # the footer: nothing lost on the way
        if written != self._rows_in:
            self.abort()
            raise AdvcliError(f"{self.target}: internal error: {self._rows_in} rows were handed to the writer "
                              f"but the file holds {written}; nothing was written",
                              hint="this is a bug in advcli; please report it with the input's row count")
        with open(self.tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        self._prepared = True

    def commit(self) -> None:
        """The finished file becomes the target: renamed (or uploaded) now, or, while a command stages its
        outputs (``advcli run``: :func:`advcli.io.commit.staged`), as that command's last step."""
        from .commit import put_in_place

        self.prepare()
        if remote.is_uri(self.target):  # complete and checked: now upload it (atomic on the store)
            put_in_place(self.target, self.tmp, self._upload)
            return
        if put_in_place(self.target, self.tmp):
            try:
                dfd = os.open(os.path.dirname(os.path.abspath(self.target)), os.O_RDONLY)
                os.fsync(dfd)
                os.close(dfd)
            except OSError:
                pass

    def _upload(self) -> None:
        try:
            remote.upload(self.tmp, self.target)
        finally:
            try:
                os.remove(self.tmp)
            except OSError:
                pass

    def _close_output(self) -> None:
        """Release the temp file (errors ignored: abort removes it anyway)."""
        close_quietly(self._writer)

    def abort(self) -> None:
        try:
            self._finish_thread()
        except BaseException:  # noqa: BLE001
            pass
        self._close_output()
        try:
            os.remove(self.tmp)
        except OSError:
            pass
