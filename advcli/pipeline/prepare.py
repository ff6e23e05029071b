"""Passes 1-2 together: :func:`prepare_run` builds the row table and everything resolved from it
before the write pass (KL coefficients, post-processed rewards, row-level advantages, token
group statistics, whitening moments).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..errors import AdvcliError
from ..io.reader import InputSet
from ..io.value_checks import refuse_unplaced_rows
from ..ops import batchnorm
from ..ops.batch import RowTable
from ..ops.groups import GroupIndex, flat_group_rows
from ..ops.rewards import clip as clip_values
from ..ops.rewards import normalize_rewards, shape_rewards
from ..ops.whiten import MomentSums, WhitenSpec
from . import roles as role_rules
from .moments import token_moment_pass, token_reward_small, whiten_stats
from .plan import Plan, ProgressFn, RunState, strided_groups
from .read import allows_nan
from .rows import (
    KL_SKIPPED,
    SAMPLE_KEEP,
    Prepared,
    defer_row_kl,
    flat_rule,
    kl_coefs,
    row_inputs,
    row_table_pass,
    scopes_and_groups,
)
from .tokens import token_group_pass


def _amplified_item(plan: Plan, sums: MomentSums, mean: torch.Tensor, rstd: torch.Tensor, step_values: list) -> dict:
    """The ``float32_amplified_normalization`` diagnostic: steps whose whitening / batch normalisation
    divides by a variance at its 1e-8 floor (values all but equal), multiplying float32 residues by ~1e4."""
    from ..ops.batchnorm import amplified

    flag = amplified(sums, rstd)
    n = sums.count.clamp(min=1)
    ex = [{"step": step_values[s], "tokens": int(sums.count[s]), "mean": float(sums.total[s] / n[s]),
           "rms": float((sums.total_sq[s] / n[s]).sqrt()), "scale": float(rstd[s])}
          for s in torch.nonzero(flag, as_tuple=True)[0][:10].tolist()]
    a = plan.run.whitening
    how = []
    if a.whiten:
        how.append(f"whitening multiplies by rsqrt(var {'+' if a.eps_mode == 'add' else 'floored at'} "
                   f"{a.eps:g})")
    if a.batch_normalize:
        how.append("advantage_batch_normalize multiplies by rsqrt(max(var, 1e-8)) (SkyRL _normalize_advantages, "
                   "trainer.py L1477-1481 @a9564572)")
    summary = (f"float32_amplified_normalization: {int(flag.sum())} steps normalised at the variance floor "
               f"(scale up to {max((e['scale'] for e in ex), default=0):.3g}, e.g. "
               f"{'the whole input' if ex[0]['step'] is None else 'step ' + str(ex[0]['step'])}); "
               "their advantages are float32 residues ×1e4, not signal" if ex else None)
    return {"kind": "float32_amplified_normalization", "count": int(flag.sum()), "unit": "steps",
            "severity": "warning", "examples": ex, "summary": summary,
            "explanation": "steps whose advantages are (all but) equal before normalisation, so the variance sits at "
                           "its floor and " + " and ".join(how) + " of up to 1e4: the framework's float32 rounding "
                           "residues (its mean an ulp off the common value, an estimator's residue) become advantages "
                           "of order 1e-4..1 that depend on its summation order and cannot be reproduced exactly; "
                           "the intended values are those of --precision float64."}


def row_whitening_sums(plan: Plan, scopes, adv_row: torch.Tensor, row: dict,
                       last_len: torch.Tensor | None = None) -> MomentSums:
    """Pass 2's moments for a row-level estimator, per scope: each row's advantage weighed by its Σ mask
    (or its length, ``whitening.mask: all``): no token pass. The Ray engine's per-step driver makes them
    for one step's rows (its scopes coded 0..D-1) in the worker task resolving it. ``last_len`` (SkyRL 0.1.0's
    step-wise copy, ``grouping.trajectory_copy=last_row``, with ``whitening.mask: all``): row i holds its value
    on min(L_i, last_len_i) of its L_i positions (0 on the rest) and, in SkyRL's padded grid, on last_len_i
    cells: the moments count L_i positions, the values min(L_i, last_len_i), the grid total Σ A_i·last_len_i."""
    if plan.run.whitening.mean_span != "mask":
        raise AdvcliError(f"advantage.whiten_mean_span={plan.run.whitening.mean_span} needs a token-level estimator "
                          "(a row-level estimator's advantage is one value per row)",
                          hint="leave advantage.whiten_mean_span at mask")
    sums = MomentSums.zeros(scopes.num_groups)
    w = row["length" if plan.run.whitening.mask == "all" else "valid"].to(torch.float64)
    a = adv_row.to(torch.float64)
    if last_len is None and plan.run.whitening.mask == "all" and plan.params.get("mask_output", True):
        # every position counts, and the estimator wrote 0 at the mask=0 ones: the row's value on Σ mask of them
        on = row["valid"].to(torch.float64)
        sums.add_rows((w, a * on, a * a * on), scopes.codes.to(torch.int64))
        return sums
    if last_len is None:
        sums.add(a, w, scopes.codes)
        return sums
    cut = last_len.to(torch.float64)
    on = torch.minimum(w, cut)
    sums.add_rows((w, a * on, a * a * on), scopes.codes.to(torch.int64))
    sums.grid_total = torch.zeros(scopes.num_groups, dtype=torch.float64).index_add_(0, scopes.codes, a * cut)
    return sums


def whitening_of_sums(plan: Plan, sums: MomentSums, step_values: list, cells: Callable,
                      state: RunState | None = None):
    """Pass 2's result from the per-scope moments of the advantages (token-level: their mask=1 tokens;
    row-level: each row's value weighed by its Σ mask): (mean, rstd) [S] float64 as the write pass applies
    them (whitening, then SkyRL's batch normalisation composed in: ``cells()`` [S], its grid's cells),
    the ``float32_amplified_normalization`` item, and the other precision's (mean, rstd, dtype) where the
    whitening is one-pass (else None). The Ray engine's per-step driver calls it with the sums its workers
    made (advcli.engines.ray_moments). ``state``: the run's (its scope domains name a scope in an error)."""
    run_sums = sums  # slime float32 one-pass: the sums in the framework's own summation order, where kept
    if plan.whiten_spec().one_pass == torch.float32 and getattr(sums, "ordered", None) is not None:
        run_sums = MomentSums(*sums.ordered)
    S = sums.count.numel()
    if plan.run.whitening.whiten:
        mean, rstd = whiten_stats(plan, run_sums, plan.whiten_spec(), step_values, plan.run.whitening.small, state)
    else:
        mean = torch.zeros(S, dtype=torch.float64)
        rstd = torch.ones(S, dtype=torch.float64)
    if plan.run.whitening.batch_normalize:  # SkyRL advantage_batch_normalize (ops.batchnorm)
        mean, rstd = batchnorm.compose(sums, mean, rstd, cells())
    other = None
    if plan.whiten_spec().one_pass is not None:  # the same formula in the other precision (diagnostics)
        import dataclasses

        from ..ops.whiten import scope_mean_rstd
        dt = torch.float64 if plan.dtype == torch.float32 else torch.float32
        other = scope_mean_rstd(sums, dataclasses.replace(plan.whiten_spec(), one_pass=dt)) + (dt,)
    return mean, rstd, _amplified_item(plan, sums, mean, rstd, step_values), other


