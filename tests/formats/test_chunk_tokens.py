"""Every command reads in chunks of about CHUNK_TOKENS tokens, not only `run`: with long responses a chunk of
--chunk-rows rows (8,192 by default for stats and filter) would hold the whole dump, and the memory of stats,
validate, filter, audit and compare grew with the responses' length (8,192 rows of 16k-token responses are 134M
tokens in one chunk). Here a dump of 600 responses of 2,048 tokens (1.2M tokens) is read by each command, every
batch pyarrow decodes is counted, and none may hold more than CHUNK_TOKENS tokens (a chunk of `run` rounds to
whole writer pieces of 256 rows: 512 rows here). The figures are those of one chunk holding everything."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_main

from advcli.io.reader import CHUNK_TOKENS, InputSet, file_chunk_rows, rows_for_tokens

ROWS, LENGTH, GROUP = 600, 2048, 8


def test_rows_for_tokens_from_the_formula():
    # min(chunk_rows, chunk_tokens * rows // tokens), at least 1; None: no bound of that kind
    assert rows_for_tokens(600, 600 * 2048, 8192, 1 << 19) == 256
    assert rows_for_tokens(600, 600 * 2048, 100, 1 << 19) == 100
    assert rows_for_tokens(600, 600 * 2048, None, None) == 600
    assert rows_for_tokens(600, 0, 8192, 1 << 19) == 8192  # no list column: rows alone
    assert rows_for_tokens(3, 3 << 30, 8192, 1 << 19) == 1
    assert rows_for_tokens(0, 0, None, 1 << 19) == 1


@pytest.fixture(scope="module")
def long_dump(tmp_path_factory):
    rng = np.random.default_rng(5)
    n = ROWS * LENGTH
    offsets = pa.array(np.arange(ROWS + 1, dtype=np.int32) * LENGTH)
    mask = (rng.random(n) < 0.9).astype(np.int8)
    logp = (-rng.random(n)).astype(np.float32)
    t = pa.table({
        "prompt_id": pa.array([f"p{i // GROUP}" for i in range(ROWS)]),
        "reward": pa.array(rng.integers(0, 2, ROWS).astype(np.float32)),
        "response_mask": pa.ListArray.from_arrays(offsets, pa.array(mask)),
        "old_log_probs": pa.ListArray.from_arrays(offsets, pa.array(logp)),
        "ref_log_probs": pa.ListArray.from_arrays(offsets, pa.array(logp - 0.01)),
    })
    path = tmp_path_factory.mktemp("long") / "long.parquet"
    pq.write_table(t, path, row_group_size=ROWS)  # one row group: pyarrow's batches are what advcli asks for
    return str(path)


@pytest.fixture
def largest_batch(monkeypatch):
    """The most list elements of one column in any batch pyarrow decodes while the test runs."""
    seen = [0]
    real = pq.ParquetFile.iter_batches

    def counted(self, *args, **kwargs):
        for batch in real(self, *args, **kwargs):
            for col in batch.columns:
                if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
                    seen[0] = max(seen[0], int(col.offsets[-1].as_py() - col.offsets[0].as_py()))
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counted)
    return seen


def test_file_chunk_rows_reads_the_longest_list_column(long_dump):
    f = pq.ParquetFile(long_dump)
    assert file_chunk_rows(f, ["response_mask", "reward"], 8192) == CHUNK_TOKENS // LENGTH
    assert file_chunk_rows(f, ["reward", "prompt_id"], 8192) == 8192
    assert InputSet.open([long_dump]).chunk_rows(8192) == CHUNK_TOKENS // LENGTH


@pytest.mark.parametrize("argv", [
    ["stats", "{dump}", "--json"],
    ["validate", "{dump}", "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
     "--set", "algorithm.use_kl_in_reward=true"],
    ["filter", "{dump}", "-o", "{tmp}/kept.parquet", "--drop-uniform"],
    ["compare", "{dump}", "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "--flavor", "nemo", "--json"],
], ids=["stats", "validate", "filter", "compare"])
def test_every_command_reads_chunks_of_bounded_tokens(argv, long_dump, tmp_path, capsys, largest_batch):
    argv = [a.format(dump=long_dump, tmp=tmp_path) for a in argv]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    assert 0 < largest_batch[0] <= 2 * 256 * LENGTH  # was ROWS * LENGTH: the whole dump in one batch
    if argv[0] != "compare":  # (compare's runs write: whole pieces of 256 rows)
        assert largest_batch[0] <= CHUNK_TOKENS


def test_stats_and_audit_of_long_responses_give_the_one_chunk_figures(long_dump, tmp_path, capsys):
    out = str(tmp_path / "out.parquet")
    assert run_main(["run", long_dump, "-o", out, "--quiet", "--set", "algorithm.adv_estimator=grpo"], capsys)[0] == 0
    code, text, err = run_main(["stats", out, "--json"], capsys)
    assert code == 0, err
    metrics = json.loads(text)["metrics"]
    # from the file itself: the mean over mask=1 tokens and the mean response length
    t = pq.read_table(out)
    adv = np.concatenate([np.asarray(a, np.float64) for a in t.column("advantages").to_pylist()])
    mask = np.concatenate([np.asarray(m) for m in t.column("response_mask").to_pylist()]) != 0
    assert metrics["critic/advantages/mean"] == pytest.approx(adv[mask].mean(), rel=1e-5, abs=1e-7)
    assert metrics["response_length/mean"] == pytest.approx(LENGTH)
    code, text, err = run_main(["audit", out, "--against", "advantages", "--json"], capsys)
    assert code == 0, err
    assert json.loads(text)["agree"] is True
