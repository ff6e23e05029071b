"""``advcli filter`` and ``advcli run --drop-uniform/--solve-rate/--min-group-size``.

The groups kept are checked against an independent pandas computation over (step, prompt_id):
``nunique(dropna=False) == 1`` for uniform, the mean of the non-NaN metric for the solve rate, the
group size for --min-group-size.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_commands import main_rc


def make_dump(path, seed=0, rows=300):
    rng = np.random.default_rng(seed)
    n_groups = rows // 4
    sizes = rng.integers(1, 8, size=n_groups)  # uneven, singleton groups too
    gid = np.repeat(np.arange(n_groups), sizes)[:rows]
    R = gid.size
    step = (gid % 3).astype(np.int64)
    order = rng.permutation(R)  # scattered rows
    gid, step = gid[order], step[order]
    p_solve = rng.choice([0.0, 0.3, 0.7, 1.0], size=n_groups)
    reward = (rng.random(R) < p_solve[gid]).astype(np.float32)
    reward[rng.random(R) < 0.03] = np.nan
    acc = rng.choice([0.0, 0.5, 1.0], size=R).astype(np.float32)
    lengths = rng.integers(1, 9, size=R)
    mask = [(rng.random(L) > 0.1).astype(np.int8).tolist() for L in lengths]
    lp = [rng.normal(size=L).astype(np.float32).tolist() for L in lengths]
    src = np.array(["math", "code", "chat"])[gid % 3 if seed % 2 else rng.integers(0, 3, size=R)]
    t = pa.table({"prompt_id": pa.array([f"q{g}" for g in gid]), "step": pa.array(step),
                  "reward": pa.array(reward, pa.float32()), "acc": pa.array(acc),
                  "data_source": pa.array(src.tolist()), "response_mask": pa.array(mask, pa.list_(pa.int8())),
                  "old_log_probs": pa.array(lp, pa.list_(pa.float32()))})
    pq.write_table(t, str(path), row_group_size=64)
    return str(path)


def pandas_keep(df: pd.DataFrame, metric="reward", drop_uniform=False, solve=None, min_size=None) -> np.ndarray:
    g = df.groupby(["step", "prompt_id"], sort=False)[metric]
    keep = np.ones(len(df), bool)
    if drop_uniform:
        keep &= ~(g.transform(lambda s: s.nunique(dropna=False)) == 1).to_numpy()
    if solve is not None:
        mean = g.transform("mean").to_numpy()
        keep &= (mean >= solve[0]) & (mean <= solve[1])
    if min_size is not None:
        keep &= (g.transform("size").to_numpy() >= min_size)
    return keep


def assert_same(got: pa.Table, want: pa.Table) -> None:
    """Same schema, same values (NaN equal to NaN: Table.equals says NaN != NaN)."""
    assert got.schema.equals(want.schema, check_metadata=False)
    assert got.num_rows == want.num_rows
    for c in got.column_names:
        a, b = got.column(c), want.column(c)
        if pa.types.is_floating(a.type):
            assert np.array_equal(a.to_numpy(), b.to_numpy(), equal_nan=True), c
        else:
            assert a.equals(b), c


CASES = [
    (["--drop-uniform"], dict(drop_uniform=True)),
    (["--solve-rate", "0.2:0.8"], dict(solve=(0.2, 0.8))),
    (["--min-group-size", "3"], dict(min_size=3)),
    (["--drop-uniform", "--solve-rate", "0.1:1", "--min-group-size", "2"],
     dict(drop_uniform=True, solve=(0.1, 1.0), min_size=2)),
    (["--metric", "acc", "--drop-uniform"], dict(metric="acc", drop_uniform=True)),
]


@pytest.mark.parametrize("args,spec", CASES)
def test_filter_keeps_the_groups_pandas_keeps(tmp_path, capsys, args, spec):
    src = make_dump(tmp_path / "in.parquet", seed=len(args))
    df = pq.read_table(src).to_pandas()
    keep = pandas_keep(df, **spec)
    assert 0 < keep.sum() < len(df)
    out = tmp_path / "out.parquet"
    code, stdout, err = main_rc(capsys, "filter", src, "-o", out, *args, "--chunk-rows", "7", "--json")
    assert code == 0, err
    rep = json.loads(stdout)
    got = pq.read_table(out)
    want = pq.read_table(src).filter(pa.array(keep))
    assert_same(got, want)  # every column unchanged, rows in input order
    assert rep["rows_kept"] == int(keep.sum()) and rep["rows_dropped"] == int((~keep).sum())
    kept_groups = df[keep].groupby(["step", "prompt_id"]).ngroups
    assert rep["groups_kept"] == kept_groups
    assert rep["groups"] == df.groupby(["step", "prompt_id"]).ngroups
    # per step and per data source add up
    assert sum(s["rows_dropped"] for s in rep["per_step"]) == rep["rows_dropped"]
    assert sum(s["rows_dropped"] for s in rep["per_source"]) == rep["rows_dropped"]
    for s in rep["per_step"]:
        assert s["rows_dropped"] == int((~keep & (df["step"] == s["step"]).to_numpy()).sum())


def test_filter_chunk_size_independent_and_reports(tmp_path, capsys):
    src = make_dump(tmp_path / "in.parquet", seed=3)
    outs = []
    for cr in ("7", "100000"):
        out = tmp_path / f"o{cr}.parquet"
        code, _, err = main_rc(capsys, "filter", src, "-o", out, "--drop-uniform", "--chunk-rows", cr, "-q")
        assert code == 0, err
        outs.append(pq.read_table(out))
    assert_same(outs[0], outs[1])
    for ext in ("json", "md", "html"):
        rp = tmp_path / f"f.{ext}"
        code, _, err = main_rc(capsys, "filter", src, "-o", tmp_path / f"x{ext}.parquet", "--drop-uniform",
                               "--report", rp, "-q")
        assert code == 0, err
        text = rp.read_text()
        assert "math" in text and ("per_step" in text or "Per step" in text)
    # the summary on the terminal
    code, _, err = main_rc(capsys, "filter", src, "-o", tmp_path / "y.parquet", "--drop-uniform")
    assert code == 0 and "uniform groups" in err


def test_filter_refusals(tmp_path, capsys):
    src = make_dump(tmp_path / "in.parquet")
    out = tmp_path / "o.parquet"
    code, _, err = main_rc(capsys, "filter", src, "-o", out)
    assert code == 2 and "--drop-uniform" in err
    code, _, err = main_rc(capsys, "filter", src, "-o", out, "--solve-rate", "0.9:0.1")
    assert code == 2 and "LO <= HI" in err
    code, _, err = main_rc(capsys, "filter", src, "-o", out, "--solve-rate", "half")
    assert code == 2 and "LO:HI" in err
    code, _, err = main_rc(capsys, "filter", src, "-o", out, "--drop-uniform", "--metric", "nope")
    assert code == 2 and "nope" in err
    code, _, err = main_rc(capsys, "filter", src, "-o", src, "--drop-uniform")
    assert code == 2 and "input" in err
    t = pq.read_table(src).drop_columns(["prompt_id"])
    pq.write_table(t, tmp_path / "noid.parquet")
    code, _, err = main_rc(capsys, "filter", tmp_path / "noid.parquet", "-o", out, "--drop-uniform")
    assert code == 2 and "prompt_id" in err
    assert not out.exists()


def test_run_with_drop_uniform_equals_run_on_the_filtered_rows(tmp_path, capsys):
    """DAPO: the advantages are those of a run on the kept rows alone (batch statistics included)."""
    src = make_dump(tmp_path / "in.parquet", seed=5)
    df = pq.read_table(src).to_pandas()
    # no NaN rewards for a GRPO run
    t = pq.read_table(src)
    t = t.set_column(t.schema.get_field_index("reward"), "reward",
                     pa.array(np.nan_to_num(df["reward"].to_numpy()), pa.float32()))
    pq.write_table(t, src)
    df = t.to_pandas()
    keep = pandas_keep(df, drop_uniform=True, min_size=2)
    kept = tmp_path / "kept.parquet"
    pq.write_table(t.filter(pa.array(keep)), kept)
    conf = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "--device", "cpu"]
    code, _, err = main_rc(capsys, "run", kept, "-o", tmp_path / "ref.parquet", *conf, "-q")
    assert code == 0, err
    code, out, err = main_rc(capsys, "run", src, "-o", tmp_path / "got.parquet", *conf, "--drop-uniform",
                             "--min-group-size", "2", "--json", "--chunk-rows", "7")
    assert code == 0, err
    rep = json.loads(out)
    got, ref = pq.read_table(tmp_path / "got.parquet"), pq.read_table(tmp_path / "ref.parquet")
    assert got.num_rows == int(keep.sum())
    for c in ("advantages", "returns", "prompt_id", "reward", "old_log_probs"):
        assert got.column(c).to_pylist() == ref.column(c).to_pylist()
    assert any("had not been sampled" in w for w in rep["warnings"])
    assert rep["filter"]["rows_dropped"] == int((~keep).sum()) and rep["filter"]["per_step"]
    assert rep["inputs"] == [str(src)]
    assert not [p for p in tmp_path.iterdir() if ".advcli-" in p.name]  # the temporary file is gone
    code, _, err = main_rc(capsys, "run", src, "-o", tmp_path / "side.parquet", *conf, "--drop-uniform",
                           "--output-mode", "sidecar")
    assert code == 2 and "row_index" in err
    code, _, err = main_rc(capsys, "run", src, "-o", src, *conf, "--drop-uniform")
    assert code == 2 and "input" in err


def test_group_decisions_pure():
    from advcli.figures.curate import group_decisions, make_spec

    g = np.array([0, 0, 1, 1, 1, 2, 3, 3])
    m = np.array([1, 1, 0, 1, 1, 0.5, np.nan, np.nan])
    d = group_decisions(g, m, make_spec(True, "0.5:0.7", 2))
    assert d["size"].tolist() == [2, 3, 1, 2]
    assert d["uniform"].tolist() == [True, False, True, True]
    assert d["drop_min_size"].tolist() == [False, False, True, False]
    assert d["drop_solve_rate"].tolist() == [True, False, False, True]
    assert d["keep"].tolist() == [False, True, False, False]


@pytest.mark.parametrize("flavor", [None, "verl", "verl@0.9.0", "verl@0.8.0", "verl@0.5.0", "skyrl"])
def test_drop_uniform_follows_the_trainers_dynamic_sampling(flavor):
    """--drop-uniform is advcli's rule (every row the same value, a group of one included) unless --flavor names a
    trainer whose dynamic sampling differs: verl drops a group only when it has more than one row and np.std of
    its values is 0 (v1/replay_buffer.py L295 @1dda039b): a group of one (verl's GRPO gives it its raw score)
    and one with a NaN are kept; SkyRL keeps a group only when np.std > 0 (trainer_utils.py L556 @a9564572): a
    NaN group is dropped. Both compute the std in float64: three rows of 0.1 have std 1.4e-17, not 0 (kept).
    verl before 0.9.0 ran the DAPO recipe's test, kept when ``std > 0 or len == 1`` (recipe/dapo/dapo_ray_trainer.py
    L258 @v0.7.0, L230 @v0.5.0; the verl-recipe submodule's from 0.7.1): a NaN group of two or more is dropped."""
    from advcli.figures.curate import group_decisions, make_spec

    # groups: [1, 1] | [0, 1] | [0.7] | [0.1 ×3] | [1, NaN] | [NaN, NaN] | [0.5 ×9]
    g = np.array([0, 0, 1, 1, 2, 3, 3, 3, 4, 4, 5, 5] + [6] * 9)
    m = np.array([1, 1, 0, 1, 0.7, 0.1, 0.1, 0.1, 1, np.nan, np.nan, np.nan] + [0.5] * 9)
    assert np.std([0.1, 0.1, 0.1]) > 0 and np.std([0.5] * 9) == 0  # numpy's own values, on which this rests
    uniform = group_decisions(g, m, make_spec(True, None, None, flavor=flavor))["drop_uniform"].tolist()
    want = {None: [True, False, True, True, False, True, True],
            "verl": [True, False, False, False, False, False, True],
            "verl@0.9.0": [True, False, False, False, False, False, True],
            "verl@0.8.0": [True, False, False, False, True, True, True],
            "verl@0.5.0": [True, False, False, False, True, True, True],
            "skyrl": [True, False, True, False, True, True, True]}[flavor]
    assert uniform == want
    # SkyRL's n_samples_per_prompt == 1: every group one row, every group kept
    ones = group_decisions(np.arange(3), np.array([1.0, 0.0, 1.0]), make_spec(True, None, None, flavor="skyrl"))
    assert not ones["drop_uniform"].any()


def test_run_drop_uniform_under_verl_keeps_a_group_of_one_with_its_score(tmp_path, capsys):
    """run --flavor verl --drop-uniform: verl's DAPO filter keeps a group of one, whose GRPO advantage is its
    score/(1 + 1e-6) (mean 0, std 1 for a lone row); advcli's own rule drops it."""
    rows = [("a", 1.0), ("a", 0.0), ("b", 0.7), ("c", 1.0), ("c", 1.0)]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": [p for p, _ in rows], "reward": pa.array([r for _, r in rows], pa.float32()),
                             "response_mask": [[1, 1]] * len(rows)}), src)
    out = tmp_path / "o.parquet"
    code, _, err = main_rc(capsys, "run", src, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                           "--drop-uniform")
    assert code == 0, err
    t = pq.read_table(out)
    assert t.column("prompt_id").to_pylist() == ["a", "a", "b"] and "uniform rule: verl's" in " ".join(err.split())
    assert t.column("advantages").to_pylist()[2] == pytest.approx([0.7 / (1 + 1e-6)] * 2, rel=1e-6)
    code, _, err = main_rc(capsys, "run", src, "-o", out, "--force", "--flavor", "advcli", "--drop-uniform")
    assert code == 0 and pq.read_table(out).column("prompt_id").to_pylist() == ["a", "a"], err