def id_blocks(plan: Plan, groups, ncfg) -> bool:
    """Whether a positional flavor's rows grouped by id (``advcli.group_by=id``, a reordered dump) form whole
    groups of its n rows, so that its [G, n] reshape can run on them gathered: the same group statistics,
    bit for bit, as on the dump in rollout order (summed as index sums they can differ in the last bit)."""
    n = plan.run.grouping.size
    return bool(plan.group_by == "id" and n and groups is not None and groups.num_groups
                and ncfg.mean in ("group", "loo", "none") and ncfg.std in ("group", "none")
                and bool((groups.sizes == int(n)).all()))


def row_rewards(plan: Plan, row: dict, comps: dict, scopes, groups, state: RunState):
    """(raw row score, r̃ the post-processed row reward, the row score the group estimators see before the KL,
    the float32 group-mean checks) from pass 1's row table: the reward's source (column, components,
    Σ token_level_scores), its shaping, no-EOS rule, normalisation and clamp, placement. ``advcli stats``
    replays it on an output whose run reshaped its rewards (advcli.runs.stats)."""
    reward = plan.run.reward
    R = int(row["length"].numel())
    if plan.reward_source == "components":
        weights = reward.weights or [1.0] * len(plan.components)
        if allows_nan(plan):  # TRL: (rewards_per_func * weights).nansum(dim=1); NaN where every function is NaN
            per_func = torch.stack([comps[c] for c in plan.components], dim=1)
            raw = (per_func * torch.tensor([float(w) for w in weights], dtype=plan.dtype)).nansum(dim=1)
            if plan.run.reward.nan == "allow":  # TRL >= 1.6.0 (#5902); before, nansum's 0 stands
                raw[torch.isnan(per_func).all(dim=1)] = float("nan")
        else:
            raw = sum(torch.tensor(float(w), dtype=plan.dtype) * comps[c] for w, c in zip(weights, plan.components))
    elif plan.reward_source == "reward":
        raw = row.get("reward", torch.zeros(R, dtype=plan.dtype))
        if plan.run.reward.nan == "zero":  # TRL 0.16.0-1.5.1: the one reward function's None nansums to 0
            raw = torch.nan_to_num(raw, nan=0.0)
        half = score_dtype(plan)
        if half is not None:  # the trainer's scores are 16-bit: every estimator, and the KL penalty, sees them
            raw = raw.to(half).to(raw.dtype)  # rounded (verl: token_level_scores in the reward's dtype)
    else:
        raw = row["score_sum"]
    ncfg = reward.normalize
    norm_checks: list = []
    if plan.reward_source != "token_level_scores":  # AReaL: overlong penalty, clip((r + bias)·scale)
        # OpenRLHF before 0.11.2 penalises its 16-bit rewards in place, in their dtype
        raw = shape_rewards(raw, overlong_length(reward.overlong.length, row), reward, row.get("truncated"),
                            shaping_dtype(plan) if reward.overlong.exact else None)
    if (reward.no_eos_value is not None or reward.no_eos_penalty is not None) and "truncated" in row:
        # TRL's old RLOOTrainer, before normalize_reward: scores of responses without EOS are set to
        # penalty_reward_value (0.9-0.10) or lowered by missing_eos_penalty (0.11-0.21; rloo_trainer.py L391-393
        # @v0.21.0)
        cut = row["truncated"] != 0
        raw = torch.where(cut, torch.full_like(raw, float(reward.no_eos_value)), raw) \
            if reward.no_eos_value is not None else raw - cut.to(raw.dtype) * float(reward.no_eos_penalty)
    reward_row = raw
    norm = role_rules.norm_spec(reward)
    if norm is not None and plan.reward_source != "token_level_scores":  # AReaL NormConfig (reward_norm)
        from ..ops.normcfg import normalize_rows
        g = groups if groups is not None else scopes
        reward_row, gn, mom = normalize_rows(raw, g.codes, g.sizes, role_rules.group_scope(g, scopes),
                                             scopes.num_groups, norm, round32=plan.dtype == torch.float32)
        norm_checks = [("reward_norm", mom, gn, g.codes)] if gn.center32 else []
    elif plan.reward_source != "token_level_scores":
        # 16-bit rewards keep their dtype through the normalisation and the clamp where the trainer's do:
        # OpenRLHF before 0.11.2 shapes bf16 rewards in bf16; ROLL's reward_postprocess runs reward_norm and
        # the reward_clip clamp on its workers' float16 rewards (functionals.py L651-677 @ 8eb27cc2), so the
        # clamp's bound is the float16 nearest ±c (0.3 -> 0.30004883), and compute_advantage casts to float32
        half = shaping_dtype(plan) if (ncfg.mean, ncfg.std) != ("none", "none") or reward.clip else None
        shaped = raw.to(half) if half is not None else raw
        if plan.group_by == "position" and not strided_groups(plan):  # the frameworks' own [G, n] reshape
            from ..ops.blocks import block_normalize
            reward_row = block_normalize(shaped, scopes, state.block_sizes or int(plan.run.grouping.size),
                                         ncfg.mean, ncfg.std, ncfg.eps, bool(ncfg.centre_first))
        elif id_blocks(plan, groups, ncfg):  # advcli.group_by=id on a positional flavor: its reshape, groups gathered
            from ..ops.blocks import block_normalize
            order = torch.argsort(groups.codes, stable=True)  # each group's rows together, in input order
            back = torch.empty_like(order)
            back[order] = torch.arange(order.numel())
            gathered = GroupIndex(scopes.codes[order], scopes.num_groups)
            reward_row = block_normalize(shaped[order], gathered, int(plan.run.grouping.size), ncfg.mean, ncfg.std,
                                         ncfg.eps, bool(ncfg.centre_first))[back]
        else:
            reward_row = normalize_rewards(shaped, scopes, groups, ncfg.mean, ncfg.std, ncfg.eps, bool(ncfg.onepass))
        reward_row = clip_values(reward_row, reward.clip).to(raw.dtype)
    if reward.zero_truncated and "truncated" in row:  # AReaL mask_no_eos_with_zero
        reward_row = torch.where(row["truncated"] != 0, torch.zeros_like(reward_row), reward_row)
    # the row score the group estimators see: Σ_t token_level_rewards
    if plan.reward_source == "token_level_scores":
        score = raw.clone()
    else:
        keep = row["keep"] if reward.mask_placed else (row["length"] > 0)
        if reward.empty_row == "score":  # verl: scores[i, -1] of an empty response
            keep = keep | (row["length"] == 0)
        score = torch.where(keep, reward_row, torch.zeros_like(reward_row))
    return raw, reward_row, score, norm_checks


