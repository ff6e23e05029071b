"""areal-jsonl: AReaL's rollout/{version}/{task_id}.jsonl (one file per prompt group), built here from
the field list of spec/dumps.md §8. Expected advantages computed independently: verl GRPO
((s − μ_g)/(σ_g unbiased + 1e-6)) and RLOO (s − mean of the others)."""
import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import edit_record, run_main

import advcli


def build(root, n=4):
    rng = np.random.default_rng(0)
    groups = []
    for version in (1, 2):
        for task in (0, 1, 7):
            d = root / "rollout" / str(version)
            d.mkdir(parents=True, exist_ok=True)
            recs = [{"task_id": task, "sample_idx": i, "seqlen": 30 + i, "prompt_len": 20, "head_version": version,
                     "tail_version": version, "reward": float(rng.choice([0.0, 1.0, 0.5])),
                     "prompt": f"<|im_start|>user\nq{task}<|im_end|>", "completion": f"c{i}<|im_end|>"}
                    for i in range(n)]
            (d / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
            groups.append(recs)
    ev = root / "eval-rollout" / "1"
    ev.mkdir(parents=True)
    (ev / "0.jsonl").write_text(json.dumps(groups[0][0]) + "\n")
    return groups


def save_config(trial):
    """``trial/config.yaml`` as AReaL's save_config writes it (yaml.dump of the dataclasses, sort_keys=False):
    the GRPO example's actor section among keys advcli does not read."""
    import yaml

    norm = {"mean_leave1out": False, "std_unbiased": True, "eps": 1e-5, "group_size": 1}
    cfg = {"experiment_name": "gsm8k-grpo", "trial_name": "trial0",
           "gconfig": {"n_samples": 4, "max_new_tokens": 1024, "temperature": 1.0},
           "actor": {"path": "Qwen/Qwen2.5-1.5B-Instruct", "optimizer": {"lr": 1.7e-5, "type": "adam"},
                     "reward_norm": {"mean_level": "group", "std_level": "group", **norm},
                     "adv_norm": {"mean_level": "batch", "std_level": "batch", **norm},
                     "reward_scaling": 10.0, "reward_bias": -0.5, "reward_clip": 20.0, "overlong_reward_penalty": False,
                     "overlong_tokens": None, "overlong_penalty_factor": None, "mask_no_eos_with_zero": False,
                     "discount": 1.0, "gae_lambda": 1.0, "gae_lambda_kwargs": {}, "kl_ctl": 0.0,
                     "kl_estimator": "k1", "recompute_logprob": True, "use_decoupled_loss": True,
                     "eps_clip": 0.4, "max_new_tokens": 1024},
           "ref": {"path": "Qwen/Qwen2.5-1.5B-Instruct"}}
    (trial / "config.yaml").write_text(yaml.dump(cfg, default_flow_style=False, sort_keys=False))


@pytest.mark.parametrize("chunk", ["4096", "5"])
def test_grpo_and_rloo(tmp_path, capsys, chunk):
    groups = build(tmp_path / "trial")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=grpo", "--chunk-rows", chunk, "-q"], capsys)
    assert code == 0, err
    got = pq.read_table(out).column("advantages").to_pylist()
    exp = []
    for g in groups:
        s = [r["reward"] for r in g]
        mu = sum(s) / len(s)
        sd = math.sqrt(sum((x - mu) ** 2 for x in s) / (len(s) - 1))
        exp += [(x - mu) / (sd + 1e-6) for x in s]
    assert np.allclose(got, exp, rtol=1e-5, atol=1e-5)
    code, _, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "verl", "--force",
                             "--set", "algorithm.adv_estimator=rloo", "-q"], capsys)
    assert code == 0, err
    got = pq.read_table(out).column("advantages").to_pylist()
    exp = []
    for g in groups:
        s = [r["reward"] for r in g]
        exp += [x * len(s) / (len(s) - 1) - sum(s) / (len(s) - 1) for x in s]
    assert np.allclose(got, exp, rtol=1e-5, atol=1e-5)