def test_help_example_works(tmp_path):
    """The first example of `advcli filter --help`, on the sample data, as a new user would run it."""
    import os
    import shlex

    from test_commands import ROOT, _example_lines, invoke

    line = _example_lines("filter")[0]
    args = [os.path.join(ROOT, a) if a.startswith("sample_data/") else a for a in shlex.split(line)[1:]]
    args = [str(tmp_path / a) if a.endswith(".parquet") and not os.path.isabs(a) else a for a in args]
    r = invoke(*args)
    assert r.returncode == 0, (line, r.stdout)
    assert "Examples" in invoke("audit", "--help").stdout


# ------------------------------------------------------------------------------- group health (part 2)
def _health_dump(tmp_path, seed=11):
    """make_dump without NaN rewards (a GRPO run needs numbers) plus a reward/acc component."""
    src = make_dump(tmp_path / "h.parquet", seed=seed)
    t = pq.read_table(src)
    r = np.nan_to_num(t.column("reward").to_numpy(zero_copy_only=False))
    t = t.set_column(t.schema.get_field_index("reward"), "reward", pa.array(r, pa.float32()))
    t = t.append_column("reward/acc", t.column("acc"))
    pq.write_table(t, src)
    return src, t.to_pandas()


def _pandas_block(df: pd.DataFrame, metric="reward") -> dict:
    g = df.groupby(["step", "prompt_id"], sort=False)[metric]
    uni = g.nunique(dropna=False) == 1
    size = g.size()
    usual = size.value_counts().idxmax()
    return {"groups": len(size), "rows": len(df), "uniform_groups": int(uni.sum()),
            "uniform_share": uni.mean(), "singleton_groups": int((size == 1).sum()),
            "partial_groups": int((size < usual).sum()), "group_mean_reward": g.mean().mean(),
            "solved_share": float((df[metric] > 0).sum() / df[metric].notna().sum())}


