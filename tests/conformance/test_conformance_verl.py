"""verl's released package against `advcli run --flavor verl`: every outcome and token estimator the flavor
runs from a rollout batch, and the reward KL, on random batches (several seeds, uneven groups with a
singleton, masks with zeros). The expected numbers come from the installed release's own
``verl/trainer/ppo/core_algos.py`` (estimators, ``kl_penalty``), ``verl/utils/torch_functional.py``
(``masked_whiten``) and ``verl/utils/groupwise.py``; ``apply_kl_penalty`` of
``verl/trainer/ppo/ray_trainer.py`` is two lines restated in the test (scores − β·kld·mask)."""
from __future__ import annotations

import inspect
import json
import os
from collections import defaultdict
from typing import Any, Optional

import numpy as np
import pytest
import torch
from _released import (
    advcli_run,
    assert_matches,
    group_sizes,
    installed_release_args,
    package_code,
    package_file,
    package_method,
    padded,
    random_rows,
    require,
    scores_at_last,
)

from advcli.errors import AdvcliError
from advcli.flavors import get, release_of, resolve

VERSION = require("verl")
# that release's settings, as --set; the actor's KL loss on and β = 0: verl 0.2-0.3 put β·KL in the reward unless
# the actor has a KL loss, 0.1 always (no effect from 0.4.0); the estimator tests compare the estimators alone (the
# reward-KL test sets its own)
AT_RELEASE = installed_release_args("verl", VERSION) + ["--set", "actor_rollout_ref.actor.use_kl_loss=true",
                                                        "--set", "algorithm.kl_ctrl.kl_coef=0"]
SEEDS = (0, 1, 2)


class AlgoConfig(dict):
    """verl's AlgoConfig as the estimators read it: ``config.get(key)`` and ``config.gamma``."""

    def __getattr__(self, name):
        return self[name]


def _verl() -> dict:
    # optional=True: a release before 0.6.0 has no groupwise.py, before 0.5.0 no masked_sum, and each release
    # only the estimators it has (the tests of the others check that advcli refuses them at that release)
    helpers = package_code("verl.utils.torch_functional", ["masked_sum", "masked_mean", "masked_var", "masked_whiten"],
                           {"torch": torch, "Optional": Optional}, optional=True)
    verl_f = type("verl_F", (), {k: staticmethod(helpers[k]) for k in ("masked_mean", "masked_var",
                                                                        "masked_whiten", "masked_sum") if k in helpers})
    ns: dict[str, Any] = {"torch": torch, "np": np, "os": os, "Any": Any, "Optional": Optional}
    try:
        group = package_code("verl.utils.groupwise", ["_resolve_device", "_to_1d_numpy_object_array",
                                                      "as_torch_index", "group_mean_std"],
                             {**ns, "get_device_name": lambda: "cpu"})
    except AssertionError:  # verl < 0.6.0: no verl/utils/groupwise.py (nor grpo_vectorized)
        group = {"as_torch_index": None, "group_mean_std": None}
    names = ["compute_gae_advantage_return", "compute_grpo_outcome_advantage",
             "compute_grpo_vectorized_outcome_advantage", "compute_grpo_passk_outcome_advantage",
             "compute_reinforce_plus_plus_baseline_outcome_advantage", "compute_rloo_outcome_advantage",
             "compute_opo_outcome_advantage", "compute_reinforce_plus_plus_outcome_advantage",
             "compute_gpg_outcome_advantage", "compute_rloo_vectorized_outcome_advantage",
             "compute_remax_outcome_advantage", "compute_gdpo_outcome_advantage",
             "kl_penalty", "kl_penalty_forward"]
    return package_code("verl.trainer.ppo.core_algos", names, {
        **ns, "defaultdict": defaultdict, "verl_F": verl_f, "AlgoConfig": AlgoConfig,
        "as_torch_index": group["as_torch_index"], "group_mean_std": group["group_mean_std"]}, optional=True)


VERL = _verl()
RELEASE = release_of(get("verl"), VERSION) if any(VERSION in (r.name, *r.aliases) for r in get("verl").releases) \
    else get("verl").releases[-1]


def call(name: str, **kwargs):
    """The release's function ``name`` called as its ray_trainer.compute_advantage calls it: only the arguments
    it takes (0.4.0's reinforce_plus_plus takes gamma, later ones read config.gamma), the response mask named
    eos_mask where the release names it so (≤ 0.3)."""
    fn = VERL[name]
    params = inspect.signature(fn).parameters
    if "eos_mask" in params and "response_mask" in kwargs:
        kwargs["eos_mask"] = kwargs.pop("response_mask")
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return fn(**kwargs)
    return fn(**{k: v for k, v in kwargs.items() if k in params})


