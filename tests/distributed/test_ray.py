"""--engine ray: the same outputs as the local engine (rows, order, columns, values, metadata).

The Ray tests start one local Ray instance for the module (``ray_session``, ~3 s) and
are skipped when Ray is not installed (``pip install 'advcli[ray]'``). Inputs are generated dumps
with groups scattered inside steps, a step column, two input files and small read blocks and
batches, so every group and step statistic spans blocks, batches and files.
"""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import two_files

from advcli.errors import AdvcliError

HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (pip install 'advcli[ray]')")


# ------------------------------------------------------------------ no cluster needed
def test_shards_tile_every_row_once_in_order():
    """Row groups [3, 4, 10] and [0-row file] and [5]: with a target of 4 rows, the first two row groups
    are packed into shards of >= 4 rows, the 10-row group (> 2x target) is cut into ceil(10/4) = 3
    pieces, and the next file's rows follow; every row once, in input order, with its global row."""
    from advcli.engines.ray_shards import Shard, plan_shards

    shards = plan_shards([[3, 4, 10], [], [5]], target=4)
    assert shards == [Shard(0, 0, 7, 0), Shard(0, 7, 10, 7), Shard(0, 10, 13, 10), Shard(0, 13, 17, 13),
                      Shard(2, 0, 5, 17)]
    covered = [s.first + i for s in shards for i in range(s.stop - s.start)]
    assert covered == list(range(22))


def test_shard_reads_exactly_its_rows(tmp_path):
    """A shard that starts and ends inside row groups reads exactly those rows, in batches of at most
    chunk_rows rows, each with its first row in the file."""
    from advcli.engines.ray_shards import Shard, read_shard

    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"v": list(range(25)), "w": [str(i) for i in range(25)]}), path, row_group_size=10)
    got = list(read_shard(str(path), Shard(0, 7, 23, 107), ["v"], chunk_rows=4))
    # batches follow the file's own (row group, chunk_rows) cuts: 7 | 8-9 | 10-13 | 14-17 | 18-19 | 20-22
    assert [off for off, _ in got] == [7, 8, 10, 14, 18, 20]
    assert all(b.num_rows <= 4 and b.schema.names == ["v"] for _, b in got)
    assert [v for _, b in got for v in b.column("v").to_pylist()] == list(range(7, 23))
    assert [off + b.num_rows for off, b in got][-1] == 23


@needs_ray
def test_sink_writes_blocks_that_are_not_neighbours_as_separate_files(tmp_path):
    """A write task may get blocks of rows that do not follow each other (rows 0-9 and 20-29 in one
    task, 10-19 in another): each run of consecutive rows is its own part file, and the parts tile the
    rows in order; a row given twice is refused."""
    import types

    from advcli.engines.ray_output import ordered_sink
    from advcli.engines.ray_rows import ROW_COL

    schema = pa.schema([("x", pa.int64())])

    def block(rows):
        return pa.table({"x": pa.array([10 * r for r in rows], pa.int64()), ROW_COL: pa.array(rows, pa.int64())})

    sink = ordered_sink(str(tmp_path), schema, 30, 10)
    spans = sink.write([block(list(range(20, 30))), block(list(range(0, 10)))], None)
    spans += sink.write([block(list(range(10, 20)))], None)
    assert sorted(spans) == [(0, 9, 10), (10, 19, 10), (20, 29, 10)]
    sink.on_write_complete(types.SimpleNamespace(write_returns=[spans]))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["part-000000000000.parquet", "part-000000000010.parquet", "part-000000000020.parquet"]
    got = pa.concat_tables([pq.read_table(tmp_path / n) for n in names])
    assert got.column("x").to_pylist() == [10 * r for r in range(30)]

    twice = ordered_sink(str(tmp_path / "twice"), schema, 3, 10)
    spans = twice.write([block([0, 1, 1, 2])], None)
    with pytest.raises(AdvcliError, match="do not hold rows"):
        twice.on_write_complete(types.SimpleNamespace(write_returns=[spans]))


