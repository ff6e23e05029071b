"""Token-level estimators built on reverse scans: GAE, REINFORCE-style returns, ReMax."""
from __future__ import annotations

from ..config import Key
from ..ops import scans
from ..ops.batch import TokenChunk
from . import EstimatorSpec, register

GAMMA = Key(1.0, "discount γ", None, "float")
HOLES = Key("skip", "mask=0 tokens inside a row: `skip` (the scan jumps over them, verl/NeMo), "
            "`step` (they count as discount steps with reward 0, ROLL/OpenRLHF)", ("skip", "step"), "str")
# reinforce_plus_plus only: `reset` (verl ≤ 0.8.0)
RETURN_HOLES = Key("skip", HOLES.doc + ", or `reset` (a mask=0 token keeps its reward and what follows, the "
                   "tokens before it start afresh: verl ≤ 0.8.0)", ("skip", "step", "reset"), "str")


# -------------------------------------------------------------------------------------------- gae
def gae_token(chunk: TokenChunk, p: dict):
    """GAE(γ, λ). ``holes=skip``: verl ``compute_gae_advantage_return`` (core_algos L215-263
    @1dda039b) and NeMo PPO gae; ``holes=step``: every column is a step with the given values
    (ROLL passes unmasked values; OpenRLHF zeroes V and R at mask=0 first: ``zero_masked``)."""
    values = chunk.tokens["values"]
    r = chunk.token_rewards
    if p["holes"] != "skip" and p["zero_masked"]:
        values = values * chunk.mask
        r = r * chunk.mask

    def run(lam):
        if p["holes"] == "skip":
            return scans.gae_skip_masked(r, values, chunk.mask, chunk.layout, p["gamma"], lam)
        return scans.gae_all_positions(r, values, chunk.layout, p["gamma"], lam)
    alpha = float(p.get("lam_length_alpha") or 0.0)
    lam = p["lam"]
    if alpha > 0:  # NeMo RL VAPO length-adaptive λ_i = clamp(1 − 1/max(α·Σ_t m_it, 1), 0, 1), in the mask's dtype
        # (advantage_estimator.py _resolve_lambda_policy L412-422 @7ea279ab)
        length = chunk.layout.count_per_row(chunk.mask).to(chunk.mask.dtype)
        lam = (1.0 - 1.0 / (alpha * length).clamp(min=1.0)).clamp(min=0.0, max=1.0)
    adv = run(lam)
    # NeMo RL VAPO decoupled GAE (advantage_estimator.py L466-490 @7ea279ab): returns from a second
    # run with the value λ
    lam_ret = p.get("returns_lam")
    lam_ret = p["lam"] if lam_ret is None else lam_ret
    adv_ret = adv if alpha <= 0 and lam_ret == p["lam"] else run(lam_ret)
    return adv, adv_ret + values


register(EstimatorSpec(
    name="gae", level="token", token_fn=gae_token, needs=("values",),
    formula="δ_t = r_t + γ·V_next − V_t;  A_t = δ_t + γλ·A_next;  returns = A + V  (holes=skip: the scan "
            "jumps over mask=0 tokens, V_next = the next trained token's value; holes=step: every position "
            "is a step, V_L = 0; lam_length_alpha α > 0: λ_i = clamp(1 − 1/max(α·Σm_i, 1), 0, 1) for A)",
    source="holes=skip: verl core_algos.compute_gae_advantage_return (L215-263 @1dda039b), NeMo RL ppo gae; "
           "holes=step: ROLL compute_gae_advantage_return, OpenRLHF get_advantages_and_returns (zero_masked)",
    params={"gamma": GAMMA, "lam": Key(1.0, "GAE λ", None, "float"), "holes": HOLES,
            "zero_masked": Key(False, "with holes=step: multiply V and r by the mask first (OpenRLHF)",
                               None, "bool"),
            "returns_lam": Key(None, "λ of the returns when it differs from the advantages' λ (NeMo RL "
                               "gae_lambda_value); default: lam", None, "float"),
            "lam_length_alpha": Key(0.0, "α > 0: the advantages' λ of row i is clamp(1 − 1/max(α·Σ_t m_it, 1), 0, 1) "
                                    "instead of lam (NeMo RL VAPO length_adaptive_alpha; the returns keep returns_lam "
                                    "or lam)", None, "float")}))


