"""The first command a user types on a trainer's own dump: ``advcli run DUMP -o out.parquet --flavor X``
and nothing else. Dumps built by the format tests' builders (the trainers' field lists, spec/dumps.md);
expected numbers from the frameworks' formulas, computed here:

* verl, ROLL: their default estimator (GAE) needs token data; the refusal names the exact ``--set``, and
  that ``--set`` (parsed out of the hint) runs.
* slime: the group size comes from the dump's group_index; GRPO (r − μ)/(std(r − μ, unbiased) + 1e-6)
  on every position (slime/ray/rollout.py L608-633 @624b824a). A default group size of 1 is refused; a
  step that is not a multiple of a size the user set is warned about.
* AReaL: the keys not set come from the run's config.yaml in the trial directory (as AReaL's save_config
  writes it; here its GRPO example, examples/math/gsm8k_grpo.yaml @cbff54d6) on the JSONL: r' = clip((r −
  0.5)·10, ±20); reward_norm group/group: z = (r' − μ_g)/(σ_g unbiased + 1e-5); GAE with V = 0, γ = λ = 1: z
  on every response token; adv_norm batch/batch over the step's tokens (token-weighted, unbiased, + 1e-5).
  Without a config.yaml they are AReaL's defaults (no normalisation, scaling 1, bias 0).
"""
import json
import math
import re

import numpy as np
import pyarrow.parquet as pq
from conftest import run_main
from test_format_areal import build as areal_build
from test_format_areal import save_config as areal_save_config
from test_format_roll import N as ROLL_N
from test_format_roll import rlvr, roll_grpo
from test_format_slime import build as slime_build
from test_format_slime import sample as slime_sample
from test_format_slime import save_rollout
from test_format_trl import G as TRL_G
from test_format_trl import write_step as trl_write_step
from test_format_verl import v1_records, verl_grpo, write


def hinted_set(err: str) -> list[str]:
    """The ``--set KEY=VALUE`` arguments of the hint, as a user would copy them."""
    hint = err.split("hint:", 1)[1]
    return [x for kv in re.findall(r"--set (\S+)", hint) for x in ("--set", kv)]


def test_verl_default_gae_refused_with_the_set_that_runs(tmp_path, capsys):
    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = v1_records(1, 1)
    write(d / "1.jsonl", recs)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "verl"], capsys)
    assert code == 2 and "Traceback" not in err and not out.exists()
    assert "--set algorithm.adv_estimator=grpo" in err and "default" in err
    fix = hinted_set(err)
    assert fix == ["--set", "algorithm.adv_estimator=grpo"]
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "verl", *fix, "-q"], capsys)
    assert code == 0, err
    exp = verl_grpo([r["score"] for r in recs], [r["uid"].rsplit("_", 2)[0] for r in recs])
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)


def test_roll_default_gae_refused_then_group_size_from_the_dump(tmp_path, capsys):
    d = tmp_path / "rollout_dump"
    d.mkdir()
    obj = rlvr(1, 1)
    (d / "rollout_dump_data.step_1.jsonl").write_text(json.dumps(obj) + "\n")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "roll"], capsys)
    assert code == 2 and not out.exists()
    fix = hinted_set(err)
    assert fix == ["--set", "adv_estimator=grpo"]
    code, stdout, err = run_main(["run", d, "-o", out, "--flavor", "roll", *fix, "--json"], capsys)
    assert code == 0, err
    rep = json.loads(stdout)
    key = "actor_infer.generating_args.num_return_sequences"
    assert any(f"group size {ROLL_N}" in x and key in x for x in rep["from_dump"])
    assert rep["settings"][key] == ROLL_N
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), roll_grpo(obj["scores"]),
                       rtol=1e-5, atol=1e-5)


def slime_grpo(samples):
    """slime's grpo per group_index (the dump's groups): (r − μ)/(std(r − μ, unbiased) + 1e-6)."""
    out = []
    for s in samples:
        r = np.array([x["reward"] for x in samples if x["group_index"] == s["group_index"]], np.float64)
        c = r - r.mean()
        out.append((s["reward"] - r.mean()) / (c.std(ddof=1) + 1e-6))
    return out


