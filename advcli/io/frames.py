"""In-memory tables as inputs of the library calls (``advcli.run``, ``stats``, ``audit``, ``compare``): a
``pyarrow.Table`` or a ``pandas.DataFrame`` is written once to a temporary Parquet file that the call reads
like any input, and removed when the call returns. What the call reports or raises names the table
(``<pandas.DataFrame>``), not the temporary file.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from ..errors import AdvcliError
from .reader import SHOWN_AS
from .temps import scratch_prefix


def frame_kind(obj) -> str | None:
    """``"pyarrow.Table"``, ``"pyarrow.RecordBatch"``, ``"pandas.DataFrame"`` or None (a path), without
    importing pandas."""
    cls = type(obj)
    name = f"{cls.__module__.split('.')[0]}.{cls.__name__}"
    if name in ("pyarrow.Table", "pyarrow.RecordBatch", "pandas.DataFrame"):
        return name
    return None


def not_an_input(obj) -> AdvcliError:
    """The error for an object that is neither a path nor an in-memory table (its type named, never its
    contents: a table's text can run to pages)."""
    cls = type(obj)
    name = f"{cls.__module__}.{cls.__qualname__}"
    hint = "give a path (str or os.PathLike), a pyarrow.Table or RecordBatch, or a pandas.DataFrame"
    if "RecordBatchReader" in name:
        hint = "read it into a table first (reader.read_all()), or write it to a Parquet file and pass the path"
    elif "dataset" in name.lower():
        hint = "pass the dataset's files (dataset.files) or a directory of Parquet files; advcli reads them in chunks"
    return AdvcliError(f"an input of type {name} is not a path nor a table advcli reads", hint=hint)


def typed_empty(table):
    """A table of no rows with its role columns of type null (a DataFrame filtered down to nothing: pandas'
    object columns carry no element type) given their roles' types: lists of float32 per token (int8 for the
    mask), float32 per row, strings for the group key. A run of no rows is valid; a null column is not."""
    import pyarrow as pa

    from ..config.column_roles import ROLE_INFO

    flags = ("is_last_step", "is_padding", "truncated", "trainable")
    counts = ("num_output_tokens", "num_total_tokens", "num_turns")
    kinds = {default: (role, kind) for role, (default, kind, _) in ROLE_INFO.items()}
    for i, field in enumerate(table.schema):
        if not pa.types.is_null(field.type) or field.name not in kinds:
            continue
        role, kind = kinds[field.name]
        if kind == "tokens":
            t = pa.list_(pa.int8() if role == "response_mask" else pa.int32() if role == "turn_ids" else pa.float32())
        elif kind == "scalar":
            t = pa.bool_() if role in flags else pa.int64() if role in counts else pa.float32()
        else:
            t = {"key": pa.string(), "int": pa.int64()}[kind]
        table = table.set_column(i, pa.field(field.name, t), pa.array([], type=t))
    return table


class FrameInputs:
    """``with FrameInputs() as frames: path = frames.path(x)``: ``x`` as a path (an in-memory table written
    to a temporary Parquet file); ``frames.output_path()`` a temporary output beside them; ``frames.named(obj)``
    a report or message with the temporary paths replaced by the tables' names."""

    def __init__(self, rename=None, *, rows_dropped: bool = False):
        self.directory: str | None = None
        self.names: dict[str, str] = {}  # temporary path -> the table's name in messages
        self.rename = rename  # message -> message: a converted dump's temporary Parquet named as the dump
        # the call keeps some rows only (advcli.filter): a DataFrame's RangeIndex written as a column, its labels
        # then coming back with the rows kept (as metadata, to_pandas() would number the kept rows 0..n-1)
        self.rows_dropped = rows_dropped

    def __enter__(self) -> FrameInputs:
        return self

    def __exit__(self, kind, error, tb) -> None:
        for path in self.names:
            SHOWN_AS.pop(path, None)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        if isinstance(error, AdvcliError):  # the message names the table the user passed (the call's keywords,
            if self.rename is not None:  # columns=..., not --column: advcli._in_library_words) and the dump's file
                error.message = self.rename(error.message)  # and line, as the command line names them
            error.message = self.named(error.message)
            error.hint = self.named(error.hint) if error.hint else error.hint
            error.args = (error.message,)

    def _dir(self) -> str:
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix=scratch_prefix("frames"))
        return self.directory

    def path(self, obj) -> str:
        """A path as it is (``str``/``os.PathLike``); an in-memory table written to a temporary Parquet file."""
        kind = frame_kind(obj)
        if kind is None:
            if isinstance(obj, str) or hasattr(obj, "__fspath__"):
                return os.fspath(obj)
            raise not_an_input(obj)
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = obj
        if kind == "pyarrow.RecordBatch":
            table = pa.Table.from_batches([obj])
        if kind == "pandas.DataFrame":
            twice = sorted({str(c) for c in obj.columns[obj.columns.duplicated()]})
            if twice:  # (pandas allows it, Arrow does not: a concat of two frames with one column each)
                raise AdvcliError(f"the pandas.DataFrame has more than one column named {', '.join(map(repr, twice))}",
                                  hint="drop or rename the duplicates: df.loc[:, ~df.columns.duplicated()]")
            try:
                # a RangeIndex as metadata, another index as columns: to_pandas() of the result restores it
                table = pa.Table.from_pandas(obj, preserve_index=True if self.rows_dropped else None)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError) as e:
                raise AdvcliError(f"the pandas.DataFrame cannot be read as an Arrow table: {e}",
                                  hint="each column must hold one type: numbers, strings, or lists of numbers "
                                       "(one list per row for the token columns)") from None
        if table.num_rows == 0:
            table = typed_empty(table)
        n = len(self.names)
        target = os.path.join(self._dir(), f"table{n}.parquet")
        pq.write_table(table, target)
        self.names[target] = f"<{kind}>" if n == 0 else f"<{kind} #{n + 1}>"
        SHOWN_AS[target] = self.names[target]  # the output's provenance names the table, not this file
        return target

    def output_path(self) -> str:
        """A temporary output path, removed with the inputs."""
        return os.path.join(self._dir(), "output.parquet")

    def named(self, obj):
        """``obj`` (strings, dicts, lists) with each temporary table path replaced by the table's name."""
        if not self.names:
            return obj
        if isinstance(obj, str):
            for path, name in self.names.items():
                obj = obj.replace(path, name)
            return obj
        if isinstance(obj, dict):
            return {k: self.named(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.named(v) for v in obj)
        return obj
