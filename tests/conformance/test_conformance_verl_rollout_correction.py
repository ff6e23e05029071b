"""verl's released package against `advcli run --flavor verl@RELEASE`: the rollout correction as that release
computes it, on random batches (uneven lengths, masks with zeros). The expected weights, corrected masks and
metrics come from the installed release's own ``verl/trainer/ppo/rollout_corr_helper.py``
(``compute_rollout_correction_and_add_to_batch``, 0.6.1 onwards) or ``mismatch_helper.py``
(``compute_rollout_importance_weights``, 0.6.0, whose weights leave the mask as it is), with ``masked_sum`` /
``masked_mean`` of its ``verl/utils/torch_functional.py``; DataProto is stubbed. Both run in float32 on the same
inputs. A release without a rollout correction (before 0.6.0) skips. 0.6.0's weight quantiles (torch.quantile of
the weights before truncation) are compared too."""
from __future__ import annotations

import ast
import math
import types
from typing import Any, Optional

import numpy as np
import pytest
import torch
from _released import package_code, package_file, padded, random_rows, require, write_parquet
from conftest import run_table

from advcli.flavors import get

VERSION = require("verl")
_ENTRY = next((r for r in get("verl").releases if VERSION in (r.name, *r.aliases)), None)
API = (_ENTRY.settings if _ENTRY else {}).get("advcli.rollout_corr_api", "0.8.0")
if API == "none":
    pytest.skip(f"verl {VERSION} has no rollout correction", allow_module_level=True)
FLAVOR = f"verl@{VERSION}" if _ENTRY else "verl"
MODULE = "verl.trainer.ppo.mismatch_helper" if API == "0.6.0" else "verl.trainer.ppo.rollout_corr_helper"
P = "algorithm.rollout_correction."


class _DataProto:
    @staticmethod
    def from_dict(tensors):
        return tensors