def flat_kl_rows(plan: Plan, row: dict, raw: torch.Tensor, live: torch.Tensor, groups) -> torch.Tensor | None:
    """[R] bool, the rows ``kl.skip_flat_groups`` takes the KL term from (:func:`advcli.ops.groups.flat_group_rows`
    on the reward column read in float64, else the raw row score), or None where it does not act."""
    rule = flat_rule(plan)
    if rule is None:
        return None
    reward = row["reward64"] if "reward64" in row else raw.to(torch.float64)
    return flat_group_rows(reward, live, groups, rule, float(plan.run.kl.flat_tol))


def _first(flags: torch.Tensor) -> tuple[int | None, int]:
    """(the first row where ``flags`` [R] holds, or None; how many)."""
    rows = torch.nonzero(flags, as_tuple=True)[0]
    return (int(rows[0]) if rows.numel() else None), rows.numel()


def prepare_run(plan: Plan, inputs: InputSet, chunk_rows: int, progress: ProgressFn | None = None,
            token_moments: Callable | None = None, defer_kl: bool = False, row_pass: Callable | None = None,
            correction: Callable | None = None, state: RunState | None = None):
    """Passes 1-2: the per-row table of the whole input and all that is resolved from it (scopes,
    groups, per-step KL coefficients, post-processed rewards, row-level advantages, token group
    statistics, whitening moments). Returns ``(res, row, betas, kls, warnings)``.

    ``defer_kl``: where :func:`defer_row_kl` allows, leave the per-row KL (``row["kl_sum"]``,
    ``row["kl_mean"]``, ``kls`` and the KL part of the row score) to the write pass, which must then
    call :func:`finish_row_kl` (``res.kl_deferred`` says so).

    ``token_moments`` (default :func:`token_moment_pass`, same signature) computes the per-scope
    moments of token rewards/advantages; the Ray engine passes one that runs on its workers.
    ``row_pass`` (default :func:`row_table_pass`, same signature and result) likewise for pass 1,
    and ``correction`` (default :func:`advcli.pipeline.correction_pass.correction_pass`) for the rollout
    correction's statistics pass.

    ``state``: the run's :class:`advcli.pipeline.plan.RunState` (None: a new one), which the passes fill with
    what they learn (the scopes' domains, the block sizes, the grouping's warnings, the columns checked) and
    ``res.state`` carries to the write pass; the plan itself is never changed.
    """
    reward = plan.run.reward
    state = RunState() if state is None else state
    token_moments = token_moments or token_moment_pass
    # pass 1: the row table
    deferred = defer_kl and defer_row_kl(plan)
    row, comps, keys = (row_pass or row_table_pass)(plan, inputs, chunk_rows, progress, row_kl=not deferred,
                                                    state=state)
    R = inputs.num_rows
    scopes, groups, step_values = scopes_and_groups(plan, keys, R, inputs.paths[0], state)
    refuse_unplaced_rows(reward, plan.reward_source, inputs.paths, inputs.file_rows(), _first(row["valid"] == 0),
                         _first(row["length"] == 0))
    live = row["valid"] > 0  # Σ mask > 0 before the rollout correction (kl.skip_flat_groups' live rows)
    correction_fn, correction = correction, None
    if plan.correction is not None:  # rollout correction: step statistics; the estimator's Σ mask is m'
        from .correction_pass import correction_pass
        correction, row["valid"] = (correction_fn or correction_pass)(plan, inputs, scopes, step_values, chunk_rows,
                                                                      progress, state=state)
    raw, reward_row, score, norm_checks = row_rewards(plan, row, comps, scopes, groups, state)
    skipped = flat_kl_rows(plan, row, raw, live, groups if groups is not None else scopes)
    if skipped is not None and "kl_sum" in row:  # their KL is 0: so are their sums (the adaptive controller's)
        for k in ("kl_sum", "kl_mean"):
            row[k] = torch.where(skipped, torch.zeros_like(row[k]), row[k])
    betas, kls = kl_coefs(plan, scopes, row.get("kl_mean"), state)
    beta_row = (scopes.per_row(torch.tensor(betas, dtype=torch.float64)) if plan.kl_on
                else torch.zeros(R, dtype=torch.float64))
    if plan.kl_on and not deferred:
        score = (score - (beta_row * row["kl_sum"].to(torch.float64)).to(plan.dtype))
    columns = {f"component:{c}": comps[c] for c in plan.components}
    if "reward_baseline" in row:
        columns["reward_baseline"] = row["reward_baseline"]
    if "is_last_step" in row:
        columns["is_last_step"] = row["is_last_step"]
        if plan.run.grouping.trajectory_copy == "last_row":  # SkyRL 0.1.0: each turn gets the last step's row
            from ..estimators.stepwise import LAST_LENGTH, last_step_lengths
            columns[LAST_LENGTH] = last_step_lengths(row["is_last_step"], row["length"], scopes)
    for r in role_rules.row_scalar_roles(plan):
        columns[r] = row[r]
    for k in row:
        if k.startswith("token_mean:"):
            columns[k] = row[k]
    if skipped is not None:
        columns[KL_SKIPPED] = skipped
    keep_rules = sample_keep(plan, row, raw, groups)
    if keep_rules:  # ROLL's sample-level masks: rows out of the advantage (tokens.token_chunk)
        columns[SAMPLE_KEEP] = torch.stack(list(keep_rules.values())).all(dim=0)
    columns["reward_row"] = reward_row  # r̃_i as placed: the outcome apart from the KL (AReaL turn GAE)
    if plan.spec.reward_from_components and not plan.components:
        columns["component:score"] = score
    inputs_cols, labels = row_inputs(plan, keys, R)
    columns.update(inputs_cols)
    table = RowTable(score=score, valid_len=row["valid"], length=row["length"], scopes=scopes, groups=groups,
                     columns=columns, labels=labels)
    if plan.kl_on and plan.spec.level == "row" and plan.run.kl.score_sum != "exact":
        # pass 1c (SkyRL, verl): s_i = token_level_rewards.sum(-1) on the step's float32 grid
        from .scores import grid_scores
        table.score = grid_scores(plan, inputs, Prepared(scopes, groups, step_values, beta_row, reward_row,
                                                                  None, table, state=state), chunk_rows, progress)
    adv_row = row_advantages(plan, inputs, table) if plan.spec.level == "row" else None
    res = Prepared(scopes, groups, step_values, beta_row, reward_row, adv_row, table, state=state)
    res.raw_score, res.row_keys, res.kl_deferred = raw, keys, deferred
    res.row_dtype = reward_dtype(plan, inputs) if plan.spec.level == "row" else None  # 16-bit scores: the diagnostics
    res.norm_checks = norm_checks  # (stage, moments, constants, group codes): float32 group-mean checks
    res.correction = correction
    # pass 1b: per-(group, position) token sums
    if plan.spec.group_token_pass is not None and (plan.spec.group_token_pass_needed is None
                                                    or plan.spec.group_token_pass_needed(plan.params)):
        res.group_tables = token_group_pass(plan, inputs, res, chunk_rows, progress)
    if keep_rules:
        res.diagnostics.append(sample_mask_item(plan, keep_rules, columns[SAMPLE_KEEP], raw, row["valid"]))
    warnings: list[str] = list(state.group_warnings) + list(plan.warnings)
    if reward.zero_truncated and "truncated" not in row:
        warnings.append("mask_no_eos_with_zero (reward.zero_truncated) is on but the input has no truncated column: "
                        "no row is treated as truncated (AReaL flags the rows whose prompt + response fill the batch "
                        "width; map that flag with --column truncated=NAME)")

    # pass 2a: token-reward whitening statistics (reward.whiten_tokens, ROLL whiten_rewards)
    if reward.whiten_tokens:
        sums = token_moments(plan, inputs, res, chunk_rows, progress, rewards=True)
        res.tlr_mean, res.tlr_rstd = whiten_stats(plan, sums, WhitenSpec(), step_values, token_reward_small(plan),
                                                  state)
    # pass 2: whitening statistics
    if plan.whiten:
        if plan.spec.level == "row":
            sums = row_whitening_sums(plan, scopes, adv_row, row, table.columns.get("last_step_length"))
        else:
            sums = token_moments(plan, inputs, res, chunk_rows, progress, rewards=False)
        cells = lambda: batchnorm.grid_cells(table.length, scopes.codes, scopes.num_groups)  # noqa: E731
        res.whiten_mean, res.whiten_rstd, item, res.whiten_other = whitening_of_sums(plan, sums, step_values, cells,
                                                                                     state)
        res.diagnostics.append(item)
    return res, row, betas, kls, warnings


