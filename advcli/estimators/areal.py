"""AReaL's advantage chain after the token rewards: GAE (token or turn timesteps, a per-row λ, a
bootstrap for truncated rows), then the NormConfig ``adv_norm`` (areal-project/AReaL @ cbff54d6,
``PPOActor._compute_advantages``, areal/trainer/ppo/actor.py L268-313; gae.py; lambda_fn.py).

AReaL has no estimator switch: GRPO, Dr.GRPO, RLOO, REINFORCE and PPO are settings of this one chain
(V = 0 without a critic makes GAE a reward-to-go with factor γλ). The reward shaping,
``reward_norm`` and the KL reward happen before, in the pipeline's reward stage (``--flavor areal``).

- **token** timesteps: :func:`advcli.ops.rowscan.gae_kept` — GAE over the trained tokens, carried
  across the others (a reward on an untrained token, e.g. the outcome on a masked last token, is
  lost); a row flagged ``truncated`` starts from ``bootstrap_value`` (AReaL's ``values[:, W−1]``).
- **turn** timesteps (gae.py L82-163): each run of trained tokens with one ``turn_ids`` value is a
  timestep; its reward is the outcome reward summed over its trained tokens (the KL is left out),
  its value V at its first trained token; GAE over the turns, each trained token gets its turn's
  advantage (0 elsewhere), then the token's own KL reward is added; returns = turn advantage + turn
  value on trained tokens, V elsewhere.
- **λ per row** (lambda_fn.py L37-137): ``constant`` (value), ``vapo_length_adaptive``
  (``max(0, 1 − 1/(α·n))``, n = 0 → 0) or ``relative_position`` (``q^(1/(n−1))``, n = 1 → 1,
  n = 0 → 0); n = trained tokens (token mode) or turns (turn mode). Computed in float32, as AReaL.
- **adv_norm**: :mod:`advcli.ops.normcfg` with the loss mask, per trajectory group (the pipeline's
  ``runs``) and per step; its statistics come from the token-statistics pass over the whole input.
"""
from __future__ import annotations

import math

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch
from ..ops import normcfg
from ..ops.batch import GroupTokenTables, TokenChunk
from ..ops.ragged import Ragged
from ..ops.rowscan import gae_kept, gae_sequential, kept_layout
from . import EstimatorSpec, register

LAMBDA_FNS = ("constant", "vapo_length_adaptive", "relative_position")
CACHE_BYTES = 256 << 20  # pre-norm advantages the statistics pass keeps for the write pass


def check_lambda(fn: str | None, kwargs: dict, lam) -> None:
    """AReaL's own checks of the λ settings (lambda_fn.py, actor.py), raised before any data is read."""
    if fn is None:
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam):
            raise AdvcliError(f"key actor.gae_lambda: {lam!r} must be a finite number or a λ function path "
                              "(AReaL: 'Static gae_lambda must be finite')")
        return
    if fn not in LAMBDA_FNS:
        raise AdvcliError(f"λ function {fn!r}: known ones are {', '.join(LAMBDA_FNS)}")
    want = {"constant": "value", "vapo_length_adaptive": "alpha", "relative_position": "q"}[fn]
    extra = [k for k in kwargs if k != want]
    if want not in kwargs or extra:
        raise AdvcliError(f"key actor.gae_lambda_kwargs: the λ function {fn} takes exactly one keyword, {want!r} "
                          f"(got {sorted(kwargs) or 'none'})", hint=f"--set actor.gae_lambda_kwargs.{want}=...")
    v = kwargs[want]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise AdvcliError(f"key actor.gae_lambda_kwargs.{want}: {v!r} is not a number")
    if fn == "vapo_length_adaptive" and not v > 0:
        raise AdvcliError(f"key actor.gae_lambda_kwargs.alpha: alpha must be a positive number, got {v!r} "
                          "(AReaL vapo_length_adaptive_gae)")
    if fn == "relative_position" and not (math.isfinite(v) and 0 < v <= 1):
        raise AdvcliError(f"key actor.gae_lambda_kwargs.q: q must be a finite number in (0, 1], got {v!r} "
                          "(AReaL relative_position_gae_lambda)")


