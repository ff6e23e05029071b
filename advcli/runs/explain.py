"""``advcli explain``: the resolved canonical configuration and the formulas that will run."""
from __future__ import annotations

import json


def keys_text(flavor) -> str:
    from ..flavors import flavor_keys, release_of

    keys = flavor_keys(flavor)
    release = release_of(flavor, None)  # the defaults of --flavor NAME: its default release's settings win
    at_release = dict(release.settings) if release is not None else {}
    lines = [f"{flavor.name} keys ({flavor.framework}); defaults are the framework's"
             + (f" at {release.name}, what --flavor {flavor.name} runs" if at_release else "") + ":", ""]
    width = max(len(k) for k in keys)
    for k, key in keys.items():
        choices = f" [{', '.join(map(str, key.choices))}]" if key.choices else ""
        lines.append(f"  {k:<{width}}  default {json.dumps(at_release.get(k, key.default))}{choices}")
        lines.append(f"  {'':<{width}}  {key.doc}")
    if flavor.aliases:
        lines += ["", "older names accepted: " + ", ".join(f"{a} -> {b}" for a, b in flavor.aliases.items())]
    if flavor.name == "advcli":
        from ..estimators import all_specs

        lines += ["", "estimator.name: " + ", ".join(sorted(all_specs())),
                  "estimator.<param>: see `advcli explain --flavor advcli --set estimator.name=NAME`"]
    return "\n".join(lines)


