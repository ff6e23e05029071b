"""verl's DAPO reward manager: its overlong penalty (reward.reward_manager.name=dapo with
reward.reward_kwargs.overlong_buffer_cfg) on a Parquet file's raw scores, and on verl's own dumps, whose score
field is the reward function's own where it returns a dict (the manager's logged overlong_reward then added).

Expected values follow verl-project/verl @ 1dda039b, written out here from its code:
- workers/reward_manager/dapo.py L119-132 (and experimental/reward_loop/reward_manager/dapo.py L105-116):
  exceed_len = valid_response_length − (max_resp_len − len), valid_response_length an int64 torch tensor (the
  response's attention mask sum); overlong_reward = min(−exceed_len / len · penalty_factor, 0) — the int64
  tensor's true division gives float32; reward = score + overlong_reward (a Python float plus a float32 tensor:
  float32), put at the response's last token of the float32 reward tensor;
- core_algos.py compute_grpo_outcome_advantage: (s − mean) / (unbiased std + 1e-6) per group, in float32;
- ray_trainer.py _write_generations L459-470: the reward's extra keys are written over the base fields, so a
  reward function returning {"score", "acc", "pred"} leaves its own score in the dump's `score`."""
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import run_main

LEN, FACTOR, MAX = 4, 0.7, 12
DAPO_SETS = ["--set", "reward.reward_manager.name=dapo",
             "--set", "reward.reward_kwargs.overlong_buffer_cfg.enable=true",
             "--set", f"reward.reward_kwargs.overlong_buffer_cfg.len={LEN}",
             "--set", f"reward.reward_kwargs.overlong_buffer_cfg.penalty_factor={FACTOR}",
             "--set", f"reward.reward_kwargs.max_resp_len={MAX}"]


def verl_dapo_reward(score: float, n: int) -> np.float32:
    """verl's float32 arithmetic of the penalty, step by step (numpy float32 stands in for the 0-dim tensors)."""
    exceed = n - (MAX - LEN)
    ratio = np.float32(np.float32(-exceed) / np.float32(LEN))  # int64 / int: float32 true division
    penalty = min(np.float32(ratio * np.float32(FACTOR)), 0)
    return np.float32(np.float32(score) + np.float32(penalty))


def grpo(rewards, groups):
    rewards = np.asarray(rewards, dtype=np.float32)
    out = np.zeros_like(rewards)
    for g in set(groups):
        idx = [i for i, h in enumerate(groups) if h == g]
        s = rewards[idx]
        out[idx] = (s - s.mean(dtype=np.float32)) / (np.float32(s.std(ddof=1, dtype=np.float32)) + np.float32(1e-6))
    return out


# (prompt, score, response tokens): lengths around the buffer's start (MAX − LEN = 8) and its end
ROWS = [("a", 1.0, 5), ("a", 1.0, 9), ("a", 0.0, 12), ("a", 1.0, 8),
        ("b", 0.0, 3), ("b", 1.0, 11), ("b", 1.0, 10), ("b", 0.0, 1)]


def write_parquet(path):
    masks = [[1] * n for _, _, n in ROWS]
    pq.write_table(pa.table({"prompt_id": [p for p, _, _ in ROWS], "reward": [s for _, s, _ in ROWS],
                             "response_mask": pa.array(masks, pa.list_(pa.int8()))}), path)


def first_advantages(path):
    return np.array([a[0] for a in pq.read_table(path).column("advantages").to_pylist()], dtype=np.float32)


def run_with_config(tmp_path, capsys, cfg: dict):
    """The first token's advantages of a run on the Parquet rows with ``cfg`` as the --config file."""
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    write_parquet(src)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    code, _, err = run_main(["run", src, "-o", out, "--flavor", "verl", "--config", tmp_path / "run.yaml", "-q"],
                            capsys)
    assert code == 0, err
    return first_advantages(out)


def expected():
    return grpo([verl_dapo_reward(s, n) for _, s, n in ROWS], [p for p, _, _ in ROWS])