HALF = {"bfloat16": "bfloat16", "float16": "float16"}


def _input_half(plan) -> torch.dtype | None:
    """float16 where the reward column read is float16 (``reward.dtype=input``), else None."""
    col = plan.cmap.names.get("reward") if plan.reward_source == "reward" else None
    if col is None:
        return None
    import pyarrow as pa

    return torch.float16 if pa.types.is_float16(plan.cmap.schema.field(col).type) else None


def sample_keep(plan: Plan, row: dict, raw: torch.Tensor, groups) -> dict[str, torch.Tensor]:
    """bool [R] per rule set of ``advantage.drop_length`` / ``drop_group_mean`` / ``keep_scores_below`` (keyed by
    the key): the rows each keeps in the advantage; the row stays where every rule keeps it. Empty when none is
    set. ROLL's ``get_sample_level_mask`` (functionals.py L681-738 @8eb27cc2), on the raw scores (in the rewards'
    16-bit dtype where they have one) and Σ mask: ``max_len_mask`` keeps Σ mask ≠ the maximum length;
    ``difficulty_mask`` (L603-611) keeps the rows of a group whose ``torch.mean`` of the scores is strictly inside
    (low, high), every row where groups have one row; ``error_max_len_clip`` keeps (score = 0 and Σ mask <
    threshold) or score = 1."""
    adv = plan.run.advantage
    rules: dict[str, torch.Tensor] = {}
    if adv.drop_length is None and adv.drop_group_mean is None and adv.keep_scores_below is None:
        return rules
    valid = row["valid"]
    if adv.drop_length is not None:
        rules["drop_length"] = valid != int(adv.drop_length)
    half = shaping_dtype(plan)
    scores = raw.to(half) if half is not None else raw
    if adv.drop_group_mean is not None and groups is not None and bool((groups.sizes > 1).any()):
        low, high = (float(b) for b in adv.drop_group_mean)
        mean = groups.per_row(groups.mean_f32(scores))
        rules["drop_group_mean"] = (mean > low) & (mean < high)
    if adv.keep_scores_below is not None:
        rules["keep_scores_below"] = (((scores == 0) & (valid.to(torch.float64) < float(adv.keep_scores_below)))
                                      | (scores == 1))
    return rules