def explain_text(flavor_at, cfg: dict, native: dict) -> str:
    """``flavor_at``: the flavor at its release (:class:`advcli.flavors.FlavorAt`, or ``NAME[@RELEASE]``), whose
    release the text names."""
    from ..config.runspec import RunSpec
    from ..estimators import get, resolve_params
    from ..flavors import at, unread_at_release

    run = RunSpec.from_config(cfg)  # the resolved configuration, read once
    spec = get(run.estimator.name)
    params = resolve_params(spec, {"name": run.estimator.name, **run.estimator.given})
    if spec.build is not None:  # a mix: the formula and sources of its terms
        spec, params = spec.build(params)
    fa = at(flavor_at)
    flavor = fa.flavor
    out = [f"flavor   {flavor.name}: {flavor.framework}"]
    release = fa.label()
    if release:
        out.append(f"release  {release} (`advcli explain --flavor {flavor.name} --history` lists the others)")
    if native:
        out.append("given    " + ", ".join(f"{k}={json.dumps(v)}" for k, v in native.items()))
        unread = unread_at_release(fa, native)
        if unread:
            out.append("unread   " + unread)
    out += ["", "pipeline (in order):"]
    r, k, a, w, g = run.reward, run.kl, run.advantage, run.whitening, run.grouping
    src = r.source if r.source != "auto" else "token_level_scores if present, else the reward column"
    if g.keep_mean_between is not None:
        lo, hi = g.keep_mean_between
        out.append(f"  0. groups kept      those whose mean reward is strictly inside ({float(lo):.10g}, "
                   f"{float(hi):.10g}); the others are taken out before anything is computed, as if never sampled "
                   "(dynamic filtering)")
    out.append(f"  1. row reward       r_i = {src}"
               + (f", components {r.components} weights {r.weights or 'all 1'}" if r.components else ""))
    out += _shaping_lines(r)
    if r.normalize.mean != "none" or r.normalize.std != "none":
        centred = f"(r − mean_{r.normalize.mean})" if r.normalize.mean != "none" else "r"
        out.append(f"     normalise        {centred.strip('()')}" if r.normalize.std == "none" else
                   f"     normalise        {centred}/(std_{r.normalize.std} + {r.normalize.eps:g})  (unbiased std)")
    if r.clip:
        out.append(f"     clip             r ← clamp(r, {r.clip[0]}, {r.clip[1]})")
    place = {"last": "position L_i−1 (the last token, masked or not)", "all": "every position of the row"}.get(
        r.placement, "the last mask=1 token")
    out.append(f"  2. token rewards    R_it = r_i at {place}" + (" × mask" if r.mask_placed else ""))
    if k.in_reward:
        from ..ops.kl import KL_KINDS

        clamps = []
        if k.input_clamp is not None:
            clamps.append(f"ref−logp clamped to ±{k.input_clamp:g}")
        if k.output_clamp is not None:
            clamps.append(f"value clamped to ±{k.output_clamp:g}")
        ctrl = (f"fixed β = {k.coef:g}" if k.controller == "fixed" else
                f"adaptive β0 = {k.coef:g}, target {k.target:g}, horizon {k.horizon:g}; each step uses "
                "β from before its update; β ← β·(1 + clip(kl/target − 1, ±0.2)·n/horizon), kl the mean over "
                "the step's rows of each row's masked mean KL, n = "
                + ("the step's rows" if k.update_rows is None else f"{k.update_rows}"))
        if k.policy != "old_log_probs" or k.missing != "refuse":
            out.append(f"     log-probs        logp = {k.policy}"
                       + ("; a missing logp or ref column counts as zeros" if k.missing == "zeros" else ""))
        out.append(f"     KL               R_it −= β·KL_it{'·m_it' if k.mask else ''}, KL = {k.estimator}: "
                   f"{KL_KINDS[k.estimator].formula}" + (f" ({'; '.join(clamps)})" if clamps else ""))
        if k.skip_flat_groups == "range":
            out.append(f"     flat groups      no KL term on the rows of a group with more than one live row (Σ m > 0) "
                       f"whose rewards lie within {k.flat_tol:g} (KL 0 in the controller's step mean too)")
        elif k.skip_flat_groups == "std":
            out.append("     flat groups      no KL term on the rows of a group of more than one row whose rewards' "
                       "numpy float64 std is 0 (KL 0 in the controller's step mean too)")
        if k.coef_min is not None:
            ctrl += f"; the penalty uses max({k.coef_min:g}, β)"
        out.append(f"     controller       {ctrl}")
        if k.token_clip:
            out.append(f"     clip             R ← clamp(R, {k.token_clip[0]}, {k.token_clip[1]})")
    else:
        out.append("     KL               not in the reward")
    dropped = []  # ROLL's sample-level masks (advantage.drop_*): rows out of the estimator's mask
    if a.drop_length is not None:
        dropped.append(f"Σ mask = {a.drop_length}")
    if a.drop_group_mean is not None:
        lo, hi = a.drop_group_mean
        dropped.append(f"the mean score of their group (of more than one row) outside ({lo:g}, {hi:g}), bounds "
                       "included")
    if a.keep_scores_below is not None:
        dropped.append(f"a score other than 1, or 0 with Σ mask ≥ {a.keep_scores_below:g}")
    if dropped:
        out.append("     sample mask      mask 0 from here on (estimator, whitening, written values) for the rows with "
                   + "; or ".join(dropped))
    from ..correction.plan import explain_lines  # rollout correction (advcli.correction.plan), between KL and estimator
    correction = explain_lines(run.correction)
    after = bool(run.correction.gate_level)  # OpenRLHF's: in the loss, after
    if not after:
        out += correction
    out.append(f"  3. estimator        {spec.name}: {spec.formula}")
    from ..flavors import estimator_origin

    origin = estimator_origin(fa, native, spec.source)
    out.append(f"     matches          {origin}")
    if origin != spec.source and spec.source:
        out.append(f"     first matched    {spec.source} (the same estimator code, with this run's parameters)")
    if params:
        out.append("     parameters       " + ", ".join(f"{p}={json.dumps(v)}" for p, v in params.items()))
    if spec.level == "row":
        out.append("     groups           exact over the whole input (rows of a group may sit anywhere), per step")
    if g.trajectories == "last_step":
        out.append("     trajectories     step-wise: the estimator runs on the is_last_step rows only; every turn "
                   "of a trajectory (rows up to its last step) gets its last step's value")
        if g.trajectory_copy == "last_row":
            out.append("                      copied as SkyRL 0.1.0 copies the last step's padded row: a turn's "
                       "position t gets the value for t < the last step's length, 0 from there on (the turn's "
                       "own mask not applied)")
    if a.distill_coef is not None:
        out.append(f"     distillation     A_t −= {a.distill_coef:g}·(logp_t − teacher_t) on every position"
                   + (" (the returns too)" if a.distill_returns else ""))
    if g.by == "position" and g.layout == "strided":
        out.append(f"     layout           strided: each step is {g.size} copies of its prompts one after another; "
                   f"row r of a step of S rows is in group r mod S/{g.size} (TRL's old RLOOTrainer)")
    if g.by == "position" and g.fallback == "scope":
        rows = f"{g.scope_rows} rows" if g.scope_rows is not None else f"a multiple of {g.size} rows"
        out.append(f"     fallback         a step without {rows} is one group "
                   "(its reward statistics over the whole step)")
    if w.whiten:
        var = "unbiased" if w.unbiased else "biased"
        eps = f"rsqrt(var + {w.eps:g})" if w.eps_mode == "add" else f"rsqrt(max(var, {w.eps:g}))"
        where = "every position" if w.mask == "all" else "the mask=1 tokens"
        out.append(f"  4. whiten           A ← (A − μ)·{eps if w.scale else '1'} over {where} of "
                   f"each {'step and domain' if g.scope == 'step_domain' else 'step'} ({var} variance"
                   + (", one pass: Σx²m/N − (Σxm/N)² in the run's precision" if w.one_pass else "")
                   + ")" + ("; then masked_fill(M=0, 0)" if a.remask == "fill"
                            else "; then × mask" if a.remask else "; masked positions not re-masked"))
        if w.mean_span == "row":
            out.append("     mean             μ = Σ A over every position of the step's rows (mask=0 holes "
                       "included) / Σ mask (OpenRLHF 0.7.0's replay buffer)")
        elif w.mean_span == "prefix":
            out.append("     kept positions   each row's first Σ mask positions only: μ = Σ A over them / Σ mask "
                       "over them, the variance over their mask=1 tokens; 0 written beyond them (OpenRLHF's "
                       "replay buffer before 0.7.0)")
    elif a.remask:
        out.append("  4. mask             A ← A × mask")
    if w.batch_normalize:
        out.append("     batch normalize  A ← (A − mean)·rsqrt(max(var, 1e-8)) per step, "
                   "mean = Σ A/(rows·longest row), "
                   "var biased over " + ("every position" if w.mask == "all" else "the mask=1 tokens"))
    if a.clip:
        out.append(f"  5. clip             A ← clamp(A, {a.clip[0]}, {a.clip[1]})")
    if after:
        out += correction
    out.append(f"  precision          {run.precision}")
    out.append("  device (auto)      " + auto_device_line(spec.level))
    if flavor.notes:
        out += ["", f"{flavor.name} semantics to know:", "  " + flavor.notes]
    out += ["", "canonical configuration (use with --flavor advcli):",
            json.dumps({k: v for k, v in cfg.items()}, indent=2, default=str)]
    return "\n".join(out)


