"""--engine ray gives the local engine's run report: metrics (quantiles included), per-step figures,
histograms, group health and diagnostics, equal as JSON values (skipped without Ray)."""
from __future__ import annotations

import importlib.util

import pyarrow.parquet as pq
import pytest
from _services import local_ray, local_ray_cluster, s3_keys
from conftest import report_of, two_files

HAVE_RAY = importlib.util.find_spec("ray") is not None
pytestmark = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (pip install 'advcli[ray]')")


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    from advcli.sample import make_table

    return two_files(make_table(1200, 6, 2, 40, 7, shuffle=True, steps=3), tmp_path_factory.mktemp("paritydump"),
                     700, 150)


def _both(paths, tmp_path, flavor, settings, **kw):
    from advcli.engines.ray_engine import run_ray
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    cfg, native = resolve(flavor, settings)
    loc = run_pipeline(paths, str(tmp_path / "local") + "/", cfg, flavor=flavor, native=native, chunk_rows=64,
                       device="cpu")
    got = run_ray(paths, str(tmp_path / "ray"), cfg, flavor=flavor, native=native, device="cpu", chunk_rows=37,
                  override_num_blocks=7, **kw)
    return report_of(loc), report_of(got)


def _assert_same(loc: dict, got: dict):
    for key in loc:
        assert got[key] == loc[key], key


@pytest.mark.parametrize("flavor,settings", [
    # row-level advantages: exact quantiles and histograms from the rows
    ("verl", [("algorithm.adv_estimator", "grpo")]),
    # token-level advantages (GAE, whitened, adaptive KL in the reward): the token sample and the
    # streamed histogram, KL clamp diagnostics, per-step β
    ("verl", [("algorithm.adv_estimator", "gae"), ("algorithm.use_kl_in_reward", True),
              ("algorithm.kl_penalty", "low_var_kl"), ("algorithm.kl_ctrl.type", "adaptive"),
              ("algorithm.kl_ctrl.kl_coef", 0.05), ("algorithm.kl_ctrl.target_kl", 0.01),
              ("algorithm.kl_ctrl.horizon", 500)]),
])
def test_report_equals_local(ray_session, dump, tmp_path, flavor, settings):
    loc, got = _both(dump, tmp_path, flavor, settings)
    assert loc["histograms"]["advantages"]["counts"]  # the figures are there to compare
    assert any(k.startswith("critic/advantages/p") for k in loc["metrics"])
    _assert_same(loc, got)


def test_report_equals_local_with_small_statistics(ray_session, dump, tmp_path, monkeypatch):
    """A token sample and histogram seed far smaller than the run (the sampled, non-exact path)."""
    from advcli.figures import collector

    real = collector.FigureCollector.__init__

    def small(self, num_rows, **kw):
        real(self, num_rows, **{**kw, "reservoir": 300})

    monkeypatch.setattr(collector.FigureCollector, "__init__", small)  # the driver builds the observer
    loc, got = _both(dump, tmp_path, "verl", [("algorithm.adv_estimator", "gae")])
    assert loc["metrics"]["critic/advantages/quantiles_exact"] is False
    _assert_same(loc, got)


@pytest.mark.parametrize("flavor,kind", [("nemo", "groups_of_one"), ("roll", "dropped_rewards")])
def test_diagnostics_and_warnings(ray_session, tmp_path, flavor, kind):
    """Groups of one (a row-level diagnostic, found on the driver) and token scores on mask=0 tokens
    (token level, found chunk by chunk on the workers' results): counts, examples in row order and
    the warning line, as the local engine gives them."""
    from advcli.sample import make_table

    t = make_table(300, 1, 2, 20, 3, shuffle=False, steps=1)
    p = str(tmp_path / "ones.parquet")
    pq.write_table(t, p, row_group_size=50)
    loc, got = _both([p], tmp_path, flavor, [])
    assert [d["count"] for d in loc["diagnostics"] if d["kind"] == kind][0] > 0
    _assert_same(loc, got)