def test_convert_lengths_steps_and_eval_skipped(tmp_path, capsys):
    build(tmp_path / "trial")
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", tmp_path / "trial", "-o", out], capsys)
    assert code == 0, err
    assert "eval-rollout" in err and "skipped" in err
    t = pq.read_table(out)
    assert t.num_rows == 24 and t.column("response_length").to_pylist()[:4] == [10, 11, 12, 13]
    assert t.column("step").to_pylist() == [1] * 12 + [2] * 12
    assert len(set(t.column("prompt_id").to_pylist())) == 6


def test_group_ids_do_not_depend_on_where_the_dump_lies(tmp_path, capsys):
    """The same trial in two folders, and one version folder given alone (what a follower reads of a step), give
    the same group ids (they hashed the file's absolute path: a copy, or a follower's snapshot, got others)."""
    ids = {}
    for name in ("a/trial", "b/c/trial"):
        build(tmp_path / name)
    for key, spec in (("a", "a/trial"), ("b", "b/c/trial"), ("step", "a/trial/rollout/2")):
        out = tmp_path / f"{key}.parquet"
        code, _, err = run_main(["convert", tmp_path / spec, "-o", out], capsys)
        assert code == 0, err
        ids[key] = pq.read_table(out).column("prompt_id").to_pylist()
    assert ids["a"] == ids["b"] and ids["step"] == ids["a"][12:] and len(set(ids["a"])) == 6