def _helpers() -> dict:
    f = package_code("verl.utils.torch_functional", ["masked_sum", "masked_mean"], {"torch": torch})
    ns = {"torch": torch, "math": math, "Any": Any, "Optional": Optional, "DataProto": _DataProto,
          "verl_F": types.SimpleNamespace(masked_sum=f["masked_sum"], masked_mean=f["masked_mean"]),
          "RolloutCorrectionConfig": dict, "PolicyLossConfig": dict}
    tree = ast.parse(open(package_file(MODULE), encoding="utf-8").read())
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    for n in tree.body:  # the module's constants (SAFETY_BOUND, SUPPORTED_ROLLOUT_RS_OPTIONS, ...)
        target = n.targets[0] if isinstance(n, ast.Assign) else n.target if isinstance(n, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id.isupper() and n.value is not None:
            ns[target.id] = ast.literal_eval(n.value)
    return package_code(MODULE, names, ns)


VERL = _helpers()
# (advcli settings = the release's keys, the release's arguments)
if API == "0.6.0":
    CONFIGS = [({"algorithm.rollout_is_threshold": 2.0, "algorithm.rollout_is": True}, dict(rollout_is_threshold=2.0)),
               ({"algorithm.rollout_is_threshold": 1.5, "algorithm.rollout_is": True, "algorithm.rollout_is_level":
                 "sequence", "algorithm.rollout_is_mode": "mask", "algorithm.rollout_is_veto_threshold": 0.3},
                dict(rollout_is_threshold=1.5, rollout_is_level="sequence", rollout_is_mode="mask",
                     rollout_is_veto_threshold=0.3)),
               ({"algorithm.rollout_is_threshold": 2.0, "algorithm.rollout_is": True, "algorithm.rollout_is_level":
                 "geometric", "algorithm.rollout_is_mode": "mask", "algorithm.rollout_is_threshold_lower": 0.7},
                dict(rollout_is_threshold=2.0, rollout_is_level="geometric", rollout_is_mode="mask",
                     rollout_is_threshold_lower=0.7))]
elif API in ("0.6.1", "0.7.0"):
    CONFIGS = [({"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "geometric",
                 "rollout_rs_threshold": 1.3, "rollout_token_veto_threshold": 0.2}, None),
               ({"rollout_is": "sequence", "rollout_is_threshold": 3.0, "rollout_is_batch_normalize": True,
                 "rollout_rs": "token", "rollout_rs_threshold": 2.5, "rollout_rs_threshold_lower": 0.4}, None),
               ({"rollout_is": "token", "rollout_is_threshold": 1.5, "rollout_is_batch_normalize": True,
                 "rollout_rs": "sequence", "rollout_rs_threshold": 4.0}, None)]
else:
    CONFIGS = [({"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "token_k1",
                 "rollout_rs_threshold": "0.5_2.0"}, None),
               ({"rollout_is": "sequence", "rollout_is_threshold": 3.0, "rollout_is_batch_normalize": True,
                 "rollout_rs": "seq_mean_k3,seq_max_k2", "rollout_rs_threshold": "0.1,0.5"}, None)]


def _expected(rows, cfg):
    m, old, roll = padded(rows, "mask"), padded(rows, "old"), padded(rows, "ref")
    if API == "0.6.0":
        w, met = VERL["compute_rollout_importance_weights"](old, roll, m, **cfg)
        w = w["rollout_is_weights"] if cfg.get("rollout_is", True) else None
        return w, m, met
    batch = types.SimpleNamespace(batch={"old_log_probs": old, "rollout_log_probs": roll, "response_mask": m})
    batch.union = lambda other: (batch.batch.update(other), batch)[1]
    batch, met = VERL["compute_rollout_correction_and_add_to_batch"](batch, cfg)
    return batch.batch.get("rollout_is_weights"), batch.batch["response_mask"], met


@pytest.mark.parametrize("seed", [0, 1, 2, "neg_inf"])
@pytest.mark.parametrize("k", range(len(CONFIGS)))
def test_rollout_correction_matches_release(tmp_path, seed, k):
    """Seed "neg_inf": rollout log-probs of −inf (an engine that gave the sampled token probability 0, as vLLM can)
    at two mask=1 tokens and one mask=0 token; the release clamps the log-ratio to ±20 before exp and the
    rejection statistics, and its unclamped figures (kl, k3_kl, the perplexities) are ±inf or NaN."""
    neg_inf = seed == "neg_inf"
    seed = 3 if neg_inf else seed
    rng = np.random.default_rng(seed)
    rows = random_rows(seed, [3, 4, 2, 5])
    for r in rows:  # rollout log-probs near the trainer's: ratios around 1, a few far off
        r["ref"] = (np.array(r["old"]) + rng.normal(0.0, 0.4, len(r["old"]))).astype(np.float32).tolist()
    if neg_inf:
        spots = [(i, j) for i, r in enumerate(rows) for j, m in enumerate(r["mask"]) if m]
        off = [(i, j) for i, r in enumerate(rows) for j, m in enumerate(r["mask"]) if not m]
        for i, j in [spots[1], spots[len(spots) // 2], *off[:1]]:
            rows[i]["ref"][j] = float("-inf")
    settings, cfg = CONFIGS[k]
    if cfg is None:
        cfg, settings = settings, {P + key: val for key, val in settings.items()}
    w, mask, met = _expected(rows, cfg)
    src = write_parquet(rows, str(tmp_path / "in.parquet"), {"ref_log_probs": "rollout_log_probs"})
    t, res = run_table(src, tmp_path / "out.parquet", FLAVOR, {"algorithm.adv_estimator": "grpo", **settings},
                       chunk_rows=5)
    n = [len(r["mask"]) for r in rows]
    if w is None:
        assert "rollout_is_weights" not in t.column_names
    else:
        for i, got in enumerate(t.column("rollout_is_weights").to_pylist()):
            assert got == pytest.approx(w[i, :n[i]].tolist(), rel=1e-5, abs=1e-6), (VERSION, k, seed, i)
    got_mask = [[int(x) for x in r] for r in t.column("response_mask_after_rs").to_pylist()]
    assert got_mask == [[int(x) for x in mask[i, :n[i]].tolist()] for i in range(len(rows))]
    want = {key: float(v) for key, v in met.items()}  # 0.6.0's rollout_is_p25 ... p99 included
    prefix = want and next(iter(want)).split("/")[0] + "/"
    got = {key: v for key, v in res.per_step[0].items() if key.startswith(prefix)}
    assert set(got) == set(want)
    for key, v in want.items():
        assert got[key] == pytest.approx(v, rel=2e-4, abs=2e-5, nan_ok=True), (VERSION, k, seed, key)
    if neg_inf:
        assert not all(map(math.isfinite, want.values()))  # the case is what it says: verl's own kl is not finite
        assert any("rollout_log_probs of -inf" in w for w in res.warnings), res.warnings