def test_group_health_in_stats_matches_pandas(tmp_path, capsys):
    src, df = _health_dump(tmp_path)
    code, out, err = main_rc(capsys, "stats", src, "--json")
    assert code == 0, err
    h = json.loads(out)["group_health"]
    want = _pandas_block(df)
    for k, v in want.items():
        assert h["overall"][k] == pytest.approx(v), k
    assert "zero_adv_token_share" not in h["overall"]  # a raw dump has no advantages
    assert h["binary_rewards"] is True
    # per step and per data source (a group's source: its first row's; here one source per group)
    for e in h["per_step"]:
        sub = df[df["step"] == e["step"]]
        for k, v in _pandas_block(sub).items():
            if k != "partial_groups":  # "partial" is against the whole run's usual size
                assert e[k] == pytest.approx(v), (e["step"], k)
    assert {e["source"] for e in h["per_source"]} == set(df["data_source"])
    for e in h["per_source"]:
        sub = df[df["data_source"] == e["source"]]
        assert e["rows"] == len(sub)
        assert e["uniform_groups"] == int((sub.groupby(["step", "prompt_id"])["reward"].nunique() == 1).sum())
    # mean group reward histogram: 0/1 rewards, 10 bins over [0, 1] (the last closed), groups per mean reward
    means = df.assign(r=df["reward"].astype(np.float64)).groupby(["step", "prompt_id"])["r"].mean().to_numpy()
    counts, _ = np.histogram(means, bins=10, range=(0.0, 1.0))
    assert h["group_mean_reward_histogram"]["counts"] == counts.tolist()
    sizes = df.groupby(["step", "prompt_id"]).size().value_counts().sort_index()
    assert h["group_sizes"]["sizes"] == sizes.index.tolist() and h["group_sizes"]["counts"] == sizes.tolist()
    assert any("singleton" in f for f in h["group_sizes"]["flags"])
    lens = df["response_mask"].map(len)
    solved = df["reward"] > 0
    assert h["length_by_outcome"]["solved"]["mean"] == pytest.approx(lens[solved].mean())
    assert h["length_by_outcome"]["unsolved"]["median"] == pytest.approx(lens[~solved].median())
    comp = {c["component"]: c for c in h["per_component"]}["reward/acc"]
    assert comp["uniform_groups"] == _pandas_block(df, "reward/acc")["uniform_groups"]