def _shaping_lines(r) -> list[str]:
    """AReaL's reward shaping and NormConfig (reward.overlong, bias/scale/shape_clip, norm, zero_truncated) of
    the spec's reward section (:class:`advcli.config.runspec.Reward`)."""
    out = []
    over = r.overlong
    if over.tokens is not None:
        n = {"span": "the span of the mask (last − first mask=1 position + 1)", "tokens": "the row's tokens",
             "first_run": "the mask's first run of ones (the first assistant message)",
             "tokens_eos": "the row's tokens, + 1 where truncated"}.get(over.length, "Σ mask")
        excess = (f"min(n − ({over.max_tokens} − {over.tokens:g}), {over.tokens:g})" if over.cap
                  else f"(n − ({over.max_tokens} − {over.tokens:g}))")
        out.append(f"     overlong         r += min(−{excess}/{over.tokens:g}·{over.factor:g}, 0), n = {n}")
    if r.truncated_factor is not None:
        c = r.truncated_factor
        out.append(f"     truncated        rows with truncated true: r ← {f'r·{c:g}' if c >= 0 else f'{c:g}'}")
    if r.bias != 0.0 or r.scale != 1.0 or r.shape_clip:
        clip = r.shape_clip
        out.append(f"     shape            r ← (r + {r.bias:g})·{r.scale:g}"
                   + (f", clamped to [{clip[0]:g}, {clip[1]:g}]" if clip else ""))
    if r.norm:
        n = r.norm
        out.append(f"     normalise        NormConfig: mean {n['mean_level']}"
                   f"{' (leave-one-out)' if n['mean_leave1out'] else ''}, "
                   f"std {n['std_level']} ({'unbiased' if n['std_unbiased'] else 'biased'}, about that mean), "
                   f"(r − mean)/(std + {n['eps'] if n['std_level'] else 0:g}); float64 statistics")
    if r.zero_truncated:
        out.append("     truncated        r ← 0 where the truncated column is true (after normalisation)")
    return out


def auto_device_line(level: str) -> str:
    """What ``--device auto`` does for an estimator of ``level`` (the run's summary says what it picked)."""
    from ..ops.fused import AUTO_GPU_MIN_TOKENS

    if level == "row":
        return "the CPU: a row-level estimator's group statistics run on the host's row table"
    return (f"a CUDA GPU when the dump has at least {AUTO_GPU_MIN_TOKENS:,} tokens and triton is installed "
            "(the fused scan kernels), else the CPU; the run's summary says which and why")