def test_sidecar_output_equals_local(ray_session, dump, tmp_path):
    """--output-mode sidecar: row_index (per input file), the keys and the new columns, the local
    engine's sidecars read in input order; the same provenance metadata."""
    import pyarrow as pa

    from advcli.engines.ray_engine import run_ray
    from advcli.engines.ray_output import read_output
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    cfg, native = resolve("verl", [("algorithm.adv_estimator", "gae")])
    out_l = tmp_path / "local"
    run_pipeline(dump, str(out_l) + "/", cfg, flavor="verl", native=native, chunk_rows=64, device="cpu",
                 output_mode="sidecar")
    local = pa.concat_tables([pq.read_table(out_l / p.rsplit("/", 1)[1]) for p in dump])
    run_ray(dump, str(tmp_path / "ray"), cfg, flavor="verl", native=native, device="cpu", chunk_rows=37,
            override_num_blocks=7, rows_per_file=100, output_mode="sidecar")
    got = read_output(str(tmp_path / "ray"))
    assert got.schema.names[0] == "row_index" and "advantages" in got.schema.names
    assert "responses" not in got.schema.names  # only the sidecar's columns
    assert got.equals(local)
    assert got.schema.metadata[b"advcli"] == local.schema.metadata[b"advcli"]
    assert got.schema.metadata[b"advcli_sidecar"] == local.schema.metadata[b"advcli_sidecar"]
    assert got["row_index"].to_pylist() == list(range(700)) + list(range(500))


def test_cli_sidecar_on_ray(ray_session, dump, tmp_path):
    from typer.testing import CliRunner

    from advcli.cli import app
    from advcli.engines.ray_output import read_output

    out = tmp_path / "side"
    r = CliRunner().invoke(app, ["run", dump[0], "-o", str(out), "--engine", "ray", "--output-mode", "sidecar",
                                 "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "--device", "cpu",
                                 "--quiet"])
    assert r.exit_code == 0, r.output
    assert read_output(str(out)).schema.names[0] == "row_index"


# ------------------------------------------------------------------ object storage (a local S3 server)
def _put_dump(fs, paths, prefix):
    for p in paths:
        with open(p, "rb") as src, fs.open_output_stream(f"bkt/{prefix}/{p.rsplit('/', 1)[1]}") as out:
            out.write(src.read())
    return f"s3://bkt/{prefix}/"


def _keys(fs, prefix="bkt"):
    return s3_keys(fs, prefix)


@pytest.fixture(scope="module")
def s3_ray(s3):
    """The Ray instance for the S3 tests, started after the server's variables are set."""
    with local_ray():
        yield s3


def test_s3_input_and_output_equal_local(s3_ray, dump, tmp_path):
    """s3:// inputs (a prefix of two files, read ranged by the workers) and an s3:// output prefix:
    the local engine's rows and report; no temporary key left; --force to replace."""
    import pyarrow as pa

    from advcli.engines.ray_engine import run_ray
    from advcli.engines.ray_output import read_output
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    fs = s3_ray
    src = _put_dump(fs, dump, "dump")
    cfg, native = resolve("verl", [("algorithm.adv_estimator", "grpo")])
    loc = run_pipeline(dump, str(tmp_path / "local") + "/", cfg, flavor="verl", native=native, chunk_rows=64,
                       device="cpu")
    local = pa.concat_tables([pq.read_table(tmp_path / "local" / p.rsplit("/", 1)[1]) for p in dump])
    got = run_ray([src], "s3://bkt/out", cfg, flavor="verl", native=native, device="cpu", chunk_rows=50,
                  rows_per_file=300)
    table = read_output("s3://bkt/out")
    assert table.equals(local)
    assert table.schema.metadata[b"advcli"] == local.schema.metadata[b"advcli"]
    assert report_of(got) == {**report_of(loc), "warnings": report_of(got)["warnings"]}
    keys = _keys(fs)
    assert [k for k in keys if not k.startswith(("bkt/dump/", "bkt/out/"))] == []  # no temporary key
    assert len([k for k in keys if k.startswith("bkt/out/part-")]) >= 2
    with pytest.raises(AdvcliError, match="already exists"):
        run_ray([src], "s3://bkt/out", cfg, flavor="verl", native=native, device="cpu")
    run_ray([src], "s3://bkt/out", cfg, flavor="verl", native=native, device="cpu", force=True)
    assert read_output("s3://bkt/out").equals(local)  # replaced: the old, smaller parts are gone
    assert [k for k in _keys(fs) if not k.startswith(("bkt/dump/", "bkt/out/"))] == []