def test_group_health_in_run_and_in_the_html_report(tmp_path, capsys):
    src, df = _health_dump(tmp_path, seed=12)
    out = tmp_path / "o.parquet"
    code, stdout, err = main_rc(capsys, "run", src, "-o", out, "--flavor", "verl", "--set",
                                "algorithm.adv_estimator=grpo", "--device", "cpu", "--json")
    assert code == 0, err
    h = json.loads(stdout)["group_health"]
    o = pq.read_table(out).to_pandas()
    adv = np.concatenate(o["advantages"].to_numpy())
    m = np.concatenate(o["response_mask"].to_numpy()) != 0
    assert h["overall"]["zero_adv_token_share"] == pytest.approx(float((adv[m] == 0).mean()))
    assert h["overall"]["uniform_groups"] == _pandas_block(df)["uniform_groups"]
    # stats of the output: the same zero-advantage share; the HTML report plots group health
    rp = tmp_path / "s.html"
    code, stdout, err = main_rc(capsys, "stats", out, "--json", "--report", rp)
    assert code == 0, err
    assert json.loads(stdout)["group_health"]["overall"]["zero_adv_token_share"] == pytest.approx(
        h["overall"]["zero_adv_token_share"])
    html = rp.read_text()
    assert "<h2>Group health</h2>" in html and "mean 0/1 reward per group" in html and "solve rate" not in html
    assert "share of uniform groups by source" in html
    md = tmp_path / "s.md"
    code, _, err = main_rc(capsys, "stats", out, "-q", "--report", md)
    assert code == 0 and "## Group health" in md.read_text()
    code, _, err = main_rc(capsys, "stats", out)
    assert code == 0 and "group health" in err


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_group_health_row_path_equals_token_path(tmp_path, monkeypatch, estimator):
    """The zero-advantage counts of the row-constant path (one value per row) equal the token path's."""
    import advcli
    from advcli.pipeline.observe import RunObserver

    src, _ = _health_dump(tmp_path, seed=13)
    got = []
    for row_path in (True, False):
        monkeypatch.setattr(RunObserver, "ROW_PATH", row_path)
        res = advcli.run(src, None, flavor="verl", settings={"algorithm.adv_estimator": estimator}, chunk_rows=7,
                         device="cpu")
        got.append(res.group_health)
    assert got[0] == got[1] and got[0]["overall"]["zero_adv_token_share"] > 0


