"""Between the write pass and the run statistics: :class:`RunObserver` feeds each written chunk
(or, for row-level estimators, its rows) to :class:`advcli.figures.FigureCollector` and the diagnostics.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..figures import ChunkFigures, FigureCollector, chunk_figures
from ..figures.arrays import to_numpy
from ..figures.collector import row_reward_and_length
from ..ops.ragged import Ragged
from .rows import kl_rows
from .tokens import chunk_final, row_level_tokens


def diagnostics_settings(plan) -> dict:
    """The :class:`advcli.pipeline.diagnostics.Diagnostics` settings of a run (all but the id lookup)."""
    from .diagnostics import drops_masked_rewards

    return {"kl": plan.run.kl if plan.kl_on else None,
            "drops": drops_masked_rewards(plan.spec, plan.params),
            "token_scores": plan.reward_source == "token_level_scores",
            "rule": plan.run.diagnostics_rule}


def uniform_groups_get_zero(plan) -> bool:
    """Does a uniform group (every reward equal) get advantage 0 in this run? The estimator says so
    (``EstimatorSpec.zero_for_uniform_groups``: it only compares rows within a group), and nothing after
    it or before it breaks the tie: no whitening of the advantages over the batch, no KL term in the
    reward (it differs row by row), no distillation term."""
    return (plan.spec.gives_zero_for_uniform_groups(plan.params) and not plan.run.whitening.whiten
            and not plan.run.kl.in_reward and not plan.run.advantage.distill_coef)


@dataclass
class ChunkObservations:
    """What the run statistics and diagnostics need from one chunk's token columns and do not
    read from its advantages: :class:`advcli.figures.ChunkFigures` and the diagnostics' token findings."""

    figures: ChunkFigures
    findings: dict


def observes_returns_early(plan) -> bool:
    """Can :func:`observe_tokens` run before whitening? Only when the written returns are not the
    (whitened) advantages themselves."""
    return plan.run.advantage.returns != "advantages"


def observe_tokens(plan, num_scopes: int, row0: int, layout: Ragged, mask, ret, tlr, tok: dict,
                   kl_rows=None) -> ChunkObservations:
    """The chunk's :class:`ChunkObservations`, computed where its token columns are decoded (the
    statistics pass's workers): the same functions :meth:`RunObserver.add` runs, so its figures
    are the same when it adds them in row order. ``ret``: the final returns (see
    :func:`observes_returns_early`)."""
    from .diagnostics import Diagnostics

    m = mask.detach().to("cpu") > 0
    values = tok.get("values") if "values" in plan.token_roles else None
    figures = chunk_figures(layout, m, ret, tlr, values, padded=bool(getattr(plan, "padded", False)),
                            one_scope=max(num_scopes, 1) == 1)
    findings = Diagnostics(**diagnostics_settings(plan)).token_findings(row0, layout, mask, tok, kl_rows)
    return ChunkObservations(figures, findings)


@dataclass
class RowValues:
    """Row-level estimators (:attr:`RunObserver.row_path`): what the statistics read from one chunk's
    tokens besides the row values: Σ token_level_rewards and the response length per row, and each
    row's last token (advantage, return, whether it is valid) to check the row values against."""

    seq_reward: np.ndarray  # [B] float64
    resp_len: np.ndarray  # [B] int64
    last_adv: torch.Tensor  # [B] as written
    last_ret: torch.Tensor  # [B] as written
    last_valid: torch.Tensor  # [B] bool: the row has a last token and it is valid


@dataclass
class ChunkPartials:
    """Everything the run statistics and diagnostics read from one chunk's tokens, as partials made
    where the tokens are (:class:`PartialMaker`) and merged by :meth:`RunObserver.add_partials` in row
    order: a few numbers per row (:class:`advcli.figures.collector.TokenPartials` or :class:`RowValues`),
    the diagnostics' token findings, and the by-position sums. Small: a Ray worker sends these instead
    of its tokens."""

    tokens: object | None  # TokenPartials (token path)
    rows: RowValues | None  # row path
    nonfinite: tuple[int, list[int]]  # rows with a non-finite valid advantage (token path)
    findings: dict
    positions: tuple | None  # (count, Σ, Σ²) per token position