def test_s3_bad_input_leaves_nothing(s3_ray, tmp_path):
    """A bad value found by a worker: the local engine's message, and no output nor temporary key."""
    import pyarrow as pa

    from advcli.engines.ray_engine import run_ray
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve
    from advcli.sample import make_table

    t = make_table(200, 4, 2, 20, 5, shuffle=False)
    vals = t.column("values").to_pylist()
    vals[150][1] = float("nan")
    t = t.set_column(t.schema.get_field_index("values"), "values", pa.array(vals, type=t.schema.field("values").type))
    p = str(tmp_path / "bad.parquet")
    pq.write_table(t, p, row_group_size=50)
    fs = s3_ray
    src = _put_dump(fs, [p], "baddump")
    cfg, native = resolve("verl", [("algorithm.adv_estimator", "gae")])
    with pytest.raises(AdvcliError, match=r"s3://bkt/baddump/bad.parquet.*'values', row 150, position 1"):
        run_ray([src], "s3://bkt/badout", cfg, flavor="verl", native=native, device="cpu", chunk_rows=40)
    assert [k for k in _keys(fs) if "badout" in k] == []


# ------------------------------------------------------------------ a multi-node cluster on this machine
@pytest.fixture()
def ray_cluster(s3):
    """A head node (no CPU for tasks: the driver's node) and two worker nodes of one CPU each, separate
    raylets, started after the S3 variables are set."""
    with local_ray_cluster(block_size=32 * 1024) as c:
        yield c


def _four_files(fs, tmp_path, prefix):
    from advcli.sample import make_table

    t = make_table(1000, 5, 2, 30, 11, shuffle=True, steps=2)
    paths = []
    for i, (a, b) in enumerate([(0, 180), (180, 430), (430, 700), (700, 1000)]):
        p = str(tmp_path / f"part{i}.parquet")
        pq.write_table(t.slice(a, b - a), p, row_group_size=60)
        paths.append(p)
    return paths, _put_dump(fs, paths, prefix)


def test_multinode_cluster_s3_equals_local(ray_cluster, tmp_path):
    """Head + two worker nodes; four files read from the S3 server by the workers (the row pass on
    the workers too, as on any multi-node cluster); output written back there: the local engine's
    rows and report."""
    import ray

    from advcli.engines.ray_engine import run_ray
    from advcli.engines.ray_output import read_output
    from advcli.flavors import resolve
    from advcli.io import remote
    from advcli.pipeline import run_pipeline

    fs = remote.filesystem_of("s3://bkt/x")[0]
    assert sum(1 for n in ray.nodes() if n.get("Alive")) == 3
    paths, src = _four_files(fs, tmp_path, "mn")
    cfg, native = resolve("verl", [("algorithm.adv_estimator", "gae"), ("algorithm.use_kl_in_reward", True),
                                   ("algorithm.kl_penalty", "k2")])
    loc = run_pipeline(paths, str(tmp_path / "local") + "/", cfg, flavor="verl", native=native, chunk_rows=64,
                       device="cpu")
    import pyarrow as pa

    local = pa.concat_tables([pq.read_table(tmp_path / "local" / f"part{i}.parquet") for i in range(4)])
    got = run_ray([src], "s3://bkt/mn-out", cfg, flavor="verl", native=native, device="cpu", chunk_rows=45,
                  rows_per_file=200)
    assert read_output("s3://bkt/mn-out").equals(local)
    assert report_of(got) == report_of(loc)



# ------------------------------------------------------------------ rollout correction (verl)
RC = "algorithm.rollout_correction."


@pytest.fixture(scope="module")
def offpolicy_dump(tmp_path_factory):
    """Two files with a rollout_log_probs column: old_log_probs + noise (some tokens far off, so
    weights are truncated and rows rejected), groups scattered inside 3 steps."""
    import numpy as np
    import pyarrow as pa

    from advcli.sample import make_table

    d = tmp_path_factory.mktemp("rcdump")
    t = make_table(1200, 6, 2, 40, 7, shuffle=True, steps=3)
    old = t.column("old_log_probs").combine_chunks()
    rng = np.random.default_rng(3)
    flat = old.values.to_numpy(zero_copy_only=False)
    noise = rng.normal(0.0, 0.3, len(flat)) * (1 + 4 * (rng.random(len(flat)) < 0.02))
    roll = pa.ListArray.from_arrays(old.offsets, pa.array((flat + noise).astype(np.float32)))
    return two_files(t.append_column("rollout_log_probs", roll), d, 700, 150)