def has(estimator: str, tmp_path) -> None:
    """Skip the test where the installed release has no such estimator, after checking that advcli refuses it at
    that release (`--flavor verl@VERSION`) as the trainer would not run it."""
    fn = OUTCOME.get(estimator, {"gae": "compute_gae_advantage_return", "gdpo": "compute_gdpo_outcome_advantage",
                                 "remax": "compute_remax_outcome_advantage"}.get(estimator))
    if fn in VERL:
        return
    with pytest.raises(AdvcliError, match="the trainer itself would not run it"):
        resolve(f"verl@{VERSION}", [("algorithm.adv_estimator", estimator)])
    pytest.skip(f"verl {VERSION} has no {fn} (advcli refuses {estimator} at this release)")

# advcli's verl estimator -> (the release's function, how ray_trainer.compute_advantage calls it)
OUTCOME = {
    "grpo": "compute_grpo_outcome_advantage", "grpo_vectorized": "compute_grpo_vectorized_outcome_advantage",
    "grpo_passk": "compute_grpo_passk_outcome_advantage",
    "reinforce_plus_plus_baseline": "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "rloo": "compute_rloo_outcome_advantage", "rloo_vectorized": "compute_rloo_vectorized_outcome_advantage",
    "opo": "compute_opo_outcome_advantage", "gpg": "compute_gpg_outcome_advantage",
    "reinforce_plus_plus": "compute_reinforce_plus_plus_outcome_advantage",
}


def package_advantages(rows, estimator: str, gamma: float = 1.0, lam: float = 1.0, norm_by_std: bool = True):
    mask = padded(rows, "mask")
    scores = scores_at_last(rows)
    index = np.array([r["prompt_id"] for r in rows], dtype=object)
    config = AlgoConfig(gamma=gamma, lam=lam, norm_adv_by_std_in_grpo=norm_by_std)
    if estimator == "gae":
        return call("compute_gae_advantage_return", token_level_rewards=scores, values=padded(rows, "values"),
                    response_mask=mask, gamma=gamma, lam=lam)
    kwargs = dict(token_level_rewards=scores, response_mask=mask, index=index, config=config)
    if estimator == "grpo":
        kwargs["norm_adv_by_std_in_grpo"] = norm_by_std
    if estimator == "reinforce_plus_plus":
        kwargs["gamma"] = gamma  # verl ≤ 0.4.0 takes it as an argument
    return call(OUTCOME[estimator], **kwargs)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("estimator", ["gae", *OUTCOME])
def test_estimator_matches_release(tmp_path, seed, estimator):
    has(estimator, tmp_path)
    sizes = group_sizes(seed)
    if estimator == "grpo_passk":  # verl raises on a group of one (core_algos.py: "at least 2 samples per group")
        sizes = [s for s in sizes if s > 1]
    rows = random_rows(seed, sizes)
    gamma, lam = (0.97, 0.9) if estimator in ("gae", "reinforce_plus_plus") else (1.0, 1.0)
    adv, ret = package_advantages(rows, estimator, gamma, lam)
    out = advcli_run(tmp_path, rows, "verl", {"algorithm.adv_estimator": estimator, "algorithm.gamma": gamma,
                                              "algorithm.lam": lam}, extra=AT_RELEASE)
    assert_matches(out["advantages"], adv, rows, f"verl {VERSION} {estimator} advantages")
    assert_matches(out["returns"], ret, rows, f"verl {VERSION} {estimator} returns")


@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_without_std_matches_release(tmp_path, seed):
    has("grpo", tmp_path)
    if "norm_adv_by_std_in_grpo" not in inspect.signature(VERL["compute_grpo_outcome_advantage"]).parameters:
        pytest.skip(f"verl {VERSION}'s grpo always divides by the std (advcli refuses the key at this release)")
    rows = random_rows(seed, group_sizes(seed))
    adv, _ = package_advantages(rows, "grpo", norm_by_std=False)
    out = advcli_run(tmp_path, rows, "verl", {"algorithm.adv_estimator": "grpo",
                                              "algorithm.norm_adv_by_std_in_grpo": "false"}, extra=AT_RELEASE)
    assert_matches(out["advantages"], adv, rows, f"verl {VERSION} grpo (norm_adv_by_std_in_grpo=false)")


