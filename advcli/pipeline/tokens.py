"""The token math of one chunk: token rewards (placed reward − β·KL), the estimator, then the
final element-wise steps (whitening, re-masking, clip, returns); and the per-(group, position)
token statistics pass of the optimal token baselines.
"""
from __future__ import annotations

import torch

from ..io.reader import InputSet
from ..ops.batch import TokenChunk
from ..ops.ragged import Ragged
from ..ops.rewards import clip as clip_values
from ..ops.whiten import prefix_kept
from . import roles as role_rules
from .plan import Plan, ProgressFn
from .read import ChunkReader, roles_to_columns, to_device
from .rows import KL_SKIPPED, SAMPLE_KEEP, Prepared, kl_token, placement_index


def token_chunk(plan: Plan, res: Prepared, layout: Ragged, tok: dict, row0: int,
                 extras: dict | None = None) -> TokenChunk:
    """The estimator's view of rows row0..row0+B-1: token rewards (placed reward − β·KL), mask, token
    columns and per-row inputs, on the compute device. ``extras`` (a dict) receives ``kld``, the KL
    term as it enters the rewards, and ``kl_mask``, the mask before any rollout correction, when KL is on."""
    dev, dt = plan.device, plan.dtype
    B = layout.num_rows
    rows = slice(row0, row0 + B)
    layout = layout.to(dev)
    mask = to_device(tok["response_mask"], dev).to(dt)
    tok = {k: to_device(v, dev) for k, v in tok.items() if k != "response_mask"}
    skipped = res.table.columns.get(KL_SKIPPED) if plan.kl_on else None
    kl_on_tok = None if skipped is None else layout.broadcast(to_device(~skipped[rows], dev).to(dt))
    # kl.skip_flat_groups: SkyRL's loss mask zeroed on the rows of flat groups
    kl_mask = mask if kl_on_tok is None else mask * kl_on_tok
    fused_out = None if skipped is not None else fused_token_rewards(plan, res, layout, tok, mask, rows)
    if fused_out is not None:  # the GPU path: placement, KL, β and the clip in one kernel (advcli.ops.fused)
        tlr, kld = fused_out
    else:
        # token-level rewards
        if plan.reward_source == "token_level_scores":
            tlr = tok["token_level_scores"].to(dt).clone()
        else:
            r = to_device(res.reward_row[rows], dev)
            if plan.run.reward.placement == "all":  # NeMo RF++ / raw_reward: every position
                tlr = layout.broadcast(r.to(dt))
            else:
                # one spare cell past the tokens takes the rewards of rows placed nowhere (-1): no boolean
                # indexing, whose output size would make the host wait for a GPU
                n = layout.num_tokens
                tlr = torch.zeros(n + 1, dtype=dt, device=dev)
                place = placement_index(plan, layout, mask)
                tlr[torch.where(place >= 0, place, n)] = r.to(dt)
                tlr = tlr[:n]
            if plan.run.reward.mask_placed:
                tlr = tlr * mask
        if plan.kl_on:
            kld = kl_token(plan, tok, kl_mask)
            if kl_on_tok is not None and not plan.run.kl.mask:
                kld = kld * kl_on_tok.to(kld.dtype)
            tlr = tlr - _beta(res, rows, layout, dev, dt, per_token=True) * kld
            tlr = clip_values(tlr, plan.run.kl.token_clip)
    keep = res.table.columns.get(SAMPLE_KEEP)
    if keep is not None:  # ROLL: the estimator, the whitening and the written values see the final mask
        keep_tok = layout.broadcast(to_device(keep[rows], dev).to(dt))
        mask, tlr = mask * keep_tok, tlr * keep_tok
    if plan.kl_on and extras is not None:
        extras["kld"] = kld
        # verl's apply_kl_penalty (ray_trainer.py L78-117 @1dda039b) runs before the rollout correction:
        # its per-row masked_mean(kld, m) divides by the row's original Σm, not by the corrected m'
        extras["kl_mask"] = kl_mask
    if res.tlr_mean is not None:  # reward.whiten_tokens (ROLL whiten_rewards), then × mask
        scope_tok = layout.broadcast(res.scopes.codes[rows].to(dev))
        tlr = ((tlr.to(torch.float64) - torch.index_select(res.tlr_mean.to(dev), 0, scope_tok))
               * torch.index_select(res.tlr_rstd.to(dev), 0, scope_tok)).to(dt)
        tlr = tlr * mask
    if res.correction is not None:  # verl: after the KL penalty; the estimator sees the corrected mask
        from ..correction.plan import apply_chunk
        weights, mask, corrected = apply_chunk(plan, res.correction, layout, mask, tok, row0)
        if weights is not None:
            tok["rollout_is_weights"] = weights  # (verl's estimators read batch["rollout_is_weights"])
        if extras is not None:
            extras["rollout_is_weights"] = weights
            extras["response_mask_after_rs"] = corrected  # OpenRLHF: not the estimator's mask
    row_inputs = {k: to_device(v[rows], dev) for k, v in res.table.columns.items()}
    if res.groups is not None:
        row_inputs["group"] = to_device(res.groups.codes[rows], dev)
    row_inputs["scope"] = to_device(res.scopes.codes[rows], dev)
    row_inputs["row"] = torch.arange(row0, row0 + B, device=dev)  # global row numbers (0-based, input order)
    return TokenChunk(layout=layout, mask=mask, token_rewards=tlr, tokens=tok, rows=row_inputs,
                      group_tables=res.group_tables)