@pytest.mark.parametrize("prefix", ["reward.", "reward_model."])
def test_parquet_scores_get_the_dapo_penalty(tmp_path, capsys, prefix):
    """The penalty before GRPO, by the trainer's key names of either section (the examples write both)."""
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    write_parquet(src)
    sets = [a.replace("reward.", prefix, 1) if a.startswith("reward.reward_kwargs") else a for a in DAPO_SETS]
    if prefix == "reward_model.":
        sets[1] = "reward_model.reward_manager=dapo"
    code, _, err = run_main(["run", src, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                             *sets, "-q"], capsys)
    assert code == 0, err
    got = first_advantages(out)
    assert np.allclose(got, expected(), rtol=1e-5, atol=1e-6)
    plain = grpo([s for _, s, _ in ROWS], [p for p, _, _ in ROWS])
    assert not np.allclose(got, plain, atol=1e-3)  # the penalty changed the numbers


def test_a_config_file_of_the_trainer_gives_the_same_numbers(tmp_path, capsys):
    """The run's Hydra config with its whole reward section (workers, custom function, the manager's other
    settings): the overlong keys are read, the rest ignored, and the numbers are those of --set."""
    cfg = {"algorithm": {"adv_estimator": "grpo"},
           "reward": {"_target_": "verl.workers.config.RewardConfig", "num_workers": 8,
                      "custom_reward_function": {"path": None, "name": "compute_score"},
                      "reward_manager": {"_target_": "verl.workers.config.reward.RewardManagerConfig",
                                         "source": "register", "name": "dapo"},
                      "reward_kwargs": {"overlong_buffer_cfg": {"enable": True, "len": LEN, "penalty_factor": FACTOR,
                                                                "log": False},
                                        "max_resp_len": MAX}}}
    assert np.allclose(run_with_config(tmp_path, capsys, cfg), expected(), rtol=1e-5, atol=1e-6)


def test_the_legacy_section_replaces_the_new_one_as_verl_migrates_it(tmp_path, capsys):
    """A Hydra config of 1dda039b holds reward.reward_manager.name: naive (the default) and, from the command line
    of verl's examples, reward_model.reward_manager: dapo with reward_model.reward_kwargs: verl's migration
    (reward_loop.py L48-72) puts the legacy values in place, the kwargs as a whole."""
    cfg = {"algorithm": {"adv_estimator": "grpo"},
           "reward_model": {"enable": False, "reward_manager": "dapo", "num_workers": None,
                            "reward_kwargs": {"overlong_buffer_cfg": {"enable": True, "len": LEN,
                                                                      "penalty_factor": FACTOR},
                                              "max_resp_len": MAX}},
           "reward": {"num_workers": 8, "reward_manager": {"source": "register", "name": "naive"},
                      "reward_kwargs": {"overlong_buffer_cfg": {"enable": False, "len": 1, "penalty_factor": 9.0},
                                        "max_resp_len": 2}}}
    assert np.allclose(run_with_config(tmp_path, capsys, cfg), expected(), rtol=1e-5, atol=1e-6)


def test_another_manager_or_the_penalty_off_changes_nothing(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    write_parquet(src)
    plain = grpo([s for _, s, _ in ROWS], [p for p, _, _ in ROWS])
    for name, enable in (("naive", "true"), ("dapo", "false")):
        out = tmp_path / f"{name}.parquet"
        sets = [a.replace("name=dapo", f"name={name}").replace("enable=true", f"enable={enable}") for a in DAPO_SETS]
        code, _, err = run_main(["run", src, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                                 *sets, "-q"], capsys)
        assert code == 0, err
        assert np.allclose(first_advantages(out), plain, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("change, said", [
    ("reward.reward_kwargs.max_resp_len=null", "without reward.reward_kwargs.max_resp_len"),
    ("reward.reward_kwargs.overlong_buffer_cfg.len=0", "asserts len > 0"),
    ("reward.reward_kwargs.max_resp_len=3", "max_resp_len >= len"),
])
def test_what_the_manager_asserts_is_refused(tmp_path, capsys, change, said):
    src = tmp_path / "in.parquet"
    write_parquet(src)
    code, _, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--flavor", "verl", *DAPO_SETS,
                             "--set", change], capsys)
    assert code == 2 and said in err and "Traceback" not in err