def _local_and_ray(flavor: str, settings: list, dump: list, tmp_path):
    """The same resolved run by the local engine (chunks of 64) and on Ray (chunks of 37, 7 blocks, 300 rows a
    file): (local result, local output table, Ray result, Ray output table)."""
    import pyarrow as pa

    from advcli.engines.ray_engine import run_ray
    from advcli.engines.ray_output import read_output
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    cfg, native = resolve(flavor, settings)
    loc = run_pipeline(dump, str(tmp_path / "local") + "/", cfg, flavor=flavor, native=native, chunk_rows=64,
                       device="cpu")
    local = pa.concat_tables([pq.read_table(tmp_path / "local" / p.rsplit("/", 1)[1]) for p in dump])
    got = run_ray(dump, str(tmp_path / "ray"), cfg, flavor=flavor, native=native, device="cpu", chunk_rows=37,
                  override_num_blocks=7, rows_per_file=300)
    return loc, local, got, read_output(str(tmp_path / "ray"))


@pytest.mark.parametrize("settings", [
    # token-level truncated IS (TIS), batch-normalised per step; GRPO
    [("algorithm.adv_estimator", "grpo"), (RC + "rollout_is", "token"), (RC + "rollout_is_threshold", 2.0),
     (RC + "rollout_is_batch_normalize", True)],
    # sequence-level IS and sequence-level rejection (two criteria); GAE: the whitening moments pass
    # sees the corrected mask
    [("algorithm.adv_estimator", "gae"), (RC + "rollout_is", "sequence"), (RC + "rollout_is_threshold", 3.0),
     (RC + "rollout_rs", "seq_max_k3,seq_mean_k2"), (RC + "rollout_rs_threshold", "0.5,0.1")],
    # verl 0.7.0's correction: rejection by the geometric-mean ratio, the per-token veto, the sequence batch mean
    [("algorithm.adv_estimator", "grpo"), ("advcli.rollout_corr_api", "0.7.0"), (RC + "rollout_is", "sequence"),
     (RC + "rollout_is_threshold", 3.0), (RC + "rollout_is_batch_normalize", True), (RC + "rollout_rs", "geometric"),
     (RC + "rollout_rs_threshold", 1.2), (RC + "rollout_token_veto_threshold", 0.3)],
], ids=["token_tis_grpo", "seq_rs_gae", "verl_0_7_0_geometric_veto"])
def test_rollout_correction_equals_local(ray_session, offpolicy_dump, tmp_path, settings):
    """verl's rollout correction on Ray: the local engine's rows (rollout_is_weights,
    response_mask_after_rs, advantages), and its report (rollout_corr/* per step and overall, the
    weights' histogram), equal."""
    loc, local, got, table = _local_and_ray("verl", settings, offpolicy_dump, tmp_path)
    assert "response_mask_after_rs" in table.column_names
    kept = local.column("response_mask_after_rs").combine_chunks().values.to_numpy()
    assert 0 < kept.sum() < len(kept) or "rollout_rs" not in str(settings)  # rows were rejected
    assert table.equals(local)
    assert table.schema.metadata[b"advcli"] == local.schema.metadata[b"advcli"]
    rl, rg = report_of(loc), report_of(got)
    assert any(k.startswith("rollout_corr/") for k in rl["metrics"])
    assert any(k.startswith("rollout_corr/") for k in rl["per_step"][1])
    if "rollout_is_weights" in table.column_names:
        assert rl["histograms"]["rollout_is_weights"]["counts"]
    _assert_same(rl, rg)


def test_verl_0_6_0_weight_quantiles_equal_local(ray_session, offpolicy_dump, tmp_path):
    """verl 0.6.0's mismatch/rollout_is_p25 ... p99 on Ray: the workers send each row's weights, the driver takes
    each step's quantiles in the local engine's order: the same figures per step and overall."""
    loc, local, got, table = _local_and_ray("verl@0.6.0", [("algorithm.adv_estimator", "grpo"),
                                                           ("algorithm.rollout_is_threshold", 2.0)],
                                            offpolicy_dump, tmp_path)
    rl, rg = report_of(loc), report_of(got)
    names = [f"mismatch/rollout_is_p{q}" for q in (25, 50, 75, 95, 99)]
    assert all(n in rl["per_step"][1] for n in names) and all(n in rl["metrics"] for n in names)
    assert table.equals(local)
    _assert_same(rl, rg)