def test_slime_group_size_from_group_index(tmp_path, capsys):
    d = tmp_path / "rollout_data"
    d.mkdir()
    samples = slime_build(d, 0, 0) + slime_build(d, 1, 1)  # 3 groups of 4 per rollout
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", d, "-o", out, "--flavor", "slime", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(stdout)
    assert any("group size 4 from the dump's group_index" in x and "n_samples_per_prompt" in x
               for x in rep["from_dump"])
    rows = pq.read_table(out).to_pylist()
    exp = slime_grpo(samples)
    assert any(abs(a) > 0.1 for a in exp)
    for row, s, a in zip(rows, samples, exp):
        assert np.allclose(row["advantages"], [a] * s["response_length"], rtol=1e-5, atol=1e-5)  # masked too
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "slime", "--force"], capsys)
    assert code == 0 and "group size 4 from the dump's group_index" in " ".join(err.split())


def test_slime_default_singletons_refused(tmp_path, capsys):
    """Unequal groups (no size to take) leave n_samples_per_prompt at its default 1: refused, naming the key. A
    converted Parquet of equal groups records them: it takes n from them, as the dump does."""
    rng = np.random.default_rng(3)
    samples = [slime_sample(g, k, rng, float(k % 2)) for g, n in ((0, 4), (1, 3)) for k in range(n)]
    d = save_rollout(tmp_path, 0, samples)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "slime"], capsys)
    assert code == 2 and not out.exists() and "Traceback" not in err
    assert "n_samples_per_prompt" in err and "defaults to 1" in err and "1 of 3 rows" in " ".join(err.split())
    d2 = tmp_path / "even" / "rollout_data"
    d2.mkdir(parents=True)
    slime_build(d2, 0, 0)
    conv = tmp_path / "c.parquet"
    assert run_main(["convert", d2, "-o", conv], capsys)[0] == 0
    code, _, err = run_main(["run", conv, "-o", out, "--flavor", "slime"], capsys)
    assert code == 0 and "group size 4 from the dump's group_index" in " ".join(err.split()), err


def test_slime_whole_step_as_one_group_is_said(tmp_path, capsys):
    """n set by the user, 15 rows in the step: slime normalises the step as one group (reshape to [1, 15]);
    the run does it too, with a warning."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    samples = slime_build(d, 0, 0, groups=3, n=5)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "slime", "--set", "n_samples_per_prompt=4"], capsys)
    assert code == 0, err
    assert "ONE group" in " ".join(err.split()) and "15 rows in step 0" in " ".join(err.split())
    r = np.array([s["reward"] for s in samples])
    c = r - r.mean()
    exp = c / (c.std(ddof=1) + 1e-6)
    got = [row["advantages"][0] for row in pq.read_table(out).to_pylist()]
    assert np.allclose(got, exp, rtol=1e-5, atol=1e-5)


def areal_build_with_config(trial):
    groups = areal_build(trial)
    areal_save_config(trial)
    return groups


def areal_expected(groups, adv_norm=True):
    """AReaL's GRPO example on the JSONL (module docstring), per version directory (the step)."""
    adv, ret = [], []
    for v in sorted({g[0]["tail_version"] for g in groups}):
        z, lengths = [], []
        for g in groups:
            if g[0]["tail_version"] != v:
                continue
            r = np.clip((np.array([x["reward"] for x in g]) - 0.5) * 10.0, -20, 20)
            mu = r.mean()
            sd = math.sqrt(((r - mu) ** 2).sum() / (len(r) - 1))
            z += list((r - mu) / (sd + 1e-5))
            lengths += [x["seqlen"] - x["prompt_len"] for x in g]
        z, w = np.array(z), np.array(lengths, np.float64)
        mean = (z * w).sum() / w.sum()
        std = math.sqrt((w * (z - mean) ** 2).sum() / (w.sum() - 1))
        ret += list(z)
        adv += list((z - mean) / (std + 1e-5)) if adv_norm else list(z)
    return adv, ret


def test_areal_jsonl_runs_its_saved_config(tmp_path, capsys):
    groups = areal_build_with_config(tmp_path / "trial")
    # unequal response lengths inside a step, so that the token weighting of adv_norm shows
    assert len({x["seqlen"] for g in groups for x in g}) > 1
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "areal", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(stdout)
    assert any("saved configuration" in x and "config.yaml" in x for x in rep["from_dump"])
    assert any("task_id" in x for x in rep["from_dump"])
    t = pq.read_table(out)
    adv, ret = areal_expected(groups)
    assert np.allclose(t.column("advantages").to_pylist(), adv, rtol=1e-5, atol=1e-5)
    assert np.allclose(t.column("returns").to_pylist(), ret, rtol=1e-5, atol=1e-5)
    # verl's GRPO, the fallback the docs gave before, is not AReaL's number here
    assert np.max(np.abs(np.array(adv) - np.array(ret))) > 0.05