def test_one_eval_file_directly(tmp_path, capsys):
    build(tmp_path / "trial")
    code, _, err = run_main(["convert", tmp_path / "trial" / "eval-rollout" / "1" / "0.jsonl",
                             "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err


def test_type_change_names_line(tmp_path, capsys):
    build(tmp_path / "trial")
    p = tmp_path / "trial" / "rollout" / "2" / "7.jsonl"
    lines = p.read_text().splitlines()
    r = json.loads(lines[2])
    r["head_version"] = "two"
    lines[2] = json.dumps(r)
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["convert", tmp_path / "trial", "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and "rollout/2/7.jsonl:3: field 'head_version'" in err


def test_inspect(tmp_path, capsys):
    build(tmp_path / "trial")
    code, out, err = run_main(["inspect", tmp_path / "trial"], capsys)
    assert code == 0, err
    assert "areal-jsonl" in out and "task_id" in out and "6 (sizes: 6×4)" in out


def test_inspect_suggests_areal_under_a_saved_token_weighted_adv_norm(tmp_path, capsys):
    """A trial whose config.yaml turns on adv_norm (token-weighted: the response lengths make the mask run
    builds): inspect, which opens the dump without that mask, said the lengths were missing and suggested verl's
    GRPO, another estimator. It suggests --flavor areal, and the command gives what run gives."""
    build(tmp_path / "trial")
    save_config(tmp_path / "trial")
    code, out, err = run_main(["inspect", tmp_path / "trial", "--json"], capsys)
    assert code == 0, err
    example = json.loads(out)["dump"]["example"]
    assert example.endswith("--output out.parquet --flavor areal"), example
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    code, _, err = run_main(["run", tmp_path / "trial", "-o", a, "--flavor", "areal", "-q"], capsys)
    assert code == 0, err
    code, _, err = run_main(["run", tmp_path / "trial", "-o", b, "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo", "-q"], capsys)
    assert code == 0, err
    assert pq.read_table(a).column("advantages") != pq.read_table(b).column("advantages")  # not a stand-in


def test_task_files_in_numeric_order(tmp_path, capsys):
    """Task ids are numbers: rollout/1/2.jsonl comes before rollout/1/10.jsonl (not text order)."""
    d = tmp_path / "trial" / "rollout" / "1"
    d.mkdir(parents=True)
    for task in (10, 2, 1):
        recs = [{"task_id": task, "sample_idx": i, "seqlen": 30, "prompt_len": 20, "head_version": 1,
                 "tail_version": 1, "reward": float(i), "prompt": f"q{task}", "completion": "c"} for i in range(2)]
        (d / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", tmp_path / "trial", "-o", out], capsys)
    assert code == 0, err
    assert pq.read_table(out).column("task_id").to_pylist() == [1, 1, 2, 2, 10, 10]


def read_it_with(out: str) -> list[str]:
    import shlex

    line = next(ln for ln in out.splitlines() if ln.startswith("read it with"))
    return shlex.split(line.removeprefix("read it with"))


@pytest.mark.parametrize("raw_key", ["original_reward", "original_rewards"])
def test_original_reward_is_the_recomputed_reward(tmp_path, capsys, raw_key):
    """AReaL's rollout-time reward normalisation (gconfig.reward_normalization) writes the group's population
    z-score as ``reward`` and the raw value as ``original_reward`` (workflow_executor.py L1033-1035 @ cbff54d6):
    the recomputation starts from the raw reward, and the summary says so."""
    d = tmp_path / "trial" / "rollout" / "1"
    d.mkdir(parents=True)
    raws = {0: [1.0, 0.0, 0.0, 0.0], 3: [0.5, 1.0, 0.0, 0.25]}
    for task, raw in raws.items():
        mu = sum(raw) / len(raw)
        pstd = math.sqrt(sum((x - mu) ** 2 for x in raw) / len(raw))  # remote_inf_engine.py: std(unbiased=False)
        recs = [{"task_id": task, "sample_idx": i, "seqlen": 30, "prompt_len": 20, "head_version": 1,
                 "tail_version": 1, "reward": (r - mu) / (pstd + 1e-8), raw_key: r, "prompt": f"q{task}",
                 "completion": "c"} for i, r in enumerate(raw)]
        (d / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    code, out, err = run_main(["inspect", tmp_path / "trial"], capsys)
    assert code == 0, err
    assert raw_key in out
    words = read_it_with(out)
    assert words[words.index("--flavor") + 1] == "areal" and "actor.kl_ctl=0" in words  # no config.yaml: no KL
    out_path = tmp_path / "out.parquet"
    verl_rloo = ["run", str(tmp_path / "trial"), "--flavor", "verl", "--set", "algorithm.adv_estimator=rloo"]
    code, _, err = run_main([*verl_rloo, "-o", out_path, "--force"], capsys)
    assert code == 0, err
    assert f"reward = {raw_key}" in err  # the summary names the reward that ran
    assert "--column reward=normalized_reward" in " ".join(err.split())  # and the one AReaL trained on
    t = pq.read_table(out_path)
    exp = []
    for raw in raws.values():  # RLOO of the raw rewards: s − mean of the others
        exp += [x - (sum(raw) - x) / (len(raw) - 1) for x in raw]
    assert np.allclose(t.column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)
    assert np.allclose(t.column("reward").to_pylist(), [x for raw in raws.values() for x in raw])
    code, _, err = run_main(["convert", tmp_path / "trial", "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err
    norm = pq.read_table(tmp_path / "c.parquet").column("normalized_reward").to_pylist()
    assert norm[0] == pytest.approx(math.sqrt(3), rel=1e-5)  # (1 − 0.25)/sqrt(3/16): the dump's own value, kept
    # the reward AReaL trained on: the z-score, by --column
    code, _, err = run_main([*verl_rloo, "-o", out_path, "--force", "--column", "reward=normalized_reward"], capsys)
    assert code == 0, err
    zs = pq.read_table(out_path).column("normalized_reward").to_pylist()
    exp = []
    for k in range(0, len(zs), 4):
        z = zs[k:k + 4]
        exp += [x - (sum(z) - x) / 3 for x in z]
    assert np.allclose(pq.read_table(out_path).column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)


def _normalised_dump(trial, raws: dict) -> list[float]:
    """AReaL's JSONL with rollout-time reward normalisation (remote_inf_engine.py L180-215 @ cbff54d6: each
    reward replaced by its group's population z-score (r − mean)/(std + 1e-8), the raw one written as
    original_reward); returns the z-scores in row order."""
    d = trial / "rollout" / "1"
    d.mkdir(parents=True)
    zs = []
    for task, raw in raws.items():
        mu = sum(raw) / len(raw)
        pstd = math.sqrt(sum((x - mu) ** 2 for x in raw) / len(raw))
        z = [(r - mu) / (pstd + 1e-8) for r in raw]
        zs += z
        recs = [{"task_id": task, "sample_idx": i, "seqlen": 30, "prompt_len": 20, "head_version": 1,
                 "tail_version": 1, "reward": z[i], "original_reward": r, "prompt": f"q{task}", "completion": "c"}
                for i, r in enumerate(raw)]
        (d / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return zs


def test_rollout_time_normalisation_is_the_reward_areal_trained_on(tmp_path, capsys):
    """gconfig.reward_normalization (the trial's config.yaml, or shown by the records' original_reward): AReaL's
    trainer starts from the z-score, so --flavor areal alone reproduces the run. With kl_ctl 0, no adv_norm,
    γ = λ = 1, bias 0 and scaling 1, each response's advantage is its reward: the z-score (by hand above)."""
    import yaml

    raws = {0: [1.0, 0.0, 0.0, 1.0], 3: [3.0, 1.0, 0.0, 0.0]}
    trial = tmp_path / "trial"
    zs = _normalised_dump(trial, raws)
    raw_rows = [x for raw in raws.values() for x in raw]
    cfg = {"gconfig": {"n_samples": 4, "max_new_tokens": 512, "reward_normalization": True},
           "actor": {"path": "m", "reward_norm": None, "adv_norm": None, "reward_scaling": 1.0, "reward_bias": 0.0,
                     "kl_ctl": 0.0}}
    (trial / "config.yaml").write_text(yaml.dump(cfg, sort_keys=False))
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", trial / "rollout", "-o", out, "--flavor", "areal"], capsys)
    assert code == 0, err
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), zs, rtol=1e-5, atol=1e-6)
    assert zs[4] == pytest.approx(2 / math.sqrt(1.5), rel=1e-6)  # [3, 1, 0, 0]: (3 − 1)/sqrt(6/4), population std
    # the dump moved away from its trial: the records show the setting, and the summary says so
    moved = tmp_path / "elsewhere"
    _normalised_dump(moved, raws)
    code, _, err = run_main(["run", moved / "rollout", "-o", out, "--flavor", "areal", "--set", "actor.kl_ctl=0",
                             "--force"], capsys)
    assert code == 0, err
    assert "gconfig.reward_normalization=true from the dump's records" in " ".join(err.split())
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), zs, rtol=1e-5, atol=1e-6)
    # set off: the raw rewards; and AReaL refuses it beside actor.reward_norm
    code, _, err = run_main(["run", moved / "rollout", "-o", out, "--flavor", "areal", "--set", "actor.kl_ctl=0",
                             "--set", "gconfig.reward_normalization=false", "--force"], capsys)
    assert code == 0, err
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), raw_rows, rtol=1e-5, atol=1e-6)
    code, _, err = run_main(["run", moved / "rollout", "-o", out, "--flavor", "areal", "--set", "actor.kl_ctl=0",
                             "--set", "actor.reward_norm.mean_level=group", "--force"], capsys)
    assert code == 2 and "AReaL refuses the two together" in err
    # the config says true, but the records carry no original_reward (AReaL normalises only
    # InteractionWithTokenLogpReward workflows): nothing was normalised, the records win, the summary says so
    plain = tmp_path / "plain"
    d = plain / "rollout" / "1"
    d.mkdir(parents=True)
    for task, raw in raws.items():
        (d / f"{task}.jsonl").write_text("".join(json.dumps(
            {"task_id": task, "sample_idx": i, "seqlen": 30, "prompt_len": 20, "head_version": 1, "tail_version": 1,
             "reward": r, "prompt": f"q{task}", "completion": "c"}) + "\n" for i, r in enumerate(raw)))
    (plain / "config.yaml").write_text(yaml.dump(cfg, sort_keys=False))
    code, _, err = run_main(["run", plain / "rollout", "-o", out, "--flavor", "areal", "--force"], capsys)
    assert code == 0, err
    assert "gconfig.reward_normalization=false from the dump's records" in " ".join(err.split())
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), raw_rows, rtol=1e-5, atol=1e-6)
    # the same config given with --config: the records still decide; --set decides over them
    with_cfg = ["run", plain / "rollout", "-o", out, "--flavor", "areal", "--config", plain / "config.yaml", "--force"]
    code, _, err = run_main(with_cfg, capsys)
    assert code == 0, err
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), raw_rows, rtol=1e-5, atol=1e-6)
    code, _, err = run_main(with_cfg + ["--set", "gconfig.reward_normalization=true"], capsys)
    assert code == 2 and "normalized_reward" in err
    # a converted dump keeps what its records showed
    conv = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", moved / "rollout", "-o", conv], capsys)
    assert code == 0, err
    code, _, err = run_main(["run", conv, "-o", out, "--flavor", "areal", "--set", "actor.kl_ctl=0", "--force"], capsys)
    assert code == 0, err
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), zs, rtol=1e-5, atol=1e-6)
    # and so does the file read back as a table (pq.read_table keeps the schema's metadata, not the footer's)
    got = advcli.run(pq.read_table(conv), flavor="areal", settings={"actor.kl_ctl": 0}).table
    assert got.column("advantages").to_pylist() == pq.read_table(out).column("advantages").to_pylist()