def _beta(res: Prepared, rows: slice, layout: Ragged, dev, dt, per_token: bool) -> torch.Tensor:
    """The chunk's KL coefficient: [1] when one β covers the chunk (one step, a fixed β), else per row ([B]) or,
    with ``per_token``, per token ([N]). The test is on the host, so it makes no GPU wait."""
    beta = res.beta_row[rows]
    if beta.numel() and bool((beta == beta[0]).all()):
        return to_device(beta[:1], dev).to(dt)
    beta = to_device(beta, dev).to(dt)
    return layout.broadcast(beta) if per_token else beta


def fused_token_rewards(plan: Plan, res: Prepared, layout: Ragged, tok: dict, mask: torch.Tensor,
                        rows: slice) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(token rewards, KL term or None) from the fused kernel (:func:`advcli.ops.fused.token_rewards`) where
    it runs (:func:`advcli.ops.fused.enabled`) and reproduces the torch path below: KL kinds k1, abs, k2, k3,
    log-probs of one float dtype no wider than the run's; None otherwise (the torch path runs)."""
    from ..ops import fused

    if not fused.enabled(mask):
        return None
    dev, dt = plan.device, plan.dtype
    c = plan.run.kl
    kw: dict = {}
    if plan.kl_on:
        lp, ref = role_rules.kl_inputs(c, tok, mask)
        if (c.estimator not in fused.KL_CODES or lp.dtype != ref.dtype
                or lp.dtype not in (torch.float32, torch.float64) or torch.result_type(lp, mask) != dt):
            return None
        kw = dict(kl=c.estimator, logp=lp, ref=ref, beta=_beta(res, rows, layout, dev, dt, per_token=False),
                  input_clamp=c.input_clamp, output_clamp=c.output_clamp, kl_mask=c.mask,
                  clip=c.token_clip or None, kld_dtype=torch.result_type(lp, mask) if c.mask else lp.dtype)
    pl = plan.run.reward
    if plan.reward_source == "token_level_scores":
        place, reward = "scores", tok["token_level_scores"].to(dt)
    else:
        reward = to_device(res.reward_row[rows], dev).to(dt)
        if pl.placement == "all":
            place = "all"
        elif pl.placement == "last_valid" or plan.padded:
            place = "last_valid_or_last" if plan.padded else "last_valid"
        else:
            place = "last"
    return fused.token_rewards(reward, mask, layout.offsets, layout.num_rows, place, mask_placed=pl.mask_placed,
                               **kw)


def token_group_pass(plan: Plan, inputs: InputSet, res: Prepared, chunk_rows: int,
                      progress: ProgressFn | None):
    """Token statistics per (group, position) over the whole input, for estimators that declare
    ``group_token_pass`` (verl's optimal token baselines): one read of the token columns into flat
    tables of Σ_g (longest row of g) slots (``batch.GroupTokenTables``)."""
    from ..ops.batch import GroupTokenTables

    g = res.groups if res.groups is not None else res.scopes
    width = torch.zeros(g.num_groups, dtype=torch.int64).scatter_reduce_(
        0, g.codes, res.table.length.to(torch.int64), reduce="amax")
    ctx = GroupTokenTables(groups=g, width=width, table=res.table)
    reader = ChunkReader(plan, inputs, res.state)
    cols = list(roles_to_columns(plan, plan.token_roles))
    row0 = 0
    for fi, rb, batch in inputs.iter_batches(cols, chunk_rows):
        offsets, tok = reader.tokens(batch, inputs.paths[fi], rb, plan.token_roles)
        chunk = token_chunk(plan, res, Ragged(torch.from_numpy(offsets)), tok, row0)
        plan.spec.group_token_pass(chunk, plan.params, ctx)
        row0 += batch.num_rows
        if progress:
            progress("token statistics", row0, inputs.num_rows)
    return ctx


def chunk_math(plan: Plan, res: Prepared, layout: Ragged, tok: dict, row0: int, apply_whiten: bool,
                rewards_only: bool = False, extras: dict | None = None):
    """(advantages, returns, token_level_rewards, mask) flat tensors for rows row0..row0+B-1
    (``extras``: see :func:`token_chunk`)."""
    chunk = token_chunk(plan, res, layout, tok, row0, extras)
    layout, mask, tlr = chunk.layout, chunk.mask, chunk.token_rewards
    if rewards_only:
        return None, None, tlr, mask
    # estimator
    if plan.spec.level == "row":
        adv = ret = row_level_tokens(plan, res, layout, mask, row0)
    else:
        adv, ret = plan.spec.token_fn(chunk, plan.params)
    return chunk_final(plan, res, layout, adv, ret, tlr, mask, row0, apply_whiten)


