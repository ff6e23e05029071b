"""Full output without re-encoding the input: splice the new columns into a copy of the input file.

A Parquet file is ``PAR1``, column chunks at absolute offsets, then the footer (``FileMetaData``)
that lists them. The output of ``--output-mode full`` keeps every input column unchanged, so its
bytes need not be decoded and encoded again (for GRPO that was most of the run's CPU time):

1. the input's bytes up to its footer are copied as they are (``os.copy_file_range``: no decode,
   often no copy through user space) — every offset in the input's footer stays valid, page indexes
   and bloom filters included;
2. the new columns are encoded by pyarrow, one small in-memory Parquet file per row-group piece
   (the same data-determined pieces as :class:`~advcli.io.writer.AtomicParquetWriter`, cut again at
   the input's row-group boundaries), with dictionary encoding off so that a column chunk is only
   data pages; those pages are appended. Pages are self-contained (each holds its own levels and
   starts a row), so the pages of consecutive pieces form one column chunk;
3. the footer is the input's, with the new columns' schema elements appended, one new column chunk
   per input row group (offsets, value counts and sizes summed over its pieces), the row groups'
   byte totals updated, and the key-value metadata (``ARROW:schema`` and the provenance) of the
   output schema as pyarrow writes it.

The file is readable by any Parquet reader (column chunks need not be adjacent: readers seek to the
offsets the footer gives). Inputs this cannot handle — an encrypted file, a row group of no rows, an
input column named like a new one, a footer this codec cannot parse — are written the ordinary
way (:func:`spliceable` says which). The committed file is checked: row count and schema.
"""
from __future__ import annotations

import bisect
import copy
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import AdvcliError
from . import writer as _writer
from .footer import MAGIC, items, read_footer, top_level
from .reader import changed_error, check_unchanged
from .thrift_compact import I32, I64, LIST, STRUCT, Struct, ThriftError, decode_struct, encode_struct


def _footer_of(buf) -> Struct:
    """The FileMetaData of a whole Parquet file held in memory (bytes or a pyarrow Buffer)."""
    mv = memoryview(buf)
    n = int.from_bytes(mv[-8:-4], "little")
    return decode_struct(bytes(mv[len(mv) - 8 - n:len(mv) - 8]))[0]


def spliceable(path: str, new_names: list[str]) -> bool:
    """Whether :class:`SplicedParquetWriter` can write the full output of ``path``."""
    try:
        meta, _ = read_footer(path)
    except (OSError, ThriftError):
        return False
    if 8 in meta or 9 in meta:  # encryption_algorithm, footer_signing_key_metadata
        return False
    schema = items(meta, 2)
    if not schema:
        return False
    top = {bytes(e.get_value(4, b"")).decode("utf-8", "replace") for e in top_level(schema)}
    if top & set(new_names):
        return False
    groups = items(meta, 4)
    if not groups or any(not rg.get_value(3, 0) for rg in groups):
        return False
    for rg in groups:
        for cc in items(rg, 1):
            if 8 in cc or 9 in cc or 3 not in cc:  # encrypted column, or its metadata elsewhere
                return False
    return True


def _pieces_by_row_group(batch: pa.RecordBatch, row0: int, bounds: list[int]) -> list[tuple[int, pa.RecordBatch]]:
    """Split ``batch`` (global rows ``row0``…) at the input's row-group boundaries ``bounds``
    (cumulative row counts): [(row group, slice)]."""
    out, pos, n = [], 0, batch.num_rows
    while pos < n:
        g = bisect.bisect_right(bounds, row0 + pos)
        end = min(n, bounds[g] - row0)
        out.append((g, batch.slice(pos, end - pos)))
        pos = end
    return out


def _copy(fd_in: int, off_in: int, fd_out: int, off_out: int, size: int) -> None:
    """Copy ``size`` bytes between descriptors at explicit offsets (their file positions unchanged):
    ``copy_file_range`` (no copy through user space), else pread/pwrite."""
    done = 0
    try:
        while done < size:
            n = os.copy_file_range(fd_in, fd_out, min(size - done, 1 << 30), off_in + done, off_out + done)
            if n == 0:
                raise OSError("short copy")
            done += n
    except (AttributeError, OSError):  # not available here, or across file systems
        while done < size:
            block = os.pread(fd_in, min(size - done, 1 << 24), off_in + done)
            if not block:
                raise OSError("the source is shorter than expected") from None
            os.pwrite(fd_out, block, off_out + done)
            done += len(block)


