"""TRL's released package against `advcli run --flavor trl`: GRPOTrainer's and RLOOTrainer's advantages for every
scale_rewards, both multi-objective aggregations, reward weights, reward functions that return None (NaN),
RLOO's reward clip, KL term and normalisation, on random batches (several seeds and group sizes, masks with
zeros). The expected numbers come from the installed release's own statements: the advantage block of
``GRPOTrainer._generate_and_score_completions`` (``trl/trainer/grpo_trainer.py``) and of
``RLOOTrainer._generate_and_score_completions`` (``trl/trainer/rloo_trainer.py``), from the unscorable mask to
``nan_to_num`` (older releases: from the weighted sum of the reward functions to the process slice; 0.14.0's
``compute_loss``, 0.15.0's ``_prepare_inputs``), with ``nanstd`` of ``trl/trainer/utils.py``; with each release's
settings of the release table (``advcli.trl_code``), and only the options the release had (0.16.0-0.21.0:
scale_rewards true/false; RLOO from 0.22.0). The trainer's module imports accelerate,
transformers and datasets at its top, so the block is compiled from the file and run on its own
(one process: ``gather`` is the identity)."""
from __future__ import annotations

import ast
import os
from types import SimpleNamespace

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

VERSION = require("trl")
if not os.path.exists(os.path.join(os.path.dirname(package_file("trl.trainer.utils")), "grpo_trainer.py")):
    pytest.skip(f"trl {VERSION} has no GRPOTrainer (0.14.0 brought it); its old online RLOOTrainer is checked by "
                "test_conformance_trl_old_rloo.py", allow_module_level=True)
AT_RELEASE = installed_release_args("trl", VERSION)  # that release's settings, as --set
# the installed release's advantage code class (advcli.trl_code; the newest state when the table has no setting)
CODE = next((a.split("=", 1)[1] for a in AT_RELEASE if a.startswith("advcli.trl_code=")), "1.6.0")
_AT = ("0.14.0", "0.15.0", "0.16.0", "0.22.0", "0.22.2", "0.27.0", "1.6.0").index(CODE)
# nanstd came with the None rewards' logging (0.16.0); the older blocks do not call it
NS = package_code("trl.trainer.utils", ["nanstd"], {"torch": torch}) \
    if "def nanstd(" in open(package_file("trl.trainer.utils"), encoding="utf-8").read() else {"nanstd": None}


def _assigns(stmt: ast.stmt, *names: str) -> bool:
    return isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]) in names


def _starts(stmt: ast.stmt) -> bool:
    """The advantage block's first statement: 1.6.0's unscorable mask, 0.27.0-1.5.1's branch on
    multi_objective_aggregation, or the weighted sum of the reward functions (0.14.0-0.26.2, RLOO 0.22.0-1.5.1)."""
    return (_assigns(stmt, "unscorable_mask", "rewards") and "rewards_per_func" in ast.unparse(stmt.value)) or (
        isinstance(stmt, ast.If) and "multi_objective_aggregation" in ast.unparse(stmt.test))


def _block(module: str, cls: str):
    """The advantage statements of the release's ``cls`` as released, from :func:`_starts` to ``nan_to_num``
    (1.6.0 and newer) or to the last statement before the process slice (0.15.0-1.5.1) or before the loss
    (0.14.0, where the block sits in ``compute_loss``). One process: ``gather`` is the identity."""
    path = package_file(module)
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    methods = {n.name: n for n in klass.body if isinstance(n, ast.FunctionDef)}
    for name in ("_generate_and_score_completions", "_prepare_inputs", "compute_loss"):
        body = methods[name].body if name in methods else []
        start = next((i for i, st in enumerate(body) if _starts(st)), None)
        if start is not None:
            break
    assert start is not None, f"{module}: no advantage block in {cls}"
    stop = next(i for i in range(start, len(body)) if _assigns(body[i], "process_slice", "per_token_loss")
                or (_assigns(body[i], "advantages") and "nan_to_num" in ast.unparse(body[i].value)))
    stop += int("nan_to_num" in ast.unparse(body[stop]))
    return compile(ast.Module(body=body[start:stop], type_ignores=[]), path, "exec")


