"""Token-level estimators without a scan: the token rewards themselves, and distillation log-ratios.

``token_rewards`` takes the token-level rewards as the pipeline builds them (the row reward placed
by ``reward.placement`` — ``all`` puts it on every position — minus β·KL_t when ``kl.in_reward``) as
the advantages; batch whitening, if any, is ``advantage.whiten``. With ``reward.placement=all`` and
``reward.normalize.mean=group`` this is NeMo RL's REINFORCE++ (``(r_i − μ_g) − β·KL_t``, then a
biased token z-score) and, without the baseline, its PPO ``raw_reward``.
"""
from __future__ import annotations

from ..ops.batch import TokenChunk
from . import EstimatorSpec, register


def token_rewards_token(chunk: TokenChunk, p: dict):
    """NeMo ``ReinforcePlusPlusAdvantageEstimator`` (L193-267) / ``RawRewardAdvantageEstimator``
    (L270-299) before their normalisation: ``a[i, t] = r̃_i − β·KL_t`` at every position (masked ones
    included: NeMo does not zero them)."""
    a = chunk.token_rewards.clone()
    return a, a


register(EstimatorSpec(
    name="token_rewards", level="token", token_fn=token_rewards_token,
    formula="A_t = R_t (the token-level rewards: placed row reward − β·KL_t); whitening via advantage.whiten",
    source="NeMo RL ReinforcePlusPlusAdvantageEstimator / RawRewardAdvantageEstimator "
           "(advantage_estimator.py L193-299 @7ea279ab)", params={},
    # a reward placed on every token and passed through is that reward
    response_level_ok=lambda run: run.reward.placement == "all"))


def distill_token(chunk: TokenChunk, p: dict):
    """NeMo ``OPDAdvantageEstimator.compute_advantage`` (L551-627): ``A = (teacher_lp − lp)·M``."""
    a = (chunk.tokens["teacher_log_probs"] - chunk.tokens["old_log_probs"]).to(chunk.mask.dtype) * chunk.mask
    return a, a


register(EstimatorSpec(
    name="distill", level="token", token_fn=distill_token, needs=("teacher_log_probs", "old_log_probs"),
    formula="A_t = (teacher_log_probs_t − old_log_probs_t)·m_t  (on-policy distillation)",
    source="NeMo RL OPDAdvantageEstimator (advantage_estimator.py L551-627 @7ea279ab)", params={}))
