"""advcli.io.footer: a Parquet footer's column names, metadata and row count read without pyarrow, checked
against pyarrow's own reading of the same files (the reference), and the fall-backs to pyarrow."""
from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advcli.errors import AdvcliError
from advcli.io import footer


def _tables():
    yield "lists", pa.table({"prompt_id": ["a", "a", "b"], "reward": pa.array([1.0, 0.0, 0.5], pa.float32()),
                             "response_mask": pa.array([[1, 1], [1], [0, 1, 1]], pa.list_(pa.int8()))}), {}
    nested = pa.array([{"x": 1, "y": [1.0]}, {"x": 2, "y": []}],
                      pa.struct([("x", pa.int64()), ("y", pa.list_(pa.float64()))]))
    yield "struct, map and list of lists", pa.table({
        "s": nested, "after": [1, 2],
        "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())),
        "ll": pa.array([[[1], [2, 3]], []], pa.list_(pa.list_(pa.int32()))), "last": ["p", "q"]}), {}
    yield "metadata", pa.table({"a": [1]}).replace_schema_metadata({"advcli.import": '{"level": "response"}',
                                                                     "x": "y"}), {}
    yield "no rows", pa.table({"a": pa.array([], pa.int64()), "ü-name": pa.array([], pa.string())}), {}
    yield "many row groups", pa.table({"a": list(range(5000)), "b": [0.5] * 5000}), {"row_group_size": 10}
    yield "no arrow schema", pa.table({"a": [1, 2]}), {"store_schema": False}


@pytest.mark.parametrize("name,table,kw", list(_tables()), ids=[t[0] for t in _tables()])
def test_facts_are_pyarrows(tmp_path, name, table, kw):
    p = str(tmp_path / "x.parquet")
    pq.write_table(table, p, **kw)
    facts = footer.read_schema_facts(p)
    assert facts is not None
    ref = pq.ParquetFile(p)
    assert facts.names == tuple(ref.schema_arrow.names)
    assert dict(facts.metadata) == dict(ref.schema_arrow.metadata or {})
    assert facts.num_rows == ref.metadata.num_rows == table.num_rows


def test_pandas_index_column(tmp_path):
    p = str(tmp_path / "x.parquet")
    pd.DataFrame({"a": [1, 2]}, index=[7, 9]).to_parquet(p)
    facts = footer.read_schema_facts(p)
    assert facts.names == ("a", "__index_level_0__") == tuple(pq.read_schema(p).names)
    assert set(facts.metadata) == {b"pandas"}


def test_read_once_per_version(tmp_path):
    """A file rewritten between two asks is read again (its identity changed); asked twice unchanged, once."""
    p = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({"a": [1]}), p)
    first = footer.read_schema_facts(p)
    assert footer.read_schema_facts(p) is first
    pq.write_table(pa.table({"b": [1], "c": [2]}), p)
    assert footer.read_schema_facts(p).names == ("b", "c")


def test_what_it_leaves_to_pyarrow(tmp_path, monkeypatch):
    """Not Parquet, cut short, a footer over the size limit, a URI: None here, and schema_facts asks pyarrow, whose
    refusal names the file."""
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1" + b"\0" * 40)
    cut = tmp_path / "cut.parquet"
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"a": list(range(100))}), good)
    cut.write_bytes(good.read_bytes()[:-5])
    for p in (bad, cut, tmp_path / "missing.parquet", tmp_path):
        assert footer.read_schema_facts(str(p)) is None
    assert footer.read_schema_facts("s3://bucket/x.parquet") is None
    with pytest.raises(AdvcliError, match="cut.parquet: not a readable Parquet file"):
        footer.schema_facts(str(cut))
    monkeypatch.setattr(footer, "MAX_FOOTER", 10)
    footer._SEEN.clear()
    assert footer.read_schema_facts(str(good)) is None
    assert footer.schema_facts(str(good)).names == ("a",)  # through pyarrow