def test_missing_ray_says_how_to_install(monkeypatch):
    from advcli.engines.ray_engine import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(AdvcliError, match=r"pip install 'advcli\[ray\]'"):
        import_ray()


def test_unknown_engine_suggests_nearest():
    from advcli.engines import check_engine

    with pytest.raises(AdvcliError, match="Did you mean 'ray'"):
        check_engine("rya")


# ------------------------------------------------------------------ against the local engine
@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """Two files of one dump: 3 steps, groups of 6 scattered inside each step, masked spans."""
    from advcli.sample import make_table

    t = make_table(1500, 6, 2, 40, 7, shuffle=True, steps=3)
    return two_files(t, tmp_path_factory.mktemp("raydump"), 830, 200)  # a step and many groups straddle them


def _local(paths, tmp_path, flavor, settings, chunk_rows=128):
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    cfg, native = resolve(flavor, settings)
    out = tmp_path / "local"
    run_pipeline(paths, str(out) + ("/" if len(paths) > 1 else ""), cfg, flavor=flavor, native=native,
                 chunk_rows=chunk_rows, device="cpu")
    files = [out / p.rsplit("/", 1)[1] for p in paths] if len(paths) > 1 else [out]
    return pa.concat_tables([pq.read_table(f) for f in files])


def _ray(paths, tmp_path, flavor, settings, **kw):
    from advcli.engines.ray_engine import run_ray
    from advcli.engines.ray_output import read_output
    from advcli.flavors import resolve

    cfg, native = resolve(flavor, settings)
    out = str(tmp_path / "ray")
    result = run_ray(paths, out, cfg, flavor=flavor, native=native, device="cpu", **kw)
    return read_output(out), result, out


def _same(local: pa.Table, got: pa.Table, tol: float | None = None):
    assert got.schema.names == local.schema.names
    assert got.schema.equals(local.schema, check_metadata=False)
    assert got.num_rows == local.num_rows
    for name in local.schema.names:
        if tol is not None and name in ("advantages", "returns"):
            x = local[name].combine_chunks()
            y = got[name].combine_chunks()
            assert x.offsets.equals(y.offsets)
            np.testing.assert_allclose(y.flatten().to_numpy(), x.flatten().to_numpy(), rtol=tol, atol=tol)
        else:
            assert got[name].equals(local[name]), name
    meta_l = local.schema.metadata[b"advcli"]
    assert got.schema.metadata[b"advcli"] == meta_l  # same provenance: config, inputs, fingerprint


def test_verl_grpo_scattered_groups_small_blocks(ray_session, dump, tmp_path):
    settings = [("algorithm.adv_estimator", "grpo")]
    local = _local(dump, tmp_path, "verl", settings)
    got, result, out = _ray(dump, tmp_path, "verl", settings, chunk_rows=37, override_num_blocks=9,
                            rows_per_file=150)
    _same(local, got)
    import os

    files = sorted(os.listdir(out))
    assert len(files) >= 5 and files[0] == "part-000000000000.parquet"  # several files, named by first row
    assert pq.read_table(out).equals(got)  # a plain read of the directory gives the rows in order
    steps = np.bincount(local["step"].to_numpy()).tolist()
    assert result.rows == 1500 and [s["rows"] for s in result.per_step] == steps and len(steps) == 3
    m = result.metrics
    adv = local["advantages"].combine_chunks().flatten().to_numpy()
    mask = local["response_mask"].combine_chunks().flatten().to_numpy().astype(bool)
    assert m["critic/advantages/count"] == int(mask.sum())
    assert m["critic/advantages/max"] == pytest.approx(float(adv[mask].max()))


