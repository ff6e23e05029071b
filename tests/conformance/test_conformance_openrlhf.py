"""OpenRLHF's released package against `advcli run --flavor openrlhf`: every estimator of the release (flash_reinforce
included) and every KL estimator in the reward, on random steps (several seeds, n = 1 where the estimator allows
it, masks with interior and trailing zeros). Expected numbers: the installed release's
``RemoteExperienceMaker.compute_advantages_and_returns`` / ``get_advantages_and_returns`` /
``get_cumulative_returns`` (``openrlhf/trainer/ppo_utils/experience_maker.py``), ``compute_approx_kl`` and
``compute_reward`` (``openrlhf/models/utils.py``) and ``apply_length_penalties``
(``openrlhf/trainer/ppo_utils/length_penalty.py``), run on one step of right-padded experiences split in
two micro-batches, as the trainer holds them."""
from __future__ import annotations

import copy
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

from advcli.errors import AdvcliError
from advcli.flavors import get, resolve

C_ENABLE = "algo.advantage.is_correction_enable"
VERSION = require("openrlhf")
RELEASE = tuple(int(x) for x in VERSION.split(".")[:3])
if RELEASE < (0, 7, 1):
    pytest.skip(f"openrlhf {VERSION}: before 0.7.1 the advantages are whitened in the replay buffer "
                "(test_conformance_openrlhf_old.py runs the release)", allow_module_level=True)
AT_RELEASE = installed_release_args("openrlhf", VERSION)  # that release's settings, as --set
MAKER = "openrlhf.trainer.ppo_utils.experience_maker"


def _openrlhf() -> dict:
    ns: dict[str, Any] = {"torch": torch, "Optional": Optional, "Tuple": tuple, "Union": Union, "List": list,
                          "itertools": itertools, "time": time, "timedelta": timedelta, "Experience": Any,
                          "RayActorGroup": Any, "logger": logging.getLogger("openrlhf"),
                          "KL_IS_WEIGHT_CLIP": 10.0,
                          "ABC": object, "deepcopy": copy.deepcopy}  # what 0.9.0's RemoteExperienceMaker uses
    import torch.nn.functional as F

    ns["F"], ns["List"] = F, list
    package_code("openrlhf.models.utils", ["compute_approx_kl", "compute_reward", "masked_mean"], ns)
    for module in ("openrlhf.utils.utils", "openrlhf.datasets.utils"):  # 0.7.4.post2-0.8.0's normalisation pads
        try:
            package_code(module, ["zero_pad_sequences"], ns)
            break
        except (AssertionError, ImportError, OSError):
            pass
    try:
        package_code("openrlhf.trainer.ppo_utils.length_penalty", ["apply_overlong_penalty",
                                                                   "apply_stop_properly_penalty",
                                                                   "apply_length_penalties"], ns)
    except AssertionError:  # before 0.9.3 the overlong penalty sits inside compute_advantages_and_returns
        pass
    return package_code(MAKER, ["RemoteExperienceMaker"], ns)


OPENRLHF = _openrlhf()
# flash_reinforce arrived in 0.11.2: an older release (tools/conformance_matrix.py) runs the others
HAS_FLASH = "flash_reinforce" in open(package_file(MAKER), encoding="utf-8").read()
ESTIMATORS = ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo") + (
    ("flash_reinforce",) if HAS_FLASH else ())
GROUPED = ("rloo", "reinforce_baseline", "group_norm", "dr_grpo")


