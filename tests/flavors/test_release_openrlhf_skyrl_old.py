"""OpenRLHF's releases 0.7.1-0.10.3 and SkyRL 0.1.0 (`--flavor NAME@X`), with numbers worked out here from the
formula of that release's code, read at the tag / in the wheel:

- OpenRLHF v0.9.5 / v0.10.3 (openrlhf/trainer/ppo_utils/experience_maker.py compute_advantages_and_returns):
  group_norm on the [G, n] reshape, (r − mean)/(unbiased std + 1e-9), then the cumulative return of M·R with
  γ = 1 (the shaped reward at every token before the row's last), no global normalisation; β = 0: no reward KL.
  Releases up to 0.10.1 take the flat flags (--advantage_estimator, --n_samples_per_prompt, --init_kl_coef);
- OpenRLHF v0.7.1-v0.8.4 whiten rloo too, v0.7.1-v0.8.5 leave the KL estimate unclamped (models/utils.py
  compute_approx_kl, clamp(-10, 10) from v0.8.6); v0.8.9-v0.10.1 have --enable_vllm_is_correction (models/loss.py
  PolicyLoss.forward: clamp(e^lr, max=HIGH) to v0.9.0, clamp(LOW, HIGH) / --use_icepop in v0.9.1-v0.9.2, the
  types tis|icepop|mis (v0.9.3), then seq-mask-tis); before v0.11.0 the CLI does not refuse dr_grpo at n = 1;
- SkyRL 0.1.0 (skyrl/backends/skyrl_train/utils/ppo_utils.py compute_grpo_outcome_advantage): (s − mean)/(std +
  1e-6) on every response position;
- what a release's code lacks is refused (exit 2), as the trainer itself would not run it.
"""
from __future__ import annotations

import math

import pytest
from _released import advcli_run
from conftest import run_main

from advcli.flavors import get, release_of


def group_norm(rewards: list[float], eps: float) -> list[float]:
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + eps) for r in rewards]


REWARDS = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]


def rows() -> list[dict]:
    return [dict(prompt_id=f"p{i // 4}", reward=r, mask=[1, 1, 1], old=[-1.0] * 3, ref=[-1.2] * 3, values=[0.0] * 3)
            for i, r in enumerate(REWARDS)]


@pytest.mark.parametrize("spec,settings", [
    ("openrlhf@0.9.5", {"advantage_estimator": "group_norm", "n_samples_per_prompt": 4, "init_kl_coef": 0}),
    ("openrlhf@0.8.7", {"advantage_estimator": "group_norm", "n_samples_per_prompt": 4, "init_kl_coef": 0}),
    ("openrlhf@0.10.3", {"algo.advantage.estimator": "group_norm", "rollout.n_samples_per_prompt": 4,
                         "algo.kl.init_coef": 0}),
])
def test_openrlhf_old_releases_group_norm(tmp_path, spec, settings):
    want = group_norm(REWARDS[:4], 1e-9) + group_norm(REWARDS[4:], 1e-9)
    got = advcli_run(tmp_path, rows(), spec, settings)["advantages"]
    for i, row in enumerate(got):
        assert row == pytest.approx([want[i]] * 3, rel=1e-5), f"{spec} row {i}"


def test_openrlhf_old_releases_map_to_their_entries():
    o = get("openrlhf")
    assert release_of(o, "0.10.2").name == release_of(o, "0.10.3").name == "0.10.4"
    assert release_of(o, "0.11.1").name == release_of(o, "3c3be623").name == "0.11.0"
    # the length penalties split 0.8.6 | 0.8.7 (overlong), 0.9.1 | 0.9.2 (stop-properly), 0.9.7 | 0.9.8
    # (max_new_tokens); dynamic filtering 0.8.0.post1 | 0.8.1
    want = {"0.7.1": "0.7.1", "0.7.5": "0.7.1", "0.8.0.post1": "0.7.1", "0.8.1": "0.8.1", "0.8.4": "0.8.1",
            "0.8.5": "0.8.5", "0.8.6": "0.8.6",
            "0.8.8": "0.8.7", "0.8.9.post1": "0.8.9", "0.9.0": "0.8.9", "0.9.1.post1": "0.9.1", "0.9.2": "0.9.2",
            "0.9.3": "0.9.3", "0.9.4": "0.9.4", "0.9.7": "0.9.4", "0.9.8": "0.9.8", "0.9.10": "0.9.8",
            "0.10.0": "0.9.8", "0.10.1.post2": "0.9.8"}
    for v, name in want.items():
        assert release_of(o, v).name == name, v