def test_verl_gae_adaptive_kl_per_step(ray_session, dump, tmp_path):
    settings = [("algorithm.adv_estimator", "gae"), ("algorithm.gamma", 0.99), ("algorithm.lam", 0.95),
                ("algorithm.use_kl_in_reward", True), ("algorithm.kl_penalty", "low_var_kl"),
                ("algorithm.kl_ctrl.type", "adaptive"), ("algorithm.kl_ctrl.kl_coef", 0.05),
                ("algorithm.kl_ctrl.target_kl", 0.01), ("algorithm.kl_ctrl.horizon", 500)]
    local = _local(dump, tmp_path, "verl", settings)
    got, result, _ = _ray(dump, tmp_path, "verl", settings, chunk_rows=53, override_num_blocks=7)
    _same(local, got)
    assert "token_level_rewards" in got.schema.names
    betas = [s["kl_coef"] for s in result.per_step]
    assert betas[0] == 0.05 and len(set(betas)) == 3  # the controller moved from step to step


def test_nemo_gae_whitening_moments_on_workers(ray_session, dump, tmp_path):
    # per-step whitening of token-level advantages: the moments pass runs on the workers
    settings = [("ppo.adv_estimator.name", "gae"), ("ppo.adv_estimator.gae_lambda", 0.9),
                ("ppo.adv_estimator.gae_gamma", 0.99)]
    local = _local(dump, tmp_path, "nemo", settings)
    got, _, _ = _ray(dump, tmp_path, "nemo", settings, chunk_rows=64, override_num_blocks=5)
    _same(local, got)  # the workers' moment bins merged exactly: the local engine's sums


def test_worker_side_bad_input_is_one_clear_error(ray_session, tmp_path):
    # values are read only by the workers (the driver's row pass does not need them)
    from advcli.sample import make_table

    t = make_table(40, 4, 3, 9, 1, shuffle=True)
    vals = t.column("values").to_pylist()
    vals[17][1] = float("nan")
    t = t.set_column(t.schema.get_field_index("values"), "values",
                     pa.array(vals, type=t.schema.field("values").type))
    p = str(tmp_path / "bad.parquet")
    pq.write_table(t, p)
    with pytest.raises(AdvcliError, match=r"'values', row 17, position 1"):
        _ray([p], tmp_path, "verl", [("algorithm.adv_estimator", "gae")], chunk_rows=8)
    assert not (tmp_path / "ray").exists()  # nothing left at the output path


def test_cli_engine_ray_on_sample_data(ray_session, tmp_path):
    import os

    from typer.testing import CliRunner

    from advcli.cli import app
    from advcli.engines.ray_output import read_output

    sample = os.path.join(os.path.dirname(os.path.dirname(__file__)), "..", "sample_data", "rollouts.parquet")
    out_l, out_r = str(tmp_path / "l.parquet"), str(tmp_path / "r")
    runner = CliRunner()
    r1 = runner.invoke(app, ["run", sample, "-o", out_l, "-q", "--chunk-rows", "100"])
    assert r1.exit_code == 0, r1.output
    r2 = runner.invoke(app, ["run", sample, "-o", out_r, "-q", "--engine", "ray", "--chunk-rows", "50"])
    assert r2.exit_code == 0, r2.output
    _same(pq.read_table(out_l), read_output(out_r))
    r3 = runner.invoke(app, ["run", sample, "-o", out_r, "-q", "--engine", "ray"])
    assert r3.exit_code != 0 and "already exists" in str(r3.exception or r3.output)


def test_roll_positional_groups_reward_whitening(ray_session, tmp_path):
    # ROLL: positional groups of 4 per step, group reward norm, KL in the token rewards, token-reward
    # whitening (the workers' moments:rewards pass) then advantage whitening (moments:advantages)
    from advcli.sample import make_table

    t = make_table(600, 4, 2, 30, 3, shuffle=False, steps=2)
    paths = [str(tmp_path / "r1.parquet"), str(tmp_path / "r2.parquet")]
    pq.write_table(t.slice(0, 352), paths[0], row_group_size=100)
    pq.write_table(t.slice(352), paths[1], row_group_size=100)
    settings = [("adv_estimator", "gae"), ("actor_infer.generating_args.num_return_sequences", 4),
                ("norm_mean_type", "group"), ("norm_std_type", "group"), ("reward_clip", 5.0),
                ("add_token_level_kl", True), ("kl_penalty", "k3"), ("init_kl_coef", 0.1),
                ("whiten_rewards", True), ("whiten_advantages", True), ("lambd", 0.9), ("gamma", 0.99)]
    local = _local(paths, tmp_path, "roll", settings, chunk_rows=50)
    got, _, _ = _ray(paths, tmp_path, "roll", settings, chunk_rows=29)
    _same(local, got)


