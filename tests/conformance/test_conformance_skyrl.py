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
import pyarrow as pa
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


def _zero_variance_filter():
    """The installed release's ``zero_variance_filter`` (skyrl/train/utils/trainer_utils.py) and whether it takes
    the loss masks and a tolerance (0.3.0 on) or compares numpy's std of every reward with 0 (0.1.0, 0.2.0)."""
    import inspect

    ns = package_code("skyrl.train.utils.trainer_utils", ["zero_variance_filter"],
                      {"np": np, "defaultdict": defaultdict, "List": list, "Optional": Optional})
    fn = ns["zero_variance_filter"]
    return fn, "loss_masks" in inspect.signature(fn).parameters


def _flat_rows(seed: int) -> list[dict]:
    """random_rows plus the groups zero_variance_filter tells apart: three rewards of 0.1 (numpy's float64 std of
    them is 1.4e-17, not 0), equal rewards beside an untrained row (loss mask all 0) of another reward, rewards
    5e-7 apart, and a group of equal dyadic rewards."""
    rows = random_rows(seed, group_sizes(seed))
    extra = random_rows(50 + seed, [3, 3, 2, 4], rewards="positive")
    for r, (g, reward) in zip(extra, [("q0", 0.1)] * 3 + [("q1", 0.9), ("q1", 0.4), ("q1", 0.4)]
                              + [("q2", 0.5), ("q2", 0.5 + 5e-7)] + [("q3", 0.25)] * 4):
        r["prompt_id"], r["reward"] = g, reward
    extra[3]["mask"] = [0] * len(extra[3]["mask"])  # q1's 0.9: not live
    return rows + extra


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("estimator", ["grpo", "reinforce++"])
def test_zero_variance_filter_with_reward_kl_matches_release(tmp_path, seed, estimator):
    """``postprocess_generator_output`` (skyrl/train/trainer.py) with zero_variance_filter: the release's own
    zero_variance_filter on the rewards (as Python floats: the float64 column) and uids, called as the trainer calls
    it, the loss masks of the rows it drops zeroed; then compute_approx_kl (k3) × the zeroed loss mask,
    ``rewards − kl·β`` and the estimator. advcli finds the same flat groups and gives the same token rewards and
    advantages."""
    zvf, new_rule = _zero_variance_filter()
    rows = _flat_rows(seed)
    uids = [r["prompt_id"] for r in rows]
    rewards = [float(r["reward"]) for r in rows]
    masks = [list(r["mask"]) for r in rows]
    kept = set(zvf(rewards, uids, loss_masks=masks, tol=1e-6) if new_rule else zvf(rewards, uids))
    assert len(kept) < len(rows)  # the filter acts on this batch
    loss_mask = padded(rows, "mask")
    for i in range(len(rows)):
        if i not in kept:
            loss_mask[i] = 0.0
    beta = 0.3
    kld = SKYRL["compute_approx_kl"](padded(rows, "old"), padded(rows, "ref"), loss_mask=loss_mask,
                                     kl_estimator_type="k3")
    tlr = token_rewards(rows) - kld * beta
    gamma = 0.9 if estimator == "reinforce++" else 1.0
    adv, _ = SKYRL[FUNCTIONS[estimator]](token_level_rewards=tlr, response_mask=response_mask(rows),
                                         index=np.array(uids), values=None, gamma=gamma, lambd=1.0,
                                         grpo_norm_by_std=True, config=None)
    A = "trainer.algorithm."
    out = advcli_run(tmp_path, rows, "skyrl", {A + "advantage_estimator": estimator, A + "gamma": gamma,
                                               A + "use_kl_in_reward": "true", A + "use_kl_loss": "false",
                                               A + "kl_loss_coef": beta, A + "zero_variance_filter": "true"},
                     extra=AT_RELEASE, reward_type=pa.float64())
    assert_matches(out["token_level_rewards"], tlr, rows, f"skyrl {VERSION} zero_variance_filter token rewards")
    assert_matches(out["advantages"], adv, rows, f"skyrl {VERSION} zero_variance_filter {estimator} advantages")


# ------------------------------------------------------------------------------- step-wise trajectories
class _Batch(dict):
    """TrainingInputBatch as compute_advantages_and_returns reads it: tensors by key, ``metadata``, ``to``."""

    def __init__(self, tensors, metadata):
        super().__init__(tensors)
        self.metadata = metadata

    def to(self, _device):
        return self