def test_replay_dump_refused(tmp_path, capsys):
    """AReaL #1407's trajectory replay dumps (step_{step:06d}.pt, step_{step:06d}_dp_{rank}.pt: torch.save of the
    batch) are not merged upstream: refused with the JSONL dump to use, nothing written, no traceback."""
    import torch

    d = tmp_path / "trajectories"
    d.mkdir()
    torch.save([{"input_ids": torch.zeros(2, 4, dtype=torch.long), "rewards": torch.ones(2)}], d / "step_000007.pt")
    for spec in (d, d / "step_000007.pt"):
        code, _, err = run_main(["run", spec, "-o", tmp_path / "o.parquet", "--set", "algorithm.adv_estimator=grpo"],
                                capsys)
        assert code == 2 and "step_000007.pt" in err and "#1407" in err and "rollout.dump_to_file=true" in err
        assert "Traceback" not in err and not (tmp_path / "o.parquet").exists()
    (d / "step_000007.pt").rename(d / "step_000008_dp_3.pt")
    code, _, err = run_main(["inspect", d], capsys)
    assert code == 2 and "AReaL trajectory replay dump" in err


def test_saved_config_given_with_config_runs_as_beside_the_dump(tmp_path, capsys):
    """AReaL's trial config.yaml (the whole experiment, as save_config writes it) given with --config FILE
    --flavor areal: its actor section's training keys (path, optimizer, eps_clip) are not refused, the
    flavor's keys are taken; the numbers are AReaL's GRPO example computed by hand, the same as when advcli
    finds the file beside the dump."""
    import shutil

    from test_first_command import areal_expected

    groups = build(tmp_path / "trial")
    save_config(tmp_path / "trial")
    moved = tmp_path / "elsewhere" / "rollout"
    shutil.copytree(tmp_path / "trial" / "rollout", moved)  # the dump without its trial directory
    out, beside = tmp_path / "o.parquet", tmp_path / "b.parquet"
    code, stdout, err = run_main(["run", moved, "-o", out, "--flavor", "areal", "--config",
                                  tmp_path / "trial" / "config.yaml", "--json"], capsys)
    assert code == 0, err
    # the --config file is the run's configuration: no line saying AReaL's defaults run for want of one
    assert not any("no configuration of the run" in x for x in json.loads(stdout)["from_dump"])
    code, _, err = run_main(["run", tmp_path / "trial" / "rollout", "-o", beside, "--flavor", "areal", "-q"], capsys)
    assert code == 0, err
    got = pq.read_table(out).column("advantages").to_pylist()
    adv, _ = areal_expected(groups)
    assert np.allclose(got, adv, rtol=1e-5, atol=1e-5)
    assert pq.read_table(out).column("advantages").to_pylist() == pq.read_table(beside).column("advantages").to_pylist()