GRPO = _block("trl.trainer.grpo_trainer", "GRPOTrainer")
RLOO = _block("trl.trainer.rloo_trainer", "RLOOTrainer") if _AT >= 3 else None  # the older trainer before 0.22.0


def release_advantages(code, rows, funcs, g, **config) -> torch.Tensor:
    per_func = torch.tensor([[r[f] for f in funcs] for r in rows], dtype=torch.float32)
    weights = config.pop("reward_weights", None) or [1.0] * len(funcs)
    trainer = SimpleNamespace(reward_weights=torch.tensor(weights, dtype=torch.float32), reward_funcs=funcs,
                              num_generations=g, args=SimpleNamespace(**config), **config)
    ns = {"torch": torch, "nanstd": NS["nanstd"], "gather": lambda t: t, "self": trainer, "device": "cpu",
          "mode": "train",
          "rewards_per_func": per_func, "num_generations": g, "completion_mask": padded(rows, "mask"),
          "old_per_token_logps": padded(rows, "old"), "ref_per_token_logps": padded(rows, "ref")}
    exec(code, ns)
    adv = ns["advantages"]
    width = max(len(r["mask"]) for r in rows)
    return adv.unsqueeze(1).expand(len(rows), width)  # one value per sample, over all its positions


def trl_rows(seed: int, g: int, prompts: int = 4, none_rate: float = 0.15) -> list[dict]:
    """prompts × g rows with two reward functions, ``acc`` (0/1) and ``fmt`` (normal); each may be None (NaN),
    except before 0.16.0, where TRL cannot take a None (torch.tensor raises)."""
    none_rate = none_rate if _AT >= 2 else 0.0
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
    if _AT < 2 and scale != "group" or _AT == 2 and scale == "batch":
        pytest.skip(f"trl {VERSION} has no scale_rewards={scale}")
    if _AT == 2:  # 0.16.0-0.21.0: a bool
        scale = scale == "group"
    rows = trl_rows(seed, g)
    weights = [1.0, 0.5] if _AT >= 1 else None  # 0.14.0: no reward_weights
    expected = release_advantages(GRPO, rows, ["acc", "fmt"], g, reward_weights=weights, scale_rewards=scale,
                                  multi_objective_aggregation="sum_then_normalize")
    given = {"scale_rewards": scale} if _AT >= 2 else {}
    out = advcli_run(tmp_path, rows, "trl", settings(g, ["acc", "fmt"], weights, **given), extra=AT_RELEASE)
    assert_matches(out["advantages"], expected, rows, f"trl {VERSION} GRPO scale_rewards={scale}")


@pytest.mark.parametrize("seed", (0, 1))
def test_grpo_normalize_then_sum_matches_release(tmp_path, seed):
    if _AT < 5:
        pytest.skip(f"trl {VERSION} has no multi_objective_aggregation (0.27.0, #4785)")
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
    if _AT < 3:
        pytest.skip(f"trl {VERSION}'s RLOOTrainer is the old online trainer (test_conformance_trl_old_rloo.py)")
    rows = trl_rows(seed, g)
    expected = release_advantages(RLOO, rows, ["acc", "fmt"], g, beta=beta, normalize_advantages=normalize,
                                  reward_clip_range=clip)
    extra = {"reward_clip_range": f"[{clip[0]},{clip[1]}]"} if clip else {}
    out = advcli_run(tmp_path, rows, "trl", settings(g, ["acc", "fmt"], trainer="rloo", beta=beta,
                                                     normalize_advantages=normalize, **extra), extra=AT_RELEASE)
    assert_matches(out["advantages"], expected, rows, f"trl {VERSION} RLOO beta={beta}", atol=3e-5)