def _trajectories(seed: int) -> tuple[list[dict], list[bool]]:
    """random_rows' rows cut into trajectories of 1-3 turns (the last turn's uid and reward are the ones SkyRL
    reads): (rows, is_last_step)."""
    rows = random_rows(seed, [3, 4, 1, 3], max_len=6)
    rng = np.random.default_rng(100 + seed)
    out, last = [], []
    for r in rows:
        for _ in range(int(rng.integers(0, 3))):  # earlier turns: other ids, other rewards, lengths 1-7
            n = int(rng.integers(1, 8))
            out.append(dict(prompt_id=f"turn{len(out)}", reward=float(rng.normal()),
                            mask=[int(x) for x in (rng.random(n) > 0.3)], old=[-1.0] * n, ref=[-1.0] * n,
                            values=[0.0] * n))
            last.append(False)
        out.append(r)
        last.append(True)
    return out, last


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("estimator,batch_normalize", [("grpo", False), ("rloo", False), ("grpo", True)])
def test_step_wise_matches_release(tmp_path, seed, estimator, batch_normalize):
    """The installed release's own RayPPOTrainer.compute_advantages_and_returns (skyrl/train/trainer.py), its
    step-wise branch, on a batch laid out as convert_prompts_responses_to_batch_tensors lays it out (right-padded
    [B, T], SkyRL's response_mask 1 on [0, L)); only the registry lookup of ppo_utils.compute_advantages_and_returns
    is replaced by the estimator function it finds. Compared over each row's own length (advcli writes L_i values):
    at 0.1.0 the last step's padded row copied to each turn, from 0.2.0 the value × each turn's own mask."""
    import types

    import pyarrow as pa
    import pyarrow.parquet as pq
    from _released import package_method, write_parquet
    from typer.testing import CliRunner

    from advcli.cli import app

    rows, last = _trajectories(seed)
    ns = {"torch": torch, "np": np, "TrainingInputBatch": _Batch, "logger": types.SimpleNamespace(info=lambda *_: None),
          "ppo_utils": types.SimpleNamespace(compute_advantages_and_returns=lambda adv_estimator, **kw:
                                             SKYRL[FUNCTIONS[adv_estimator]](**kw))}
    method = package_method("skyrl.train.trainer", "RayPPOTrainer", "compute_advantages_and_returns", ns)
    algo = types.SimpleNamespace(advantage_estimator=estimator, gamma=1.0, lambd=1.0, grpo_norm_by_std=True)
    cfg = types.SimpleNamespace(generator=types.SimpleNamespace(step_wise_trajectories=True),
                                trainer=types.SimpleNamespace(algorithm=algo))
    data = _Batch({"rewards": token_rewards(rows), "response_mask": response_mask(rows),
                   "loss_mask": padded(rows, "mask"), "values": None,
                   "is_last_step": torch.tensor(last, dtype=torch.bool)},
                  {"uids": [r["prompt_id"] for r in rows], "avg_response_length": 0.0,
                   "is_last_step": last})  # 0.1.0 reads the tensor, 0.2.0 on the metadata list
    out = method(types.SimpleNamespace(cfg=cfg, all_metrics={}), data)
    settings = ["--set", "generator.step_wise_trajectories=true", "--set",
                f"trainer.algorithm.advantage_estimator={estimator}"]
    if batch_normalize:  # 0.1.0's normalize_advantages_dict (ppo_utils.py); 0.2.0 on: test_flavor_skyrl.py
        norm = package_code(PPO, ["normalize_advantages_dict"], {"torch": torch, "TrainingInputBatch": _Batch,
                                                                 "Float": _Float}, optional=True)
        if "normalize_advantages_dict" not in norm:
            pytest.skip(f"skyrl {VERSION} normalises in RayPPOTrainer._normalize_advantages (tested elsewhere)")
        out = norm["normalize_advantages_dict"](out)
        settings += ["--set", "trainer.algorithm.advantage_batch_normalize=true"]
    src = write_parquet(rows, str(tmp_path / "in.parquet"))
    t = pq.read_table(src)
    pq.write_table(t.append_column("is_last_step", pa.array(last, pa.bool_())), src)
    dst = str(tmp_path / "out.parquet")
    argv = ["run", src, "-o", dst, "--flavor", f"skyrl@{VERSION}", "--force", "--device", "cpu", *settings]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    got = pq.read_table(dst).column("advantages").to_pylist()
    assert_matches(got, out["advantages"], rows, f"skyrl {VERSION} step-wise {estimator} advantages")
    # the batch holds an earlier turn longer than its last step (where 0.1.0's copy and 0.2.0's differ)
    ends = [i for i, x in enumerate(last) if x]
    last_len = [len(rows[next(e for e in ends if e >= i)]["mask"]) for i in range(len(rows))]
    assert any(len(r["mask"]) > n for r, n in zip(rows, last_len))