def test_areal_jsonl_a_key_set_overrides_the_saved_config(tmp_path, capsys):
    groups = areal_build_with_config(tmp_path / "trial")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "areal", "-q",
                             "--set", "actor.adv_norm.mean_level=null", "--set", "actor.adv_norm.std_level=null"],
                            capsys)
    assert code == 0, err
    adv, _ = areal_expected(groups, adv_norm=False)
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), adv, rtol=1e-5, atol=1e-5)
    # a discount below 1 makes the advantage differ along the response: token data, which the dump lacks
    code, _, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "areal", "--force",
                             "--set", "actor.discount=0.9"], capsys)
    assert code == 2 and "areal_gae" in err and "Traceback" not in err


def test_areal_converted_parquet_keeps_the_token_weights(tmp_path, capsys):
    groups = areal_build_with_config(tmp_path / "trial")
    conv, out = tmp_path / "c.parquet", tmp_path / "o.parquet"
    assert run_main(["convert", tmp_path / "trial", "-o", conv], capsys)[0] == 0
    code, _, err = run_main(["run", conv, "-o", out, "--flavor", "areal", "-q"], capsys)
    assert code == 0, err
    adv, _ = areal_expected(groups)
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), adv, rtol=1e-5, atol=1e-5)


def test_areal_jsonl_without_a_saved_config_runs_areals_defaults(tmp_path, capsys):
    """Issue 41.9: no config.yaml beside the dump: the keys not set are AReaL's defaults, never the GRPO example.
    Defaults: kl_ctl 0.1, which needs log-probs the dump lacks (refused, nothing written); with kl_ctl 0: bias 0,
    scaling 1, clip ±20, both NormConfig sections off, GAE with V = 0 at γ = λ = 1: the raw reward on the
    response's tokens. `--set actor.reward_norm.mean_level=group` turns reward_norm on with NormConfig's other
    defaults (std_level batch, unbiased, eps 1e-5): (r − μ_g)/(σ + 1e-5), σ = sqrt(Σ_step (r − μ_g)²/(N − 1))
    about each row's group mean, per step."""
    groups = areal_build(tmp_path / "trial")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "areal"], capsys)
    assert code == 2 and "KL" in err and not out.exists() and "Traceback" not in err
    code, stdout, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "areal", "--json",
                                  "--set", "actor.kl_ctl=0"], capsys)
    assert code == 0, err
    assert any("no configuration of the run" in x and "defaults" in x for x in json.loads(stdout)["from_dump"])
    raw = [x["reward"] for g in groups for x in g]
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), raw, rtol=1e-6, atol=1e-6)
    code, _, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "areal", "--force", "-q",
                             "--set", "actor.kl_ctl=0", "--set", "actor.reward_norm.mean_level=group"], capsys)
    assert code == 0, err
    want = []
    for v in (1, 2):
        step = [g for g in groups if g[0]["tail_version"] == v]
        centred = [x["reward"] - np.mean([y["reward"] for y in g]) for g in step for x in g]
        sd = math.sqrt(sum(c * c for c in centred) / (len(centred) - 1))
        want += [c / (sd + 1e-5) for c in centred]
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), want, rtol=1e-5, atol=1e-5)



def test_roll_unequal_groups_refusal_names_both_keys(tmp_path, capsys):
    """No one group size in the dump: the estimator fix alone would meet the group-size refusal next, so
    the hint names both keys."""
    d = tmp_path / "rollout_dump"
    d.mkdir()
    obj = rlvr(1, 1)
    obj["id"] = ["1"] * 4 + ["2"] * 2 + ["3"] * 3 + ["4"] * 3
    (d / "rollout_dump_data.step_1.jsonl").write_text(json.dumps(obj) + "\n")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "roll"], capsys)
    assert code == 2 and not out.exists() and "Traceback" not in err
    hint = " ".join(err.split("hint:", 1)[1].split())
    assert "--set adv_estimator=grpo" in hint and "--set actor_infer.generating_args.num_return_sequences=N" in hint
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "roll", "--set", "adv_estimator=grpo"], capsys)
    assert code == 2 and "defaults to 1" in err and "1 of 2 rows" in " ".join(err.split())


