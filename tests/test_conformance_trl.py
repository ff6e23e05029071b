"""TRL's released package against `advcli run --flavor trl`: GRPOTrainer's and RLOOTrainer's advantages for every
scale_rewards, both multi-objective aggregations, reward weights, reward functions that return None (NaN),
RLOO's reward clip, KL term and normalisation, on random batches (several seeds and group sizes, masks with
zeros). The expected numbers come from the installed release's own statements: the advantage block of
``GRPOTrainer._generate_and_score_completions`` (``trl/trainer/grpo_trainer.py``) and of
``RLOOTrainer._generate_and_score_completions`` (``trl/trainer/rloo_trainer.py``), from the unscorable mask to
``nan_to_num``, with ``nanstd`` of ``trl/trainer/utils.py``; the trainer's module imports accelerate,
transformers and datasets at its top, so the block is compiled from the file and run on its own
(one process: ``gather`` is the identity)."""
from __future__ import annotations

import ast
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _released import (
    advcli_run,
    assert_matches,
    installed_release_args,
    method_statements,
    package_code,
    padded,
    random_rows,
    require,
)

VERSION = require("trl")
AT_RELEASE = installed_release_args("trl", VERSION)  # that release's settings, as --set
NS = package_code("trl.trainer.utils", ["nanstd"], {"torch": torch})


def _is_assign_to(name: str, call: str):
    def test(stmt: ast.stmt) -> bool:
        return (isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]) == name
                and ast.unparse(stmt.value).startswith(call))
    return test


def _block(module: str, cls: str):
    return method_statements(module, cls, "_generate_and_score_completions",
                             _is_assign_to("unscorable_mask", "torch.isnan(rewards_per_func)"),
                             _is_assign_to("advantages", "torch.nan_to_num(advantages"))


GRPO = _block("trl.trainer.grpo_trainer", "GRPOTrainer")
RLOO = _block("trl.trainer.rloo_trainer", "RLOOTrainer")


def release_advantages(code, rows, funcs, g, **config) -> torch.Tensor:
    per_func = torch.tensor([[r[f] for f in funcs] for r in rows], dtype=torch.float32)
    weights = config.pop("reward_weights", None) or [1.0] * len(funcs)
    trainer = SimpleNamespace(reward_weights=torch.tensor(weights, dtype=torch.float32), reward_funcs=funcs,
                              **config)
    ns = {"torch": torch, "nanstd": NS["nanstd"], "gather": lambda t: t, "self": trainer, "device": "cpu",
          "rewards_per_func": per_func, "num_generations": g, "completion_mask": padded(rows, "mask"),
          "old_per_token_logps": padded(rows, "old"), "ref_per_token_logps": padded(rows, "ref")}
    exec(code, ns)
    adv = ns["advantages"]
    width = max(len(r["mask"]) for r in rows)
    return adv.unsqueeze(1).expand(len(rows), width)  # one value per sample, over all its positions


def trl_rows(seed: int, g: int, prompts: int = 4, none_rate: float = 0.15) -> list[dict]:
    """prompts × g rows with two reward functions, ``acc`` (0/1) and ``fmt`` (normal); each may be None (NaN)."""
    rows = random_rows(seed, [g] * prompts)
    rng = np.random.default_rng(seed + 100)
    for r in rows:
        r["acc"] = float(rng.integers(0, 2)) if rng.random() > none_rate else float("nan")
        r["fmt"] = float(rng.normal()) if rng.random() > none_rate else float("nan")
        r["extra"] = {"acc": r["acc"], "fmt": r["fmt"]}
    return rows


def settings(g, funcs, weights=None, **kw) -> dict:
    s = {"num_generations": g, "reward_funcs": "[" + ",".join(funcs) + "]"}
    if weights:
        s["reward_weights"] = "[" + ",".join(str(w) for w in weights) + "]"
    return {**s, **{k: (str(v).lower() if isinstance(v, bool) else v) for k, v in kw.items()}}


@pytest.mark.parametrize("seed", (0, 1, 2))
@pytest.mark.parametrize("g", (2, 5))
@pytest.mark.parametrize("scale", ("group", "batch", "none"))
def test_grpo_matches_release(tmp_path, seed, g, scale):
    rows = trl_rows(seed, g)
    weights = [1.0, 0.5]
    expected = release_advantages(GRPO, rows, ["acc", "fmt"], g, reward_weights=weights, scale_rewards=scale,
                                  multi_objective_aggregation="sum_then_normalize")
    out = advcli_run(tmp_path, rows, "trl", settings(g, ["acc", "fmt"], weights, scale_rewards=scale), extra=AT_RELEASE)
    assert_matches(out["advantages"], expected, rows, f"trl {VERSION} GRPO scale_rewards={scale}")


@pytest.mark.parametrize("seed", (0, 1))
def test_grpo_normalize_then_sum_matches_release(tmp_path, seed):
    rows = trl_rows(seed, 4)
    expected = release_advantages(GRPO, rows, ["acc", "fmt"], 4, reward_weights=[2.0, 1.0], scale_rewards="group",
                                  multi_objective_aggregation="normalize_then_sum")
    out = advcli_run(tmp_path, rows, "trl", settings(4, ["acc", "fmt"], [2.0, 1.0],
                                                     multi_objective_aggregation="normalize_then_sum"),
                     extra=AT_RELEASE)
    assert_matches(out["advantages"], expected, rows, f"trl {VERSION} GRPO normalize_then_sum")


@pytest.mark.parametrize("seed", (0, 1, 2))
@pytest.mark.parametrize("g", (2, 4))
@pytest.mark.parametrize("beta,normalize,clip", [(0.05, False, None), (0.0, True, None), (0.1, True, (-0.5, 1.0))])
def test_rloo_matches_release(tmp_path, seed, g, beta, normalize, clip):
    rows = trl_rows(seed, g)
    expected = release_advantages(RLOO, rows, ["acc", "fmt"], g, beta=beta, normalize_advantages=normalize,
                                  reward_clip_range=clip)
    extra = {"reward_clip_range": f"[{clip[0]},{clip[1]}]"} if clip else {}
    out = advcli_run(tmp_path, rows, "trl", settings(g, ["acc", "fmt"], trainer="rloo", beta=beta,
                                                     normalize_advantages=normalize, **extra), extra=AT_RELEASE)
    assert_matches(out["advantages"], expected, rows, f"trl {VERSION} RLOO beta={beta}", atol=3e-5)
