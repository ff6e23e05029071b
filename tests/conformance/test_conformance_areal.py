"""AReaL's released package (``areal``, 1.0.4: the only release on the package index, older than the commit
the flavor was first matched against) against `advcli run --flavor areal`. The expected numbers come from the
installed release's own ``PPOActor._compute_advantages`` (``areal/trainer/ppo/actor.py``) with its
``Normalization`` and ``KLEstimator`` (``areal/utils/data.py``), run on packed batches laid out as AReaL lays
them (a prompt token, then the response; ``loss_mask`` and ``logprobs`` rolled by the method itself,
``ref_logp`` already aligned), for the reward shaping, the KL reward of each estimator, GAE and both
normalisations.

AReaL 1.0.4 normalises groups in fixed consecutive slices of ``NormConfig.group_size`` rows, where the
flavor (the newest verified state) takes each prompt's actual group: the release's settings
(``advcli.norm_groups=slices``) reproduce it, and the default does not when groups are uneven."""
from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from _released import (
    advcli_run,
    assert_matches,
    package_code,
    package_method,
    random_rows,
    release,
    release_settings,
    require,
)

VERSION = require("areal")


def _areal() -> dict:
    ns: dict[str, Any] = {"torch": torch, "np": np, "dist": dist, "Any": Any, "NormConfig": Any,
                          "functools": functools}
    package_code("areal.utils.data", ["Normalization", "KLEstimator"], ns)
    ns["_compute_advantages"] = package_method("areal.trainer.ppo.actor", "PPOActor", "_compute_advantages", ns)
    return ns


AREAL = _areal()
PROMPT = 1  # prompt tokens per sequence


def norm_config(mean="group", std="group", group_size=1, leave1out=False, unbiased=True, eps=1e-5):
    return SimpleNamespace(mean_level=mean, mean_leave1out=leave1out, std_level=std, std_unbiased=unbiased,
                           group_size=group_size, eps=eps)


def release_advantages(rows, reward_norm=None, adv_norm=None, kl_ctl=0.0, kl="k1", bias=0.0, scaling=1.0,
                       clip=20.0, discount=1.0, lam=1.0):
    """1.0.4's own _compute_advantages on the rows as one packed, right-padded batch; the advantages of
    each row's response tokens (rolled coordinates: response token j sits at PROMPT − 1 + j)."""
    width = PROMPT + max(len(r["mask"]) for r in rows) + 1  # room for the token after the last
    bs = len(rows)
    input_ids = torch.ones(bs, width, dtype=torch.long)
    attention = torch.zeros(bs, width)
    loss_mask = torch.zeros(bs, width)
    logprobs = torch.zeros(bs, width)
    ref = torch.zeros(bs, width)
    for i, r in enumerate(rows):
        n = len(r["mask"])
        attention[i, :PROMPT + n] = 1
        loss_mask[i, PROMPT:PROMPT + n] = torch.tensor(r["mask"], dtype=torch.float32)
        logprobs[i, PROMPT:PROMPT + n] = torch.tensor(r["old"])
        ref[i, PROMPT - 1:PROMPT - 1 + n] = torch.tensor(r["ref"])  # the reference model's rolled output
    config = SimpleNamespace(overlong_reward_penalty=False, use_decoupled_loss=True, recompute_logprob=False)
    actor = SimpleNamespace(
        config=config, reward_bias=bias, reward_scaling=scaling, reward_clip=clip, kl_ctl=kl_ctl,
        kl_estimator=AREAL["KLEstimator"](kl), discount=discount, gae_lambda=lam, mask_no_eos_with_zero=False,
        reward_norm=AREAL["Normalization"](reward_norm) if reward_norm else None,
        adv_norm=AREAL["Normalization"](adv_norm) if adv_norm else None)
    data = {"input_ids": input_ids, "attention_mask": attention, "loss_mask": loss_mask, "logprobs": logprobs,
            "ref_logp": ref, "rewards": torch.tensor([r["reward"] for r in rows])}
    out = AREAL["_compute_advantages"](actor, data)
    adv = torch.zeros(bs, width)
    for i, r in enumerate(rows):
        n = len(r["mask"])
        adv[i, :n] = out["advantages"][i, PROMPT - 1:PROMPT - 1 + n]
    return adv


def flavor_settings(reward_norm=None, adv_norm=None, **kw) -> dict:
    s = {"actor.kl_ctl": kw.get("kl_ctl", 0.0), "actor.kl_estimator": kw.get("kl", "k1"),
         "actor.reward_bias": kw.get("bias", 0.0), "actor.reward_scaling": kw.get("scaling", 1.0),
         "actor.discount": kw.get("discount", 1.0), "actor.gae_lambda": kw.get("lam", 1.0),
         "actor.use_decoupled_loss": "true"}
    for section, cfg in (("reward_norm", reward_norm), ("adv_norm", adv_norm)):
        if cfg is not None:
            for f in ("mean_level", "std_level", "group_size", "eps"):
                value = getattr(cfg, f)
                s[f"actor.{section}.{f}"] = "null" if value is None else value
            s[f"actor.{section}.mean_leave1out"] = str(cfg.mean_leave1out).lower()
            s[f"actor.{section}.std_unbiased"] = str(cfg.std_unbiased).lower()
    return s


def areal_rows(seed: int, sizes: list[int]) -> list[dict]:
    rows = random_rows(seed, sizes)
    for r in rows:  # AReaL's dumps name the inference engine's log-probs rollout_log_probs; no critic
        r["rollout"] = r.pop("old")
        del r["values"]
    return rows


