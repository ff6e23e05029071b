"""SkyRL's released package (``skyrl``) against `advcli run --flavor skyrl`: every estimator the flavor offers
and the reward KL of each estimator type, on random batches (several seeds, uneven groups with a singleton,
loss masks with zeros). Expected numbers: the installed release's
``skyrl/backends/skyrl_train/utils/ppo_utils.py`` (the registered estimators, ``compute_approx_kl``,
``masked_whiten``) and ``torch_utils.py`` (``masked_mean``), called as ``RayPPOTrainer`` calls them
(``skyrl/train/trainer.py``: ``compute_advantages_and_returns`` passes SkyRL's ``response_mask``, 1 on every
response position; ``apply_reward_kl_penalty`` subtracts ``kl·max(0, β)`` with the ``loss_mask``)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional, Union

import numpy as np
import pytest
import torch
from _released import (
    advcli_run,
    assert_matches,
    group_sizes,
    installed_release_args,
    package_code,
    padded,
    random_rows,
    require,
)

from advcli.errors import AdvcliError
from advcli.flavors import resolve

VERSION = require("skyrl")
AT_RELEASE = installed_release_args("skyrl", VERSION)  # that release's settings, as --set
SEEDS = (0, 1, 2)
PPO = "skyrl.backends.skyrl_train.utils.ppo_utils"


def _float_hint(*_):
    return torch.Tensor


class _Float:  # jaxtyping's Float[...] in the signatures: an annotation only
    __class_getitem__ = classmethod(_float_hint)


def _skyrl() -> dict:
    ns: dict[str, Any] = {"torch": torch, "np": np, "defaultdict": defaultdict, "Optional": Optional,
                          "Union": Union, "Float": _Float, "Tuple": tuple}
    package_code("skyrl.backends.skyrl_train.utils.torch_utils", ["masked_mean"], ns)
    return package_code(PPO, ["compute_approx_kl", "masked_var", "masked_whiten",
                              "compute_reinforce_plus_plus_outcome_advantage", "compute_rloo_outcome_advantage",
                              "compute_gae_advantage_return", "compute_grpo_outcome_advantage",
                              "compute_maxrl_advantage"], ns, optional=True)  # 0.1.0: no maxrl


SKYRL = _skyrl()
FUNCTIONS = {"grpo": "compute_grpo_outcome_advantage", "rloo": "compute_rloo_outcome_advantage",
             "maxrl": "compute_maxrl_advantage", "reinforce++": "compute_reinforce_plus_plus_outcome_advantage",
             "gae": "compute_gae_advantage_return"}


def response_mask(rows) -> torch.Tensor:
    """SkyRL's response_mask: 1 on every response position of the row (its loss_mask is the mask column)."""
    out = torch.zeros(len(rows), max(len(r["mask"]) for r in rows))
    for i, r in enumerate(rows):
        out[i, :len(r["mask"])] = 1.0
    return out


def token_rewards(rows) -> torch.Tensor:
    """postprocess_generator_output: the row's reward on its last response token."""
    out = torch.zeros(len(rows), max(len(r["mask"]) for r in rows))
    for i, r in enumerate(rows):
        out[i, len(r["mask"]) - 1] = r["reward"]
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("estimator,norm_by_std", [(e, True) for e in FUNCTIONS] + [("grpo", False)])
def test_estimator_matches_release(tmp_path, seed, estimator, norm_by_std):
    if FUNCTIONS[estimator] not in SKYRL:  # the release predates it: advcli refuses it there, as SkyRL would
        with pytest.raises(AdvcliError, match="the trainer itself would not run it"):
            resolve(f"skyrl@{VERSION}", [("trainer.algorithm.advantage_estimator", estimator)])
        pytest.skip(f"skyrl {VERSION} has no {FUNCTIONS[estimator]}")
    rows = random_rows(seed, group_sizes(seed))
    gamma, lam = (0.95, 0.9) if estimator in ("gae", "reinforce++") else (1.0, 1.0)
    adv, ret = SKYRL[FUNCTIONS[estimator]](
        token_level_rewards=token_rewards(rows), response_mask=response_mask(rows),
        index=np.array([r["prompt_id"] for r in rows]), values=padded(rows, "values"), gamma=gamma, lambd=lam,
        grpo_norm_by_std=norm_by_std, config=None)
    A = "trainer.algorithm."
    out = advcli_run(tmp_path, rows, "skyrl", {A + "advantage_estimator": estimator, A + "gamma": gamma,
                                               A + "lambd": lam, A + "grpo_norm_by_std": str(norm_by_std).lower()},
                     extra=AT_RELEASE)
    assert_matches(out["advantages"], adv, rows, f"skyrl {VERSION} {estimator} advantages")
    assert_matches(out["returns"], ret, rows, f"skyrl {VERSION} {estimator} returns")


@pytest.mark.parametrize("kl", ["k1", "abs", "k2", "k3"])
def test_reward_kl_matches_release(tmp_path, kl):
    rows = random_rows(3, group_sizes(3))
    rows[0]["old"][0], rows[0]["ref"][0] = -30.0, -0.1  # a log-ratio past k3's ±20 input clamp
    beta = 0.02
    kld = SKYRL["compute_approx_kl"](padded(rows, "old"), padded(rows, "ref"), loss_mask=padded(rows, "mask"),
                                     kl_estimator_type=kl)
    A = "trainer.algorithm."
    out = advcli_run(tmp_path, rows, "skyrl", {A + "advantage_estimator": "grpo", A + "use_kl_in_reward": "true",
                                               A + "use_kl_loss": "false", A + "kl_estimator_type": kl,
                                               A + "kl_loss_coef": beta}, extra=AT_RELEASE)
    assert_matches(out["token_level_rewards"], token_rewards(rows) - kld * max(0.0, beta), rows,
                   f"skyrl {VERSION} reward KL {kl}")