def row_level_tokens(plan: Plan, res: Prepared, layout: Ragged, mask: torch.Tensor, row0: int) -> torch.Tensor:
    """A row-level estimator's token values: each row's advantage over its tokens, × mask unless the
    estimator keeps masked positions (``mask_output``). Advantages and returns both start from it.
    Step-wise trajectories copied as SkyRL 0.1.0 copies them (``grouping.trajectory_copy=last_row``): × (t <
    the last step's length), as the last step's padded row holds A·response_mask."""
    rows = slice(row0, row0 + layout.num_rows)
    a = layout.broadcast(to_device(res.adv_row[rows], plan.device).to(plan.dtype))
    a = a * mask if plan.params.get("mask_output", True) else a
    cut = res.table.columns.get("last_step_length")  # estimators.stepwise.LAST_LENGTH
    if cut is not None:
        a = a * (layout.position < layout.broadcast(to_device(cut[rows], plan.device))).to(plan.dtype)
    return a


def chunk_final(plan: Plan, res: Prepared, layout: Ragged, adv, ret, tlr, mask, row0: int, apply_whiten: bool):
    """The estimator's output -> the final values: whitening (``apply_whiten``), re-masking, clip,
    returns. Without ``apply_whiten`` (statistics passes) only the re-masking, whose result the
    final values can start from again (x·1 = x on the valid tokens, which are all that whitening reads)."""
    dev, dt = plan.device, plan.dtype
    rows = slice(row0, row0 + layout.num_rows)
    fused_adv = fused_final(plan, res, layout, adv, mask, rows, apply_whiten)
    if fused_adv is not None:  # the GPU path: whitening, re-masking and clip in one kernel (advcli.ops.fused)
        if plan.run.advantage.returns == "advantages":
            ret = fused_adv
        return fused_adv, ret, tlr, mask
    fresh = False  # adv is a tensor of this function's own (may be changed in place)
    if apply_whiten and plan.whiten:
        if res.scopes.num_groups == 1:  # one scope: the same element-wise ops with a scalar
            mean, rstd = to_device(res.whiten_mean[:1], dev), to_device(res.whiten_rstd[:1], dev)
        else:
            scope_tok = layout.broadcast(to_device(res.scopes.codes[rows], dev))
            mean = torch.index_select(to_device(res.whiten_mean, dev), 0, scope_tok)  # (faster than [scope_tok])
            rstd = torch.index_select(to_device(res.whiten_rstd, dev), 0, scope_tok)
        # (v − μ)·rstd in float64, in place on one fresh copy (the input may be a cached tensor)
        x = adv.to(torch.float64, copy=True)
        adv = x.sub_(mean).mul_(rstd).to(dt)  # x itself or its float32 copy
        fresh = True
    remask = plan.run.advantage.remask
    if remask == "fill":  # masked_fill: 0 at M=0 whatever adv holds there (NaN included)
        adv = adv.masked_fill_(mask == 0, 0.0) if fresh else adv.masked_fill(mask == 0, 0.0)
    elif remask:  # A·M: a NaN at M=0 stays NaN
        adv = adv.mul_(mask) if fresh else adv * mask
    if apply_whiten and plan.run.whitening.mean_span == "prefix":  # OpenRLHF before 0.7.0: the replay buffer
        kept = prefix_kept(layout, mask).to(adv.dtype)  # holds each row's first Σm positions, whitened or not
        adv = adv.mul_(kept) if fresh else adv * kept
    if apply_whiten:  # the final values only: whitening statistics are of the unclipped advantages
        adv = clip_values(adv, plan.run.advantage.clip)
    if plan.run.advantage.returns == "advantages":
        ret = adv
    return adv, ret, tlr, mask


def fused_final(plan: Plan, res: Prepared, layout: Ragged, adv, mask, rows: slice, apply_whiten: bool):
    """:func:`chunk_final`'s advantages from the fused kernel (:func:`advcli.ops.fused.finalize`) where it runs
    and there is a step to do; None otherwise (the torch path runs)."""
    from ..ops import fused

    whiten = apply_whiten and plan.whiten
    remask = plan.run.advantage.remask
    clip = plan.run.advantage.clip if apply_whiten else None
    if not (whiten or remask or clip) or adv.dtype != plan.dtype or not fused.enabled(adv):
        return None
    dev = plan.device
    kw: dict = {}
    if whiten:
        if res.scopes.num_groups == 1:
            kw = dict(mean=to_device(res.whiten_mean[:1], dev), rstd=to_device(res.whiten_rstd[:1], dev))
        else:
            kw = dict(mean=to_device(res.whiten_mean, dev), rstd=to_device(res.whiten_rstd, dev),
                      scope=to_device(res.scopes.codes[rows], dev))
        kw = {k: v.contiguous() for k, v in kw.items()}
    return fused.finalize(adv, mask, layout.offsets, layout.num_rows, remask="fill" if remask == "fill" else
                          ("mul" if remask else None), clip=clip or None, **kw)