def test_saved_config_with_a_misspelt_actor_key_is_refused(tmp_path, capsys):
    import yaml

    build(tmp_path / "trial")
    save_config(tmp_path / "trial")
    cfg = yaml.safe_load((tmp_path / "trial" / "config.yaml").read_text())
    cfg["actor"]["reward_scalling"] = cfg["actor"].pop("reward_scaling")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.dump(cfg))
    code, _, err = run_main(["run", tmp_path / "trial" / "rollout", "-o", tmp_path / "o.parquet", "--flavor", "areal",
                             "--config", bad], capsys)
    assert code == 2
    assert "'actor.reward_scalling' is not a setting of --flavor areal" in err and "actor.reward_scaling" in err
    # the same file saved beside the dump, where the run finds it: refused the same way, not dropped (which would
    # run actor.reward_scaling at its default)
    build(tmp_path / "trial2")
    (tmp_path / "trial2" / "config.yaml").write_text(yaml.dump(cfg))
    code, _, err = run_main(["run", tmp_path / "trial2" / "rollout", "-o", tmp_path / "o.parquet", "--flavor",
                             "areal"], capsys)
    assert code == 2 and "'actor.reward_scalling' is not a setting of --flavor areal" in err
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("bad", [None, "0", 0.5, True])
def test_a_task_id_that_is_no_integer_is_refused(tmp_path, capsys, bad):
    """The task id groups a file's samples (prompt_id {version}/{task_id}/...): a null one made its sample a group of
    its own, with a group-of-one advantage, exit 0. It is refused naming the file, the line and the field."""
    build(tmp_path / "trial")
    edit_record(tmp_path / "trial" / "rollout" / "1" / "0.jsonl", 1, lambda rec: rec.update(task_id=bad))
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "areal"], capsys)
    assert code == 2 and f"rollout/1/0.jsonl:2: field 'task_id' is {bad!r}; expected an integer" in err, err
    assert "internal error" not in err and not out.exists()