def sample_mask_item(plan: Plan, rules: dict[str, torch.Tensor], keep: torch.Tensor, raw: torch.Tensor,
                     valid: torch.Tensor) -> dict:
    """The ``sample_masked`` diagnostic: the rows the sample-level masks left out of the advantage, how many each
    rule took out, the first rows with their score, Σ mask and the rules that dropped them."""
    from .diagnostics import MAX_EXAMPLES

    adv = plan.run.advantage
    said = {"drop_length": f"advantage.drop_length={adv.drop_length} (Σ mask equal to it)",
            "drop_group_mean": f"advantage.drop_group_mean={adv.drop_group_mean} (group mean score outside)",
            "keep_scores_below": f"advantage.keep_scores_below={adv.keep_scores_below} (not scored 1, or 0 with "
                                 "Σ mask below it)"}
    out = ~keep
    rows = torch.nonzero(out, as_tuple=True)[0][:MAX_EXAMPLES].tolist()
    examples = [{"row": r, "score": float(raw[r]), "valid_tokens": int(valid[r]),
                 "rules": [k for k, kept in rules.items() if not bool(kept[r])]} for r in rows]
    per_rule = "; ".join(f"{said[k]}: {int((~kept).sum()):,}" for k, kept in rules.items())
    return {"kind": "sample_masked", "count": int(out.sum()), "unit": "rows", "severity": "info",
            "examples": examples,
            "explanation": "rows left out of the advantage by the sample-level masks (ROLL max_len_mask, "
                           "difficulty_mask, error_max_len_clip): their tokens' mask is 0 for the estimator, the "
                           "whitening and the written values, while the reward normalisation and the KL still count "
                           f"them. Rows each rule takes out: {per_rule}."}


