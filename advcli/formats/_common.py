"""Helpers the format modules share (not a format: modules starting with ``_`` are not registered)."""
from __future__ import annotations

import json

# A format's column types, by name: pyarrow's type aliases (``pa.type_for_alias``), or ``list<ALIAS>``.
# Names rather than pyarrow types, so that recognising a dump (which imports every format module) does
# not import pyarrow: the conversion makes the types (:func:`arrow_type`), after torch where a run has it.
F32 = "float32"
F64 = "float64"
I64 = "int64"
STR = "string"
BOOL = "bool"
MASK = "list<int8>"
F32_LIST = "list<float32>"


def arrow_type(name: str):
    """The pyarrow type a column type name above stands for."""
    import pyarrow as pa

    if name.startswith("list<") and name.endswith(">"):
        return pa.list_(arrow_type(name[5:-1]))
    return pa.type_for_alias(name)


def text_key(*parts) -> str:
    """A short stable id for a group key made of text or token ids (16 hex digits of blake2b)."""
    import hashlib  # here: loading OpenSSL is for the dumps that need a key, not for every command's start

    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        if not isinstance(p, (str, bytes)):
            p = json.dumps(p, separators=(",", ":"), ensure_ascii=False, default=str)
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\x1f")
    return h.hexdigest()


def schema_record(path: str) -> dict | None:
    """A Parquet file's column names as a record (for content checks), or None if it is not Parquet."""
    import pyarrow.parquet as pq

    try:
        return {n: None for n in pq.read_schema(path).names}
    except Exception:  # noqa: BLE001 - not a Parquet file
        return None


def where_in_dump(path: str, line: int) -> str:
    """How a message names one record of a trainer's dump: ``FILE:LINE`` in a JSON-lines file (lines from 1, as
    an editor shows them), ``FILE, row N`` in a Parquet file (rows from 0, as advcli's own Parquet messages
    count them), ``FILE: sample N`` in a slime ``.pt`` (its ``samples`` list from 0, as the slime reader's own
    messages and ``samples[N]`` name it), ``FILE, record N`` in another file (a compressed stream's records
    from 1)."""
    if path.endswith((".jsonl", ".json")):
        return f"{path}:{line}"
    if path.endswith(".parquet"):
        return f"{path}, row {line}"
    if path.endswith(".pt"):
        return f"{path}: sample {line - 1}"
    return f"{path}, record {line}"