def test_a_task_id_that_is_not_its_files_is_refused(tmp_path, capsys):
    """AReaL writes task t's samples to {t}.jsonl, each with task_id t: a record of another task id in a task's
    file (moved or edited by hand) would be a group of its own; it is refused naming the file, line and both."""
    build(tmp_path / "trial")
    edit_record(tmp_path / "trial" / "rollout" / "1" / "0.jsonl", 2, lambda rec: rec.update(task_id=7))
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "areal"], capsys)
    assert code == 2 and "rollout/1/0.jsonl:3: field 'task_id' is 7, but the file is 0.jsonl" in err, err
    assert not out.exists()


@pytest.mark.parametrize("seqlen, prompt_len", [(5, 20), (30, -1)])
def test_a_seqlen_shorter_than_its_prompt_is_refused(tmp_path, capsys, seqlen, prompt_len):
    """response_length = seqlen − prompt_len (the synthetic mask's length under token-weighted adv_norm): a negative
    one was written as it is, exit 0. Refused naming the file, the line and both fields."""
    build(tmp_path / "trial")
    edit_record(tmp_path / "trial" / "rollout" / "1" / "0.jsonl", 1,
                lambda rec: rec.update(seqlen=seqlen, prompt_len=prompt_len))
    out = tmp_path / "o.parquet"
    for command in (["convert", tmp_path / "trial"], ["run", tmp_path / "trial", "--flavor", "areal"]):
        code, _, err = run_main([*command, "-o", out], capsys)
        assert code == 2 and f"rollout/1/0.jsonl:2: fields 'seqlen' {seqlen} and 'prompt_len' {prompt_len}" in err, err
        assert not out.exists()