def row_lambda(fn: str, kwargs: dict, lengths: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One λ per row from its timestep count (AReaL lambda_fn.py L37-137 @cbff54d6, float32 there)."""
    n = lengths.to(dtype)
    if fn == "constant":
        return torch.full_like(n, float(kwargs["value"]))
    if fn == "vapo_length_adaptive":
        lam = (1.0 - 1.0 / (float(kwargs["alpha"]) * n.clamp(min=1.0))).clamp(min=0.0)
        return torch.where(lengths > 0, lam, torch.zeros_like(lam))
    steps = (n - 1).clamp(min=1.0)
    lam = torch.exp(math.log(float(kwargs["q"])) / steps)
    return torch.where(lengths > 1, lam, torch.where(lengths == 1, torch.ones_like(lam), torch.zeros_like(lam)))


def turn_ids_column(p: dict) -> tuple[tuple[str, str], ...]:
    """actor.gae_timestep_unit=turn reads the turn_ids column (AReaL: 'requires rollout data to include turn_ids')."""
    if p["timestep"] != "turn":
        return ()
    return (("turn_ids", "actor.gae_timestep_unit=turn needs it: one turn index per token; AReaL 'requires "
                         "rollout data to include turn_ids'"),)


def _turns(chunk: TokenChunk, keep: torch.Tensor):
    """The turns of the chunk's rows: (kept tokens, kept layout, turn of each kept token, turn layout).
    Checks AReaL's rules (gae.py ``_validate_turn_ids``): ≥ 0 and non-decreasing on trained tokens."""
    # turn_ids present: the spec requires it under timestep=turn (:func:`turn_ids_column`)
    kept, klay, _, _ = kept_layout(keep, chunk.layout)
    tid = chunk.tokens["turn_ids"][kept].to(torch.int64)
    krow = klay.row_index
    if tid.numel() and bool((tid < 0).any()):
        k = int(torch.nonzero(tid < 0)[0])
        raise AdvcliError(f"turn_ids: a trained token (response_mask 1) has turn id {int(tid[k])}; AReaL requires "
                          "turn ids ≥ 0 on every trained token (gae.py _validate_turn_ids)",
                          hint="give every trained token the index of its turn; -1 only on masked tokens")
    new = torch.ones_like(tid, dtype=torch.bool)
    if tid.numel() > 1:
        same_row = krow[1:] == krow[:-1]
        if bool((same_row & (tid[1:] < tid[:-1])).any()):
            k = int(torch.nonzero(same_row & (tid[1:] < tid[:-1]))[0]) + 1
            raise AdvcliError(f"turn_ids: a row goes back from turn {int(tid[k - 1])} to {int(tid[k])} on its trained "
                              "tokens; AReaL requires them non-decreasing (gae.py _validate_turn_ids)")
        new[1:] = (tid[1:] != tid[:-1]) | ~same_row
    turn_of = torch.cumsum(new.to(torch.int64), 0) - 1
    per_row = torch.zeros(chunk.layout.num_rows, dtype=torch.int64, device=tid.device).index_add_(
        0, krow, new.to(torch.int64))
    toffs = torch.zeros(chunk.layout.num_rows + 1, dtype=torch.int64, device=tid.device)
    torch.cumsum(per_row, 0, out=toffs[1:])
    return kept, klay, turn_of, Ragged(toffs), new


def _pre_norm(chunk: TokenChunk, p: dict):
    """(advantages before adv_norm, returns) at every position of the chunk."""
    dt = chunk.token_rewards.dtype
    mask, layout = chunk.mask, chunk.layout
    keep = mask > 0
    values = chunk.tokens.get("values")
    values = torch.zeros_like(chunk.token_rewards) if values is None else values.to(dt)
    # bootstrap: values[:, W−1]·no_eos, only with a critic (without one AReaL's values are zeros)
    boot = torch.zeros(layout.num_rows, dtype=dt, device=mask.device)
    if "values" in chunk.tokens and "truncated" in chunk.rows and "bootstrap_value" in chunk.rows:
        boot = chunk.rows["bootstrap_value"].to(dt) * (chunk.rows["truncated"] != 0).to(dt)
    gamma = float(p["gamma"])
    turn = p["timestep"] == "turn"
    turns = _turns(chunk, keep) if turn else None
    if not turn and p["lam_fn"] is not None and "turn_ids" in chunk.tokens:
        # a λ function's context validates the turn ids whenever the data has them, token timesteps too
        # (actor.py _compute_gae_lambda -> gae.py _build_gae_lambda_context L183 @cbff54d6)
        _turns(chunk, keep)
    if p["lam_fn"] is not None:
        n = layout.count_per_row(keep) if not turn else (turns[3].lengths)
        coef = gamma * row_lambda(p["lam_fn"], p["lam_kwargs"] or {}, n, dt)
    else:
        coef = gamma * float(p["lam"])
    sequential = p["order"] == "sequential" or (p["order"] == "auto" and dt == torch.float32
                                                 and p["norm"] is not None)
    gae = gae_sequential if sequential else gae_kept
    if torch.is_tensor(coef):
        coef = coef.to(mask.device)
    if not turn:
        adv = gae(chunk.token_rewards, values, keep, layout, gamma, coef, boot)
        return adv, adv + values
    # turn timesteps: the outcome alone is the GAE reward; the token's KL reward is added afterwards
    kept, klay, turn_of, tlay, new = turns
    outcome = torch.zeros_like(chunk.token_rewards)
    last = layout.last_index()
    ok = last >= 0
    outcome[last[ok]] = chunk.rows["reward_row"].to(dt)[ok]
    kl_part = chunk.token_rewards - outcome
    T = tlay.num_tokens
    r_turn = torch.zeros(T, dtype=dt, device=mask.device).index_add_(0, turn_of, outcome[kept])
    v_turn = values[kept][new]
    a_turn = gae(r_turn, v_turn, torch.ones(T, dtype=torch.bool, device=mask.device), tlay, gamma, coef, boot)
    adv = torch.zeros_like(chunk.token_rewards)
    adv[kept] = a_turn[turn_of]
    ret = values.clone()
    ret[kept] = (a_turn + v_turn)[turn_of]
    return adv + kl_part, ret


def _norm(p: dict) -> normcfg.NormSpec | None:
    return normcfg.NormSpec.parse(p["norm"], "actor.adv_norm")


def _group_codes(chunk: TokenChunk) -> torch.Tensor:
    g = chunk.rows.get("group")
    return g if g is not None else chunk.rows["scope"]


def areal_stats(chunk: TokenChunk, p: dict, ctx: GroupTokenTables) -> None:
    """Token-statistics pass: the adv_norm moments of every group (exact sums, input order)."""
    spec = _norm(p)
    if spec is None:
        return
    acc = ctx.extra.get("areal_acc")
    if acc is None:
        g = ctx.groups
        scope = torch.zeros(g.num_groups, dtype=torch.int64)
        if g.codes.numel():
            scope.scatter_(0, g.codes, ctx.table.scopes.codes)
        acc = ctx.extra["areal_acc"] = normcfg.MomentAccumulator(g.sizes, scope, ctx.table.scopes.num_groups)
    adv, ret = _pre_norm(chunk, p)
    acc.add(adv, chunk.mask, chunk.layout.broadcast(_group_codes(chunk)))
    # keep the chunk's GAE for the write pass (same chunks, same bits) while it fits CACHE_BYTES
    used = ctx.extra.get("areal_cache_bytes", 0) + 2 * adv.numel() * adv.element_size()
    if chunk.layout.num_rows and "row" in chunk.rows and used <= CACHE_BYTES:
        ctx.extra.setdefault("areal_cache", {})[int(chunk.rows["row"][0])] = (chunk.layout.num_rows, adv, ret)
        ctx.extra["areal_cache_bytes"] = used


def _group_norm(ctx: GroupTokenTables, p: dict, round32: bool):
    key = ("areal_norm", round32)
    if key not in ctx.extra:
        mom = ctx.extra["areal_acc"].finish() if "areal_acc" in ctx.extra else None
        ctx.extra["areal_mom"] = mom
        ctx.extra[key] = None if mom is None else normcfg.plan_norm(mom, _norm(p), round32)
    return ctx.extra[key]


def areal_token(chunk: TokenChunk, p: dict):
    cache = getattr(chunk.group_tables, "extra", {}).get("areal_cache")
    hit = None
    if cache and chunk.layout.num_rows and "row" in chunk.rows:
        hit = cache.pop(int(chunk.rows["row"][0]), None)
    if hit is not None and hit[0] == chunk.layout.num_rows and hit[1].numel() == chunk.mask.numel():
        adv, ret = hit[1], hit[2]
    else:
        adv, ret = _pre_norm(chunk, p)
    spec = _norm(p)
    if spec is not None:
        gn = _group_norm(chunk.group_tables, p, round32=adv.dtype == torch.float32)
        if gn is not None:
            adv = normcfg.apply_norm(adv, chunk.mask, chunk.layout.broadcast(_group_codes(chunk)), gn, adv.dtype)
    return adv, ret


def areal_diagnostics(ctx, p: dict, ids) -> list[dict]:
    """The adv_norm check of :func:`float32_group_mean_item`, from the token-statistics pass."""
    spec = _norm(p)
    if spec is None or ctx is None:
        return []
    gn = _group_norm(ctx, p, round32=True)
    mom = ctx.extra.get("areal_mom")
    if gn is None or mom is None:
        return []
    # the advantages come out of a float32 GAE: a few ulps of each value (AReaL's own loop order)
    return [float32_group_mean_item("adv_norm", mom, gn, ctx.groups.codes, ids, noise_ulps=8.0)]


def float32_group_mean_item(stage: str, mom, gn, group_codes: torch.Tensor, ids, noise_ulps: float = 1.0) -> dict:
    """``float32_norm`` (warning): groups where a NormConfig group mean rounded to float32 (AReaL's
    rule, areal/utils/data.py Normalization.__call__ @cbff54d6: ``mean = torch.zeros_like(x)`` holds the
    float64 group mean in float32, and ``x − mean`` is taken in float32) moves the result by more than
    1e-5 + 1e-4·|float64 result| (``normcfg.hazard_groups``)."""
    flagged = normcfg.hazard_groups(mom, gn, noise_ulps)
    ex = []
    for g in flagged[:10].tolist():
        rows = torch.nonzero(group_codes == g, as_tuple=True)[0].tolist()
        ex.append({"stage": stage, "group": ids(rows[:1])[0] if ids else None, "rows": rows[:16],
                   "elements": int(mom.count[g]), "mean_float64": float(gn.a64[g]),
                   "mean_float32": float(gn.mean[g]), "std_plus_eps": float(gn.denom[g]),
                   "shift": float((gn.mean[g] - gn.a64[g]) / gn.denom[g])})
    what = "normalised rewards" if stage == "reward_norm" else "advantages"
    return {"kind": "float32_norm", "stage": stage, "count": int(flagged.numel()), "unit": "groups",
            "severity": "warning", "examples": ex,
            "explanation": f"{stage}: AReaL's Normalization (areal/utils/data.py L1382-1638 @cbff54d6) divides by the "
                           f"std of nearly equal {what} in these groups, so float32 rounding is magnified past "
                           "1e-5 + 1e-4·|value|: a group mean is computed in float64 but stored in a float32 tensor "
                           "(mean = torch.zeros_like(x)) and x − mean is taken in float32"
                           + ("; the advantages themselves come from AReaL's float32 GAE loop, a few ulps off the "
                              "exact values" if stage == "adv_norm" else "")
                           + ". This run reproduces AReaL's float32 numbers (its own operation order); --precision "
                           "float64 gives the intended values."}


register(EstimatorSpec(
    name="areal_gae", level="token", token_fn=areal_token, group_token_pass=areal_stats,
    group_token_pass_needed=lambda p: p.get("norm") is not None,  # the statistics pass is adv_norm's only
    optional=("values", "turn_ids", "truncated", "bootstrap_value"),
    needs_for=turn_ids_column,
    formula="token: δ_t = r_t + γ·V_next − V_t, A_t = δ_t + γλ_i·A_next over the trained tokens (carried over the "
            "others; V_next after the last trained token = bootstrap_value of a truncated row, else 0); turn: the "
            "same over turns (turn reward = outcome, turn value = V at its first trained token), then + the token's "
            "KL reward; returns = A + V before adv_norm; then adv_norm (NormConfig, float64 statistics, std about "
            "the chosen mean, (A − mean)·m/(std + eps))",
    source="AReaL PPOActor._compute_advantages (areal/trainer/ppo/actor.py L268-313), gae.py "
           "_compute_token_level_gae / _compute_turn_level_gae, lambda_fn.py, utils/data.py Normalization "
           "(L1382-1638) @cbff54d6",
    params={"gamma": Key(1.0, "discount γ", None, "float"),
            "lam": Key(1.0, "GAE λ (a number; see lam_fn)", None, "float"),
            "lam_fn": Key(None, "per-row λ function: constant, vapo_length_adaptive, relative_position (null: lam)",
                          (None,) + LAMBDA_FNS, "any"),
            "lam_kwargs": Key(None, "keyword arguments of lam_fn (value / alpha / q)", None, "any"),
            "timestep": Key("token", "GAE timestep: token or turn (needs turn_ids)", ("token", "turn"), "str"),
            "order": Key("auto", "GAE evaluation: `scan` (the blocked scan, fast), `sequential` (AReaL's reverse "
                         "loop over positions: its float32 bits) or `auto` (sequential in a float32 run with adv_norm, "
                         "whose division by a tiny std can magnify the scan's ulp differences)",
                         ("auto", "scan", "sequential"), "str"),
            "norm": Key(None, "adv_norm: a NormConfig mapping (mean_level, mean_leave1out, std_level, std_unbiased, "
                        "eps) applied with the mask, per group and step; null: off", None, "any")},
    diagnostics=areal_diagnostics,
    # without a critic (V = 0): a reward-to-go with factor γλ over the trained tokens, the outcome at every token
    # when γλ = 1 (turn timesteps and a per-row λ need the token data)
    response_level_ok=lambda run: float(run.estimator.given.get("gamma", 1.0)) * float(run.estimator.given.get(
        "lam", 1.0)) == 1.0 and run.estimator.given.get("lam_fn") is None
    and run.estimator.given.get("timestep", "token") == "token",
    weighs_by_tokens=lambda run: "adv_norm weighs each response by its trained tokens"
    if run.estimator.given.get("norm") is not None else ""))