def overlong_length(kind: str, row: dict) -> torch.Tensor:
    """The response length n of the overlong penalty (``reward.overlong.length``) from pass 1's row table: Σ mask,
    the span of the mask, its first run of ones, the row's tokens, or its tokens plus the EOS OpenRLHF 0.8.7-0.8.8
    appended to a truncated response (the input's ``truncated`` column)."""
    if kind in ("span", "first_run"):  # (pass 1 keeps the one the run asks for under "span")
        return row["span"]
    if kind == "tokens":
        return row["length"]
    if kind == "tokens_eos":
        return row["length"] + (row["truncated"] != 0).to(torch.int64)
    return row["valid"]


def score_dtype(plan) -> torch.dtype | None:
    """The 16-bit dtype the trainer's scores were in (``reward.dtype``), which the reward column is rounded to, or
    None. ``input``: a float16 reward column's float16."""
    want = plan.run.reward.dtype
    if want == "input":
        return _input_half(plan)
    return getattr(torch, HALF[want]) if want in HALF else None


def shaping_dtype(plan) -> torch.dtype | None:
    """The 16-bit dtype the reward normalisation runs in (``reward.dtype``), or None: the run's precision (also
    where the scores are promoted first, ``reward.promote``: OpenRLHF 0.11.2)."""
    return None if plan.run.reward.promote else score_dtype(plan)


def reward_dtype(plan, inputs) -> torch.dtype | None:
    """The 16-bit dtype the row estimator computes in (``reward.dtype``), or None: the run's precision.
    ``input`` keeps a float16 reward column's dtype; with KL in the reward verl's ``apply_kl_penalty``
    (scores − β·kl, the KL in float32) promotes the rewards to float32, so None."""
    want = plan.run.reward.dtype
    if want == "run" or plan.kl_on or not plan.spec.keeps_reward_dtype or plan.run.reward.promote:
        return None
    if want == "input":
        return _input_half(plan)
    return getattr(torch, HALF[want])


def row_advantages(plan, inputs, table):
    """The row estimator's advantages in the run's precision; computed on the scores in the rewards' 16-bit
    dtype where the trainer keeps it (:func:`reward_dtype`: verl's grpo, rloo and gpg then round every step
    to bf16; rloo_vectorized returns float64, verl #7964)."""
    import dataclasses

    half = reward_dtype(plan, inputs)
    if half is None:
        return plan.spec.row_fn(table, plan.params)
    adv = plan.spec.row_fn(dataclasses.replace(table, score=table.score.to(half)), plan.params)
    return adv.to(plan.dtype)
