"""A local Parquet file's footer read without pyarrow: its top-level column names, its key-value metadata
and its row count, for the work a command does before it imports torch.

Why: ``import pyarrow`` (with numpy, which it imports) is about 0.2 s of a run's start. torch imports numpy
anyway, so a run that reads its first footer with this module and imports pyarrow after torch starts its
math sooner by that much, and a refusal about the dump's columns (no group id, an unknown flavor's
default estimator) reaches the user before either import.

The footer is Parquet's ``FileMetaData`` in Thrift's compact protocol (:mod:`advcli.io.thrift_compact`;
parquet-format, ``src/main/thrift/parquet.thrift``): field 2 the schema (a depth-first flattened list of
``SchemaElement``: field 4 the name, field 5 the number of children), field 3 ``num_rows``, field 5 the
``key_value_metadata`` (``KeyValue``: 1 key, 2 value). The file ends with the footer, its length
(4 bytes, little-endian) and ``PAR1``.

:func:`read_schema_facts` answers None for anything it does not read plainly (a URI, an encrypted footer,
a footer over :data:`MAX_FOOTER` bytes, bytes that are not a footer): callers then ask pyarrow
(:func:`schema_facts`), whose own reading and messages are the reference.
"""
from __future__ import annotations

import os
import types

from ..errors import AdvcliError
from ..records import record
from .reader import identity, open_parquet
from .thrift_compact import STRUCT, Struct, ThriftError, decode_struct

MAGIC = b"PAR1"
# footers larger than this (thousands of row groups) are decoded by pyarrow's C++: Python's decoding of a
# row group's column statistics costs about a millisecond per hundred columns, more than the import it saves
MAX_FOOTER = 256 << 10


def read_footer(path: str, max_bytes: int | None = None) -> tuple[Struct, int]:
    """(the decoded FileMetaData of the local Parquet file ``path``, the footer's start offset = the end of
    the data region). :class:`~advcli.io.thrift_compact.ThriftError` when it is not a plain Parquet footer, or
    is longer than ``max_bytes``."""
    size = os.path.getsize(path)
    if size < 12:
        raise ThriftError("too small for a Parquet file")
    with open(path, "rb") as fh:
        fh.seek(size - 8)
        tail = fh.read(8)
        if tail[4:] != MAGIC:  # b"PARE": encrypted footer
            raise ThriftError("not a plain Parquet footer")
        n = int.from_bytes(tail[:4], "little")
        if n <= 0 or n > size - 12:
            raise ThriftError("bad footer length")
        if max_bytes is not None and n > max_bytes:
            raise ThriftError(f"footer of {n} bytes, over {max_bytes}")
        fh.seek(size - 8 - n)
        data = fh.read(n)
    meta, end = decode_struct(data)
    if end != n:
        raise ThriftError("footer length mismatch")
    return meta, size - 8 - n


def items(s: Struct, fid: int) -> list:
    """The elements of the list field ``fid`` of ``s`` (empty when absent)."""
    return s.get_value(fid, (STRUCT, []))[1]


def top_level(schema: list) -> list:
    """The root's direct children (depth-first flattened schema: skip each child's subtree)."""
    out, i = [], 1
    while i < len(schema):
        out.append(schema[i])
        i = _past_subtree(schema, i)
    return out


def _past_subtree(schema: list, i: int) -> int:
    n = schema[i].get_value(5, 0) or 0
    i += 1
    for _ in range(n):
        i = _past_subtree(schema, i)
    return i


@record(frozen=True)
class SchemaFacts:
    """What a command needs of a Parquet file before it reads a row."""
    names: tuple[str, ...]  # the top-level columns, in file order (pyarrow's ``schema_arrow.names``)
    metadata: types.MappingProxyType  # key-value metadata, bytes -> bytes (pyarrow's ``schema_arrow.metadata``,
    # ARROW:schema left out), read-only: the facts of a file version are shared
    num_rows: int
    # the top-level columns that hold other columns (a list, a struct, a map): a table without any holds one value a
    # row in every column
    nested: tuple[str, ...] = ()


# (path, its identity: device, inode, size, mtime) -> facts: a run asks for a file's facts at several steps before torch
_SEEN: dict[tuple, SchemaFacts | None] = {}


def read_schema_facts(path: str) -> SchemaFacts | None:
    """:class:`SchemaFacts` of a local Parquet file from its footer, or None where pyarrow should read it
    (see the module's docstring). Read once per version of the file (:func:`advcli.io.reader.identity`)."""
    if "://" in path or not os.path.isfile(path):
        return None
    try:
        version = (path, *identity(path))
    except AdvcliError:  # gone since isfile
        return None
    if version not in _SEEN:
        if len(_SEEN) >= 64:
            _SEEN.clear()
        _SEEN[version] = _read_facts(path)
    return _SEEN[version]


def _read_facts(path: str) -> SchemaFacts | None:
    try:
        meta, _ = read_footer(path, max_bytes=MAX_FOOTER)
        if 8 in meta or 9 in meta:  # encryption_algorithm, footer_signing_key_metadata: pyarrow says what to do
            return None
        schema = items(meta, 2)
        if not schema:
            return None
        columns = top_level(schema)
        names = tuple(bytes(e.get_value(4, b"")).decode("utf-8") for e in columns)
        nested = tuple(n for n, e in zip(names, columns) if (e.get_value(5, 0) or 0) > 0)
        metadata = {}
        for kv in items(meta, 5):
            key = bytes(kv.get_value(1, b""))
            if key != b"ARROW:schema":
                metadata[key] = bytes(kv.get_value(2, b""))
        return SchemaFacts(names, types.MappingProxyType(metadata), int(meta.get_value(3, 0)), nested)
    except (OSError, ThriftError, UnicodeDecodeError, AttributeError, TypeError, ValueError, RecursionError):
        return None  # not what it looked like: pyarrow's reading and message


def schema_facts(path: str) -> SchemaFacts:
    """:class:`SchemaFacts` of ``path`` (local or a URI): from the footer here where
    :func:`read_schema_facts` can, otherwise through pyarrow (:func:`advcli.io.reader.open_parquet`, whose
    refusals name the file and say what is wrong)."""
    facts = read_schema_facts(path)
    if facts is not None:
        return facts
    f = open_parquet(path)
    try:
        schema = f.schema_arrow
        return SchemaFacts(tuple(schema.names), types.MappingProxyType(dict(schema.metadata or {})),
                           f.metadata.num_rows, tuple(fl.name for fl in schema if fl.type.num_fields > 0))
    finally:
        f.close(force=True)