def run(tmp_path, rows, settings, extra=()):
    data = [dict(r, old=r["rollout"]) for r in rows]
    return advcli_run(tmp_path, data, "areal", settings, list(extra), rename={"old_log_probs": "rollout_log_probs"})


def as_release(rows):
    return [dict(r, old=r["rollout"]) for r in rows]


@pytest.mark.parametrize("seed", (0, 1, 2))
@pytest.mark.parametrize("kl", ["k1", "k2", "k3"])
def test_full_groups_match_release(tmp_path, seed, kl):
    """Groups of equal size G = NormConfig.group_size: 1.0.4's slices are the prompts' groups, so the
    newest flavor and the release agree (reward shaping, KL reward, GAE, group reward_norm, batch adv_norm)."""
    rows = areal_rows(seed, [4, 4, 4])
    reward_norm, adv_norm = norm_config(group_size=4), norm_config("batch", "batch")
    kw = dict(kl_ctl=0.1, kl=kl, bias=-0.5, scaling=10.0, discount=0.98, lam=0.95)
    expected = release_advantages(as_release(rows), reward_norm, adv_norm, **kw)
    out = run(tmp_path, rows, flavor_settings(reward_norm, adv_norm, **kw))
    assert_matches(out["advantages"], expected, rows, f"areal {VERSION} (KL {kl})", atol=3e-5)


@pytest.mark.parametrize("seed", (0, 1))
@pytest.mark.parametrize("leave1out,unbiased", [(False, True), (True, True), (False, False)])
def test_release_slices_match_release(tmp_path, seed, leave1out, unbiased):
    """Uneven groups (3, 5, 4 rows) with group_size 4: 1.0.4 normalises the rows in slices of 4 whatever
    their prompt; `--set` of the release's settings reproduces it, the newest flavor (per-prompt groups) does
    not."""
    rows = areal_rows(seed, [3, 5, 4])
    reward_norm = norm_config(group_size=4, leave1out=leave1out, unbiased=unbiased)
    expected = release_advantages(as_release(rows), reward_norm)
    out = run(tmp_path, rows, flavor_settings(reward_norm), release_settings(release("areal", "1.0.4")))
    assert_matches(out["advantages"], expected, rows, f"areal {VERSION} slices", atol=3e-5)
    newest = run(tmp_path, rows, flavor_settings(reward_norm))
    with pytest.raises(AssertionError):
        assert_matches(newest["advantages"], expected, rows, "the newest flavor on uneven groups")


def test_group_size_left_at_one_gives_zeros(tmp_path):
    """1.0.4 with reward_norm at group level and group_size left at 1: every row is its own group, the
    centred reward is 0, so every advantage is 0 (without adv_norm)."""
    rows = areal_rows(3, [4, 4])
    reward_norm = norm_config(group_size=1)
    expected = release_advantages(as_release(rows), reward_norm)
    assert float(expected.abs().max()) == 0.0
    out = run(tmp_path, rows, flavor_settings(reward_norm), release_settings(release("areal", "1.0.4")))
    assert all(v == 0.0 for row in out["advantages"] for v in row)
    newest = run(tmp_path, rows, flavor_settings(reward_norm))
    assert any(v != 0.0 for row in newest["advantages"] for v in row)


@pytest.mark.parametrize("seed", (0, 1))
@pytest.mark.parametrize("sizes,adv", [([4, 4, 3], False), ([4, 3], True), ([3], False)])
def test_release_remainder_slice_matches_release(tmp_path, seed, sizes, adv):
    """A step that is not a whole number of slices (11 rows in slices of 4, 7 rows, 3 rows < group_size): 1.0.4
    leaves the rest's group mean and std at 0 and divides it by eps (AReaL #1673); the release's settings
    reproduce what the release computed, adv_norm (batch level) included, and the run warns naming the bug."""
    rows = areal_rows(seed, sizes)
    reward_norm = norm_config(group_size=4)
    adv_norm = norm_config("batch", "batch") if adv else None
    expected = release_advantages(as_release(rows), reward_norm, adv_norm)
    assert adv or float(expected.abs().max()) > 1e3  # the tail: reward / eps (batch adv_norm then rescales it)
    out = run(tmp_path, rows, flavor_settings(reward_norm, adv_norm), release_settings(release("areal", "1.0.4")))
    assert_matches(out["advantages"], expected, rows, f"areal {VERSION} remainder slice", rtol=1e-5, atol=3e-5)


@pytest.mark.parametrize("std,unbiased", [("group", True), ("group", False), ("batch", True)])
def test_release_group_size_one_leave_one_out_matches_release(tmp_path, std, unbiased):
    """1.0.4 with group_size 1 and mean_leave1out: each row is centred on 0 (the release's special case) and
    divided by its std (1 unbiased, |x| biased) or the batch std about those zero means; the release runs it,
    so `--flavor areal@1.0.4` does (it was refused)."""
    rows = areal_rows(4, [4, 4])
    reward_norm = norm_config(std=std, group_size=1, leave1out=True, unbiased=unbiased)
    expected = release_advantages(as_release(rows), reward_norm)
    out = run(tmp_path, rows, flavor_settings(reward_norm), release_settings(release("areal", "1.0.4")))
    assert_matches(out["advantages"], expected, rows, f"areal {VERSION} group_size 1, leave-one-out", atol=3e-5)
