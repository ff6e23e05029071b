"""Where the Ray engine's compute-and-write pass goes (its statistics: :mod:`advcli.engines.ray_stats`):
the ordered Parquet sink (part files named by their
first global row), and the output directory or object-storage prefix it is published to.
"""
from __future__ import annotations

import glob
import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import AdvcliError
from ..io.modes import missing_directory
from ..io.temps import TMP_TAG, scratch_prefix, temp_stem
from ..io.writer import refuse_special_file
from .ray_rows import ROW_COL


def check_output_dir(output: str, inputs: list[str], force: bool) -> None:
    from ..io.reader import given_files

    real = os.path.realpath(output)
    # the file given, also where a temporary file stands for it (a converted dump's directory and files)
    for rp in {os.path.realpath(q) for p in inputs for q in given_files(p)}:
        if rp == real or rp.startswith(real + os.sep):
            raise AdvcliError(f"{output}: the output directory is or holds an input; advcli never overwrites "
                              "its input", hint="choose another --output path")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise missing_directory(output, parent, "the output directory's parent")
    if not os.access(parent, os.W_OK):
        raise AdvcliError(f"{output}: {parent} is not writable", hint="choose another --output directory")
    refuse_special_file(output)
    if os.path.exists(output) and not force:
        raise AdvcliError(f"{output}: already exists", hint="pass --force to replace it")


def tmp_dir(output: str) -> str:
    d, name = os.path.split(os.path.abspath(output.rstrip(os.sep)))
    return os.path.join(d, f".{temp_stem(name)}{TMP_TAG}{os.getpid()}")


def ordered_sink(directory: str, out_schema: pa.Schema, num_rows: int, rows_per_file: int,
                  upload_fs=None):
    """A Ray Data sink writing ``part-<first global row:012d>.parquet`` files, each file's rows in
    global row order, and checking on completion that the files tile rows 0..R-1 exactly.

    Not ``Dataset.write_parquet``: its writer (``pyarrow.dataset.write_dataset(use_threads=True)``,
    Ray 2.60 ``ParquetDatasink``) may reorder the blocks of one write task inside the file; seen
    here as two 97-row batches swapped. Each file goes through advcli's own writer
    (:class:`advcli.io.writer.AtomicParquetWriter`: project write settings, temp file + rename)."""
    from ray.data.datasource import Datasink

    from ..io.writer import AtomicParquetWriter

    class OrderedParquetSink(Datasink):
        def get_name(self) -> str:
            return "AdvcliParquet"

        @property
        def min_rows_per_write(self):
            return rows_per_file

        def write(self, blocks, ctx):
            tables = [t for t in blocks if t.num_rows]
            if not tables:
                return []
            t = pa.concat_tables(tables)
            rows = t.column(ROW_COL).to_numpy()
            if bool((np.diff(rows) <= 0).any()):
                order = np.argsort(rows, kind="stable")
                t, rows = t.take(pa.array(order)), rows[order]
            if bool((np.diff(rows) == 0).any()):  # a row twice: on_write_complete refuses the run
                return [(int(rows[0]), -1, int(len(rows)))]
            # Ray may hand one write task blocks that are not neighbours (seen on 131,072 rows with
            # several actors): one file per run of consecutive rows, so every file still tiles its rows
            cuts = np.flatnonzero(np.diff(rows) != 1) + 1
            starts = np.concatenate([[0], cuts]).astype(np.int64)
            ends = np.concatenate([cuts, [len(rows)]]).astype(np.int64)
            return [self._write_file(t.slice(a, b - a), int(rows[a]), int(rows[b - 1]))
                    for a, b in zip(starts, ends)]

        def _write_file(self, t: pa.Table, first: int, last: int) -> tuple[int, int, int]:
            name = f"part-{first:012d}.parquet"
            local = directory if upload_fs is None else tempfile.mkdtemp(prefix=scratch_prefix("ray-part"))
            w = AtomicParquetWriter(os.path.join(local, name), out_schema, threaded=False)
            try:
                for b in t.drop_columns([ROW_COL]).to_batches():
                    w.write(b)
                w.commit()
                if upload_fs is not None:  # the finished file, to the run's temporary prefix
                    from ..io.remote import put_file

                    put_file(upload_fs, os.path.join(local, name), f"{directory}/{name}")
            except BaseException:
                w.abort()
                raise
            finally:
                if upload_fs is not None:
                    shutil.rmtree(local, ignore_errors=True)
            return first, last, t.num_rows

        def on_write_complete(self, write_result):
            spans = sorted(x for r in write_result.write_returns for x in (r or []))
            nxt = 0
            for first, last, n in spans:
                if first != nxt or last - first + 1 != n:
                    raise AdvcliError(f"--engine ray: the written files do not hold rows {nxt}.. in order "
                                      f"(a file holds rows {first}..{last}, {n} rows); nothing was written",
                                      hint="please report this with your Ray version; --engine local is unaffected")
                nxt = last + 1
            if nxt != num_rows:
                raise AdvcliError(f"--engine ray: {nxt} rows were written, the input has {num_rows}")

    return OrderedParquetSink()