@pytest.mark.parametrize("kl", ["kl", "abs", "mse", "low_var_kl", "k3+"])
def test_reward_kl_matches_release(tmp_path, kl):
    """apply_kl_penalty (ray_trainer.py): token_level_rewards = scores − β·kl_penalty(old, ref)·mask."""
    rows = random_rows(5, group_sizes(5))
    beta = 0.05
    try:
        VERL["kl_penalty"](torch.zeros(1, 1), torch.zeros(1, 1), kl)
    except NotImplementedError:
        assert kl not in RELEASE.accepts["algorithm.kl_penalty"][0], f"advcli accepts {kl} at verl {VERSION}"
        pytest.skip(f"verl {VERSION}'s kl_penalty raises on {kl} (advcli refuses it at this release)")
    kld = VERL["kl_penalty"](padded(rows, "old"), padded(rows, "ref"), kl) * padded(rows, "mask")
    expected = scores_at_last(rows) - beta * kld
    out = advcli_run(tmp_path, rows, "verl", {"algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": "true",
                                              "algorithm.kl_penalty": kl, "algorithm.kl_ctrl.kl_coef": beta,
                                              "actor_rollout_ref.actor.use_kl_loss": "false"},
                     extra=AT_RELEASE)
    assert_matches(out["token_level_rewards"], expected, rows, f"verl {VERSION} reward KL {kl}")


@pytest.mark.parametrize("seed", SEEDS)
def test_remax_matches_release(tmp_path, seed):
    """ReMax: the baseline is the greedy response's reward, one per row (the reward_baseline column)."""
    rows = random_rows(seed, group_sizes(seed))
    rng = np.random.default_rng(seed)
    for r in rows:
        r["extra"] = {"reward_baseline": float(rng.normal())}
    baselines = torch.tensor([r["extra"]["reward_baseline"] for r in rows])
    has("remax", tmp_path)
    adv, ret = call("compute_remax_outcome_advantage", token_level_rewards=scores_at_last(rows),
                    reward_baselines=baselines, response_mask=padded(rows, "mask"), config=AlgoConfig())
    out = advcli_run(tmp_path, rows, "verl", {"algorithm.adv_estimator": "remax"}, extra=AT_RELEASE)
    assert_matches(out["advantages"], adv, rows, f"verl {VERSION} remax advantages")
    assert_matches(out["returns"], ret, rows, f"verl {VERSION} remax returns")


@pytest.mark.parametrize("seed", SEEDS)
def test_gdpo_matches_release(tmp_path, seed):
    """GDPO: each reward component z-scored in its group, weighted, summed, whitened over the tokens; the
    components come from the reward manager's extra keys (columns acc and fmt here)."""
    has("gdpo", tmp_path)
    rows = random_rows(seed, group_sizes(seed))
    rng = np.random.default_rng(seed + 7)
    for r in rows:
        r["extra"] = {"acc": float(rng.integers(0, 2)), "fmt": float(rng.normal())}
    lengths = [len(r["mask"]) for r in rows]
    attention = torch.zeros(len(rows), 1 + max(lengths), dtype=torch.long)  # verl: int64 masks
    for i, n in enumerate(lengths):
        attention[i, :1 + n] = 1
    batch = {"prompts": torch.zeros(len(rows), 1), "attention_mask": attention}
    non_tensor = {k: np.array([r["extra"][k] for r in rows], dtype=np.float32) for k in ("acc", "fmt")}
    config = AlgoConfig(gdpo_reward_keys=["acc", "fmt"], gdpo_reward_weights=[1.0, 0.5],
                        norm_adv_by_std_in_grpo=True)
    adv, _ = VERL["compute_gdpo_outcome_advantage"](
        token_level_rewards=scores_at_last(rows), response_mask=padded(rows, "mask"),
        index=np.array([r["prompt_id"] for r in rows], dtype=object), config=config, non_tensor_batch=non_tensor,
        batch=batch)
    out = advcli_run(tmp_path, rows, "verl", {"algorithm.adv_estimator": "gdpo",
                                              "algorithm.gdpo_reward_keys": "[acc,fmt]",
                                              "algorithm.gdpo_reward_weights": "[1.0,0.5]"}, extra=AT_RELEASE)
    assert_matches(out["advantages"], adv, rows, f"verl {VERSION} gdpo advantages")


# the trainers' own dump writers: RayPPOTrainer._write_generations (V0, ray_trainer.py) and
# PPOTrainer._write_generations (V1, v1/trainer_base.py: _log_rollout_data adds the uid {sample}_{rollout}_{output})
WRITERS = {"v0": ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer"),
           "v1": ("verl.trainer.ppo.v1.trainer_base", "PPOTrainer")}


