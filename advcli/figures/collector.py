"""The run statistics collector: fed with the row table once and every chunk of the write pass,
it keeps a few float64/int64 entries per row and per-scope running sums, and gives every figure at
the end (:meth:`FigureCollector.finish`; the figures: :mod:`advcli.figures`).

Numpy only: every entry point takes numpy arrays or torch tensors (on any device) and converts them
once with :func:`advcli.figures.arrays.to_numpy`; layouts are a :class:`advcli.ops.ragged.Ragged` or its
offsets, groupings an :class:`advcli.ops.groups.GroupIndex` or :class:`advcli.figures.arrays.Codes`."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..report.catalog import compute_figures
from .arrays import Codes, offsets_of, to_numpy, writable_state
from .histograms import BINS, StreamHistogram, count_bins, histogram, linear_bins
from .json_values import figure
from .quantile_sketch import RESERVOIR, TokenSample, quantiles
from .sums import RowPartials, ScopeSums, row_sums64
from .verl_metrics import group_figures, metric_block, row_figures


@dataclass
class ChunkFigures:
    """One chunk's run figures that do not depend on its advantages: Σ token_level_rewards and the
    response length per row, and the per-row partials of the returns, the values and returns − values.
    Computed by :func:`chunk_figures` wherever the chunk's token columns are decoded (the statistics
    pass keeps them beside its cached results, so the write pass need not decode the inputs again) and
    added by :meth:`FigureCollector.add_chunk` in row order, so every sum is the same as when computed there."""

    seq_reward: np.ndarray  # [B] float64
    resp_len: np.ndarray  # [B] int64
    ret: RowPartials
    val: RowPartials | None
    ret_minus_val: RowPartials | None


def _valid_tokens(offs: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the valid tokens' flat indices, ``voff`` [B+1]: valid tokens before each row) of mask ``m`` (bool)."""
    sel = np.flatnonzero(m)
    return sel, np.searchsorted(sel, offs)


