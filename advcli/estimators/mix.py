"""A weighted sum of estimators (``--set advcli.mix="0.7*grpo+0.3*rloo"``): ``A = Σ_k w_k · A^(k)``.

Each term ``A^(k)`` is a registered estimator (or a user function) run with its own parameters, as the
flavor resolves its name (``advcli.flavors.mix_config``); the stages around the estimator (reward,
KL, whitening, clip) run once, around the sum. The spec the run runs is built from the terms
(:func:`build`): row level when every term is and they agree on masked positions (the sum of the row advantages, one
per row), else token level, the row terms' advantages then computed once from the row table of the whole input and
broadcast over each row's tokens.

Returns: the weighted sum of the terms' returns (a row-level term's returns are its advantages).
"""
from __future__ import annotations

import dataclasses

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch  # the registry loads without torch
from . import EstimatorSpec, get, register, resolve_params


def _terms(params: dict) -> list[tuple[float, EstimatorSpec, dict]]:
    terms = params.get("terms") or []
    if len(terms) < 2:
        raise AdvcliError("key estimator.terms: estimator mix needs at least two terms ([{weight, name, ...}, ...])",
                          hint='--set advcli.mix="0.7*grpo+0.3*rloo"')
    out = []
    for t in terms:
        if not isinstance(t, dict) or "name" not in t:
            raise AdvcliError(f"key estimator.terms: term {t!r} must be a mapping with a name and a weight")
        spec = get(str(t["name"]))
        if spec.build is not None:
            raise AdvcliError(f"estimator mix: term {t['name']!r} is itself a mix; write the weighted sum out")
        given = {k: v for k, v in t.items() if k not in ("weight", "name")}
        out.append((float(t.get("weight", 1.0)), spec, resolve_params(spec, given)))
    return out


def _mask_output(spec: EstimatorSpec, params: dict) -> bool:
    return bool(params.get("mask_output", True)) if spec.level == "row" else True


def build(params: dict) -> tuple[EstimatorSpec, dict]:
    """The spec and parameters of the weighted sum of ``params["terms"]``."""
    terms = _terms(params)
    masks = {_mask_output(s, p) for _, s, p in terms}
    formula = " + ".join(f"{w:g}·A[{s.name}]" for w, s, _ in terms)
    # one row value per row only where every term treats masked positions alike (NeMo keeps them, verl zeroes
    # them): else the sum is taken per token, each row term broadcast its own way
    row = all(s.level == "row" for _, s, _ in terms) and len(masks) == 1
    needs = tuple(dict.fromkeys(r for _, s, _ in terms for r in s.needs))
    optional = tuple(dict.fromkeys(r for _, s, _ in terms for r in s.optional))
    common = dict(
        name="mix", formula=f"A = {formula}", source="; ".join(f"{s.name}: {s.source}" for _, s, _ in terms),
        needs=needs, optional=optional, uses_groups=any(s.uses_groups for _, s, _ in terms),
        row_constant=all(s.row_constant for _, s, _ in terms),
        zero_for_uniform_groups=all(s.gives_zero_for_uniform_groups(p) for _, s, p in terms),
        reward_from_components=any(s.reward_from_components for _, s, _ in terms),
        min_components=max(s.min_components for _, s, _ in terms),
        drops_masked_rewards=any(s.drops_masked_rewards for _, s, _ in terms),
        needs_lengths=next((s.needs_lengths for _, s, _ in terms if s.needs_lengths), ""))
    run_params = {"terms": params["terms"], "mask_output": masks.pop() if len(masks) == 1 else True}
    if row:
        return EstimatorSpec(level="row", row_fn=lambda table, _p: mix_rows(terms, table), **common), run_params
    return EstimatorSpec(level="token", token_fn=lambda chunk, _p: mix_tokens(terms, chunk),
                         group_token_pass=lambda chunk, _p, ctx: mix_token_pass(terms, chunk, ctx),
                         **common), run_params


def weighted_sum(weights: list[float], values: list[torch.Tensor]) -> torch.Tensor:
    """``Σ_k w_k · v_k`` in the order of the terms, in the values' dtype."""
    total = None
    for w, v in zip(weights, values):
        term = torch.tensor(w, dtype=v.dtype, device=v.device) * v
        total = term if total is None else total + term
    return total


def mix_rows(terms, table) -> torch.Tensor:
    """Row level: ``A_i = Σ_k w_k · A^(k)_i``, each term's row function on the whole row table."""
    return weighted_sum([w for w, _, _ in terms], [s.row_fn(table, p).to(table.score.dtype) for _, s, p in terms])


def mix_token_pass(terms, chunk, ctx) -> None:
    """The pass over the whole input before the write pass: the row terms' advantages (from the row table),
    and each token term's own group token pass, in tables of its own."""
    from ..ops.batch import GroupTokenTables

    mine = ctx.extra.setdefault("mix", {})
    for k, (_, spec, p) in enumerate(terms):
        if spec.level == "row" and k not in mine:
            mine[k] = spec.row_fn(ctx.table, p)
        elif spec.level == "token" and spec.group_token_pass is not None and (
                spec.group_token_pass_needed is None or spec.group_token_pass_needed(p)):
            if k not in mine:
                mine[k] = GroupTokenTables(groups=ctx.groups, width=ctx.width, table=ctx.table)
            spec.group_token_pass(chunk, p, mine[k])


def mix_tokens(terms, chunk) -> tuple[torch.Tensor, torch.Tensor]:
    """Token level: ``A_t = Σ_k w_k · A^(k)_t`` (a row term: its row advantage on every token, × mask unless
    it keeps masked positions), and the same sum of the returns."""
    mine = chunk.group_tables.extra["mix"]
    advs, rets = [], []
    rows = chunk.rows["row"]
    for k, (_, spec, p) in enumerate(terms):
        if spec.level == "row":
            a = chunk.layout.broadcast(mine[k].to(chunk.mask.device)[rows.to(torch.int64)].to(chunk.mask.dtype))
            a = a * chunk.mask if p.get("mask_output", True) else a
            advs.append(a)
            rets.append(a)
        else:
            c = dataclasses.replace(chunk, group_tables=mine.get(k))
            a, r = spec.token_fn(c, p)
            advs.append(a.to(chunk.mask.dtype))
            rets.append(r.to(chunk.mask.dtype))
    weights = [w for w, _, _ in terms]
    return weighted_sum(weights, advs), weighted_sum(weights, rets)


register(EstimatorSpec(
    name="mix", level="row", build=build,
    formula="A = Σ_k w_k · A^(k): a weighted sum of estimators, each with its own parameters "
            "(--set advcli.mix=\"0.7*grpo+0.3*rloo\")",
    source="advcli (the estimator lab)",
    params={"terms": Key(None, "the terms: [{weight, name, <the estimator's parameters>}, ...] "
                               "(advcli.mix writes them)", None, "list")}))