def test_skyrl_0_1_0_grpo(tmp_path):
    want = group_norm(REWARDS[:4], 1e-6) + group_norm(REWARDS[4:], 1e-6)
    got = advcli_run(tmp_path, rows(), "skyrl@0.1.0", {"trainer.algorithm.advantage_estimator": "grpo"})
    for i, row in enumerate(got["advantages"]):
        assert row == pytest.approx([want[i]] * 3, rel=1e-5), f"row {i}"


@pytest.mark.parametrize("argv,says", [
    (["--flavor", "openrlhf@0.10.3", "--set", "algo.advantage.estimator=flash_reinforce"], "no flash_reinforce"),
    (["--flavor", "openrlhf@0.8.5", "--set", "enable_vllm_is_correction=true"],
     "--enable_vllm_is_correction came with 0.8.9"),
    (["--flavor", "openrlhf@0.9.0", "--set", "enable_vllm_is_correction=true", "--set",
      "vllm_is_correction_type=icepop"], "types tis only"),
    (["--flavor", "openrlhf@0.9.0", "--set", "enable_vllm_is_correction=true", "--set",
      "vllm_is_truncated_threshold=[0.5,5]"], "take one number"),
    (["--flavor", "openrlhf@0.9.3", "--set", "enable_vllm_is_correction=true", "--set",
      "vllm_is_correction_type=seq-mask-tis"], "tis, icepop, mis only"),
    (["--flavor", "openrlhf@0.9.5", "--set", "use_icepop=true"], "0.9.1-0.9.2 only"),
    (["--flavor", "openrlhf@0.10.4", "--set", "algo.advantage.is_correction_enable=true", "--set",
      "algo.advantage.is_correction_type=mis"], "types tis, icepop, seq-mask-tis only"),
    (["--flavor", "openrlhf", "--set", "use_icepop=true"], "0.9.1-0.9.2 only"),
    (["--flavor", "openrlhf@0.3.5"], "older than the oldest release advcli reproduces, 0.3.6.post1"),
    (["--flavor", "skyrl@0.1.0", "--set", "trainer.algorithm.advantage_estimator=maxrl"], "has no maxrl"),
    (["--flavor", "skyrl@0.0.1"], "name reservation"),
])
def test_what_an_old_release_lacks_is_refused(argv, says, capsys, sample_path, tmp_path):
    code, _, err = run_main(["run", sample_path, "-o", str(tmp_path / "o.parquet"), *argv], capsys)
    assert code == 2 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "o.parquet").exists()


# --------------------------------------------- OpenRLHF 0.7.1-0.8.5: whitening and the KL clamp, by hand
def whiten(values: list[float]) -> list[float]:
    """experience_maker.py's step normalisation: over every action token, biased variance, max(var, 1e-8)^-½."""
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return [(v - mean) / math.sqrt(max(var, 1e-8)) for v in values]


def rloo(rewards: list[float]) -> list[float]:
    n = len(rewards)
    return [r - (sum(rewards) - r) / (n - 1) for r in rewards]


@pytest.mark.parametrize("spec,whitened", [("openrlhf@0.7.1", True), ("openrlhf@0.8.4", True),
                                           ("openrlhf@0.8.5", False), ("openrlhf@0.8.6", False),
                                           ("openrlhf", False)])