def release_run(rows, estimator: str, n: int, gamma: float, lambd: float, beta: float, kl: str,
                clip=(-10.0, 10.0), reward_dtype=torch.float32, penalties: dict | None = None):
    """One step through the release's own compute_advantages_and_returns, on equal micro-batches of
    experiences (the rows in order; OpenRLHF's ``index`` maps them back to prompt order from 0.8.6; before, the
    rewards are cut back with ``chunk(len(experiences))`` and 0.7.4.post2-0.8.0 stack the padded micro-batches,
    so the micro-batches hold the same number of rows, as micro_rollout_batch_size makes them). ``penalties``:
    the length penalties' flags (overlong_buffer_len, overlong_penalty_factor, stop_properly_penalty_coef,
    max_new_tokens, max_len), each experience holding its rows' response_length (the span of the action mask, as
    samples_generator.py computes it) and truncated flags."""
    lp = {"overlong_buffer_len": None, "overlong_penalty_factor": 1.0, "stop_properly_penalty_coef": None,
          "max_new_tokens": None, "max_len": 2048, **(penalties or {})}
    generate_max_len = lp["max_new_tokens"] or 1024  # 0.8.7-0.9.7: --generate_max_len, default 1024
    args = SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=n),
        algo=SimpleNamespace(advantage=SimpleNamespace(estimator=estimator, gamma=gamma, lambd=lambd,
                                                       no_std_norm=False),
                             kl=SimpleNamespace(use_loss=False, estimator=kl)),
        reward=SimpleNamespace(clip_range=list(clip), overlong_buffer_len=lp["overlong_buffer_len"],
                               overlong_penalty_factor=lp["overlong_penalty_factor"],
                               stop_properly_penalty_coef=lp["stop_properly_penalty_coef"]),
        data=SimpleNamespace(max_len=lp["max_len"]),
        # the same under the flat flags of releases 0.8.7-0.10.1 (--advantage_estimator, ...)
        advantage_estimator=estimator, n_samples_per_prompt=n, gamma=gamma, lambd=lambd, no_advantage_std_norm=False,
        use_kl_loss=False, kl_estimator=kl, reward_clip_range=list(clip),
        overlong_buffer_len=lp["overlong_buffer_len"], overlong_penalty_factor=lp["overlong_penalty_factor"],
        stop_properly_penalty_coef=lp["stop_properly_penalty_coef"], max_len=lp["max_len"],
        max_new_tokens=lp["max_new_tokens"], generate_max_len=generate_max_len)
    args.rollout.max_new_tokens = lp["max_new_tokens"]
    maker = object.__new__(OPENRLHF["RemoteExperienceMaker"])
    maker.strategy = SimpleNamespace(args=args)
    maker.args = args  # 0.9.0 reads self.args in the normalisation
    maker.kl_ctl = SimpleNamespace(value=beta)
    maker.advantage_estimator = estimator
    mask, old, ref, values = (padded(rows, k) for k in ("mask", "old", "ref", "values"))
    experiences = []
    for chunk in torch.arange(len(rows)).chunk(2 if len(rows) % 2 == 0 else 5):
        idx = chunk.tolist()
        part = slice(idx[0], idx[-1] + 1)
        kl_t = OPENRLHF["compute_approx_kl"](old[part], ref[part], kl_estimator=kl)
        rewards = torch.tensor([rows[i]["reward"] for i in idx], dtype=reward_dtype)
        cut = torch.tensor([bool(rows[i].get("extra", {}).get("truncated")) for i in idx])
        length = torch.tensor([response_length(rows[i]) for i in idx])
        # 0.7.1-0.8.2 log info["reward"]; 0.8.7-0.9.7 read the lengths and truncated flags from info
        experiences.append(SimpleNamespace(index=idx, rewards=rewards,
                                           action_mask=mask[part].bool(), values=values[part] * 1.0,
                                           kl=kl_t, info={"reward": rewards, "response_length": length,
                                                          "truncated": cut},
                                           response_length=length, truncated=cut))
    experiences = maker.compute_advantages_and_returns(experiences)
    adv = torch.cat([e.advantages for e in experiences])
    ret = torch.cat([e.returns for e in experiences])
    return adv, ret


def response_length(row: dict) -> int:
    """The response length the release's generator records (tags v0.8.7 ... v0.11.0): the span of the action mask
    (samples_generator.py, 0.9.1 on), the generated ids (0.8.9-0.9.0), those with the EOS appended to a response
    without one, a truncated one (0.8.7-0.8.8)."""
    if RELEASE < (0, 8, 9):
        return len(row["mask"]) + int(bool(row.get("extra", {}).get("truncated")))
    if RELEASE < (0, 9, 1):
        return len(row["mask"])
    on = [t for t, m in enumerate(row["mask"]) if m]
    return on[-1] - on[0] + 1 if on else 0


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


