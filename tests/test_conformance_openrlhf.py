"""OpenRLHF's released package against `advcli run --flavor openrlhf`: every estimator of the release (flash_reinforce
included) and every KL estimator in the reward, on random steps (several seeds, n = 1 where the estimator allows
it, masks with interior and trailing zeros). Expected numbers: the installed release's
``RemoteExperienceMaker.compute_advantages_and_returns`` / ``get_advantages_and_returns`` /
``get_cumulative_returns`` (``openrlhf/trainer/ppo_utils/experience_maker.py``), ``compute_approx_kl`` and
``compute_reward`` (``openrlhf/models/utils.py``) and ``apply_length_penalties``
(``openrlhf/trainer/ppo_utils/length_penalty.py``), run on one step of right-padded experiences split in
two micro-batches, as the trainer holds them."""
from __future__ import annotations

import itertools
import logging
import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, Optional, Union

import numpy as np
import pytest
import torch
from _released import (
    advcli_run,
    assert_matches,
    installed_release_args,
    package_code,
    package_file,
    padded,
    random_rows,
    require,
)

VERSION = require("openrlhf")
AT_RELEASE = installed_release_args("openrlhf", VERSION)  # that release's settings, as --set
MAKER = "openrlhf.trainer.ppo_utils.experience_maker"


def _openrlhf() -> dict:
    ns: dict[str, Any] = {"torch": torch, "Optional": Optional, "Tuple": tuple, "Union": Union, "List": list,
                          "itertools": itertools, "time": time, "timedelta": timedelta, "Experience": Any,
                          "RayActorGroup": Any, "logger": logging.getLogger("openrlhf"),
                          "KL_IS_WEIGHT_CLIP": 10.0}
    package_code("openrlhf.models.utils", ["compute_approx_kl", "compute_reward", "masked_mean"], ns)
    package_code("openrlhf.trainer.ppo_utils.length_penalty", ["apply_overlong_penalty", "apply_stop_properly_penalty",
                                                               "apply_length_penalties"], ns)
    return package_code(MAKER, ["RemoteExperienceMaker"], ns)


OPENRLHF = _openrlhf()
# flash_reinforce arrived in 0.11.2: an older release (tools/conformance_matrix.py) runs the others
HAS_FLASH = "flash_reinforce" in open(package_file(MAKER), encoding="utf-8").read()
ESTIMATORS = ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo") + (
    ("flash_reinforce",) if HAS_FLASH else ())
GROUPED = ("rloo", "reinforce_baseline", "group_norm", "dr_grpo")


def release_run(rows, estimator: str, n: int, gamma: float, lambd: float, beta: float, kl: str,
                clip=(-10.0, 10.0)):
    """One step through the release's own compute_advantages_and_returns, on two micro-batches of
    experiences (the rows in order; OpenRLHF's ``index`` maps them back to prompt order)."""
    args = SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=n),
        algo=SimpleNamespace(advantage=SimpleNamespace(estimator=estimator, gamma=gamma, lambd=lambd,
                                                       no_std_norm=False),
                             kl=SimpleNamespace(use_loss=False, estimator=kl)),
        reward=SimpleNamespace(clip_range=list(clip), overlong_buffer_len=None, stop_properly_penalty_coef=None))
    maker = object.__new__(OPENRLHF["RemoteExperienceMaker"])
    maker.strategy = SimpleNamespace(args=args)
    maker.kl_ctl = SimpleNamespace(value=beta)
    maker.advantage_estimator = estimator
    mask, old, ref, values = (padded(rows, k) for k in ("mask", "old", "ref", "values"))
    half = len(rows) // 2
    experiences = []
    for part in (slice(0, half), slice(half, len(rows))):
        idx = list(range(len(rows)))[part]
        kl_t = OPENRLHF["compute_approx_kl"](old[part], ref[part], kl_estimator=kl)
        experiences.append(SimpleNamespace(index=idx, rewards=torch.tensor([rows[i]["reward"] for i in idx]),
                                           action_mask=mask[part].bool(), values=values[part] * 1.0,
                                           kl=kl_t, info={}))
    experiences = maker.compute_advantages_and_returns(experiences)
    adv = torch.cat([e.advantages for e in experiences])
    ret = torch.cat([e.returns for e in experiences])
    return adv, ret


def step_rows(seed: int, n: int) -> list[dict]:
    """Rows of one step for OpenRLHF: 5 prompts of n consecutive samples (it reshapes the step to [-1, n])."""
    return random_rows(seed, [n] * 5)


CASES = [(e, n) for e in ESTIMATORS for n in ((3,) if e in GROUPED else (1, 4))]


@pytest.mark.parametrize("seed", (0, 1, 2))
@pytest.mark.parametrize("estimator,n", CASES)
def test_estimator_matches_release(tmp_path, seed, estimator, n):
    rows = step_rows(seed, n)
    gamma, lambd, beta = (0.97, 0.9, 0.02) if estimator in ("gae", "reinforce") else (1.0, 1.0, 0.02)
    adv, ret = release_run(rows, estimator, n, gamma, lambd, beta, "k1")
    out = advcli_run(tmp_path, rows, "openrlhf", {"algo.advantage.estimator": estimator,
                                                  "rollout.n_samples_per_prompt": n, "algo.advantage.gamma": gamma,
                                                  "algo.advantage.lambd": lambd, "algo.kl.init_coef": beta},
                     extra=AT_RELEASE)
    assert_matches(out["advantages"], adv, rows, f"openrlhf {VERSION} {estimator} advantages", atol=2e-5)
    assert_matches(out["returns"], ret, rows, f"openrlhf {VERSION} {estimator} returns", atol=2e-5)


@pytest.mark.parametrize("kl", ["k1", "k2", "k3"])
def test_reward_kl_matches_release(tmp_path, kl):
    """The KL at every position of the reward, k3 with a log-ratio below −10 (0.11.2 clamps its input there;
    the output clamp at 10 gives the same value)."""
    rows = step_rows(4, 2)
    rows[1]["old"][0], rows[1]["ref"][0] = -25.0, -0.1
    rows[2]["old"][0], rows[2]["ref"][0] = -0.1, -12.0
    adv, ret = release_run(rows, "reinforce_baseline", 2, 1.0, 1.0, 0.05, kl)
    out = advcli_run(tmp_path, rows, "openrlhf", {"algo.advantage.estimator": "reinforce_baseline",
                                                  "rollout.n_samples_per_prompt": 2, "algo.kl.init_coef": 0.05,
                                                  "algo.kl.estimator": kl}, extra=AT_RELEASE)
    assert_matches(out["returns"], ret, rows, f"openrlhf {VERSION} returns with KL {kl}", atol=2e-5)
    assert_matches(out["advantages"], adv, rows, f"openrlhf {VERSION} advantages with KL {kl}", atol=2e-5)


def test_flash_reinforce_is_reward_minus_step_mean(tmp_path):
    """By hand: one-token rows, no KL: the advantage is r − mean of the step's rewards, not whitened."""
    rows = random_rows(9, [1] * 6, max_len=1)
    mean = np.mean(np.array([r["reward"] for r in rows], dtype=np.float32))
    out = advcli_run(tmp_path, rows, "openrlhf", {"algo.advantage.estimator": "flash_reinforce",
                                                  "algo.kl.init_coef": 0}, extra=AT_RELEASE)
    expected = torch.tensor([[r["reward"] - mean if r["mask"][0] else 0.0] for r in rows])
    assert_matches(out["advantages"], expected, rows, "flash_reinforce by hand")