def test_openrlhf_rloo_whitened_before_0_8_5(tmp_path, spec, whitened):
    """rloo's shaped reward, returned to every token (γ = 1, no KL); 0.7.1-0.8.4 then whiten it over the step's
    action tokens (`not in ["group_norm", "dr_grpo"]`, experience_maker.py @v0.8.4), 0.8.5 on do not."""
    shaped = rloo(REWARDS[:4]) + rloo(REWARDS[4:])
    tokens = whiten([s for s in shaped for _ in range(3)]) if whitened else [s for s in shaped for _ in range(3)]
    got = advcli_run(tmp_path, rows(), spec, {"advantage_estimator": "rloo", "n_samples_per_prompt": 4,
                                              "init_kl_coef": 0})["advantages"]
    for i, row in enumerate(got):
        assert row == pytest.approx(tokens[3 * i:3 * i + 3], rel=1e-5, abs=1e-6), f"{spec} row {i}"


@pytest.mark.parametrize("spec,clamped", [("openrlhf@0.7.5", False), ("openrlhf@0.8.5", False),
                                          ("openrlhf@0.8.6", True), ("openrlhf@0.9.4", True)])
def test_openrlhf_kl_clamp_from_0_8_6(tmp_path, spec, clamped):
    """k1 = old − ref = −24.9 at a row's first token: −β·k1 enters the reward whole before 0.8.6, clamped to
    ±10 from 0.8.6 (compute_approx_kl, models/utils.py @v0.8.6 L40). dr_grpo: r − the group mean, returned to
    every token with the KL terms after it (γ = 1), not whitened."""
    beta = 0.1
    data = [dict(prompt_id="p0", reward=r, mask=[1, 1], old=[-25.0, -1.0], ref=[-0.1, -1.0], values=[0.0, 0.0])
            for r in (1.0, 0.0)]
    k1 = max(-24.9, -10.0) if clamped else -24.9
    want = [[(r - 0.5) - beta * k1, r - 0.5] for r in (1.0, 0.0)]
    got = advcli_run(tmp_path, data, spec, {"advantage_estimator": "dr_grpo", "n_samples_per_prompt": 2,
                                            "init_kl_coef": beta, "kl_estimator": "k1"})["advantages"]
    for i, row in enumerate(got):
        assert row == pytest.approx(want[i], rel=1e-5), f"{spec} row {i}"