@pytest.mark.skipif(RELEASE < (0, 9, 8), reason="before 0.9.8 the controller's input is not replayable (refused)")
@pytest.mark.parametrize("estimator,batch", [("reinforce", None), ("group_norm", 40)])
def test_adaptive_kl_controller_matches_release(tmp_path, estimator, batch):
    """Four steps under the release's own AdaptiveKLController (openrlhf/trainer/ppo_utils/kl_controller.py): each
    step made with kl_ctl.value, then ``kl_ctl.update(status["kl"], rollout.batch_size × n_samples_per_prompt)``
    (ppo_trainer.py train_step), status["kl"] being ppo_train's average of the micro-batches' ``info["kl"]`` (each
    row's masked_mean(compute_approx_kl(old, ref), action_mask)) weighted by their rows (ppo_actor.py)."""
    ns = package_code("openrlhf.trainer.ppo_utils.kl_controller", ["AdaptiveKLController"], {"np": np})
    n, prompts, target, horizon = 3, 5, 0.12, 60.0
    ctl = ns["AdaptiveKLController"](0.05, target, horizon)
    rows, adv, ret, betas = [], [], [], []
    for step in range(4):
        part = step_rows(30 + step, n)
        for k, r in enumerate(part):  # a KL that moves around the target from step to step
            r["step"] = step
            r["ref"] = (np.array(r["old"]) - (0.2 + 0.15 * step) * (1 + (k % 3) / 3)).astype(np.float32).tolist()
        a, b = release_run(part, estimator, n, 1.0, 1.0, ctl.value, "k2")
        betas.append(ctl.value)
        rows += part
        adv += [a[i, :len(r["mask"])] for i, r in enumerate(part)]
        ret += [b[i, :len(r["mask"])] for i, r in enumerate(part)]
        mask, old, ref = (padded(part, k) for k in ("mask", "old", "ref"))
        parts = torch.arange(len(part)).chunk(2)  # the micro-batches, weighted by their rows
        row_kl = [OPENRLHF["masked_mean"](OPENRLHF["compute_approx_kl"](old[i], ref[i], kl_estimator="k2"),
                                          mask[i], dim=-1) for i in parts]
        status_kl = sum(float(k.mean()) * len(k) for k in row_kl) / len(part)
        ctl.update(status_kl, (prompts if batch is None else batch) * n)
    assert len(set(np.sign(np.diff(betas)))) == 2, betas  # β went up and down: the clip and its inside both ran
    settings = {"algo.advantage.estimator": estimator, "rollout.n_samples_per_prompt": n, "algo.kl.init_coef": 0.05,
                "algo.kl.estimator": "k2", "algo.kl.target": target, "algo.kl.horizon": horizon}
    if batch is not None:
        settings["rollout.batch_size"] = batch
    out = advcli_run(tmp_path, rows, "openrlhf", settings, extra=AT_RELEASE)
    width = max(len(r["mask"]) for r in rows)
    pad = [torch.nn.functional.pad(t, (0, width - len(t))) for t in adv]
    pad_ret = [torch.nn.functional.pad(t, (0, width - len(t))) for t in ret]
    assert_matches(out["advantages"], torch.stack(pad), rows, f"openrlhf {VERSION} adaptive KL advantages",
                   atol=2e-5)
    assert_matches(out["returns"], torch.stack(pad_ret), rows, f"openrlhf {VERSION} adaptive KL returns", atol=2e-5)


def test_flash_reinforce_is_reward_minus_step_mean(tmp_path):
    """By hand: one-token rows, no KL: the advantage is r − mean of the step's rewards, not whitened."""
    rows = random_rows(9, [1] * 6, max_len=1)
    mean = np.mean(np.array([r["reward"] for r in rows], dtype=np.float32))
    out = advcli_run(tmp_path, rows, "openrlhf", {"algo.advantage.estimator": "flash_reinforce",
                                                  "algo.kl.init_coef": 0}, extra=AT_RELEASE)
    expected = torch.tensor([[r["reward"] - mean if r["mask"][0] else 0.0] for r in rows])
    assert_matches(out["advantages"], expected, rows, "flash_reinforce by hand")


# ------------------------------------------------------------------ the length penalties (apply_length_penalties)
PENALTIES = {  # the release's flags -> advcli's --set of the same
    "overlong": {"overlong_buffer_len": 4.0, "max_new_tokens": 10},
    "overlong, factor, max_len": {"overlong_buffer_len": 5.0, "overlong_penalty_factor": 0.3, "max_len": 9},
    "stop-properly factor": {"stop_properly_penalty_coef": 0.5},
    "stop-properly reward": {"stop_properly_penalty_coef": -0.5},
    "both": {"overlong_buffer_len": 3.0, "overlong_penalty_factor": 0.7, "max_new_tokens": 8,
             "stop_properly_penalty_coef": 0.0},
}
AS_SET = {"overlong_buffer_len": "reward.overlong_buffer_len",
          "overlong_penalty_factor": "reward.overlong_penalty_factor",
          "stop_properly_penalty_coef": "reward.stop_properly_penalty_coef",
          "max_new_tokens": "rollout.max_new_tokens", "max_len": "data.max_len"}