def test_row_pass_on_workers(ray_session, dump, tmp_path):
    # pass 1 on the workers (the default on a multi-node cluster): the same per-row table, so the
    # same outputs; adaptive KL makes the row pass read the log-prob columns and the step keys
    settings = [("algorithm.adv_estimator", "rloo"), ("algorithm.use_kl_in_reward", True),
                ("algorithm.kl_ctrl.type", "adaptive"), ("algorithm.kl_penalty", "k2")]
    local = _local(dump, tmp_path, "verl", settings)
    got, result, _ = _ray(dump, tmp_path, "verl", settings, chunk_rows=41, row_pass="workers")
    _same(local, got)
    assert len({s["kl_coef"] for s in result.per_step}) == 3


def test_an_advcli_error_raised_in_a_ray_task_is_told_as_itself():
    """An AdvcliError raised inside a Ray task (the per-step driver resolves steps in tasks) comes back as
    Ray's RayTaskError(AdvcliError), whose str() is Ray's own text: the user gets the task's own message."""
    if not HAVE_RAY:
        pytest.skip("ray is not installed")
    from ray.exceptions import RayTaskError

    from advcli.engines.ray_engine import _unwrap

    raised = RayTaskError("_resolve_step", "Traceback ...", AdvcliError("d.parquet: row 7 is bad", hint="fix it"))
    wrapped = raised.as_instanceof_cause()
    want = "d.parquet: row 7 is bad\n  hint: fix it"
    assert isinstance(wrapped, AdvcliError) and str(wrapped) != want  # Ray's text, not the message
    assert str(_unwrap(wrapped)) == want


def test_quiet_run_on_its_own_instance_prints_no_ray_notice(tmp_path):
    """``advcli run --engine ray -q`` in a fresh process (advcli starts and stops the local instance): Ray's
    token-authentication notice is nothing the user can act on there and is not printed."""
    import os
    import subprocess
    import sys

    if not HAVE_RAY:
        pytest.skip("ray is not installed")

    sample = os.path.join(os.path.dirname(os.path.dirname(__file__)), "..", "sample_data", "rollouts.parquet")
    p = subprocess.run([sys.executable, "-m", "advcli", "run", sample, "-o", str(tmp_path / "out"), "-q",
                        "--engine", "ray"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "ADVCLI_SERVER": "off"})
    assert p.returncode == 0, p.stderr
    assert "Token authentication" not in p.stderr, p.stderr


def test_row_pass_from_the_environment(ray_session, dump, tmp_path, monkeypatch):
    """ADVCLI_RAY_ROW_PASS picks where an "auto" row pass runs; a value other than driver/workers is refused
    naming the variable, with nothing written."""
    from advcli.errors import AdvcliError

    for d in ("w", "l", "bad"):
        (tmp_path / d).mkdir()
    monkeypatch.setenv("ADVCLI_RAY_ROW_PASS", "workers")
    got, _, _ = _ray(dump, tmp_path / "w", "verl", [("algorithm.adv_estimator", "grpo")])
    _same(_local(dump, tmp_path / "l", "verl", [("algorithm.adv_estimator", "grpo")]), got)
    monkeypatch.setenv("ADVCLI_RAY_ROW_PASS", "everywhere")
    with pytest.raises(AdvcliError, match="ADVCLI_RAY_ROW_PASS=everywhere"):
        _ray(dump, tmp_path / "bad", "verl", [("algorithm.adv_estimator", "grpo")])
    assert not (tmp_path / "bad" / "ray").exists()
