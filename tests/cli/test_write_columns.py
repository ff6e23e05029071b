"""``--write-columns``: which of the new columns a run writes (full and sidecar output, CLI and library)."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import advcli
from advcli.errors import AdvcliError
from advcli.sample import make_table

GAE_K3 = {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True, "algorithm.kl_penalty": "low_var_kl"}


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    p = tmp_path_factory.mktemp("wc") / "in.parquet"
    pq.write_table(make_table(60, group_size=4, min_len=1, max_len=40, seed=3, steps=2), p)
    return str(p)


def test_subset_equals_the_full_runs_columns(dump, tmp_path):
    advcli.run(dump, tmp_path / "all.parquet", settings=GAE_K3, force=True)
    advcli.run(dump, tmp_path / "two.parquet", settings=GAE_K3, write_columns=["returns", "advantages"])
    every, two = pq.read_table(tmp_path / "all.parquet"), pq.read_table(tmp_path / "two.parquet")
    src = pq.read_table(dump)
    assert every.column_names == src.column_names + ["advantages", "returns", "token_level_rewards"]
    assert two.column_names == src.column_names + ["advantages", "returns"]  # the run's order, not the request's
    for c in two.column_names:
        assert two.column(c).equals(every.column(c)), c
    prov = json.loads(pq.ParquetFile(tmp_path / "two.parquet").schema_arrow.metadata[b"advcli"])
    assert prov["output_columns"] == ["advantages", "returns"]


def test_sidecar_with_only_the_token_rewards(dump, tmp_path):
    r = run_cli("run", dump, "-o", tmp_path / "s.parquet", "-q", "--output-mode", "sidecar",
                "--write-columns", "token_level_rewards", *sum((["--set", f"{k}={v}"] for k, v in GAE_K3.items()), []))
    assert r.returncode == 0, r.stderr
    side = pq.read_table(tmp_path / "s.parquet")
    assert side.column_names == ["row_index", "prompt_id", "step", "token_level_rewards"]
    advcli.run(dump, tmp_path / "all.parquet", settings=GAE_K3, force=True)
    assert side.column("token_level_rewards").equals(
        pq.read_table(tmp_path / "all.parquet").column("token_level_rewards"))


@pytest.mark.parametrize("value, message", [
    ("advantages,retruns", "unknown column 'retruns'"),
    ("token_level_rewards", "produces no 'token_level_rewards'"),
    (",", "name at least one"),
])
def test_refusals_name_the_problem(dump, tmp_path, value, message):
    with pytest.raises(AdvcliError, match=message):
        advcli.run(dump, tmp_path / "x.parquet", settings={"algorithm.adv_estimator": "grpo"}, write_columns=value)
    assert not (tmp_path / "x.parquet").exists()
    r = run_cli("run", dump, "-o", tmp_path / "x.parquet", "--write-columns", value)
    assert r.returncode == 2 and message.split("'")[0] in r.stderr and "Traceback" not in r.stderr


def test_a_full_output_says_when_it_replaces_logged_columns(dump, tmp_path):
    """A dump that logs its own advantages/returns under advcli's output names (not an advcli output): the
    output holds the recomputed ones, the input keeps its own, and the run says so (replaced_columns); a rerun
    on an advcli output replaces its columns as asked, silently; a sidecar replaces nothing."""
    import pyarrow as pa

    t = pq.read_table(dump)
    logged = pa.array([[7.0] * len(m) for m in t.column("response_mask").to_pylist()], pa.list_(pa.float32()))
    src = tmp_path / "logged.parquet"
    pq.write_table(t.append_column("advantages", logged).append_column("returns", logged), src)
    out = tmp_path / "o.parquet"
    res = advcli.run(str(src), str(out), flavor="verl", settings={"algorithm.adv_estimator": "grpo"})
    said = [w for w in res.warnings if w.startswith("replaced_columns")]
    assert len(said) == 1 and "advantages, returns" in said[0]
    assert pq.read_table(out).column("advantages")[0].as_py()[0] != 7.0
    assert pq.read_table(src).column("advantages")[0].as_py()[0] == 7.0  # the input untouched
    again = advcli.run(str(out), str(tmp_path / "o2.parquet"), flavor="verl",
                       settings={"algorithm.adv_estimator": "rloo"})
    side = advcli.run(str(src), str(tmp_path / "s.parquet"), flavor="verl", output_mode="sidecar",
                      settings={"algorithm.adv_estimator": "grpo"})
    assert not [w for w in again.warnings + side.warnings if w.startswith("replaced_columns")]