def test_a_run_with_a_group_filter_names_the_input_row_of_a_bad_value(tmp_path, capsys):
    """run --drop-uniform on a dump with a NaN reward in a kept group: the message names the input's row (11), not
    the row of the temporary file of kept rows (where the uniform groups before it were left out: row 3)."""
    rewards = [0, 0, 1, 1, 1, 1, 0, 1, 0.5, 0.5, 0, float("nan"), 1, 0]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": [i // 2 for i in range(14)], "reward": pa.array(rewards, pa.float32()),
                             "response_mask": [[1, 1]] * 14}), src)
    code, _, err = main_rc(capsys, "run", src, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                           "algorithm.adv_estimator=grpo", "--drop-uniform")
    assert code == 2 and f"{src}: column 'reward', row 11:" in err, err


def test_verls_seq_reward_metric_is_the_reward_column(tmp_path, capsys):
    """--metric seq_reward (verl's filter_groups.metric: Σ token_level_scores of a response, its reward) was
    refused as no column; it reads the reward column and says so. seq_final_reward (after the KL term) names the
    reward as its KL-free counterpart."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "a", "b", "b"], "reward": [1.0, 1.0, 0.0, 1.0],
                             "response_mask": [[1]] * 4}), src)
    code, _, err = main_rc(capsys, "filter", src, "-o", tmp_path / "o.parquet", "--drop-uniform", "--metric",
                           "seq_reward")
    assert code == 0 and "verl's Σ token_level_scores" in " ".join(err.split()), err
    assert pq.read_table(tmp_path / "o.parquet").column("prompt_id").to_pylist() == ["b", "b"]
    code, _, err = main_rc(capsys, "filter", src, "-o", tmp_path / "p.parquet", "--drop-uniform", "--metric",
                           "seq_final_reward")
    assert code == 2 and "seq_final_reward" in err and "no --metric" in err, err


@pytest.mark.parametrize("flavor, want", [
    ("verl", [False, False, True, False]),        # v1 replay buffer: len > 1 and np.std == 0 (NaN is not 0)
    ("verl@0.7.0", [True, True, True, False]),    # DAPO recipe: not (np.std > 0 or len == 1)
    ("skyrl", [True, True, True, True]),          # handle_filter_sampling: not np.std > 0 (one row: dropped)
    ("verl@0.3.0.post0", [True, False, True, True]),  # no dynamic sampling in verl yet: advcli's own rule
])
def test_drop_uniform_with_infinite_metrics_follows_np_std(flavor, want):
    """A group holding ±inf has np.std NaN, as one holding a NaN: the rules that keep a group only when
    np.std > 0 drop it (they kept it); verl's v1 rule keeps it. verl before 0.4.0 had no recipe/dapo."""
    from advcli.figures.curate import group_decisions, make_spec

    g = np.array([0, 0, 1, 1, 2, 2, 3])  # [inf, inf] | [-inf, 1] | [1, 1] | [0.5]
    m = np.array([np.inf, np.inf, -np.inf, 1.0, 1.0, 1.0, 0.5])
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.std([np.inf, np.inf])) and np.isnan(np.std([-np.inf, 1.0]))  # numpy's own values
    assert group_decisions(g, m, make_spec(True, None, None, flavor=flavor))["drop_uniform"].tolist() == want