@pytest.mark.parametrize("settings", [
    [("algo.advantage.is_correction_level", "seq"), ("algo.advantage.is_correction_threshold", [0.8, 1.25])],
    [("algo.advantage.is_correction_level", "token"), ("algo.advantage.is_correction_mode", "clip")],
], ids=["seq_mask", "token_clip"])
def test_openrlhf_correction_equals_local(ray_session, offpolicy_dump, tmp_path, settings):
    """OpenRLHF's IS correction on Ray (reinforce: the step whitening sees the input mask): the local engine's
    rollout_is_weights, response_mask_after_rs and advantages, and its vllm_kl / is_filter_ratio, equal."""
    loc, local, got, table = _local_and_ray("openrlhf", [("algo.advantage.estimator", "reinforce"),
                                                         ("algo.kl.init_coef", 0.0), *settings], offpolicy_dump,
                                            tmp_path)
    assert {"rollout_is_weights", "response_mask_after_rs"} <= set(table.column_names)
    assert table.equals(local)
    rl, rg = report_of(loc), report_of(got)
    assert 0 < rl["metrics"]["is_filter_ratio"] < 1 and "vllm_kl" in rl["per_step"][1]
    _assert_same(rl, rg)


@pytest.mark.parametrize("release", ["0.6.4", "0.7.0"])
def test_openrlhf_replay_buffer_whitening_equals_local(ray_session, dump, tmp_path, release):
    """OpenRLHF before 0.7.1 whitens with a mean over the positions its replay buffer holds (a fourth moment sum,
    merged from the workers; 0.6.4 writes 0 beyond a row's first Σm positions): Ray's output equals the local
    engine's, on a dump with masked spans inside rows and masked tails."""
    loc, local, got, table = _local_and_ray(f"openrlhf@{release}", [("algo.advantage.estimator", "reinforce"),
                                                                    ("algo.kl.init_coef", 0.0)], dump, tmp_path)
    assert table.equals(local)


USER_FILE = '''import advcli


@advcli.estimator(level="row")
def centred(rewards, group):
    """A_i = r_i minus the mean reward of its group"""
    import torch

    n = torch.zeros(int(group.max()) + 1, dtype=rewards.dtype).index_add_(0, group, torch.ones_like(rewards))
    s = torch.zeros_like(n).index_add_(0, group, rewards)
    return rewards - (s / n)[group]
'''


