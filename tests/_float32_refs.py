"""The frameworks' float32 group statistics, as each framework's own torch calls make them.

Float32 artefacts of all-equal non-dyadic groups (12×0.7 giving |A| ≈ 0.106 instead of 0) come from
the rounding of a sum whose order belongs to torch's CPU kernels (vector width, blocking) and so to the
machine. A test of such an artefact never pastes one machine's value: it compares advcli with these
calls, run on the machine the test runs on, and asserts separately what holds everywhere (float64 gives
the exact value, the diagnostics flag the group). Each function is written from the framework's code at
the commit its docstring names; nothing here is copied from it.
"""
from __future__ import annotations

import torch


def verl_grpo(scores: list[float], index: list, eps: float = 1e-6) -> torch.Tensor:
    """verl ``compute_grpo_outcome_advantage`` (core_algos.py L267-331 @1dda039b): per group a 1-D
    ``torch.stack`` of its float32 scores in row order, ``torch.mean`` and unbiased ``torch.std``
    (a group of one: mean 0, std 1), then ``(s − μ)/(σ + eps)`` row by row."""
    s = torch.tensor(scores, dtype=torch.float32)
    members: dict = {}
    for i, g in enumerate(index):
        members.setdefault(g, []).append(i)
    stats = {}
    for g, rows in members.items():
        if len(rows) == 1:
            stats[g] = (torch.tensor(0.0), torch.tensor(1.0))
        else:
            t = torch.stack([s[i] for i in rows])
            stats[g] = (torch.mean(t), torch.std(t))
    out = s.clone()
    for i, g in enumerate(index):
        mu, sd = stats[g]
        out[i] = (s[i] - mu) / (sd + eps)
    return out


def verl_grpo_vectorized(scores: list[float], codes: list[int], eps: float = 1e-6) -> torch.Tensor:
    """verl ``compute_grpo_vectorized_outcome_advantage`` (core_algos.py L334-358) through
    ``group_mean_std(eps=0)`` (verl/utils/groupwise.py L164-222 @1dda039b): ``index_add_`` sums,
    ``mean = Σ/n``, two-pass ``var = Σ(x−mean)²/max(n−1, 1)``, ``std = sqrt(var)``."""
    s = torch.tensor(scores, dtype=torch.float32)
    g = torch.tensor(codes, dtype=torch.long)
    G = int(g.max()) + 1
    count = torch.zeros(G).index_add_(0, g, torch.ones_like(s))
    mean = torch.zeros(G).index_add_(0, g, s) / count.clamp_min(1.0)
    centred = s - mean[g]
    var = torch.zeros(G).index_add_(0, g, centred * centred) / (count - 1.0).clamp_min(1.0)
    std = torch.sqrt(torch.clamp(var, min=0.0))
    single = count <= 1.0
    mean[single], std[single] = 0.0, 1.0
    return (s - mean[g]) / (std[g] + eps)


def reshaped_group_norm(rewards: list[float], n: int, eps: float) -> torch.Tensor:
    """ROLL ``reward_norm`` with group mean and group std (functionals.py L564-600 @8eb27cc2) and
    OpenRLHF ``group_norm`` (experience_maker.py L264-270 @3c3be623): ``R = r.reshape(−1, n)``,
    ``(R − R.mean(−1, keepdim=True)) / (R.std(−1, keepdim=True) + eps)``, flattened."""
    r = torch.tensor(rewards, dtype=torch.float32).reshape(-1, n)
    return ((r - r.mean(dim=-1, keepdim=True)) / (r.std(dim=-1, keepdim=True) + eps)).reshape(-1)


def verl_kl_scores(rewards: list[float], masks: list[list[int]], old: list[list[float]], ref: list[list[float]],
                   beta: float) -> list[float]:
    """The scores verl's outcome estimators take when KL enters the reward (kl_penalty "kl"): on the
    right-padded float32 [B, T = longest row] batch, ``apply_kl_penalty`` (ray_trainer.py L78 @1dda039b)
    ``token_level_rewards = token_level_scores − β·(kl·response_mask)`` with ``kl = old − ref`` and the
    reward at column L_i − 1, then ``scores = token_level_rewards.sum(dim=-1)`` (core_algos.py L304)."""
    B, T = len(masks), max(len(m) for m in masks)
    tls, kl, mask = torch.zeros(B, T), torch.zeros(B, T), torch.zeros(B, T)
    for i, m in enumerate(masks):
        L = len(m)
        tls[i, L - 1] = rewards[i]
        kl[i, :L] = torch.tensor(old[i], dtype=torch.float32) - torch.tensor(ref[i], dtype=torch.float32)
        mask[i, :L] = torch.tensor(m, dtype=torch.float32)
    return (tls - beta * (kl * mask)).sum(dim=-1).tolist()