@pytest.mark.parametrize("penalty", list(PENALTIES))
@pytest.mark.parametrize("estimator", ("group_norm", "rloo", "reinforce", "gae"))
def test_length_penalties_match_release(tmp_path, penalty, estimator):
    """The DAPO overlong penalty on the span of the action mask (interior zeros inside it, trailing zeros
    outside; the generated ids before 0.9.1) and the ProRL stop-properly penalty on the rows marked truncated,
    before the group shaping. The releases without a flag skip it (0.8.7: overlong; 0.9.2: stop-properly; 0.9.8:
    a negative coefficient)."""
    coef = PENALTIES[penalty].get("stop_properly_penalty_coef")
    if RELEASE < (0, 8, 7) or (coef is not None and RELEASE < ((0, 9, 8) if coef < 0 else (0, 9, 2))):
        pytest.skip(f"openrlhf {VERSION} has no such flag")
    n = 3 if estimator in GROUPED else 1
    rows = random_rows(5, [n] * 6, max_len=12)
    rng = np.random.default_rng(5)
    for r in rows:
        r["extra"] = {"truncated": float(rng.random() < 0.4)}
    flags = PENALTIES[penalty]
    gamma, lambd = (0.97, 0.9) if estimator in ("gae", "reinforce") else (1.0, 1.0)
    adv, ret = release_run(rows, estimator, n, gamma, lambd, 0.0, "k1", penalties=flags)
    out = advcli_run(tmp_path, rows, "openrlhf", {"algo.advantage.estimator": estimator,
                                                  "rollout.n_samples_per_prompt": n, "algo.advantage.gamma": gamma,
                                                  "algo.advantage.lambd": lambd, "algo.kl.init_coef": 0.0,
                                                  **{AS_SET[k]: v for k, v in flags.items()}}, extra=AT_RELEASE)
    assert_matches(out["advantages"], adv, rows, f"openrlhf {VERSION} {estimator} {penalty} advantages", atol=2e-5)
    assert_matches(out["returns"], ret, rows, f"openrlhf {VERSION} {estimator} {penalty} returns", atol=2e-5)


# ------------------------------------------------------------------ the IS correction (PolicyLoss.forward)
LOSS = "openrlhf.models.loss"
NEW_FLAGS = "is_correction_level" in open(package_file(LOSS), encoding="utf-8").read()  # 0.11.2 (#1339)


def _policy_loss():
    """The release's PolicyLoss, with its aggregate_loss replaced by the per-token loss itself: with
    log_probs = old_log_probs (ratio 1) and advantages −1, PolicyLoss's per-token loss is 1, so what comes out
    is the coefficient it multiplies the loss by."""
    import torch.nn as nn
    import torch.nn.functional as F

    ns: dict[str, Any] = {"torch": torch, "nn": nn, "F": F, "dist": None, "Optional": Optional, "Tuple": tuple,
                          "aggregate_loss": lambda loss, mask, **kw: loss}
    package_code("openrlhf.models.utils", ["masked_mean"], ns)
    return package_code(LOSS, ["PolicyLoss"], ns)["PolicyLoss"]


def release_coefficient(rows, flags: dict):
    """(coefficient [B, T], vllm_kl, is_filter_ratio or None) of one micro-batch holding the whole step."""
    loss_fn = _policy_loss()(**flags)
    mask, old, roll = (padded(rows, k) for k in ("mask", "old", "roll"))
    lp = old.clone().requires_grad_(True)
    out = loss_fn(lp, old, -torch.ones_like(old), action_mask=mask, rollout_log_probs=roll)
    coef = out[0]
    if coef.dim() == 0:
        # releases before aggregate_loss (to 0.10.1) take masked_mean(loss, mask) over the tokens inside forward:
        # the per-token loss is coef·e^(lp − old), so d loss / d lp_t = coef_t·m_t / Σm at lp = old
        (grad,) = torch.autograd.grad(coef, lp)
        coef = grad * mask.sum()
    return coef.detach(), float(out[3]), (float(out[4]) if len(out) > 4 else None)


