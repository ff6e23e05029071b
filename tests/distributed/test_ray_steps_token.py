"""--engine ray's per-step driver (row pass on the workers) for token-level estimators, runs reading
``values`` and whitened runs (skipped without Ray).

Each step is resolved alone in a worker task; the whitening statistics (per step) come from a moments pass
whose workers read the resolved steps, merged exactly; the advantage sample and the histogram's seed
place each batch among the run's valid tokens from per-shard counts. The outputs must be the local
engine's bit for bit and the report's figures equal, with steps contiguous or interleaved in row order,
and the driver must have taken that path (the steps resolved one at a time) rather than the whole-dump table.
"""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import report_of, run_main, two_files

HAVE_RAY = importlib.util.find_spec("ray") is not None
pytestmark = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (pip install 'advcli[ray]')")

ADAPTIVE = [("algorithm.use_kl_in_reward", True), ("algorithm.kl_penalty", "low_var_kl"),
            ("algorithm.kl_ctrl.type", "adaptive"), ("algorithm.kl_ctrl.kl_coef", 0.05),
            ("algorithm.kl_ctrl.target_kl", 0.01), ("algorithm.kl_ctrl.horizon", 500)]


@pytest.fixture(scope="module")
def contiguous(tmp_path_factory):
    """Two files of one dump, 3 steps each contiguous in row order (a step straddles the files)."""
    from advcli.sample import make_table

    return two_files(make_table(720, 6, 2, 30, 11, shuffle=True, steps=3), tmp_path_factory.mktemp("tokcontig"),
                     410, 90)


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    """3 steps interleaved in row order: every read shard holds rows of every step."""
    from advcli.sample import make_table

    t = make_table(720, 6, 2, 30, 12, shuffle=True, steps=3)
    t = t.take(pa.array(np.random.default_rng(5).permutation(t.num_rows)))
    p = str(tmp_path_factory.mktemp("tokinter") / "i.parquet")
    pq.write_table(t, p, row_group_size=90)
    return [p]


def _spy(monkeypatch) -> dict:
    """Counts the per-step resolutions and the workers' moments passes of the runs that follow."""
    from advcli.engines import ray_engine, ray_steps

    seen = {"resolve": 0, "moments": []}
    resolve, gather = ray_steps.resolve_steps, ray_engine.gather_moments

    def counting_resolve(*a, **k):
        seen["resolve"] += 1
        return resolve(*a, **k)

    def counting_gather(ds, num_scopes, watch=None):
        seen["moments"].append(num_scopes)
        return gather(ds, num_scopes, watch)

    monkeypatch.setattr(ray_steps, "resolve_steps", counting_resolve)
    monkeypatch.setattr(ray_engine, "gather_moments", counting_gather)
    return seen


def _whitened_per_step(table: pa.Table):
    """Per step: the mean and the unbiased std of the written advantages over the mask=1 tokens (what
    verl's masked_whiten makes 0 and 1 in every step, independently of advcli's sums)."""
    adv = table["advantages"].combine_chunks()
    mask = table["response_mask"].combine_chunks()
    steps = table["step"].to_numpy()
    out = []
    for s in sorted(set(steps.tolist())):
        rows = np.flatnonzero(steps == s)
        a = np.concatenate([np.asarray(adv[int(r)].as_py(), dtype=np.float64) for r in rows])
        m = np.concatenate([np.asarray(mask[int(r)].as_py()) for r in rows]) == 1
        out.append((a[m].mean(), a[m].std(ddof=1)))
    return out


