"""``--output-mode sidecar``: only the new columns plus the row keys — ``row_index`` (the row's
position in its input file), the group id and the step — in a file that joins back to the input
and then equals the full output."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

from advcli import pipeline
from advcli.errors import AdvcliError
from advcli.flavors import resolve
from advcli.sample import make_table

GAE_K3 = {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True, "algorithm.kl_penalty": "low_var_kl"}


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    p = tmp_path_factory.mktemp("sidecar") / "in.parquet"
    pq.write_table(make_table(150, group_size=5, min_len=1, max_len=30, seed=9, steps=2), p, row_group_size=40)
    return str(p)


def run(inputs, out, settings, mode, **kw):
    cfg, native = resolve("verl", list(settings.items()))
    return pipeline.run_pipeline([str(i) for i in inputs], str(out), cfg, flavor="verl", native=native,
                                 device="cpu", force=True, output_mode=mode, **kw)


@pytest.mark.parametrize("settings", [GAE_K3, {"algorithm.adv_estimator": "grpo"}], ids=["gae_k3", "grpo"])
def test_sidecar_joins_back_to_the_full_output(dump, tmp_path, settings):
    run([dump], tmp_path / "full.parquet", settings, "full", chunk_rows=23)
    run([dump], tmp_path / "side.parquet", settings, "sidecar", chunk_rows=23)
    full = pq.read_table(tmp_path / "full.parquet")
    side = pq.read_table(tmp_path / "side.parquet")
    new = [c for c in ("advantages", "returns", "token_level_rewards") if c in full.column_names]
    assert side.column_names == ["row_index", "prompt_id", "step"] + new
    assert side.column("row_index").to_pylist() == list(range(150))
    # the documented joins (docs/performance.md) give the full output back
    src = pq.read_table(dump)
    shuffled = side.take(pa.array(list(range(149, -1, -1))))  # a sidecar that went through some reordering
    aligned = shuffled.take(pa.compute.sort_indices(shuffled["row_index"]))
    joined = src
    for c in new:
        joined = joined.append_column(c, aligned[c])
    for c in full.column_names:
        assert joined.column(c).to_pylist() == full.column(c).to_pylist(), c
    merged = (src.to_pandas().reset_index(names="row_index")
              .merge(shuffled.drop_columns(["prompt_id", "step"]).to_pandas(), on="row_index"))
    for c in new:
        assert [list(x) for x in merged[c]] == full.column(c).to_pylist(), c
    # the keys agree with the input's
    assert side.column("prompt_id").equals(pq.read_table(dump).column("prompt_id"))
    meta = json.loads(pq.ParquetFile(tmp_path / "side.parquet").schema_arrow.metadata[b"advcli_sidecar"])
    assert meta == {"join_on": "row_index", "keys": ["prompt_id", "step"], "columns": new}


def test_sidecar_without_group_or_step_columns(tmp_path):
    t = make_table(40, group_size=4, min_len=2, max_len=10, seed=1).drop_columns(["prompt_id"])
    src = tmp_path / "nokeys.parquet"
    pq.write_table(t, src)
    run([src], tmp_path / "side.parquet", {"algorithm.adv_estimator": "gae"}, "sidecar")
    side = pq.read_table(tmp_path / "side.parquet")
    assert side.column_names == ["row_index", "advantages", "returns"]
    assert [len(x) for x in side.column("advantages").to_pylist()] == [len(x) for x in t.column("values").to_pylist()]


def test_sidecar_per_input_file_row_index_restarts(dump, tmp_path):
    t = pq.read_table(dump)
    parts = tmp_path / "parts"
    parts.mkdir()
    pq.write_table(t.slice(0, 60), parts / "a.parquet")
    pq.write_table(t.slice(60), parts / "b.parquet")
    run([parts], tmp_path / "out", {"algorithm.adv_estimator": "grpo"}, "sidecar", chunk_rows=7)
    assert sorted(os.listdir(tmp_path / "out")) == ["a.parquet", "b.parquet"]
    b = pq.read_table(tmp_path / "out" / "b.parquet")
    assert b.column("row_index").to_pylist() == list(range(90))
    assert b.column("prompt_id").equals(t.slice(60).column("prompt_id"))


def test_cli_output_mode(dump, tmp_path):
    out = tmp_path / "s.parquet"
    r = run_cli("run", dump, "-o", out, "--output-mode", "sidecar", "-q", "--set", "algorithm.adv_estimator=grpo")
    assert r.returncode == 0, r.stderr
    assert pq.read_table(out).column_names == ["row_index", "prompt_id", "step", "advantages", "returns"]
    r = run_cli("run", dump, "-o", tmp_path / "x.parquet", "--output-mode", "sidecr")
    assert r.returncode == 2 and "Did you mean 'sidecar'" in r.stderr


def test_unknown_mode_in_the_api(dump, tmp_path):
    with pytest.raises(AdvcliError, match="expected full or sidecar"):
        run([dump], tmp_path / "x.parquet", {"algorithm.adv_estimator": "grpo"}, "narrow")


def test_library_entry_point_output_mode(dump, tmp_path):
    """advcli.run(..., output_mode="sidecar") writes the same sidecar as the CLI."""
    import advcli

    advcli.run(dump, tmp_path / "lib.parquet", flavor="verl", settings={"algorithm.adv_estimator": "grpo"},
               output_mode="sidecar", force=True)
    run([dump], tmp_path / "cli.parquet", {"algorithm.adv_estimator": "grpo"}, "sidecar")
    lib, cli = pq.read_table(tmp_path / "lib.parquet"), pq.read_table(tmp_path / "cli.parquet")
    assert lib.column_names == ["row_index", "prompt_id", "step", "advantages", "returns"]
    for c in lib.column_names:
        assert lib.column(c).equals(cli.column(c)), c


def test_unknown_mode_is_named_before_the_group_filter_runs(dump, tmp_path):
    """With --drop-uniform the run filters the groups first; an unknown mode is still reported as such (not as
    the filter's "sidecar with --drop-uniform" refusal), exit 2, and nothing is written, kept rows included."""
    r = run_cli("run", dump, "-o", tmp_path / "x.parquet", "--output-mode", "narrow", "--drop-uniform",
                "--set", "algorithm.adv_estimator=grpo")
    assert r.returncode == 2, r.stderr
    assert "--output-mode 'narrow': expected full or sidecar" in r.stderr and "Traceback" not in r.stderr
    assert "drop-uniform" not in r.stderr
    assert os.listdir(tmp_path) == [os.path.basename(dump)] or not any("x.parquet" in n for n in os.listdir(tmp_path))


def test_unknown_mode_in_the_library_entry_point(dump, tmp_path):
    import advcli

    with pytest.raises(AdvcliError, match="expected full or sidecar"):
        advcli.run(dump, tmp_path / "lib.parquet", flavor="verl", settings={"algorithm.adv_estimator": "grpo"},
                   output_mode="narrow")
    assert not (tmp_path / "lib.parquet").exists()