def row_reward_and_length(layout, m, tlr, padded: bool, sel: np.ndarray | None = None,
                          voff: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(Σ token_level_rewards [B] float64, response length [B] int64) of a chunk's rows (``layout``: a
    Ragged or its offsets; ``m``: mask > 0, read for padded lists only, where the length runs to the
    last mask=1 position)."""
    offs = offsets_of(layout)
    seq_reward = row_sums64(offs, tlr)
    if not padded:
        return seq_reward, np.diff(offs)
    if sel is None:
        sel, voff = _valid_tokens(offs, to_numpy(m, bool))
    n = voff[1:] - voff[:-1]
    last = sel[np.maximum(voff[1:] - 1, 0)] if sel.size else np.zeros_like(n)
    return seq_reward, np.where(n > 0, last - offs[:-1] + 1, 0)


def _gather64(x, sel: np.ndarray) -> np.ndarray:
    """``x[sel]`` as float64 (``x``: the chunk's flat token values, numpy or torch)."""
    return to_numpy(x)[sel].astype(np.float64)


def chunk_figures(layout, m, ret, tlr, values, *, padded: bool, one_scope: bool, sel: np.ndarray | None = None,
                  voff: np.ndarray | None = None) -> ChunkFigures:
    """:class:`ChunkFigures` of one chunk (``m``: mask > 0, bool; ``values`` None when the run
    reports no value figures; ``one_scope``: the run has one scope, so min/max are per chunk)."""
    offs = offsets_of(layout)
    if sel is None:
        sel, voff = _valid_tokens(offs, to_numpy(m, bool))
    seq_reward, resp_len = row_reward_and_length(offs, m, tlr, padded, sel, voff)
    rv = _gather64(ret, sel)
    ret_p = RowPartials.of_tokens(rv, voff, rows_minmax=not one_scope)
    val_p = rmv_p = None
    if values is not None:
        vv = _gather64(values, sel)
        val_p = RowPartials.of_tokens(vv, voff, rows_minmax=not one_scope)
        rmv_p = RowPartials.of_tokens(rv - vv, voff, rows_minmax=not one_scope)
    return ChunkFigures(seq_reward, resp_len, ret_p, val_p, rmv_p)


@dataclass
class TokenPartials:
    """What the run figures read from one chunk's tokens, made where the tokens are
    (:meth:`FigureCollector.token_partials`) and merged by :meth:`FigureCollector.add_partials`: a few
    numbers per row, plus the advantage sample's values that fall in the chunk and the histogram's
    counts (or, before its edges are fixed, the chunk's finite advantages)."""

    figures: ChunkFigures
    valid: np.ndarray  # [B] int64 Σ mask
    adv: RowPartials  # the valid advantages
    adv_zero: np.ndarray  # [B] int64 valid tokens whose advantage is 0
    sample: np.ndarray  # the sampled finite valid advantages (or all valid advantages: vbase None)
    num_valid: int  # valid tokens in the chunk
    picked: bool  # ``sample`` holds the sampled values only (the chunk's place among the valid tokens was known)
    hist_values: np.ndarray | None  # finite valid advantages, when the histogram's edges were not given
    hist_counts: tuple | None  # (counts [bins], underflow, overflow) against the given edges


class FigureCollector:
    """Streaming statistics of one run (every figure: the docstring of :mod:`advcli.figures`)."""

    def __init__(self, num_rows: int, *, padded: bool = False, reservoir: int = RESERVOIR, bins: int = BINS):
        R = num_rows
        self.R = R
        self.padded = padded
        self.bins = bins
        # per row, filled chunk by chunk
        self.seq_reward = np.zeros(R, np.float64)
        self.resp_len = np.zeros(R, np.int64)
        self.valid = np.zeros(R, np.int64)
        self.adv_sum = np.zeros(R, np.float64)  # Σ of the valid advantages (NaN propagates)
        self.adv_min = np.full(R, math.inf)  # of the finite valid advantages
        self.adv_max = np.full(R, -math.inf)
        self.adv_finite = np.zeros(R, np.int64)  # how many valid advantages are finite
        self.adv_nonconstant = False  # a row with two different finite valid advantages was seen
        self.adv_zero = np.zeros(R, np.int64)  # valid tokens whose advantage is 0 (group health)
        self.reservoir = TokenSample(reservoir)
        self.adv_hist = StreamHistogram(bins, seed_tokens=reservoir)
        self.rows_set = False
        self.scopes: Codes | None = None
        self.keep: np.ndarray | None = None  # [R] bool, rows the figures read (None: all; set_padding)

    # ------------------------------------------------------------------------------- row feed
    def set_rows(self, *, raw_score, score, scopes, step_values: list, groups, valid_len, kl_on: bool = False,
                 kl_row=None, betas: list[float] | None = None, kls: list[float] | None = None,
                 has_values: bool = False) -> None:
        """The per-row table of the whole input ([R] each; numpy arrays or tensors, ``scopes``/``groups``
        :class:`advcli.ops.groups.GroupIndex` or :class:`Codes`) and the per-step KL figures.
        ``valid_len`` (Σ mask per row) also fixes which valid tokens the advantage sample takes."""
        self.raw_score = to_numpy(raw_score, np.float64)
        self.score = to_numpy(score, np.float64)
        self.scopes = Codes.of(scopes)
        self.S = max(self.scopes.num_groups, 1)
        self.step_values = step_values
        self.groups = Codes.of(groups)
        self.valid_len = to_numpy(valid_len, np.int64)
        self.kl_on = kl_on
        self.kl_row = None if kl_row is None else to_numpy(kl_row, np.float64)
        self.betas, self.kls = betas or [], kls or []
        self.has_values = has_values
        self.adv = ScopeSums(self.S)
        self.ret = ScopeSums(self.S)
        self.val = ScopeSums(self.S)
        self.ret_minus_val = ScopeSums(self.S)
        self.reservoir.prepare(int(self.valid_len.sum()))
        self.rows_set = True

    def set_padding(self, padding) -> None:
        """Rows to leave out of every figure ([R] bool, or None): synthetic padding rows (verl's V1 trainer,
        ``is_padding``), in the batch for the advantages and out of every figure and group count, as verl's
        metrics leave them out (``non_padding_mask``). Their tokens are mask 0 in a run (``advcli stats`` masks
        them too: a response-level output's mask is all 1), so no token figure reads them; :meth:`finish` drops
        their rows and their group."""
        pad = None if padding is None else to_numpy(padding, bool)
        self.keep = None if pad is None or not pad.any() else ~pad

    def kept(self) -> FigureCollector:
        """This collector with the rows :meth:`set_padding` left out removed from every per-row entry, the
        groups renumbered (itself when every row is kept)."""
        import copy

        if self.keep is None:
            return self
        keep = self.keep
        v = copy.copy(self)
        for k, a in vars(self).items():
            if k != "keep" and isinstance(a, np.ndarray) and a.ndim >= 1 and a.shape[0] == self.R:
                setattr(v, k, a[keep])
        v.keep = None
        v.R = int(keep.sum())
        if self.scopes is not None:
            v.scopes = Codes(self.scopes.codes[keep], self.scopes.num_groups)
        if self.groups is not None:
            u, inv = np.unique(self.groups.codes[keep], return_inverse=True)
            v.groups = Codes(inv.ravel().astype(np.int64), int(u.size))
        return v

    # ------------------------------------------------------------------------------ chunk feed
    def _row_scope(self, rows: slice, B: int) -> np.ndarray:
        return self.scopes.codes[rows] if self.scopes is not None else np.zeros(B, np.int64)

    def add_chunk(self, row0: int, layout, mask, adv, ret, tlr, values=None,
                  figures: ChunkFigures | None = None) -> None:
        """One chunk of the write pass: rows ``row0 .. row0 + B − 1`` (flat tensors on any device):
        :meth:`token_partials` here, then :meth:`add_partials`. ``figures``: the chunk's figures that
        do not depend on its advantages (:func:`chunk_figures`), computed earlier where its token
        columns were at hand; ``ret``, ``tlr`` and ``values`` are then not read."""
        self.add_partials(row0, self.token_partials(layout, mask, adv, ret, tlr, values, figures,
                                                    check_const=not self.adv_nonconstant))

    def token_partials(self, layout, mask, adv, ret, tlr, values=None, figures: ChunkFigures | None = None,
                       *, vbase=None, edges=None, check_const: bool = True) -> TokenPartials:
        """Everything :meth:`add_partials` reads from one chunk's tokens, token by token: the valid tokens
        are found once and each quantity is reduced per row (float64). Needs only the settings of
        :meth:`settings` (a Ray worker builds a collector from them, :meth:`of_settings`). ``vbase`` [B]: where each
        row's valid tokens start among the run's (from the row table's Σ mask, so that the place of a
        token does not depend on the chunks; the sample's values are then picked here; None: the
        tokens in order, as fed); ``edges``: the advantage histogram's edges when already fixed (the
        chunk's counts are then made here; None: its finite values are sent)."""
        offs = offsets_of(layout)
        m = to_numpy(mask) > 0
        # the valid tokens' flat indices, found once and gathered with; voff[i]: valid tokens before row i
        sel, voff = _valid_tokens(offs, m)
        if figures is None:
            figures = chunk_figures(offs, m, ret, tlr, values if self.has_values else None, padded=self.padded,
                                    one_scope=self.S == 1, sel=sel, voff=voff)
        av = _gather64(adv, sel)
        pa = RowPartials.of_tokens(av, voff, rows_minmax=self.S != 1, check_const=check_const)
        zpos = np.searchsorted(np.flatnonzero(av == 0), voff)  # zeros before each row
        finite = av if pa.all_finite else av[np.isfinite(av)]
        sample = None
        cnt = voff[1:] - voff[:-1]
        if vbase is not None:  # each valid token's place: its row's first place + its rank in the row
            # place of token k = vbase[row] + k − voff[row], one repeat over the rows
            sample = self.reservoir.pick(np.arange(av.size, dtype=np.int64)
                                         + np.repeat(to_numpy(vbase, np.int64) - voff[:-1], cnt), av)
        if edges is not None:
            edges = to_numpy(edges, np.float64)
        counts = None if edges is None else count_bins(finite, edges, linear_bins(edges))
        return TokenPartials(figures, cnt, pa, zpos[1:] - zpos[:-1],
                             av if sample is None else sample, int(av.size), sample is not None,
                             finite if counts is None else None, counts)

    def add_partials(self, row0: int, p: TokenPartials) -> None:
        """One chunk's :class:`TokenPartials`, chunks in row order: the row figures are written to the row
        entries and added to the scopes row by row, so every sum is the local engine's whoever made them."""
        figures, pa = p.figures, p.adv
        B = p.valid.size
        rows = slice(row0, row0 + B)
        self.seq_reward[rows], self.resp_len[rows] = figures.seq_reward, figures.resp_len
        self.valid[rows] = p.valid
        scope = self._row_scope(rows, B)
        self.adv.add(pa, scope)
        self.adv_sum[rows] = pa.raw_sum
        self.adv_finite[rows] = pa.count
        self.adv_nonconstant |= pa.nonconstant
        if not self.adv_nonconstant:  # per-row min/max only matter while the run may be row-constant
            self.adv_min[rows], self.adv_max[rows] = pa.mn, pa.mx
        self.ret.add(figures.ret, scope)
        if figures.val is not None:
            self.val.add(figures.val, scope)
            self.ret_minus_val.add(figures.ret_minus_val, scope)
        self.adv_zero[rows] = p.adv_zero
        if p.picked:
            self.reservoir.add_picked(p.sample, p.num_valid)
        else:  # the chunk's valid advantages themselves, in order
            self.reservoir.add(p.sample)
        if p.hist_counts is not None:
            self.adv_hist.add_counts(*p.hist_counts)
        else:
            self.adv_hist.add(p.hist_values)

    def make_writable(self) -> None:
        """Copy the read-only arrays among this collector's (Ray hands an actor's numpy arguments over
        zero-copy and read-only; :class:`advcli.engines.ray_stats.StatsSink` adds into them in place)."""
        for obj in (self, self.adv_hist, *(getattr(self, k, None) for k in ("adv", "ret", "val", "ret_minus_val"))):
            if obj is not None:
                obj.__dict__.update(writable_state(obj.__dict__))

    def settings(self) -> dict:
        """What :meth:`token_partials` reads of this collector (no per-row table): for :meth:`of_settings`."""
        return {"num_scopes": self.S, "padded": self.padded, "has_values": self.has_values,
                "valid_tokens": self.reservoir.expected, "reservoir": self.reservoir.size, "bins": self.bins}

    @staticmethod
    def of_settings(st: dict) -> FigureCollector:
        """A collector that only makes :meth:`token_partials` (on a Ray worker): no rows."""
        c = FigureCollector(0, padded=st["padded"], reservoir=st["reservoir"], bins=st["bins"])
        c.S, c.has_values = st["num_scopes"], st["has_values"]
        c.reservoir.prepare(st["valid_tokens"])
        return c

    def add_row_values(self, row0: int, seq_reward, resp_len, adv_row, ret_row) -> None:
        """One chunk whose every valid token of row i holds the advantage ``adv_row[i]`` and the return
        ``ret_row[i]`` (row-level estimators; see :class:`advcli.pipeline.observe.RunObserver`): the figures of
        :meth:`add_chunk` from the rows, weighted by their valid-token counts (the row table's ``valid_len``),
        with the chunk's Σ token_level_rewards and response length per row (:func:`row_reward_and_length`)
        made where its tokens are."""
        adv_row = to_numpy(adv_row, np.float64)
        B = adv_row.size
        rows = slice(row0, row0 + B)
        self.seq_reward[rows], self.resp_len[rows] = to_numpy(seq_reward), to_numpy(resp_len)
        n = self.valid_len[rows]
        self.valid[rows] = n
        scope = self._row_scope(rows, B)
        pa = RowPartials.of_rows(adv_row, n)
        self.adv_zero[rows] = np.where(adv_row == 0, n, 0)
        self.adv.add(pa, scope)
        self.adv_sum[rows] = pa.raw_sum
        self.adv_min[rows], self.adv_max[rows], self.adv_finite[rows] = pa.mn, pa.mx, pa.count
        self.ret.add(RowPartials.of_rows(ret_row, n), scope)

    def row_advantage(self) -> np.ndarray:
        """[R] each row's mean advantage over its valid tokens (NaN for rows with none)."""
        with np.errstate(invalid="ignore"):
            return np.where(self.valid > 0, self.adv_sum / np.maximum(self.valid, 1), math.nan)

    def row_constant(self) -> bool:
        """Every row's finite valid advantages are one value (always so for row-level estimators)."""
        if self.adv_nonconstant:
            return False
        has = self.adv_finite > 0
        return bool((self.adv_min[has] == self.adv_max[has]).all())

    def finish(self) -> dict[str, Any]:
        """``{"metrics": {...}, "per_step": [...], "histograms": {...}}`` (JSON-able), over the kept rows
        (:meth:`set_padding`)."""
        if self.keep is not None:
            return self.kept().finish()
        R = self.R
        allrows = np.ones(R, bool)
        metrics = metric_block(self, allrows, None)
        non_aborted = self.resp_len != 0
        for name, x in (("critic/score", self.raw_score), ("critic/rewards", self.seq_reward)):
            metrics[f"{name}/std"] = row_figures(x, non_aborted)["std"]
            for k, v in quantiles(x[non_aborted & ~np.isnan(x)]).items():
                metrics[f"{name}/{k}"] = v
        a = self.adv.figures(None)
        metrics["critic/advantages/std"] = a["std"]
        metrics["critic/advantages/count"] = a["count"]
        metrics["critic/advantages/nonfinite"] = a["nonfinite"]
        r = self.ret.figures(None)
        metrics["critic/returns/count"] = r["count"]
        metrics["critic/returns/nonfinite"] = r["nonfinite"]
        const = self.row_constant()
        has = self.adv_finite > 0
        if const:
            q = quantiles(self.adv_min[has], self.adv_finite[has])
            exact = True
        else:
            q = quantiles(self.reservoir.values)
            exact = self.reservoir.exact
        metrics.update({f"critic/advantages/{k}": v for k, v in q.items()})
        metrics["critic/advantages/quantiles_exact"] = exact
        metrics.update(group_figures(self))
        metrics.update(compute_figures(self, allrows, None))  # the catalog's computed figures

        per_step = []
        for s in range(self.S):
            sel = self.scopes.codes == s
            kl_on = self.kl_on
            d: dict[str, Any] = {"step": self.step_values[s] if s < len(self.step_values) else None,
                                 "rows": int(sel.sum()),
                                 "kl_coef": figure(self.betas[s]) if kl_on and s < len(self.betas) else None,
                                 "kl": figure(self.kls[s]) if kl_on and s < len(self.kls) else None}
            d.update(metric_block(self, sel, s))
            d.update(compute_figures(self, sel, s))
            per_step.append(d)

        hist = {
            "score": histogram(self.raw_score[non_aborted & ~np.isnan(self.raw_score)], bins=self.bins, over="rows",
                               note="sequence score (before normalisation and KL), non-aborted rows"),
            "rewards": histogram(self.seq_reward[non_aborted & ~np.isnan(self.seq_reward)], bins=self.bins,
                                 over="rows", note="sequence reward Σ token_level_rewards, non-aborted rows"),
        }
        if const:
            hist["advantages"] = histogram(self.adv_min[has], self.adv_finite[has], bins=self.bins, over="tokens",
                                           note="valid tokens; row-constant advantages: exact, edges from the "
                                                "exact min and max")
        else:
            hist["advantages"] = self.adv_hist.result(
                f"valid tokens; edges fixed from the run's first {self.adv_hist.seed_tokens} finite valid tokens "
                "([min, max] widened by half the span each side), counts exact")
        if self.groups is not None and self.groups.num_groups:
            sizes = self.groups.sizes[self.groups.sizes > 0]
            top = int(sizes.max())
            counts = np.bincount(sizes, minlength=top + 1)[1:]
            hist["group_size"] = {"edges": [k + 0.5 for k in range(top + 1)], "counts": counts.tolist(),
                                  "underflow": 0, "overflow": 0, "over": "groups", "exact": True,
                                  "note": "groups per size (bin k holds the groups of k rows)"}
        from .group_health import of_collector

        return {"metrics": metrics, "per_step": per_step, "histograms": hist, "group_health": of_collector(self)}