# passes: the workers' moments passes over the resolved steps (token-level advantages whitened: one;
# token rewards whitened: one; a row-level estimator's whitening sums come from the steps' own rows)
@pytest.mark.parametrize("which,flavor,settings,whitened,passes", [
    # verl GAE: the values column, advantages whitened per step (masked_whiten, verl's default)
    ("contiguous", "verl", [("algorithm.adv_estimator", "gae"), ("algorithm.gamma", 0.99),
                            ("algorithm.lam", 0.95)], True, 1),
    # the adaptive KL controller's β carried from step to step into the token rewards, steps interleaved
    ("interleaved", "verl", [("algorithm.adv_estimator", "gae")] + ADAPTIVE, True, 1),
    # REINFORCE++: token-level returns, whitened and re-masked
    ("interleaved", "verl", [("algorithm.adv_estimator", "reinforce_plus_plus")], True, 1),
    # a row-level group estimator with whitening: the sums come from each step's rows
    ("contiguous", "verl", [("algorithm.adv_estimator", "reinforce_plus_plus_baseline")], True, 0),
    # GRPO with advantage whitening and token-reward whitening (two moments passes), steps interleaved
    ("interleaved", "advcli", [("estimator.name", "grpo"), ("advantage.whiten", True),
                               ("reward.whiten_tokens", True)], True, 1),
    # SkyRL REINFORCE++: whitened over every response position (whitening.mask=all), then batch-normalised
    ("interleaved", "skyrl", [("trainer.algorithm.advantage_estimator", "reinforce++"),
                              ("trainer.algorithm.advantage_batch_normalize", True)], False, 1),
    # SkyRL REINFORCE++ with the KL in the reward and zero_variance_filter: each step's flat groups found in the
    # task resolving it, their rows' KL left out of the token rewards and of the adaptive controller's step mean
    ("interleaved", "skyrl", [("trainer.algorithm.advantage_estimator", "reinforce++"),
                              ("trainer.algorithm.use_kl_in_reward", True), ("trainer.algorithm.use_kl_loss", False),
                              ("trainer.algorithm.kl_ctrl.type", "adaptive"), ("trainer.algorithm.kl_loss_coef", 0.05),
                              ("trainer.algorithm.kl_ctrl.kl_target", 0.01),
                              ("trainer.algorithm.kl_ctrl.horizon", 500),
                              ("trainer.algorithm.zero_variance_filter", True)], False, 1),
    # SkyRL GRPO batch-normalised: its mean over the step's padded grid, whose cells (rows × longest row)
    # come from each step's resolution
    ("contiguous", "skyrl", [("trainer.algorithm.advantage_batch_normalize", True)], False, 0),
    # ReMax: token-level returns minus each row's reward_baseline column, not whitened (verl compute_remax)
    ("contiguous", "verl", [("algorithm.adv_estimator", "remax")], False, 0),
])
def test_per_step_token_level_equals_local(ray_session, contiguous, interleaved, tmp_path, monkeypatch, which,
                                           flavor, settings, whitened, passes):
    from advcli.engines.ray_engine import run_ray
    from advcli.engines.ray_output import read_output
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    paths = {"contiguous": contiguous, "interleaved": interleaved}[which]
    cfg, native = resolve(flavor, settings)
    loc = run_pipeline(paths, str(tmp_path / "local") + "/", cfg, flavor=flavor, native=native, chunk_rows=64,
                       device="cpu")
    seen = _spy(monkeypatch)
    got = run_ray(paths, str(tmp_path / "ray"), cfg, flavor=flavor, native=native, device="cpu", chunk_rows=37,
                  override_num_blocks=7, row_pass="workers")
    assert seen["resolve"] == 1  # the per-step driver ran, not the whole-dump table
    assert seen["moments"] == [3] * passes  # per-step sums (3 steps), made on the workers
    local = pa.concat_tables([pq.read_table(str(tmp_path / "local" / p.rsplit("/", 1)[1])) for p in paths])
    ray_out = read_output(str(tmp_path / "ray"))
    for name in local.column_names:
        assert ray_out[name].equals(local[name]), name  # bit for bit
    loc_r, got_r = report_of(loc), report_of(got)
    for key in loc_r:
        assert got_r[key] == loc_r[key], key
    if whitened:  # each step's advantages whitened over that step's mask=1 tokens
        for mean, std in _whitened_per_step(ray_out):
            assert abs(mean) < 1e-6 and std == pytest.approx(1.0, abs=1e-5)
    if ("algorithm.kl_ctrl.type", "adaptive") in settings or ("trainer.algorithm.kl_ctrl.type", "adaptive") in settings:
        betas = [s["kl_coef"] for s in got.per_step]
        assert betas[0] == 0.05 and len(set(betas)) == 3  # the controller moved: the carry ran


def test_histogram_seed_pass_from_the_steps(ray_session, tmp_path, monkeypatch, capsys):
    """`advcli run --engine ray` (ADVCLI_RAY_ROW_PASS=workers) on a dump with more valid tokens than the
    advantage histogram's seed (65,536): the seed pass reads the resolved steps and the first shards only,
    and the report (histograms and quantiles included) is the local engine's."""
    from advcli.engines import ray_engine
    from advcli.sample import make_table

    t = make_table(1200, 4, 60, 140, 21, shuffle=True, steps=3)
    valid = int(np.concatenate(t["response_mask"].to_pylist()).sum())
    assert valid > 65_536
    path = str(tmp_path / "big.parquet")
    pq.write_table(t, path, row_group_size=150)
    seen, edges = _spy(monkeypatch), []
    real = ray_engine.histogram_edges

    def seeding(cl, map_seed, shard_valid, *a, **k):
        assert sum(shard_valid) == valid  # every shard's Σ mask, from the row pass's summaries
        edges.append(real(cl, map_seed, shard_valid, *a, **k))
        return edges[-1]

    monkeypatch.setattr(ray_engine, "histogram_edges", seeding)
    monkeypatch.setenv("ADVCLI_RAY_ROW_PASS", "workers")
    reports = {}
    for engine in ("local", "ray"):
        out = str(tmp_path / engine) + ("" if engine == "ray" else ".parquet")
        argv = ["run", path, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=gae",
                "--engine", engine, "--chunk-rows", "64", "--json", "-q"]
        code, stdout, err = run_main(argv, capsys)
        assert code == 0, err
        reports[engine] = json.loads(stdout)
    assert seen["resolve"] == 1 and len(edges) == 1 and edges[0] is not None
    want, got = reports["local"], reports["ray"]
    for key in ("metrics", "per_step", "histograms", "group_health", "diagnostics", "rows", "tokens",
                "valid_tokens"):
        assert got.get(key) == want.get(key), key
    assert want["valid_tokens"] == valid