@pytest.mark.parametrize("which", ["user_file", "codapo"])
def test_user_file_estimator_and_row_token_means_equal_local(ray_session, dump, tmp_path, which):
    """Two estimators with their own way to the workers: a user function from a file (``./file.py:fn``: the
    worker processes cannot import the module advcli made of the file; the function travels by value) and
    codapo (row means of old_log_probs over the mask, an accuracy column). Output columns and report equal
    the local engine's."""
    import pyarrow.dataset as ds

    if which == "user_file":
        (tmp_path / "centred_adv.py").write_text(USER_FILE)
        settings = [("advcli.estimator", f"{tmp_path / 'centred_adv.py'}:centred")]
    else:
        settings = [("advcli.estimator", "codapo")]
    loc, got = _both(dump, tmp_path, "verl", settings)
    _assert_same(loc, got)
    a = ds.dataset(str(tmp_path / "local"), format="parquet").to_table()
    b = ds.dataset(str(tmp_path / "ray"), format="parquet").to_table()
    assert a.column_names == b.column_names and "advantages" in a.column_names
    assert [c for c in a.column_names if not a.column(c).equals(b.column(c))] == []
    if which == "user_file":  # the function ran: A_i = r_i − mean of its group (step, prompt_id) on mask=1 tokens
        import numpy as np

        t = a.to_pandas()
        want = t["reward"] - t.groupby(["step", "prompt_id"])["reward"].transform("mean")
        for adv, mask, w in zip(t["advantages"], t["response_mask"], want):
            np.testing.assert_allclose(np.asarray(adv)[np.asarray(mask) == 1], w, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    """Steps interleaved in row order (every read shard holds rows of every step) and the same prompt ids
    in every step, first seen in a different order in each: the whole dump numbers its groups by (step,
    first appearance of the id over the whole dump), a step alone by its own first appearance."""
    import numpy as np
    import pyarrow as pa

    from advcli.sample import make_table

    t = make_table(900, 6, 2, 30, 5, shuffle=True, steps=3)
    steps, ids = t["step"].to_numpy(), t["prompt_id"].to_pylist()
    names = []
    for s in sorted(set(steps.tolist())):  # ids renamed p0, p1, ... in each step, reversed in odd steps
        rows = np.flatnonzero(steps == s)
        seen = list(dict.fromkeys(ids[r] for r in rows))
        rank = {v: (len(seen) - 1 - i if s % 2 else i) for i, v in enumerate(seen)}
        names.append({int(r): f"p{rank[ids[r]]}" for r in rows})
    pid = [next(n[r] for n in names if r in n) for r in range(t.num_rows)]
    t = t.set_column(t.schema.get_field_index("prompt_id"), "prompt_id", pa.array(pid))
    t = t.take(pa.array(np.random.default_rng(3).permutation(t.num_rows)))
    d = tmp_path_factory.mktemp("interleaved")
    p = str(d / "i.parquet")
    pq.write_table(t, p, row_group_size=100)
    return [p]


@pytest.fixture(scope="module")
def stepless(tmp_path_factory):
    """No step column: the whole dump is one step (one worker task resolves it)."""
    from advcli.sample import make_table

    t = make_table(600, 6, 2, 30, 8, shuffle=True, steps=1)
    assert "step" not in t.column_names
    p = str(tmp_path_factory.mktemp("stepless") / "s.parquet")
    pq.write_table(t, p, row_group_size=100)
    return [p]


@pytest.mark.parametrize("which,flavor,settings", [
    ("contiguous", "verl", [("algorithm.adv_estimator", "grpo")]),
    ("stepless", "verl", [("algorithm.adv_estimator", "grpo")]),
    ("interleaved", "verl", [("algorithm.adv_estimator", "grpo")]),
    # the adaptive controller's β carried from step to step (the row scores hold β·Σ KL)
    ("interleaved", "advcli", [("estimator.name", "rloo"), ("kl.in_reward", True), ("kl.estimator", "k2"),
                               ("kl.controller", "adaptive"), ("kl.coef", 0.05), ("kl.target", 0.01),
                               ("kl.horizon", 500)]),
    # verl sums those row scores on its step's token grid (kl.score_sum=left_aligned): not resolved one step at
    # a time, the whole dump on the driver, with the same rows
    ("interleaved", "verl", [("algorithm.adv_estimator", "rloo"), ("algorithm.use_kl_in_reward", True),
                             ("algorithm.kl_penalty", "k2"), ("algorithm.kl_ctrl.type", "adaptive"),
                             ("algorithm.kl_ctrl.kl_coef", 0.05), ("algorithm.kl_ctrl.target_kl", 0.01),
                             ("algorithm.kl_ctrl.horizon", 500)]),
    ("contiguous", "nemo", []),
])
def test_per_step_driver_equals_local(ray_session, dump, interleaved, stepless, tmp_path, monkeypatch, which, flavor,
                                      settings):
    """The row pass on the workers and the driver resolving one step at a time (advcli.engines.ray_steps):
    the output rows and the report are the local engine's, whether a step's rows are contiguous or spread
    over every shard."""
    from advcli.engines import ray_steps
    from advcli.engines.ray_output import read_output

    calls = []
    real = ray_steps.resolve_steps
    monkeypatch.setattr(ray_steps, "resolve_steps", lambda *a, **k: calls.append(1) or real(*a, **k))
    paths = {"contiguous": dump, "interleaved": interleaved, "stepless": stepless}[which]
    loc, got = _both(paths, tmp_path, flavor, settings, row_pass="workers")
    grid_summed = ("algorithm.use_kl_in_reward", True) in settings
    assert calls == ([] if grid_summed else [1])  # the per-step path ran (where it can)
    _assert_same(loc, got)
    import pyarrow as pa

    local = pa.concat_tables([pq.read_table(str(tmp_path / "local" / p.rsplit("/", 1)[1])) for p in paths])
    ray_out = read_output(str(tmp_path / "ray"))
    for name in ("advantages", "returns"):
        assert ray_out[name].equals(local[name]), name
    if len(settings) > 2:
        assert len({s["kl_coef"] for s in got["per_step"]}) == 3  # the controller moved: the carry ran


def test_per_step_driver_error_names_the_global_row(ray_session, tmp_path, monkeypatch):
    """A row refused while the steps are resolved (no mask=1 token for the reward to sit on, with
    reward.unplaced=error) is named by its row in the input, as the local engine names it, not by its
    place in its step; exit 2 and nothing written."""
    import pyarrow as pa

    from advcli.engines.ray_engine import run_ray
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline
    from advcli.sample import make_table

    t = make_table(600, 6, 2, 20, 9, shuffle=True, steps=3)
    bad = 437  # in the last step, far from its first row
    assert t["step"][bad].as_py() == max(t["step"].to_pylist())
    masks = t["response_mask"].to_pylist()
    masks[bad] = [0] * len(masks[bad])
    t = t.set_column(t.schema.get_field_index("response_mask"), "response_mask",
                     pa.array(masks, type=t.schema.field("response_mask").type))
    p = str(tmp_path / "d.parquet")
    pq.write_table(t, p, row_group_size=100)
    cfg, native = resolve("advcli", [("estimator.name", "grpo"), ("reward.unplaced", "error"),
                                     ("reward.placement", "last_valid")])
    with pytest.raises(AdvcliError) as loc:
        run_pipeline([p], str(tmp_path / "local.parquet"), cfg, flavor="advcli", native=native, device="cpu")
    from advcli.engines import ray_steps

    calls = []
    real = ray_steps.resolve_steps
    monkeypatch.setattr(ray_steps, "resolve_steps", lambda *a, **k: calls.append(1) or real(*a, **k))
    with pytest.raises(AdvcliError) as got:
        run_ray([p], str(tmp_path / "ray"), cfg, flavor="advcli", native=native, device="cpu", chunk_rows=37,
                row_pass="workers")
    assert calls == [1]  # the per-step path
    assert f"row {bad} has no mask=1 token" in loc.value.message
    assert got.value.message == loc.value.message
    assert not (tmp_path / "ray").exists()


@pytest.mark.parametrize("row_pass", ["driver", "workers"])
def test_an_empty_response_under_skyrl_is_refused_by_either_row_pass(ray_session, tmp_path, row_pass):
    """SkyRL stops on an empty response with a response-level reward (per_token_reward[-1] of an empty list,
    skyrl/train/trainer.py L1105 @a9564572): the Ray engine refuses it with the local engine's message, by the
    driver's row pass and by the per-step driver, naming the row by its place in the input; nothing written."""
    import pyarrow as pa

    from advcli.engines.ray_engine import run_ray
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline
    from advcli.sample import make_table

    t = make_table(600, 6, 2, 20, 9, shuffle=True, steps=3)
    bad = 437
    lists = {c: t[c].to_pylist() for c in t.column_names if pa.types.is_list(t.schema.field(c).type)}
    for c, values in lists.items():
        values[bad] = []
        t = t.set_column(t.schema.get_field_index(c), c, pa.array(values, type=t.schema.field(c).type))
    p = str(tmp_path / "d.parquet")
    pq.write_table(t, p, row_group_size=100)
    cfg, native = resolve("skyrl", [])
    with pytest.raises(AdvcliError) as loc:
        run_pipeline([p], str(tmp_path / "local.parquet"), cfg, flavor="skyrl", native=native, device="cpu")
    with pytest.raises(AdvcliError) as got:
        run_ray([p], str(tmp_path / "ray"), cfg, flavor="skyrl", native=native, device="cpu", chunk_rows=37,
                row_pass=row_pass)
    assert f"row {bad} is an empty response (0 tokens; 1 such rows)" in loc.value.message
    assert got.value.message == loc.value.message
    assert not (tmp_path / "ray").exists() and not (tmp_path / "local.parquet").exists()


def test_per_step_driver_estimator_error_names_the_input_row(ray_session, tmp_path):
    """An estimator's refusal raised while a step is resolved in a worker task (verl grpo_passk: a row alone
    in its group) comes back as the one message the local engine gives, the row named by its place in the
    input (not in its step), without Ray's traceback; nothing written."""
    import pyarrow as pa

    from advcli.engines.ray_engine import run_ray
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline
    from advcli.sample import make_table

    t = make_table(600, 6, 2, 20, 9, shuffle=True, steps=3)
    alone = 470  # in the last step: given a prompt id of its own
    ids = t["prompt_id"].to_pylist()
    ids[alone] = "alone"
    t = t.set_column(t.schema.get_field_index("prompt_id"), "prompt_id", pa.array(ids))
    p = str(tmp_path / "d.parquet")
    pq.write_table(t, p, row_group_size=100)
    cfg, native = resolve("verl", [("algorithm.adv_estimator", "grpo_passk")])
    with pytest.raises(AdvcliError) as loc:
        run_pipeline([p], str(tmp_path / "local.parquet"), cfg, flavor="verl", native=native, device="cpu")
    with pytest.raises(AdvcliError) as got:
        run_ray([p], str(tmp_path / "ray"), cfg, flavor="verl", native=native, device="cpu", chunk_rows=37,
                row_pass="workers")
    assert f"row {alone} is alone in its group" in loc.value.message
    assert str(got.value) == str(loc.value)
    assert not (tmp_path / "ray").exists()


def test_positional_fallback_diagnostics_equal_local(ray_session, tmp_path, sample_path):
    """slime's whole-step fallback (a step of 189 rows is not whole groups of 8: one group of all its rows):
    the block sizes the grouping learns are the run's state, which the statistics read on the driver's
    path too; the report's reward-normalisation check then finds the group the local engine finds (the Ray
    observer once read the group size instead: no float32_cancellation item)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    t = pq.read_table(sample_path)
    t = t.take(pc.sort_indices(t, [("step", "ascending"), ("prompt_id", "ascending")]))
    t = t.take(pa.array(np.r_[0:381]))  # step 1 loses its last 3 rows
    p = str(tmp_path / "short.parquet")
    pq.write_table(t, p, row_group_size=64)
    loc, got = _both([p], tmp_path, "slime", [("n_samples_per_prompt", 8)])
    assert any("normalised as ONE group" in w for w in loc["warnings"])
    assert [d["count"] for d in loc["diagnostics"] if d["kind"] == "float32_cancellation"] == [1]
    _assert_same(loc, got)


@pytest.mark.parametrize("settings", [[("estimator.name", "grpo")], [("estimator.name", "gae")]])
def test_workers_row_pass_checks_every_token_column(ray_session, tmp_path, settings):
    """With the row pass on the workers (the per-step driver for grpo; the whole dump's table for gae), a
    token column the math does not read but the dump holds (values, one token short in row 5) is refused as
    the local engine refuses it, and nothing is written. The driver's probe of the row pass (0 rows) once
    marked every column checked, so the workers skipped these checks and the grpo run succeeded (gae reads
    values in its token passes, which checked them)."""
    import pyarrow as pa

    from advcli.engines.ray_engine import run_ray
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline
    from advcli.sample import make_table

    t = make_table(120, 6, 2, 20, 5, shuffle=False, steps=2)
    values = t["values"].to_pylist()
    values[5] = values[5][:-1]
    t = t.set_column(t.schema.get_field_index("values"), "values", pa.array(values, type=t.schema.field("values").type))
    p = str(tmp_path / "d.parquet")
    pq.write_table(t, p, row_group_size=40)
    cfg, native = resolve("advcli", settings + [("reward.placement", "last_valid")])
    with pytest.raises(AdvcliError) as loc:
        run_pipeline([p], str(tmp_path / "local.parquet"), cfg, flavor="advcli", native=native, device="cpu")
    assert "row 5: column 'values'" in loc.value.message
    with pytest.raises(AdvcliError) as got:
        run_ray([p], str(tmp_path / "ray"), cfg, flavor="advcli", native=native, device="cpu", chunk_rows=37,
                row_pass="workers")
    assert got.value.message == loc.value.message
    assert not (tmp_path / "ray").exists()


@pytest.mark.parametrize("row_pass", ["driver", "workers"])
@pytest.mark.parametrize("batch_normalize", [False, True])
def test_skyrl_0_1_0_step_wise_equals_local(ray_session, tmp_path, monkeypatch, batch_normalize, row_pass):
    """SkyRL 0.1.0's step-wise copy (each turn gets the last step's padded row: 0 from its length on) on Ray: the
    row table carries each row's last-step length to the workers; the same advantages as the local engine,
    with the row pass on the driver or on the workers (the per-step driver makes each step's batch-normalisation
    sums, the grid total of the copied padding cells included, in the task that resolves the step)."""
    monkeypatch.setenv("ADVCLI_RAY_ROW_PASS", row_pass)
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "flavors"))
    from test_release_skyrl_010_step_wise import _write

    import advcli
    from advcli.engines.ray_output import read_output

    src = _write(str(tmp_path / "in.parquet"))
    sets = {"generator.step_wise_trajectories": True, "trainer.algorithm.advantage_batch_normalize": batch_normalize}
    loc = advcli.run(src, str(tmp_path / "a.parquet"), flavor="skyrl@0.1.0", settings=sets, device="cpu", chunk_rows=3)
    got = advcli.run(src, str(tmp_path / "b"), flavor="skyrl@0.1.0", settings=sets, device="cpu", chunk_rows=3,
                     engine="ray")
    assert read_output(str(tmp_path / "b")).column("advantages").to_pylist() == \
        pq.read_table(str(tmp_path / "a.parquet")).column("advantages").to_pylist()
    assert [w for w in got.warnings if "SkyRL 0.1.0" in w] == [w for w in loc.warnings if "SkyRL 0.1.0" in w]