def check_output_prefix(output: str, inputs: list[str], force: bool) -> None:
    """An object-storage ``--output`` prefix: not an input nor holding one, in an existing bucket,
    and --force to replace one that exists."""
    from ..io import remote

    out = output.rstrip("/")
    for p in inputs:
        if p.rstrip("/") == out or p.startswith(out + "/"):
            raise AdvcliError(f"{output}: the output prefix is or holds an input; advcli never overwrites its input",
                              hint="choose another --output path")
    parent = out.rpartition("/")[0]
    if "/" not in parent.split("://", 1)[1] and not remote.exists(parent):
        raise AdvcliError(f"{output}: the bucket {parent} does not exist",
                          hint="create it first; advcli never creates buckets")
    if remote.exists(out) and not force:
        raise AdvcliError(f"{output}: already exists", hint="pass --force to replace it")


def tmp_prefix(output: str) -> str:
    """The key of the run's temporary prefix for the output URI ``output``: at the bucket's top level where the
    credentials may write there (deleting a prefix makes pyarrow's S3 filesystem leave a zero-byte marker of its
    parent, ``out/``, as :func:`advcli.io.remote.top_temp_key` says; the bucket's root has none), else beside the
    output; a store refusing both is named before any work (:func:`advcli.io.remote.writable_temp_key`)."""
    from ..io import remote

    return remote.filesystem_of(remote.writable_temp_key(output.rstrip("/")))[1]


def delete_prefix(fs, path: str) -> None:
    import pyarrow.fs as pafs

    try:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            fs.delete_dir(path)
        elif info.type == pafs.FileType.File:
            fs.delete_file(path)
    except OSError:
        pass


def publish_prefix(fs, tmp: str, out: str) -> None:
    """Copy the finished parts from the temporary prefix to the output prefix (server-side copies;
    each part appears whole), remove what an earlier run (--force) left there, then the temporary
    prefix."""
    import pyarrow.fs as pafs

    parts = sorted(i.path for i in fs.get_file_info(pafs.FileSelector(tmp, recursive=False))
                   if i.type == pafs.FileType.File)
    old = fs.get_file_info(out)
    if old.type == pafs.FileType.File:
        fs.delete_file(out)
    new = set()
    for p in parts:
        name = p.rsplit("/", 1)[1]
        fs.copy_file(p, f"{out}/{name}")
        new.add(f"{out}/{name}")
    if old.type == pafs.FileType.Directory:
        for i in fs.get_file_info(pafs.FileSelector(out, recursive=True)):
            if i.type == pafs.FileType.File and i.path not in new:
                fs.delete_file(i.path)
    delete_prefix(fs, tmp)


def replace_dir(tmp: str, output: str) -> None:
    """Move the finished temporary directory to ``output`` (replacing what --force allowed): now, or as
    the command's last step while it stages its outputs (:func:`advcli.io.commit.staged`)."""
    from ..io.commit import put_in_place

    put_in_place(output, tmp, now=lambda: swap_dir(tmp, output))


def swap_dir(tmp: str, output: str) -> None:
    """The finished directory in place of ``output`` now (outside a staged command: the library), with
    SIGINT/SIGTERM held between the two renames, so that ``output`` is never left missing with its
    earlier content aside (a signal is raised once the new one is in place)."""
    from ..io.commit import shielded

    with shielded():
        old = None
        if os.path.lexists(output):
            old = tmp + "-old"
            os.replace(output, old)
        os.replace(tmp, output)
    if old is not None:
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.remove(old)


def read_output(path: str) -> pa.Table:
    """The Ray engine's output directory (or object-storage prefix) as one table, in input row order
    (file name order)."""
    from ..io import remote

    if remote.is_uri(path):
        return pa.concat_tables([pq.read_table(remote.open_input(f)) for f in remote.expand(path.rstrip("/") + "/")])
    files = sorted(glob.glob(os.path.join(glob.escape(path), "*.parquet")))
    return pa.concat_tables([pq.read_table(f) for f in files])