def test_library_run_takes_the_same_group_size(tmp_path):
    import advcli

    d = tmp_path / "rollout_data"
    d.mkdir()
    samples = slime_build(d, 0, 0)
    out = tmp_path / "o.parquet"
    result = advcli.run(str(d), str(out), flavor="slime")
    assert any("group size 4 from the dump's group_index" in x for x in result.from_dump)
    got = [row["advantages"][0] for row in pq.read_table(out).to_pylist()]
    assert np.allclose(got, slime_grpo(samples), rtol=1e-5, atol=1e-5)


def test_trl_group_size_from_runs_of_equal_prompt(tmp_path, capsys):
    """TRL's completions dump with num_generations=4 (TRL's GRPO default is 8): `--flavor trl` alone takes 4
    from the runs of equal prompt and gives TRL's own logged advantages; a size the user sets still wins."""
    d = tmp_path / "out" / "completions"
    d.mkdir(parents=True)
    exp = [a for step in (10, 20) for a in trl_write_step(d / f"completions_{step:05d}.parquet", step, step // 10)]
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", d.parent, "-o", out, "--flavor", "trl", "--json"], capsys)
    assert code == 0, err
    assert any(f"group size {TRL_G} from the dump's runs of equal prompt" in x for x in json.loads(stdout)["from_dump"])
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-5)
    code, _, err = run_main(["run", d.parent, "-o", out, "--flavor", "trl", "--set", "num_generations=8",
                             "--force"], capsys)
    assert code == 2 and "groups of 8" in err  # 12 rows a step: the user's 8 is kept, and refused


def _canonical_dump(path, with_prompt_id: bool, with_values: bool):
    """Two responses of 3 tokens (mask all 1), rewards 1 and 0, in advcli's own layout."""
    import pyarrow as pa

    cols = {"reward": [1.0, 0.0], "response_mask": [[1, 1, 1], [1, 1, 1]]}
    if with_prompt_id:
        cols["prompt_id"] = ["p", "p"]
    if with_values:
        cols["values"] = [[0.5, 0.25, 0.0], [0.0, 0.0, 0.0]]
    pq.write_table(pa.table(cols), path)


def test_no_flavor_picks_grpo_by_prompt_id_else_gae_by_values(tmp_path, capsys):
    """With no --flavor and no estimator: verl, GRPO on a dump with group ids (rewards 1, 0: mean 1/2,
    unbiased std √(1/2), A = ±(1/2)/(√(1/2) + 1e-6) on every token), GAE on one with values only
    (γ = λ = 1, last-token reward: A_t = r − V_t, verl's default whitening then centres them)."""
    grpo, gae, none = (str(tmp_path / f"{n}.parquet") for n in ("grpo", "gae", "none"))
    _canonical_dump(grpo, True, False)
    _canonical_dump(gae, False, True)
    _canonical_dump(none, False, False)
    rc, out, err = run_main(["run", grpo, "-o", str(tmp_path / "o1.parquet")], capsys)
    assert rc == 0 and "verl grpo (the dump has prompt_id)" in out + err
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    got = pq.read_table(tmp_path / "o1.parquet").column("advantages").to_pylist()
    np.testing.assert_allclose(np.array(got), [[a] * 3, [-a] * 3], rtol=1e-6)
    rc, out, err = run_main(["run", gae, "-o", str(tmp_path / "o2.parquet")], capsys)
    assert rc == 0 and "verl gae (the dump has values and no prompt_id)" in out + err
    raw = np.array([[0.5, 0.75, 1.0], [0.0, 0.0, 0.0]])
    mean, std = raw.mean(), raw.std(ddof=1)
    got = np.array(pq.read_table(tmp_path / "o2.parquet").column("advantages").to_pylist())
    np.testing.assert_allclose(got, (raw - mean) / np.sqrt(std ** 2 + 1e-8), rtol=1e-5, atol=1e-6)
    rc, out, err = run_main(["run", none, "-o", str(tmp_path / "o3.parquet")], capsys)
    assert rc == 2 and "neither prompt_id (for GRPO) nor values (for GAE)" in err
    assert "--flavor verl --set algorithm.adv_estimator=NAME" in err
    assert not (tmp_path / "o3.parquet").exists()
