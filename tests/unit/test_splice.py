"""--output-mode full by splicing (advcli.io.splice): the input's column chunks copied as bytes, the
new columns' pages appended, a footer listing both. The output must read back exactly as the
ordinary (decode and re-encode) writer's output does, for any row-group layout of the input."""
from __future__ import annotations

import os
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
import advcli.pipeline as pipeline
from advcli.io import splice, writer
from advcli.io.thrift_compact import decode_struct, encode_struct

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(__file__)), os.pardir, "sample_data", "rollouts.parquet")
GAE_KL = {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True, "algorithm.kl_penalty": "low_var_kl"}


def _footer_bytes(path: str) -> bytes:
    data = open(path, "rb").read()
    n = struct.unpack("<I", data[-8:-4])[0]
    return data[-8 - n:-8]


def _rewrite(src: str, dst: str, **options) -> str:
    pq.write_table(pq.read_table(src), dst, **options)
    return dst


def _run(src: str, dst: str, settings: dict, use_splice: bool, chunk_rows: int | None = None, monkeypatch=None):
    monkeypatch.setattr(pipeline.write, "SPLICE", use_splice)
    extra = {"chunk_rows": chunk_rows} if chunk_rows else {}
    advcli.run(src, dst, flavor="verl", settings=settings, device="cpu", force=True, **extra)
    return dst


@pytest.mark.parametrize("layout", [
    {},  # one row group
    {"row_group_size": 50, "write_statistics": True, "write_page_index": True, "data_page_size": 2048},
    {"row_group_size": 97, "compression": "snappy", "use_dictionary": False},
])
@pytest.mark.parametrize("settings", [{"algorithm.adv_estimator": "grpo"}, GAE_KL])
def test_spliced_output_reads_as_the_reencoded_one(tmp_path, monkeypatch, layout, settings):
    monkeypatch.setattr(writer, "DATA_PAGE_SIZE", 4096)  # many pages per piece
    src = _rewrite(SAMPLE, str(tmp_path / "in.parquet"), **layout)
    assert splice.spliceable(src, ["advantages", "returns", "token_level_rewards"])
    a = _run(src, str(tmp_path / "spliced.parquet"), settings, True, monkeypatch=monkeypatch)
    b = _run(src, str(tmp_path / "plain.parquet"), settings, False, monkeypatch=monkeypatch)
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.schema.equals(tb.schema, check_metadata=True)
    assert ta.equals(tb)
    # the input's row groups are kept (the new columns get a chunk in each) and read one by one
    fa, fin = pq.ParquetFile(a), pq.ParquetFile(src)
    assert fa.metadata.num_row_groups == fin.metadata.num_row_groups
    start = 0
    for g in range(fa.metadata.num_row_groups):
        part = fa.read_row_group(g)
        assert part.equals(tb.slice(start, part.num_rows))
        start += part.num_rows
    # the input's column chunks are its bytes: same offsets, sizes and statistics in the footer
    for g in range(fin.metadata.num_row_groups):
        for c in range(fin.metadata.num_columns):
            x, y = fin.metadata.row_group(g).column(c), fa.metadata.row_group(g).column(c)
            assert (x.data_page_offset, x.total_compressed_size, x.num_values) == \
                   (y.data_page_offset, y.total_compressed_size, y.num_values)
            assert x.statistics == y.statistics
    with open(src, "rb") as fh_in, open(a, "rb") as fh_out:
        n = os.path.getsize(src) - 8 - struct.unpack("<I", open(src, "rb").read()[-8:-4])[0]
        assert fh_in.read(n) == fh_out.read(n)


def test_spliced_bytes_do_not_depend_on_chunking(tmp_path, monkeypatch):
    src = _rewrite(SAMPLE, str(tmp_path / "in.parquet"), row_group_size=70)
    outs = [open(_run(src, str(tmp_path / f"o{c}.parquet"), GAE_KL, True, chunk_rows=c, monkeypatch=monkeypatch),
                 "rb").read() for c in (7, 64, 1000)]
    assert outs[0] == outs[1] == outs[2]


def test_input_column_named_like_a_new_one_is_rewritten(tmp_path, monkeypatch):
    """An input column called `advantages` is replaced in the output: the splice cannot drop a
    column chunk, so that input takes the ordinary writer — same result either way."""
    t = pq.read_table(SAMPLE)
    t = t.append_column("advantages", pa.array([[1.0]] * t.num_rows, pa.list_(pa.float32())))
    src = str(tmp_path / "in.parquet")
    pq.write_table(t, src)
    assert not splice.spliceable(src, ["advantages", "returns"])
    out = _run(src, str(tmp_path / "o.parquet"), {"algorithm.adv_estimator": "grpo"}, True, monkeypatch=monkeypatch)
    got = pq.read_table(out)
    assert got.column_names.count("advantages") == 1
    assert got.column("advantages").to_pylist() != [[1.0]] * t.num_rows


def test_not_spliceable_inputs(tmp_path):
    empty = str(tmp_path / "empty.parquet")
    pq.write_table(pq.read_table(SAMPLE).slice(0, 0), empty)
    assert not splice.spliceable(empty, ["advantages"])  # no row group to add the new columns to
    junk = str(tmp_path / "junk.parquet")
    open(junk, "wb").write(b"PAR1" + b"\0" * 20 + b"PAR1")
    assert not splice.spliceable(junk, ["advantages"])


@pytest.mark.parametrize("options", [
    {},
    {"write_statistics": True, "write_page_index": True, "row_group_size": 40, "compression": "snappy"},
    {"use_dictionary": False, "data_page_version": "2.0", "sorting_columns": [pq.SortingColumn(1, descending=True)]},
])
def test_thrift_footer_round_trip(tmp_path, options):
    """decode → encode gives the footer's bytes back, whatever fields the writer set."""
    p = _rewrite(SAMPLE, str(tmp_path / "f.parquet"), **options)
    raw = _footer_bytes(p)
    meta, end = decode_struct(raw)
    assert end == len(raw)
    assert encode_struct(meta) == raw
    assert meta.get_value(3) == pq.read_metadata(p).num_rows  # FileMetaData.num_rows


def test_thrift_values_by_hand():
    """Compact protocol by hand: field 1 i32 = −3 (zigzag 5), field 20 binary b'ab' (long field
    header), a list of 16 i64 (long list header), a nested struct with a true bool, then stops."""
    from advcli.io.thrift_compact import BINARY, BOOL_TRUE, I32, I64, LIST, STRUCT, Struct

    s = Struct()
    s.set_value(1, I32, -3)
    s.set_value(20, BINARY, b"ab")
    s.set_value(21, LIST, (I64, list(range(16))))
    inner = Struct()
    inner.set_value(2, BOOL_TRUE, True)
    s.set_value(22, STRUCT, inner)
    raw = encode_struct(s)
    assert raw[:2] == bytes([0x15, 0x05])  # delta 1, type i32; zigzag(−3) = 5
    assert raw[2:4] == bytes([0x08, 40])  # long header: type binary, zigzag(20) = 40
    assert raw[4:7] == b"\x02ab"
    assert raw[7:9] == bytes([0x19, 0xF6])  # delta 1, list; 0xF0 | i64 (6): size follows
    assert decode_struct(raw) == (s, len(raw))
    assert np.all(np.array(decode_struct(raw)[0].get_value(21)[1]) == np.arange(16))