def _encode_piece(table: pa.Table) -> tuple:
    """(the bytes of a small Parquet file holding ``table``, its decoded footer): the settings of
    the full output's new columns, without dictionary pages, so that a column chunk is data pages only."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", use_dictionary=False,
                   use_byte_stream_split=_writer._float_columns(table.schema) or False,
                   write_statistics=False, data_page_size=_writer.DATA_PAGE_SIZE,
                   row_group_size=max(table.num_rows, 1), store_schema=False)
    buf = sink.getvalue()
    return buf, _footer_of(buf)


class SplicedParquetWriter(_writer.AtomicParquetWriter):
    """``write()`` takes batches of the **new columns only**, rows in input order; the committed
    file is the input's columns (bytes copied) followed by them (see the module docstring)."""

    def __init__(self, target: str, source: str, out_schema: pa.Schema, new_names: list[str],
                 threaded: bool = True, identity: tuple | None = None):
        self._setup(target, out_schema, threaded)
        self.source = source
        self.identity = identity  # the source's version the run read (advcli.io.reader.identity)
        self.new_schema = pa.schema([out_schema.field(n) for n in new_names])
        self.meta, self.data_end = read_footer(source)
        check_unchanged(source, identity)
        sizes = [rg.get_value(3) for rg in items(self.meta, 4)]
        self.bounds = [sum(sizes[:i + 1]) for i in range(len(sizes))]
        self._chunks: list[list[list[tuple[int, Struct]]]] = [[[] for _ in new_names] for _ in sizes]
        self._schema_tail: list | None = None  # the new columns' schema elements and column orders
        self._orders_tail: list | None = None
        self._rebatch = _writer._Rebatcher(self.new_schema)
        self._group = 0  # the input row group being filled
        try:
            self._fh = open(self.tmp, "wb")
        except OSError as e:
            raise AdvcliError(f"{target}: cannot create the output ({e.strerror})",
                              hint="check that the output directory exists and is writable") from None
        self._offset = 0
        self._spill = [None]
        self._worker = self._encoders = None
        try:  # an interrupt from here on would leave the temporary file behind: no caller holds this writer yet
            # the new columns after the first wait here until their row group is complete (anonymous
            # files beside the output: gone with the process whatever happens)
            self._spill += [tempfile.TemporaryFile(dir=os.path.dirname(self.tmp))  # local, for s3:// too
                            for _ in range(len(new_names) - 1)]
            self._worker = _writer.OrderedWorker(self._task, depth=2, name="advcli-writer") if threaded else None
            self._encoders = (ThreadPoolExecutor(max_workers=min(len(new_names), os.cpu_count() or 1),
                                                 thread_name_prefix="advcli-encode")
                              if threaded and len(new_names) > 1 and (os.cpu_count() or 1) > 1 else None)
            self._run(("copy", None))
        except BaseException:
            self.abort()
            raise

    # ------------------------------------------------------------------ the writer thread's work
    def _run(self, task) -> None:
        if self._worker is None:
            self._inline(self._task, task)
        else:
            self._worker.submit(task)

    def _task(self, task) -> None:
        kind, payload = task
        if kind == "copy":
            self._copy_data_region()
        elif kind == "flush":
            self._flush_row_group(payload)
        else:
            self._encode(*payload)
        if self._flush_behind:
            _writer._FlushBehind.poke(self.tmp)

    def _copy_data_region(self) -> None:
        with open(self.source, "rb") as src:
            self._same_version(src.fileno())
            _copy(src.fileno(), 0, self._fh.fileno(), 0, self.data_end)
            self._same_version(src.fileno())  # not rewritten in place while its bytes were copied

    def _same_version(self, fd: int) -> None:
        """The open source is the version the run read (its bytes are copied into the output)."""
        if self.identity is not None:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != self.identity:
                check_unchanged(self.source, self.identity)  # names how, where the path shows it
                raise changed_error(self.source, "it was modified")
        self._offset = self.data_end
        self._fh.seek(self._offset)

    def _encode(self, group: int, pieces: list[pa.RecordBatch]) -> None:
        """Encode one piece of every new column and place its pages. The columns are encoded each
        by its own ``pq.write_table`` (a column's pages do not depend on the other columns), at once
        on :attr:`_encoders` where there are several: pyarrow encodes the columns of one table one
        after the other, and this thread would be the write pass's critical path (GAE writes three
        float columns; docs/performance.md)."""
        table = pa.Table.from_batches(pieces, schema=self.new_schema)
        parts = [table.select([j]) for j in range(table.num_columns)]
        if self._encoders is not None and len(parts) > 1:
            encoded = list(self._encoders.map(_encode_piece, parts))
        else:
            encoded = [_encode_piece(t) for t in parts]
        if self._schema_tail is None:
            self._schema_tail = [el for _, meta in encoded for el in items(meta, 2)[1:]]
            orders = [items(meta, 7) if 7 in meta else None for _, meta in encoded]
            self._orders_tail = None if any(o is None for o in orders) else [x for o in orders for x in o]
        for j, (buf, meta) in enumerate(encoded):
            (rg,) = items(meta, 4)
            (cc,) = items(rg, 1)
            md = cc.get_value(3)
            start = md.get_value(11) if 11 in md else md.get_value(9)
            length = md.get_value(7)
            pages = memoryview(buf)[start:start + length]
            if j == 0:  # a column chunk must be contiguous: the first column goes straight to the file,
                self._fh.write(pages)
                self._chunks[group][j].append((self._offset, cc))
                self._offset += length
            else:  # the others wait in a spill file until their row group is complete
                spill = self._spill[j]
                self._chunks[group][j].append((spill.tell(), cc))
                spill.write(pages)

    def _flush_row_group(self, group: int) -> None:
        """Append the spilled columns of ``group`` after its first column, each contiguous."""
        for j in range(1, len(self.new_schema)):
            spill = self._spill[j]
            size = spill.tell()
            spill.flush()
            self._fh.flush()
            base = self._offset
            _copy(spill.fileno(), 0, self._fh.fileno(), base, size)
            self._chunks[group][j] = [(base + rel, cc) for rel, cc in self._chunks[group][j]]
            self._offset += size
            self._fh.seek(self._offset)
            spill.seek(0)
            spill.truncate()

    # ------------------------------------------------------------------------ the caller's side
    def _emit(self, group: list[pa.RecordBatch]) -> None:
        self._run(("encode", (self._group, group)))

    def _end_row_group(self) -> None:
        last = self._rebatch.finish()
        if last:
            self._emit(last)
        self._run(("flush", self._group))
        self._group += 1

    def _flush_last(self) -> None:
        while self._group < len(self.bounds):
            self._end_row_group()

    def _add(self, batch: pa.RecordBatch) -> None:
        for g, part in _pieces_by_row_group(batch, self._rows_in, self.bounds):
            while g > self._group:  # the input's row group ended: its last piece closes here
                self._end_row_group()
            for done in self._rebatch.add(part):
                self._emit(done)
            self._rows_in += part.num_rows

    def _footer(self) -> bytes:
        meta = copy.deepcopy(self.meta)
        schema = items(meta, 2)
        root = schema[0]
        root.set_value(5, I32, (root.get_value(5) or 0) + len(self.new_schema))
        schema.extend(copy.deepcopy(self._schema_tail))
        if 7 in meta and self._orders_tail is not None:
            items(meta, 7).extend(copy.deepcopy(self._orders_tail))
        elif 7 in meta:  # cannot describe the new columns' order: drop the (optional) list
            del meta[7]
        for g, rg in enumerate(items(meta, 4)):
            add_unc = add_comp = 0
            for parts in self._chunks[g]:
                if not parts:
                    raise AdvcliError(f"{self.target}: internal error: row group {g} got no values for a new column")
                cc = copy.deepcopy(parts[0][1])
                for fid in (4, 5, 6, 7):  # offset/column index locations: none written for these
                    cc.pop(fid, None)
                md = cc.get_value(3)
                mds = [p[1].get_value(3) for p in parts]
                encodings = sorted({e for m in mds for e in m.get_value(2)[1]})
                num_values = sum(m.get_value(5) for m in mds)
                unc = sum(m.get_value(6) for m in mds)
                comp = sum(m.get_value(7) for m in mds)
                md.set_value(2, LIST, (I32, encodings))
                md.set_value(5, I64, num_values)
                md.set_value(6, I64, unc)
                md.set_value(7, I64, comp)
                md.set_value(9, I64, parts[0][0])
                for fid in (10, 11, 12, 13, 14, 15, 16, 17):  # page-level summaries of the first piece only
                    md.pop(fid, None)
                cc.set_value(3, STRUCT, Struct(sorted(md.items())))
                items(rg, 1).append(cc)
                add_unc += unc
                add_comp += comp
            rg.set_value(2, I64, rg.get_value(2) + add_unc)
            if 6 in rg:
                rg.set_value(6, I64, rg.get_value(6) + add_comp)
        sink = pa.BufferOutputStream()  # the output schema's key-value metadata, as pyarrow writes it
        pq.write_table(pa.Table.from_batches([], schema=self.schema), sink)  # (empty_table() imports pandas)
        kv = _footer_of(sink.getvalue()).get(5)
        if kv is not None:
            meta[5] = kv
        else:
            meta.pop(5, None)
        ordered = Struct(sorted(meta.items()))
        body = encode_struct(ordered)
        return body + len(body).to_bytes(4, "little") + MAGIC

    def prepare(self) -> None:
        if self._prepared:
            return
        self._drain(self._flush_last)
        total = self.bounds[-1] if self.bounds else 0
        if self._rows_in != total:
            self.abort()
            raise AdvcliError(f"{self.target}: internal error: {self._rows_in} rows were handed to the writer "
                              f"for an input of {total}; nothing was written")
        try:
            self._fh.write(self._footer())
            self._fh.flush()
            os.fsync(self._fh.fileno())
        finally:
            _writer.close_quietly(self._fh, *self._spill[1:])
        md = pq.read_metadata(self.tmp)  # the footer reads back: rows and columns as promised
        got = pq.read_schema(self.tmp)
        if md.num_rows != total or got.names != self.schema.names or not got.equals(self.schema):
            self.abort()
            raise AdvcliError(f"{self.target}: internal error: the spliced file does not read back as written "
                              f"({md.num_rows} rows, columns {got.names}); nothing was written",
                              hint="this is a bug in advcli; please report it")
        self._prepared = True

    def _finish_thread(self) -> None:
        super()._finish_thread()
        if getattr(self, "_encoders", None) is not None:
            self._encoders.shutdown(wait=True)

    def _close_output(self) -> None:
        _writer.close_quietly(self._fh, *self._spill[1:])
