"""Helpers the format modules share (not a format: modules starting with ``_`` are not registered)."""
from __future__ import annotations

import json

import pyarrow as pa

F32 = pa.float32()
F64 = pa.float64()
I64 = pa.int64()
STR = pa.string()
BOOL = pa.bool_()
MASK = pa.list_(pa.int8())
F32_LIST = pa.list_(pa.float32())


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