# -------------------------------------------------------------------------------- discounted returns
def returns_token(chunk: TokenChunk, p: dict):
    """REINFORCE return-to-go ``G_t = r_t + γ·G_{t+1}``.

    ``holes=skip``: verl ``compute_reinforce_plus_plus_outcome_advantage`` (L693-731 @1dda039b,
    after PR #7300): rewards at mask=0 dropped, γ not applied across holes, returns 0 at mask=0.
    ``holes=step``: every column is a step (ROLL ``compute_reinforce_return``; OpenRLHF
    ``get_cumulative_returns`` after ``R ← M·R``, selected with ``mask_rewards``).
    ``holes=reset``: ``G_t = r_t + γ·m_{t+1}·G_{t+1}``, returns kept at mask=0 (verl 0.8.0, before #7300).
    """
    r = chunk.token_rewards
    if p["holes"] == "skip":
        ret = scans.returns_skip_masked(r, chunk.mask, chunk.layout, p["gamma"])
    elif p["holes"] == "reset":
        ret = scans.returns_reset_at_holes(r, chunk.mask, chunk.layout, p["gamma"])
    else:
        if p["mask_rewards"]:
            r = r * chunk.mask
        ret = scans.reverse_discounted_cumsum(r, chunk.layout, p["gamma"])
    return ret, ret


register(EstimatorSpec(
    name="reinforce_plus_plus", level="token", token_fn=returns_token,
    formula="G_t = r_t + γ·G_{t+1};  A = G  (holes=skip: over the mask=1 tokens only, carried across holes, "
            "0 at mask=0; holes=step: every position is a discount step; holes=reset: G_t = r_t + γ·m_{t+1}·G_{t+1})",
    source="holes=skip: verl core_algos.compute_reinforce_plus_plus_outcome_advantage (L693-731 @1dda039b); "
           "holes=step: ROLL compute_reinforce_return, OpenRLHF get_cumulative_returns (mask_rewards); "
           "holes=reset: verl 0.8.0's compute_reinforce_plus_plus_outcome_advantage",
    params={"gamma": GAMMA, "holes": RETURN_HOLES,
            "mask_rewards": Key(False, "with holes=step: multiply the rewards by the mask first", None, "bool")},
    # the return of a reward placed at the last token with γ = 1 is that reward at every token
    response_level_ok=lambda run: float(run.estimator.given.get("gamma", GAMMA.default)) == 1.0
    and run.reward.placement in ("last", "last_valid")))


# ------------------------------------------------------------------------------------------ remax
def remax_token(chunk: TokenChunk, p: dict):
    """verl ``compute_remax_outcome_advantage`` (L734-767 @1dda039b):
    ``G = reverse cumsum of r·m`` (γ = 1, not masked inside holes), ``A = G − b_i·m``."""
    g = scans.reverse_discounted_cumsum(chunk.token_rewards * chunk.mask, chunk.layout, 1.0)
    b = chunk.layout.broadcast(chunk.rows["reward_baseline"].to(g.dtype))
    return g - b * chunk.mask, g


register(EstimatorSpec(
    name="remax", level="token", token_fn=remax_token, needs=("reward_baseline",), drops_masked_rewards=True,
    formula="G_t = Σ_{u≥t} r_u·m_u;  A_t = G_t − b_i·m_t  (b_i: the greedy response's reward)",
    source="verl core_algos.compute_remax_outcome_advantage (L734-767 @1dda039b)", params={}))