class PartialMaker:
    """Makes one chunk's :class:`ChunkPartials` from its final token values: on the driver for the local
    engine (with the run's own collector, tokens fed in order), or on a Ray worker from
    :meth:`RunObserver.partial_settings`. ``valid_len`` [R]: the row table's Σ mask, which places
    each row's valid tokens among the run's (the advantage sample is drawn by that place, whoever
    makes the chunk); ``edges``: the advantage histogram's, when fixed before the pass."""

    def __init__(self, plan, settings: dict, valid_len, collector=None, edges=None):
        from .diagnostics import Diagnostics
        self.plan, self.settings, self.edges = plan, settings, edges
        self.vstart = np.concatenate([[0], np.cumsum(to_numpy(valid_len, np.int64))])
        self.row_path = settings["row_path"]
        self.collector = collector if collector is not None else FigureCollector.of_settings(settings["figures"])
        self.local = collector is not None
        self.diag = Diagnostics(**diagnostics_settings(plan))

    def partials(self, row0: int, layout: Ragged, mask, adv, ret, tlr, tok: dict,
                 seen: ChunkObservations | None = None, vbase: np.ndarray | None = None,
                 kl_rows=None) -> ChunkPartials:
        """Rows ``row0 ..`` of the run: their final token values (``seen``: see :meth:`RunObserver.add`).
        ``vbase``: each row's first valid token's place among the run's, where the maker was given no
        ``valid_len`` (a Ray worker that knows its batch's place, not every row's)."""
        from ..figures.positions import position_sums
        from .diagnostics import nonfinite_rows
        layout = layout.to("cpu")
        positions = None
        if self.settings["positions"]:  # as written: float32, over the mask the estimator used
            positions = position_sums(layout.offsets.detach().numpy(),
                                      adv.detach().to(device="cpu", dtype=torch.float32).numpy(),
                                      (mask.detach() != 0).to("cpu").numpy())
        findings = seen.findings if seen is not None else self.diag.token_findings(row0, layout, mask, tok, kl_rows)
        if self.row_path:
            m = mask.detach().to("cpu") > 0 if self.collector.padded else None
            seq_reward, resp_len = row_reward_and_length(layout, m, tlr, self.collector.padded)
            last = layout.last_index()
            has = last >= 0
            idx = torch.clamp(last, min=0).to(adv.device)
            valid = has & (mask.detach()[idx] > 0).to("cpu") if adv.numel() else has
            pick = (lambda x: x.detach()[idx].to("cpu")) if adv.numel() else (lambda x: torch.zeros(len(has)))
            return ChunkPartials(None, RowValues(seq_reward, resp_len, pick(adv), pick(ret), valid), (0, []),
                                 findings, positions)
        c = self.collector
        check = not c.adv_nonconstant if self.local else True
        fig = seen.figures if seen is not None else None
        if vbase is None:
            vbase = self.vstart[row0:row0 + layout.num_rows]
        tp = c.token_partials(layout, mask, adv, ret, tlr, tok.get("values"), fig,
                              vbase=vbase, edges=self.edges, check_const=check)
        return ChunkPartials(tp, None, nonfinite_rows(layout, mask, adv), findings, positions)