def correction_rows(seed: int) -> list[dict]:
    rows = step_rows(seed, 4)
    rng = np.random.default_rng(seed + 100)
    for r in rows:  # a rollout engine that disagrees: some tokens far off, most near
        r["roll"] = (np.array(r["old"]) + rng.normal(0.0, 0.5, len(r["old"]))).astype(np.float32).tolist()
    return rows


NEW_CASES = [("token", "mask", "ratio", [0.5, 5.0]), ("token", "clip", "ratio", [0.5, 5.0]),
             ("token", "mask", "ratio", [0.8, 1.25]), ("seq", "mask", "ratio", [0.9, 1.1]),
             ("token", "mask", "binary_kl", [0.0, 0.01]), ("seq", "mask", "binary_kl", [0.0, 0.005]),
             ("token", "mask", "tv", [0.0, 0.05]), ("seq", "mask", "tv", [0.0, 0.1])]
LOSS_SRC = open(package_file(LOSS), encoding="utf-8").read()
# the IS correction's flags of the installed release (cli/train_ppo_ray.py, models/loss.py PolicyLoss.__init__):
# 0.8.9-0.9.0 one upper threshold, tis only; 0.9.1-0.9.2 LOW HIGH and use_icepop; 0.9.3 mis, then seq-mask-tis
IS_KIND = ("none" if "vllm_is_truncated_threshold" not in LOSS_SRC else "0.8.9"
           if "vllm_is_truncated_threshold: float" in LOSS_SRC else "0.9.1" if "use_icepop" in LOSS_SRC
           else "0.9.3" if '"mis"' in LOSS_SRC else "0.9.4")
SEQ = "mis" if IS_KIND == "0.9.3" else "seq-mask-tis"
OLD_CASES = ([("tis", [0.0, 2.0]), ("tis", [0.0, 1.1])] if IS_KIND == "0.8.9"
             else [("tis", [0.5, 5.0]), ("tis", [0.8, 1.25]), ("icepop", [0.8, 1.25])]
             + ([] if IS_KIND == "0.9.1" else [(SEQ, [0.9, 1.1])]))


def _check_correction(tmp_path, rows, settings, coef, vllm_kl, filter_ratio, what):
    import json
    import os
    import shlex

    import pyarrow as pa
    import pyarrow.parquet as pq
    from _released import write_parquet  # noqa: F401  (the rows' columns; rollout log-probs added below)
    from typer.testing import CliRunner

    from advcli.cli import app

    src, out, rep = (os.path.join(tmp_path, n) for n in ("in.parquet", "out.parquet", "r.json"))
    write_parquet(rows, src)
    t = pq.read_table(src)
    t = t.append_column("rollout_log_probs", pa.array([r["roll"] for r in rows], pa.list_(pa.float32())))
    pq.write_table(t, src)
    argv = ["run", src, "-o", out, "--flavor", "openrlhf", "--force", "--device", "cpu", "--report", rep,
            *AT_RELEASE]
    for k, v in {"algo.advantage.estimator": "group_norm", "rollout.n_samples_per_prompt": 4,
                 "algo.kl.init_coef": 0, **settings}.items():
        argv += ["--set", f"{k}={v}"]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, f"advcli {shlex.join(argv)} failed:\n{res.output}"
    got = pq.read_table(out).column("rollout_is_weights").to_pylist()
    mask = padded(rows, "mask")
    # advcli writes 0 where the mask is 0 (PolicyLoss's coefficient there is multiplied by the mask later)
    assert_matches(got, coef * mask, rows, f"openrlhf {VERSION} {what} coefficient", rtol=1e-6, atol=1e-7)
    figures = json.load(open(rep))["metrics"]
    assert figures["vllm_kl"] == pytest.approx(vllm_kl, rel=1e-5, abs=1e-7), what
    if filter_ratio is not None:
        assert figures["is_filter_ratio"] == pytest.approx(filter_ratio, rel=1e-6, abs=1e-9), what
    return filter_ratio


@pytest.mark.skipif(not NEW_FLAGS, reason="the installed OpenRLHF has the 0.10.x flags (the test below)")
@pytest.mark.parametrize("level,mode,gating,threshold", NEW_CASES)
def test_is_correction_matches_release(tmp_path, level, mode, gating, threshold):
    rows = correction_rows(5)
    coef, kl, ratio = release_coefficient(rows, {"is_correction_level": level, "is_correction_mode": mode,
                                                 "is_correction_gating": gating,
                                                 "is_correction_threshold": list(threshold)})
    thr = f"[{threshold[0]},{threshold[1]}]" if threshold[0] else str(threshold[1])
    ratio = _check_correction(tmp_path, rows, {"algo.advantage.is_correction_level": level,
                                               "algo.advantage.is_correction_mode": mode,
                                               "algo.advantage.is_correction_gating": gating,
                                               "algo.advantage.is_correction_threshold": thr},
                              coef, kl, ratio, f"{level}/{mode}/{gating}")
    assert mode == "clip" or 0 < ratio < 1, "the case filters nothing or everything: it tests little"