# ------------------------------------- OpenRLHF 0.8.9-0.10.1: --enable_vllm_is_correction, by hand
def correction_weights(tmp_path, capsys, spec: str, settings: dict, old: list[list[float]],
                       roll: list[list[float]]):
    """`advcli run` on one group of rows with rollout log-probs: the rollout_is_weights column."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from _released import write_parquet

    data = [dict(prompt_id="p0", reward=float(i % 2), mask=[1] * len(o), old=o, ref=o, values=[0.0] * len(o))
            for i, o in enumerate(old)]
    src, out = str(tmp_path / "in.parquet"), str(tmp_path / "out.parquet")
    t = pq.read_table(write_parquet(data, src))
    pq.write_table(t.append_column("rollout_log_probs", pa.array(roll, pa.list_(pa.float32()))), src)
    argv = ["run", src, "-o", out, "--flavor", spec, "--device", "cpu", "--set", "advantage_estimator=group_norm",
            "--set", f"n_samples_per_prompt={len(old)}", "--set", "init_kl_coef=0"]
    for k, v in settings.items():
        argv += ["--set", f"{k}={v}"]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    return pq.read_table(out).column("rollout_is_weights").to_pylist()


OLD = [[-1.0, -2.0, -0.5], [-1.5, -0.2, -3.0]]
ROLL = [[-1.9, -2.1, -0.4], [-1.3, -0.3, -3.05]]  # old − roll: [0.9, 0.1, −0.1] (mean 0.3), [−0.2, 0.1, 0.05]


@pytest.mark.parametrize("spec,settings,rule", [
    # 0.8.9-0.9.0: clamp(e^(old − roll), max=HIGH), HIGH one float, default 2 (models/loss.py @v0.8.9 L140-142)
    ("openrlhf@0.8.9", {"enable_vllm_is_correction": "true"}, lambda x, row: min(x, 2.0)),
    ("openrlhf@0.9.0", {"enable_vllm_is_correction": "true", "vllm_is_truncated_threshold": 1.1},
     lambda x, row: min(x, 1.1)),
    # 0.9.1-0.9.2: clamp(LOW, HIGH); --use_icepop: e^lr inside [LOW, HIGH], else 0 (models/loss.py @v0.9.1)
    ("openrlhf@0.9.1", {"enable_vllm_is_correction": "true", "vllm_is_truncated_threshold": "[1.0,2.0]"},
     lambda x, row: min(max(x, 1.0), 2.0)),
    ("openrlhf@0.9.2", {"enable_vllm_is_correction": "true", "vllm_is_truncated_threshold": "[1.0,2.0]",
                        "use_icepop": "true"}, lambda x, row: x if 1.0 <= x <= 2.0 else 0.0),
    # 0.9.3 mis (0.9.4 on: seq-mask-tis): e^lr where the row's geometric mean e^(mean lr) is inside [LOW, HIGH]
    ("openrlhf@0.9.3", {"enable_vllm_is_correction": "true", "vllm_is_truncated_threshold": "[0.9,1.2]",
                        "vllm_is_correction_type": "mis"}, lambda x, row: x if 0.9 <= row <= 1.2 else 0.0),
    ("openrlhf@0.10.1", {"enable_vllm_is_correction": "true", "vllm_is_truncated_threshold": "[0.9,1.2]",
                         "vllm_is_correction_type": "seq-mask-tis"}, lambda x, row: x if 0.9 <= row <= 1.2 else 0.0),
])
def test_openrlhf_vllm_is_correction(tmp_path, capsys, spec, settings, rule):
    got = correction_weights(tmp_path, capsys, spec, settings, OLD, ROLL)
    for i, (o, r) in enumerate(zip(OLD, ROLL)):
        lr = [a - b for a, b in zip(o, r)]
        geo = math.exp(sum(lr) / len(lr))
        assert got[i] == pytest.approx([rule(math.exp(x), geo) for x in lr], rel=1e-5), f"{spec} row {i}"


@pytest.mark.parametrize("spec", ["openrlhf@0.7.1", "openrlhf@0.9.0", "openrlhf@0.10.1", "openrlhf@0.10.4"])
def test_openrlhf_dr_grpo_at_n1_before_0_11(tmp_path, spec):
    """Releases before 0.11.0 do not refuse dr_grpo at n = 1 (cli/train_ppo_ray.py @v0.10.1 L557 checks rloo,
    reinforce_baseline and group_norm only): each row is its own group, r − r = 0 at every token (no KL)."""
    data = [dict(r, prompt_id=f"p{i}") for i, r in enumerate(rows())]  # n = 1: one row per prompt
    got = advcli_run(tmp_path, data, spec, {"advantage_estimator": "dr_grpo", "n_samples_per_prompt": 1,
                                              "init_kl_coef": 0})["advantages"]
    assert got == [[0.0] * 3] * len(REWARDS)


@pytest.mark.parametrize("spec", ["openrlhf@0.11.0", "openrlhf@0.11.1", "openrlhf"])
def test_openrlhf_dr_grpo_at_n1_refused_from_0_11(capsys, sample_path, tmp_path, spec):
    code, _, err = run_main(["run", sample_path, "-o", str(tmp_path / "o.parquet"), "--flavor", spec,
                             "--set", "algo.advantage.estimator=dr_grpo", "--set", "algo.kl.init_coef=0"], capsys)
    assert code == 2 and "requires rollout.n_samples_per_prompt > 1" in err, err
