"""The on-policy distillation term added after any token-level estimator (``advantage.distill_coef``).

slime ``apply_opd_kl_to_advantages`` (slime/backends/megatron_utils/loss.py L663-700 @624b824a),
called after the estimator and before whitening (L810)::

    A_t ← A_t − coef·(logp_t − teacher_t)        on every position (no mask)

``logp`` is the policy log-probs the KL reads (``kl.policy``: slime's ``--use-rollout-logprobs``
picks the inference engine's, ``rollout_log_probs``). The returns are left alone, except where the
framework's returns are the advantages' own list (slime ``reinforce_plus_plus_baseline``, L804:
``returns = advantages``, so the in-list rebinding of the OPD step lands in both): ``advantage.distill_returns``.

This is not an estimator of its own: :func:`with_distill_term` wraps the configured estimator's
token function, so every pass that computes advantages (statistics, write, the Ray workers) applies
the term at the same place.
"""
from __future__ import annotations

import dataclasses

from ..errors import AdvcliError
from ..lazy_torch import torch
from ..ops.batch import TokenChunk
from . import EstimatorSpec


def distill_term(chunk: TokenChunk, coef: float, policy: str = "old_log_probs") -> torch.Tensor:
    """``coef·(logp − teacher)`` per token, in the chunk's dtype (slime: float32 ``student − teacher``);
    ``policy`` is the role of logp (``kl.policy``)."""
    lp, teacher = chunk.tokens[policy], chunk.tokens["teacher_log_probs"]
    return coef * (lp - teacher).to(chunk.mask.dtype)


def with_distill_term(spec: EstimatorSpec, coef: float, returns: bool, policy: str = "old_log_probs") -> EstimatorSpec:
    """``spec`` with its token function followed by ``A −= coef·(logp − teacher)`` (and the returns
    too when ``returns``). Row-level estimators are refused: their advantages are one value per row."""
    if spec.level != "token":
        raise AdvcliError(f"key advantage.distill_coef: estimator {spec.name} is row-level (one advantage per "
                          "row); the distillation term is per token",
                          hint="use a token-level estimator, e.g. token_rewards with reward.placement=all")
    inner = spec.token_fn

    def token_fn(chunk: TokenChunk, p: dict):
        adv, ret = inner(chunk, p)
        term = distill_term(chunk, coef, policy)
        new_adv = adv - term  # a new tensor: the estimator may return one tensor as both
        return new_adv, (new_adv if returns else ret)

    needs = tuple(dict.fromkeys(spec.needs + ("teacher_log_probs", policy)))
    return dataclasses.replace(spec, token_fn=token_fn, needs=needs,
                               formula=spec.formula + f";  then A_t −= {coef:g}·(logp_t − teacher_t)"
                               + (" (returns too)" if returns else ""),
                               source=spec.source + "; distillation term: slime apply_opd_kl_to_advantages "
                               "(loss.py L663-700 @624b824a)")