class RunObserver:
    """What the pipeline feeds: :class:`FigureCollector` plus :class:`advcli.pipeline.diagnostics.Diagnostics`.

    ``RunObserver(plan, res, row, betas, kls)`` after the row table is resolved; ``add(...)`` for
    every chunk of the write (or compute-only) pass; ``finish(result)`` fills ``result.metrics``,
    ``per_step``, ``histograms``, ``group_health`` and ``diagnostics`` (each said there once, warnings
    included: ``result.warnings`` gets no copy of them).

    Row-level estimators (``spec.level == "row"``, ``spec.row_constant``): the write pass gives every
    token of row i ``broadcast(adv_row[i])`` (× mask), then the element-wise final ops of
    :func:`advcli.pipeline.tokens.chunk_final` (whitening by scope, re-masking, clip, returns), so every
    valid token of a row holds one advantage and one return. :meth:`add` then runs that same
    ``chunk_final`` on the chunk's ``[B]`` row values (one token per row, mask 1: element-wise ops,
    the same bits) and feeds :meth:`FigureCollector.add_row_values` and the diagnostics per row; per token
    only Σ token_level_rewards per row is left. Each chunk checks its rows' last token (when valid)
    against the row values and stops the run on a mismatch (a broken assumption, never silent
    figures). Not taken when the run reads a ``values`` column or :attr:`ROW_PATH` is false.
    """

    ROW_PATH = True  # tests set it false to compare with the token-by-token figures

    def __init__(self, plan, res, row: dict, betas: list, kls: list, by_position: bool = False):
        from .diagnostics import Diagnostics, id_lookup

        table = res.table
        R = table.num_rows
        self.plan, self.res = plan, res
        self.positions = None  # the advantage per token position (advcli.figures.positions), when asked for
        if by_position:
            from ..figures.positions import PositionStats
            self.positions = PositionStats()
        self.figures = FigureCollector(R, padded=bool(getattr(plan, "padded", False)))
        raw = getattr(res, "raw_score", None)
        if raw is None:
            raw = table.score
        self.figures.set_rows(raw_score=raw, score=table.score, scopes=res.scopes, step_values=res.step_values,
                            groups=res.groups, valid_len=table.valid_len, kl_on=plan.kl_on,
                            kl_row=row.get("kl_mean"), betas=betas, kls=kls,
                            has_values="values" in plan.token_roles)
        padding = table.columns.get("is_padding")  # verl's synthetic padding rows: in no figure
        self.figures.set_padding(None if padding is None else padding.to(torch.bool))
        self.row_path = (self.ROW_PATH and plan.spec.level == "row" and bool(getattr(plan.spec, "row_constant", False))
                         and getattr(res, "adv_row", None) is not None and not self.figures.has_values)
        self.maker = PartialMaker(plan, self.partial_settings(), self.figures.valid_len, collector=self.figures)
        keys = getattr(res, "row_keys", None) or {}
        pid = plan.cmap.names.get("prompt_id") if plan.cmap.has("prompt_id") else None
        mask_placed = bool(plan.run.reward.mask_placed)
        self.diag = Diagnostics(ids=id_lookup(keys.get(pid) if pid else None), **diagnostics_settings(plan))
        self.diag.items.extend(getattr(res, "diagnostics", None) or [])  # found by prepare_run (prepare.py)
        # a row estimator run on 16-bit scores (reward.dtype) rounds as the trainer does: no float32/float64 check
        run_dtype = getattr(res, "row_dtype", None) or plan.dtype
        self.diag.rows(spec=plan.spec, params=plan.params, table=table, adv_row=res.adv_row, run_dtype=run_dtype,
                       reward_row=res.reward_row, keep=row.get("keep"), mask_placed=mask_placed,
                       padding=None if padding is None else padding.to(torch.bool))
        hook = getattr(plan.spec, "diagnostics", None)  # an estimator's own checks (AReaL adv_norm float32 mean)
        if hook is not None and plan.dtype == torch.float32:
            self.diag.items += hook(getattr(res, "group_tables", None), plan.params, self.diag.ids)
        for stage, mom, gn, codes in getattr(res, "norm_checks", []):  # AReaL reward_norm float32 group mean
            from ..estimators.areal import float32_group_mean_item
            self.diag.items.append(float32_group_mean_item(stage, mom, gn, codes, self.diag.ids))

        ncfg = plan.run.reward.normalize
        if (plan.reward_source != "token_level_scores" and (ncfg.mean, ncfg.std) != ("none", "none")
                and getattr(res, "raw_score", None) is not None):
            rule = (f"reward normalisation (mean {ncfg.mean}, std {ncfg.std}, "
                    f"eps {ncfg.eps:g}) in float32: for equal non-dyadic rewards the "
                    "group mean is an ulp off and the std a tiny residue instead of 0, "
                    f"which eps={ncfg.eps:g} does not absorb")
            if ncfg.centre_first:
                rule = ("slime RolloutManager._post_process_rewards (slime/ray/rollout.py L608-633 @624b824a): float32 "
                        "rewards reshaped to [-1, n] (or [1, rows] where the step is one group), r − mean(r, -1), "
                        f"then / (std(r − mean, -1) + {ncfg.eps:g}): " + rule)
            self.diag.reward_normalization(lambda r: normalize_like_pipeline(plan, res, r), res.raw_score,
                                           res.reward_row, plan.dtype, res.groups, rule)
        if getattr(res, "whiten_other", None) is not None:
            self.diag.whitening(res.whiten_mean, res.whiten_rstd, *res.whiten_other, plan.dtype, res.step_values)

    def add(self, row0: int, layout: Ragged, mask, adv, ret, tlr, tok: dict,
            seen: ChunkObservations | None = None) -> None:
        """One chunk's final values. ``seen``: what :func:`observe_tokens` found in the chunk's token
        columns when they were decoded in an earlier pass (``tok``, ``ret`` and ``tlr`` are then not read)."""
        self.add_partials(row0, self.maker.partials(row0, layout, mask, adv, ret, tlr, tok, seen=seen,
                                                    kl_rows=kl_rows(self.res.table, row0, layout.num_rows)))

    def partial_settings(self) -> dict:
        """What :class:`PartialMaker` needs to make this run's :class:`ChunkPartials` away from the
        driver (a Ray worker): a few flags and sizes, no per-row table."""
        return {"figures": self.figures.settings(), "row_path": self.row_path,
                "positions": self.positions is not None}

    def add_partials(self, row0: int, p: ChunkPartials) -> None:
        """One chunk's :class:`ChunkPartials`, chunks in row order (wherever they were made)."""
        if p.positions is not None:
            self.positions.add_sums(*p.positions)
        if p.rows is not None:  # row path: the rows' final values, checked against the written tokens
            adv_row, ret_row = self._row_values(row0, p.rows)
            self.figures.add_row_values(row0, p.rows.seq_reward, p.rows.resp_len, adv_row, ret_row)
            n = torch.from_numpy(self.figures.valid_len[row0:row0 + adv_row.numel()])
            from .diagnostics import nonfinite_rows
            self.diag.add_nonfinite(row0, *nonfinite_rows(None, None, None, row_adv=(adv_row, n)))
        else:
            self.figures.add_partials(row0, p.tokens)
            self.diag.add_nonfinite(row0, *p.nonfinite)
        self.diag.add_findings(p.findings)

    def _row_values(self, row0: int, rows: RowValues) -> tuple[torch.Tensor, torch.Tensor]:
        """The final advantage and return [B] (plan dtype, CPU) of the chunk's rows: the pipeline's own
        ``row_level_tokens`` and ``chunk_final`` on one token per row."""
        plan, res = self.plan, self.res
        dev, dt = plan.device, plan.dtype
        B = rows.seq_reward.size
        ones = torch.ones(B, dtype=dt, device=dev)
        per_row = Ragged(torch.arange(B + 1, device=dev))
        a = row_level_tokens(plan, res, per_row, ones, row0)
        fa, fr, _, _ = chunk_final(plan, res, per_row, a, a, None, ones, row0, apply_whiten=True)
        fa, fr = fa.detach().to("cpu"), fr.detach().to("cpu")
        # the assumption, checked on one token per row: the row's last token where it is valid
        has = rows.last_valid
        for got, want in ((rows.last_adv, fa), (rows.last_ret, fr)):
            same = (got == want) | (torch.isnan(got) & torch.isnan(want)) | ~has
            if not bool(same.all()):
                r = int(torch.nonzero(~same, as_tuple=True)[0][0])
                raise RuntimeError(f"internal: row {row0 + r}'s written advantages/returns ({float(got[r])})"
                                   f" differ from the row-level value ({float(want[r])}) the statistics "
                                   "assume; please report this")
        return fa, fr

    def finish(self, result) -> None:
        out = self.figures.finish()
        result.metrics = out["metrics"]
        result.per_step = out["per_step"]
        if hasattr(result, "histograms"):
            result.histograms = out["histograms"]
        result.group_health = out.get("group_health")
        if self.positions is not None:
            result.by_position = self.positions.result()
        if result.group_health is not None:
            result.group_health["uniform_zero_advantage"] = uniform_groups_get_zero(self.plan)
        diags = self.diag.finish()
        if hasattr(result, "diagnostics"):
            result.diagnostics = diags
        # a diagnostic is said once, as a diagnostic (its severity tells a warning): result.warnings holds
        # the other warnings only



def normalize_like_pipeline(plan, res, raw: torch.Tensor) -> torch.Tensor:
    """The pipeline's reward post-processing (same ops, same switches) on ``raw`` in raw's dtype."""
    from ..ops.rewards import clip as clip_values
    from ..ops.rewards import normalize_rewards

    ncfg = plan.run.reward.normalize
    from .plan import strided_groups

    if plan.group_by == "position" and not strided_groups(plan):
        from ..ops.blocks import block_normalize
        out = block_normalize(raw, res.scopes, res.state.block_sizes or int(plan.run.grouping.size),
                              ncfg.mean, ncfg.std, ncfg.eps, bool(ncfg.centre_first))
    else:
        out = normalize_rewards(raw, res.scopes, res.groups, ncfg.mean, ncfg.std, ncfg.eps, bool(ncfg.onepass))
    return clip_values(out, plan.run.reward.clip)