def dump_records(returns_dict: bool):
    """A legacy trainer's step file with the DAPO manager logging its penalty (overlong_buffer_cfg.log=true)."""
    recs = []
    for p, s, n in ROWS:
        penalty = float(min(np.float32(np.float32(-(n - (MAX - LEN))) / np.float32(LEN)) * np.float32(FACTOR), 0))
        reward = float(verl_dapo_reward(s, n))  # what the manager put in the batch
        if returns_dict:  # math_dapo: {"score", "acc", "pred"} written over the dump's score
            extra = {"score": s, "acc": bool(s), "pred": "x"}
        else:  # a number: the dump's score is the reward's sum, the number is logged as acc
            extra = {"score": reward, "acc": s}
        recs.append({"input": f"user\n{p}\nassistant\n", "output": "y" * n, "gts": "1", "step": 2, **extra,
                     "overlong_reward": penalty, "overlong": penalty < 0})
    return recs


@pytest.mark.parametrize("returns_dict", [True, False])
def test_a_legacy_dump_adds_the_logged_penalty_where_its_score_lacks_it(tmp_path, capsys, returns_dict):
    d = tmp_path / "rollout"
    d.mkdir()
    with open(d / "2.jsonl", "w") as fh:
        for r in dump_records(returns_dict):
            fh.write(json.dumps(r) + "\n")
    # the run's config beside the dump names the penalty: the dump's rewards hold it, so it is not applied again
    (d / ".hydra").mkdir()
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump({
        "algorithm": {"adv_estimator": "grpo"},
        "reward": {"reward_manager": {"name": "dapo"},
                   "reward_kwargs": {"overlong_buffer_cfg": {"enable": True, "len": LEN, "penalty_factor": FACTOR,
                                                             "log": True}, "max_resp_len": MAX}}}))
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", d, "-o", out], capsys)
    assert code == 0, err
    t = pq.read_table(out)
    assert np.allclose(t.column("advantages").to_numpy(), expected(), rtol=1e-5, atol=1e-6)
    assert np.allclose(t.column("reward").to_numpy(), [verl_dapo_reward(s, n) for _, s, n in ROWS])
    assert ("reward = score + overlong_reward" in err) == returns_dict


def test_the_penalty_asked_again_on_a_dump_without_token_counts_is_refused(tmp_path, capsys):
    """advcli.rewards_shaped=false on verl's response-level dump: the penalty's n is nowhere in it."""
    d = tmp_path / "rollout"
    d.mkdir()
    with open(d / "2.jsonl", "w") as fh:
        for r in dump_records(True):
            fh.write(json.dumps(r) + "\n")
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=grpo", *DAPO_SETS,
                             "--set", "advcli.rewards_shaped=false"], capsys)
    assert code == 2 and "the overlong penalty needs each response's token count" in err
    assert not (tmp_path / "o.parquet").exists()


def test_a_validation_dump_takes_its_reward_field(tmp_path, capsys):
    """validation_data_dir: _validate writes reward = the reward tensor's sum (ray_trainer.py L678) beside the
    reward function's own score (its dict's, written over the base field): the reward is the manager's."""
    d = tmp_path / "val"
    d.mkdir()
    with open(d / "2.jsonl", "w") as fh:
        for r in dump_records(True):
            r = {k: v for k, v in r.items() if k not in ("overlong_reward", "overlong")}  # log=false
            r["reward"] = float(verl_dapo_reward(r["score"], len(r["output"])))
            fh.write(json.dumps(r) + "\n")
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"],
                            capsys)
    assert code == 0, err
    t = pq.read_table(out)
    assert np.allclose(t.column("advantages").to_numpy(), expected(), rtol=1e-5, atol=1e-6)
    assert t.column("score").to_pylist() == [s for _, s, _ in ROWS]  # the dump's score kept
    assert "reward = the record's reward field" in err