@pytest.mark.parametrize("layout", list(WRITERS))
@pytest.mark.parametrize("estimator", ["grpo", "rloo", "grpo_passk", "gpg", "rloo_vectorized"])
def test_release_dump_read_by_advcli(tmp_path, layout, estimator):
    """Two steps dumped by the release's own writer (trainer.rollout_data_dir), read back by `advcli run` in
    verl's format: each row's advantage is the release's estimator on the dumped scores, grouped by prompt (V0:
    the prompt text, V1: the uid's sample part) within each step."""
    module, cls = WRITERS[layout]
    has(estimator, tmp_path)
    try:
        package_file(module)
    except AssertionError:
        pytest.skip(f"verl {VERSION} has no {module} (the V1 trainer came with 0.9)")
    ns = {"os": os, "json": json, "np": np}
    try:
        write = package_method(module, cls, "_write_generations", ns)
    except StopIteration:  # verl 0.4.1-0.7.1: the writer is _dump_generations(self, ...), the step self.global_steps
        try:
            dump_generations = package_method(module, cls, "_dump_generations", ns)
        except StopIteration:
            pytest.skip(f"verl {VERSION}'s {cls} writes no rollout dump (trainer.rollout_data_dir came with 0.4.1)")

        takes_gts = "gts" in inspect.signature(dump_generations).parameters  # from 0.6.0

        def write(inputs, outputs, gts, scores, extra, path, step):
            trainer = type("Trainer", (), {"global_steps": step})()
            dump_generations(trainer, inputs, outputs, *([gts] if takes_gts else []), scores, extra, path)
    dump = tmp_path / "rollout_data"
    rng = np.random.default_rng(11)
    expected: list[float] = []
    for step in (3, 4):
        sizes = [3, 2, 4] if estimator == "grpo_passk" else [3, 1, 4]
        prompts = [g for g, n in enumerate(sizes) for _ in range(n)]
        scores = [float(rng.choice([0.0, 0.5, 1.0])) for _ in prompts]
        extra = {"uid": [f"s{step}p{g}_{k}_0" for k, g in enumerate(prompts)]} if layout == "v1" else {}
        write([f"user\nquestion {g} of step {step}\nassistant\n" for g in prompts],
              [f"answer {k}" for k in range(len(prompts))], [None] * len(prompts), scores, extra, str(dump), step)
        one_token = torch.tensor(scores).unsqueeze(1)
        adv, _ = call(OUTCOME[estimator], token_level_rewards=one_token, response_mask=torch.ones_like(one_token),
                      index=np.array([f"p{g}" for g in prompts], dtype=object),
                      config=AlgoConfig(gamma=1.0, lam=1.0, norm_adv_by_std_in_grpo=True))
        expected += adv[:, 0].tolist()
    out = tmp_path / "out.parquet"
    from typer.testing import CliRunner

    from advcli.cli import app

    res = CliRunner().invoke(app, ["run", str(dump), "-o", str(out), "--flavor", "verl", "--force",
                                   "--set", f"algorithm.adv_estimator={estimator}"])
    assert res.exit_code == 0, res.output
    import pyarrow.parquet as pq

    got = [a[0] if isinstance(a, list) else a for a in pq.read_table(out).column("advantages").to_pylist()]
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-6), (
        f"verl {VERSION} {layout} dump, {estimator}: {got} != {expected}")


# ---------------------------------------------------------------------- bf16 scores (custom reward managers)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("estimator", ["grpo", "rloo", "gpg", "rloo_vectorized"])
def test_bf16_scores_match_release(tmp_path, seed, estimator):
    """verl's core_algos on bf16 token_level_rewards (a reward manager or reward model returning bf16): grpo,
    rloo and gpg round every step to bf16, rloo_vectorized returns float64 (#7964); advcli with
    advcli.reward_dtype=bfloat16 computes the same, and differs from its float32 run by bf16's rounding."""
    has(estimator, tmp_path)
    rows = random_rows(seed, group_sizes(seed), rewards="positive")
    for r in rows:  # scores a bf16 reward model gave: bf16 values (exact in the float32 column)
        r["reward"] = float(torch.tensor(r["reward"] * 3.0, dtype=torch.bfloat16))
    mask = padded(rows, "mask")
    index = np.array([r["prompt_id"] for r in rows], dtype=object)
    adv, _ = call(OUTCOME[estimator], token_level_rewards=scores_at_last(rows).to(torch.bfloat16),
                  response_mask=mask, index=index, config=AlgoConfig(norm_adv_by_std_in_grpo=True))
    if estimator == "rloo_vectorized":  # (the others are bf16 values; × the float32 mask makes them float32)
        assert adv.dtype == torch.float64
    out = advcli_run(tmp_path, rows, "verl", {"algorithm.adv_estimator": estimator,
                                              "advcli.reward_dtype": "bfloat16"}, extra=AT_RELEASE)
    assert_matches(out["advantages"], adv.to(torch.float64), rows, f"verl {VERSION} {estimator} on bf16 scores",
                   rtol=1e-6, atol=1e-6)
    f32 = advcli_run(tmp_path, rows, "verl", {"algorithm.adv_estimator": estimator}, extra=AT_RELEASE)
    if estimator != "rloo_vectorized":  # bf16's rounding shows: the float32 run is not the trainer's
        diff = max(abs(a - b) for x, y in zip(out["advantages"], f32["advantages"]) for a, b in zip(x, y))
        assert diff > 1e-3
