"""OpenRLHF's releases 0.8.7-0.10.3 and SkyRL 0.1.0 (`--flavor NAME@X`), with numbers worked out here from the
formula of that release's code, read at the tag / in the wheel:

- OpenRLHF v0.9.5 / v0.10.3 (openrlhf/trainer/ppo_utils/experience_maker.py compute_advantages_and_returns):
  group_norm on the [G, n] reshape, (r − mean)/(unbiased std + 1e-9), then the cumulative return of M·R with
  γ = 1 (the shaped reward at every token before the row's last), no global normalisation; β = 0: no reward KL.
  Releases up to 0.10.1 take the flat flags (--advantage_estimator, --n_samples_per_prompt, --init_kl_coef);
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
    want = {"0.7.1": "0.7.1", "0.7.5": "0.7.1", "0.8.4": "0.7.1", "0.8.5": "0.8.5", "0.8.6": "0.8.7",
            "0.8.8": "0.8.7", "0.8.9.post1": "0.8.9", "0.9.0": "0.8.9", "0.9.2": "0.9.1", "0.9.3": "0.9.3",
            "0.9.4": "0.9.4", "0.9.10": "0.9.4", "0.10.0": "0.9.4", "0.10.1.post2": "0.9.4"}
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
    (["--flavor", "openrlhf@0.7.0"], "older than 0.7.1"),
    (["--flavor", "skyrl@0.1.0", "--set", "trainer.algorithm.advantage_estimator=maxrl"], "has no maxrl"),
    (["--flavor", "skyrl@0.1.0", "--set", "generator.step_wise_trajectories=true"], "step-wise path"),
    (["--flavor", "skyrl@0.0.1"], "name reservation"),
])
def test_what_an_old_release_lacks_is_refused(argv, says, capsys, sample_path, tmp_path):
    code, _, err = run_main(["run", sample_path, "-o", str(tmp_path / "o.parquet"), *argv], capsys)
    assert code == 2 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "o.parquet").exists()