@pytest.mark.skipif(NEW_FLAGS, reason="the installed OpenRLHF has the 0.11.2 flags (the test above)")
@pytest.mark.parametrize("kind,threshold", OLD_CASES)
def test_is_correction_type_matches_release(tmp_path, kind, threshold):
    entry = next((r for r in get("openrlhf").releases if VERSION in (r.name, *r.aliases)), None)
    if IS_KIND == "none":  # before 0.8.9: no IS correction, refused
        assert entry is not None and C_ENABLE in entry.accepts
        with pytest.raises(AdvcliError, match="enable_vllm_is_correction came with 0.8.9"):
            resolve(f"openrlhf@{VERSION}", [(C_ENABLE, True)])
        pytest.skip(f"openrlhf {VERSION} has no IS correction (refused at this release)")
    rows = correction_rows(6)
    settings = {"algo.advantage.is_correction_enable": "true",
                "algo.advantage.is_correction_threshold": f"[{threshold[0]},{threshold[1]}]"}
    if IS_KIND == "0.8.9":  # PolicyLoss(vllm_is_truncated_threshold=HIGH): clamp(max=HIGH)
        flags = {"vllm_is_truncated_threshold": threshold[1]}
        if "enable_vllm_is_correction" in LOSS_SRC:  # 0.8.10-0.9.0 also take the switch (the same weights)
            flags["enable_vllm_is_correction"] = True
        settings["algo.advantage.is_correction_threshold"] = str(threshold[1])
    elif IS_KIND == "0.9.1":  # --use_icepop
        flags = {"enable_vllm_is_correction": True, "use_icepop": kind == "icepop",
                 "vllm_is_truncated_threshold": list(threshold)}
        settings["use_icepop"] = str(kind == "icepop").lower()
    else:
        flags = {"enable_vllm_is_correction": True, "vllm_is_correction_type": kind,
                 "vllm_is_truncated_threshold": list(threshold)}
        settings["algo.advantage.is_correction_type"] = kind
    coef, kl, _ = release_coefficient(rows, flags)
    _check_correction(tmp_path, rows, settings, coef, kl, None, kind)


# ------------------------------------------------------------- bf16 rewards (a bf16 reward model)
PROMOTES = "advcli.reward_promote=false" not in " ".join(AT_RELEASE)  # 0.11.2 promotes rewards to float32


@pytest.mark.parametrize("estimator", ["group_norm", "rloo", "reinforce_baseline"])
def test_bf16_rewards_match_release(tmp_path, estimator):
    """The release's group shaping on bf16 rewards: 0.10.4-0.11.1 compute the [G, n] mean, std and
    leave-one-out baseline in bf16; 0.11.2 promotes the rewards to float32 first."""
    rows = step_rows(7, 4)
    for r in rows:  # rewards a bf16 reward model gave
        r["reward"] = float(torch.tensor(r["reward"] * 2.3 + 0.37, dtype=torch.bfloat16))
    adv, _ = release_run(rows, estimator, 4, 1.0, 1.0, 0.0, "k1", reward_dtype=torch.bfloat16)
    settings = {"algo.advantage.estimator": estimator, "rollout.n_samples_per_prompt": 4, "algo.kl.init_coef": 0}
    out = advcli_run(tmp_path, rows, "openrlhf", {**settings, "advcli.reward_dtype": "bfloat16"}, extra=AT_RELEASE)
    assert_matches(out["advantages"], adv.float(), rows, f"openrlhf {VERSION} {estimator} on bf16 rewards",
                   rtol=1e-5, atol=1e-5)
    f32 = advcli_run(tmp_path, rows, "openrlhf", settings, extra=AT_RELEASE)
    diff = max(abs(a - b) for x, y in zip(out["advantages"], f32["advantages"]) for a, b in zip(x, y))
    assert (diff < 1e-6) if PROMOTES else (diff > 1e-3), diff