def test_a_multi_turn_rows_trained_tokens_come_from_version_rle(tmp_path, capsys):
    """Since AReaL #1408 the writer's prompt_len is the first trained token's position (_split_trajectory_for_dump,
    workflow_executor.py L876-883 @cbff54d6), so seqlen − prompt_len also counts a multi-turn row's tool and context
    tokens; version_rle counts the trained (loss-mask) tokens only (L860-874), which AReaL's token-weighted
    adv_norm sees. A row of 1 + 3 context + 1 generated tokens (version_rle [[1, 2]]) therefore runs as the same row
    written single-turn with 2 generated tokens: the same advantages, response_length 2."""
    def dump(root, multi):
        trial = root / "trial"
        d = trial / "rollout" / "1"
        d.mkdir(parents=True)
        save_config(trial)
        rows = [(1.0, 4, [[1, 2]]), (0.0, 5, [[1, 3]]), (1.0, 7 if multi else 4, [[1, 2]]), (0.0, 4, [[1, 2]])]
        for task in (1, 2):
            recs = [{"task_id": task, "sample_idx": i, "seqlen": seqlen, "prompt_len": 2, "head_version": 1,
                     "tail_version": 1, "version_rle": rle, "reward": r, "prompt": "p", "completion": "c"}
                    for i, (r, seqlen, rle) in enumerate(rows[2 * (task - 1):2 * task])]
            (d / f"{task}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
        return trial / "rollout"

    got = {}
    for multi in (True, False):
        out = tmp_path / f"o{multi}.parquet"
        code, _, err = run_main(["run", dump(tmp_path / str(multi), multi), "-o", out, "--flavor", "areal", "-q"],
                                capsys)
        assert code == 0, err
        got[multi] = pq.read_table(out).to_pydict()
    assert got[True]["response_length"] == [2, 3, 2, 2]
    assert got[True]["advantages"] == got[False]["advantages"]


def test_a_records_shown_default_says_where_it_came_from(tmp_path, capsys):
    """Records without original_reward show gconfig.reward_normalization=false, AReaL's default: the settings line
    showed it with no line saying the dump's records decided it (a value differing from the default had one)."""
    build(tmp_path / "trial")
    code, _, err = run_main(["run", tmp_path / "trial", "-o", tmp_path / "o.parquet", "--flavor", "areal", "--set",
                             "actor.kl_ctl=0"], capsys)
    said = " ".join(err.split())
    assert code == 0 and "gconfig.reward_normalization=false from the dump's records" in said, err
    # a --set of the key is the user's: no records line
    code, _, err = run_main(["run", tmp_path / "trial", "-o", tmp_path / "o.parquet", "--flavor", "areal", "--set",
                             "actor.kl_ctl=0", "--set", "gconfig.reward_normalization=false", "--force"], capsys)
    assert code == 0 and "from the dump's records" not in " ".join(err.split()), err


def test_inspect_without_the_trials_config_suggests_areal_without_its_kl(tmp_path, capsys):
    """A rollout folder copied without the trial's config.yaml: AReaL's defaults put a KL in the reward, which the
    dump cannot give, and inspect suggested verl's GRPO (no stand-in for AReaL's numbers). It suggests --flavor areal
    with the flavor's own KL-off setting (Flavor.kl_off), and the command gives what run gives with it."""
    build(tmp_path / "trial")
    code, out, err = run_main(["inspect", tmp_path / "trial" / "rollout", "--json"], capsys)
    assert code == 0, err
    example = json.loads(out)["dump"]["example"]
    assert example.endswith("--output out.parquet --flavor areal --set actor.kl_ctl=0"), example
    code, _, err = run_main(["run", tmp_path / "trial" / "rollout", "-o", tmp_path / "a.parquet"], capsys)
    assert code == 2 and "actor.kl_ctl=0" in err  # the refusal says the same
