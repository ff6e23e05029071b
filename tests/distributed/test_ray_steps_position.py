"""--engine ray's per-step driver with **positional groups** (TRL, OpenRLHF, slime: a prompt's
completions are n consecutive rows of its step), skipped without Ray.

Positional blocks are cut inside each step in input order, so a step's rows alone give its blocks: the
per-step driver (row pass on the workers, each step resolved alone) must give the local engine's rows
bit for bit and its report, with steps contiguous or interleaved (whole blocks interleaved) in row order;
and a block that disagrees with the prompt ids is refused naming the rows of the input, as the local
engine names them.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import report_of, two_files

HAVE_RAY = importlib.util.find_spec("ray") is not None
pytestmark = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (pip install 'advcli[ray]')")

N = 6  # completions per prompt: consecutive rows


def _blocks_table(seed: int):
    """720 rows, 3 steps, each prompt's 6 completions consecutive (make_table without shuffling)."""
    from advcli.sample import make_table

    return make_table(720, N, 2, 30, seed, shuffle=False, steps=3)


def _interleave_blocks(t: pa.Table, seed: int) -> pa.Table:
    """The blocks of N rows in a random order: every step's blocks spread over the whole file, each block
    whole (what a trainer dumping several steps' batches into one file in arrival order can give)."""
    order = np.random.default_rng(seed).permutation(t.num_rows // N)
    return t.take(pa.array((order[:, None] * N + np.arange(N)).reshape(-1)))


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    d = tmp_path_factory.mktemp("posdumps")
    a, b = two_files(_blocks_table(31), d, 408, 96)  # a step straddles the two files
    i = str(d / "i.parquet")
    pq.write_table(_interleave_blocks(_blocks_table(32), 3), i, row_group_size=96)
    return {"contiguous": [a, b], "interleaved": [i]}


def _count_resolutions(monkeypatch) -> list:
    from advcli.engines import ray_steps

    calls, real = [], ray_steps.resolve_steps
    monkeypatch.setattr(ray_steps, "resolve_steps", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def _plan_of(paths, flavor, settings):
    from advcli.flavors import resolve
    from advcli.pipeline.plan import open_and_plan

    cfg, native = resolve(flavor, settings)
    return open_and_plan(paths, cfg, None, "cpu", 64, "full", None)[1]


def _per_step_equals_local(paths, flavor, settings, tmp_path, monkeypatch):
    """Both engines on ``paths``, the Ray engine with the row pass on the workers: it must take the
    per-step driver (one resolution of the steps, no whole-dump table) and give the local engine's rows
    bit for bit and its report. Returns the Ray engine's result and its output table."""
    from advcli.engines.ray_engine import run_ray
    from advcli.engines.ray_output import read_output
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    cfg, native = resolve(flavor, settings)
    loc = run_pipeline(paths, str(tmp_path / "local") + "/", cfg, flavor=flavor, native=native, chunk_rows=64,
                       device="cpu")
    calls = _count_resolutions(monkeypatch)
    got = run_ray(paths, str(tmp_path / "ray"), cfg, flavor=flavor, native=native, device="cpu", chunk_rows=37,
                  override_num_blocks=7, row_pass="workers")
    assert calls == [1]  # the per-step driver ran, not the whole-dump table
    local = pa.concat_tables([pq.read_table(str(tmp_path / "local" / p.rsplit("/", 1)[1])) for p in paths])
    ray_out = read_output(str(tmp_path / "ray"))
    for name in local.column_names:
        assert ray_out[name].equals(local[name]), name  # bit for bit
    assert report_of(got) == report_of(loc)
    return got, ray_out


@pytest.mark.parametrize("which,flavor,settings", [
    ("contiguous", "trl", [("num_generations", N)]),  # GRPO: (R − mean_g)/(std_g + 1e-4) over each block
    ("interleaved", "trl", [("num_generations", N)]),
    ("interleaved", "openrlhf", [("algo.advantage.estimator", "rloo"), ("rollout.n_samples_per_prompt", N)]),
    ("contiguous", "trl", [("trainer", "rloo"), ("num_generations", N)]),
    ("interleaved", "slime", [("n_samples_per_prompt", N)]),  # GRPO, (r − mean_g)/(std_g + 1e-6)
])
def test_positional_groups_per_step_equal_local(ray_session, dumps, tmp_path, monkeypatch, which, flavor,
                                                settings):
    from advcli.engines.ray_steps import not_step_scoped

    paths = dumps[which]
    plan = _plan_of(paths, flavor, settings)
    assert plan.group_by == "position" and not_step_scoped(plan) is None
    _, ray_out = _per_step_equals_local(paths, flavor, settings, tmp_path, monkeypatch)
    if flavor == "trl":  # GRPO's centring: a block's row advantages sum to zero (blocks whose rows all have
        # a mask=1 token, where the written advantage is the row's)
        adv, mask = ray_out["advantages"].to_pylist(), ray_out["response_mask"].to_pylist()
        row_adv = np.array([a[m.index(1)] if 1 in m else np.nan for a, m in zip(adv, mask)]).reshape(-1, N)
        full = ~np.isnan(row_adv).any(axis=1)
        assert full.sum() > 100
        assert np.abs(row_adv[full].sum(axis=1)).max() < 1e-4


def test_block_disagreeing_with_ids_names_the_input_rows(ray_session, tmp_path, monkeypatch):
    """Steps interleaved by whole blocks, one block of step 2 holding another prompt's id in its 3rd row:
    refused as the local engine refuses it, naming the block's rows and the row in the input."""
    from advcli.engines.ray_engine import run_ray
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    t = _interleave_blocks(_blocks_table(33), 4)
    steps = t["step"].to_numpy()
    ids = t["prompt_id"].to_pylist()
    start = int(np.flatnonzero(steps == steps.max())[N * 5])  # the 6th block of the last step
    other = next(x for x in ids if x != ids[start])
    ids[start + 2] = other
    t = t.set_column(t.schema.get_field_index("prompt_id"), "prompt_id", pa.array(ids, type=t["prompt_id"].type))
    path = str(tmp_path / "bad.parquet")
    pq.write_table(t, path, row_group_size=96)
    cfg, native = resolve("trl", [("num_generations", N)])
    with pytest.raises(AdvcliError) as want:
        run_pipeline([path], str(tmp_path / "l.parquet"), cfg, flavor="trl", native=native, device="cpu")
    assert f"rows {start}-{start + N - 1}" in want.value.message and f"row {start + 2}" in want.value.message
    calls = _count_resolutions(monkeypatch)
    with pytest.raises(AdvcliError) as got:
        run_ray([path], str(tmp_path / "ray"), cfg, flavor="trl", native=native, device="cpu", chunk_rows=37,
                override_num_blocks=7, row_pass="workers")
    assert calls == [1]
    assert got.value.message == want.value.message
    assert not (tmp_path / "ray").exists()


def test_slime_warnings_are_the_runs(ray_session, tmp_path, monkeypatch):
    """slime forms its blocks without reading the ids and, when a step's rows are not a multiple of n,
    normalises the step as one group, silently; advcli warns of both, counted over the whole run (one
    warning listing the steps that fell back, one naming the first block that disagrees with the ids). The
    per-step driver's warnings and rows are the local engine's; the warnings are there."""
    from advcli.engines.ray_engine import run_ray
    from advcli.engines.ray_output import read_output
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    t = _blocks_table(34)
    steps = t["step"].to_numpy()
    keep = np.ones(t.num_rows, dtype=bool)
    for s in (steps.min(), steps.max()):  # two steps of 6k + 3 rows: each normalised as one group
        keep[np.flatnonzero(steps == s)[-3:]] = False
    t = t.filter(pa.array(keep))
    ids = t["prompt_id"].to_pylist()
    mid = int(np.flatnonzero(t["step"].to_numpy() == np.median(steps))[N * 2])  # a block of the middle step
    ids[mid + 1] = next(x for x in ids if x != ids[mid])
    t = t.set_column(t.schema.get_field_index("prompt_id"), "prompt_id", pa.array(ids, type=t["prompt_id"].type))
    path = str(tmp_path / "slime.parquet")
    pq.write_table(t, path, row_group_size=96)
    cfg, native = resolve("slime", [("n_samples_per_prompt", N)])
    loc = run_pipeline([path], str(tmp_path / "l.parquet"), cfg, flavor="slime", native=native, chunk_rows=64,
                       device="cpu")
    assert any("2 step(s) normalised as ONE group" in w for w in loc.warnings)
    assert any(f"row {mid}" in w and f"row {mid + 1}" in w for w in loc.warnings)
    calls = _count_resolutions(monkeypatch)
    got = run_ray([path], str(tmp_path / "ray"), cfg, flavor="slime", native=native, device="cpu", chunk_rows=37,
                  override_num_blocks=7, row_pass="workers")
    assert calls == [1]
    assert got.warnings == loc.warnings
    assert report_of(got) == report_of(loc)
    ray_out, local = read_output(str(tmp_path / "ray")), pq.read_table(str(tmp_path / "l.parquet"))
    for name in local.column_names:
        assert ray_out[name].equals(local[name]), name


# ------------------------------------------------------------------ ROLL: (step, domain) scopes
DOMAINS = ("math", "code", "chat")


def _with_domains(t: pa.Table, seed: int) -> pa.Table:
    """A ``domain`` column, one domain per prompt block (ROLL's RLVR domains), drawn at random."""
    dom = np.random.default_rng(seed).choice(len(DOMAINS), t.num_rows // N)
    return t.append_column("domain", pa.array([DOMAINS[d] for d in np.repeat(dom, N)], type=pa.string()))


@pytest.fixture(scope="module")
def roll_dumps(tmp_path_factory):
    d = tmp_path_factory.mktemp("rolldumps")
    a, b = two_files(_with_domains(_blocks_table(35), 5), d, 372, 96)  # a step straddles the two files
    i = str(d / "i.parquet")
    pq.write_table(_interleave_blocks(_with_domains(_blocks_table(36), 6), 7), i, row_group_size=96)
    return {"contiguous": [a, b], "interleaved": [i]}


def _scopes_in_order(paths: list[str]) -> list[tuple]:
    """ROLL's (step, domain) batches: steps ascending, a step's domains in order of first appearance in it."""
    t = pa.concat_tables([pq.read_table(p) for p in paths])
    steps, doms = t["step"].to_numpy(), t["domain"].to_pylist()
    return [(int(s), d) for s in np.unique(steps) for d in dict.fromkeys(d for d, x in zip(doms, steps) if x == s)]


ROLL_N = [("actor_infer.generating_args.num_return_sequences", N)]
ADAPTIVE = [("add_token_level_kl", True), ("init_kl_coef", 0.05), ("target_kl", 0.001), ("kl_horizon", 500)]


@pytest.mark.parametrize("which,settings", [
    ("contiguous", [("adv_estimator", "grpo")]),
    ("interleaved", [("adv_estimator", "grpo"), ("whiten_advantages", True), *ADAPTIVE]),
    ("contiguous", [("adv_estimator", "gae"), ("whiten_rewards", True), ("whiten_advantages", True), *ADAPTIVE]),
])
def test_roll_step_domains_per_step_equal_local(ray_session, roll_dumps, tmp_path, monkeypatch, which, settings):
    """ROLL's scopes are (step, domain) batches, a step's domains in order of first appearance inside it,
    with one adaptive KL controller updated after each domain's batch: the per-step driver resolves each
    step's domains alone and gives the local engine's rows bit for bit and its report; the report's
    per-step entries are the (step, domain) batches in ROLL's order, the KL coefficient stepped from domain
    to domain (β' = β·(1 + clip(kl/target − 1, ±0.2)·rows/horizon)), and whitened advantages have mean 0
    over each domain's mask=1 tokens."""
    from advcli.engines.ray_steps import not_step_scoped

    paths = roll_dumps[which]
    plan = _plan_of(paths, "roll", ROLL_N + settings)
    assert plan.run.grouping.scope == "step_domain" and not_step_scoped(plan) is None
    got, ray_out = _per_step_equals_local(paths, "roll", ROLL_N + settings, tmp_path, monkeypatch)
    want = _scopes_in_order(paths)
    assert len(want) > 3 and len({s for s, _ in want}) == 3  # several domains in a step
    assert [(e["step"], e["domain"]) for e in got.per_step] == want
    settings = dict(settings)
    if "target_kl" in settings:  # the controller carried from domain to domain, step to step
        beta = [e["kl_coef"] for e in got.per_step]
        assert beta[0] == settings["init_kl_coef"] and len(set(beta)) == len(beta)
        for e, nxt in zip(got.per_step, beta[1:]):
            err = min(max(e["kl"] / settings["target_kl"] - 1, -0.2), 0.2)
            assert nxt == pytest.approx(e["kl_coef"] * (1 + err * e["rows"] / settings["kl_horizon"]), rel=1e-12)
    if settings.get("whiten_advantages"):  # whitened per (step, domain): mean 0 over its mask=1 tokens
        t = pa.concat_tables([pq.read_table(p) for p in paths])
        adv, mask = ray_out["advantages"].to_pylist(), ray_out["response_mask"].to_pylist()
        for step, dom in want:
            rows = [i for i, (s, d) in enumerate(zip(t["step"].to_pylist(), t["domain"].to_pylist()))
                    if (s, d) == (step, dom)]
            v = np.concatenate([np.asarray(adv[i], dtype=np.float64)[np.asarray(mask[i]) == 1] for i in rows])
            assert abs(v.mean()) < 1e-5 and v.std() == pytest.approx(1.0, abs=1e-2)
