"""Numerical and semantic hazards no framework reports, counted per run with the rows concerned.

:meth:`Diagnostics.finish` returns ``RunResult.diagnostics``: a list of plain JSON-able dicts ::

    {"kind": str,           # see below
     "count": int,          # how many groups / rows / tokens are concerned (0: checked, none found)
     "unit": "groups" | "rows" | "tokens",
     "severity": "info" | "warning",
     "examples": [dict, ...],   # the first MAX_EXAMPLES, with global row numbers (0-based, input
                                # order across all input files) and group ids (prompt_id, or "#k")
     "meaning": str,        # one line (MEANINGS): what the terminal summary says after the count
     "explanation": str}

Only the kinds that apply to the configuration are listed. Kinds:

- ``groups_of_one`` (info): groups with a single row. Examples give the row, its score and the
  advantage the estimator gave it (verl grpo: s/(1+1e-6); rloo: s; rloo_vectorized, NeMo: 0; ROLL
  with a group std: NaN), and the explanation says which of these happened.
- ``all_equal_groups`` (info): groups of ≥ 2 rows whose estimator row scores are all equal (no
  learning signal; the intended advantage is 0).
- ``float32_cancellation`` (warning): row-level group estimators only. The estimator is run a
  second time on the same row table in the other precision (float64 when the run is float32, and
  vice versa), so A32 is what the framework computes and A64 the intended math. A group is flagged
  when its float64 std is 0 or below 1e-6·|mean| while max|A32| > :data:`ATOL`, or when
  max|A32 − A64| > ATOL + RTOL·max|A64|. Examples: group id, rows,
  rewards, float64 mean/std, the A32 and A64 values and the framework rule responsible.
- ``dropped_rewards`` (warning): rows whose reward sits on a mask=0 token where the configuration
  then discards it: verl gae / reinforce_plus_plus / remax (they read rewards at mask=1 tokens
  only), ROLL's ``×mask`` (``reward.mask_placed``), OpenRLHF's ``R ← M·R``. For
  ``token_level_scores`` inputs: non-zero scores on mask=0 tokens under such an estimator.
- ``kl_input_clamp`` / ``kl_output_clamp`` (info): tokens whose log-ratio ``ref − logp`` exceeded
  the input clamp, or whose KL estimate exceeded the output clamp (only when KL enters the reward;
  counted over the tokens the KL term applies to).
- ``nonfinite_advantages`` (warning): rows with NaN/inf advantages on valid tokens.
- ``sample_masked`` (info, unit ``rows``): with ``advantage.drop_length`` / ``drop_group_mean`` /
  ``keep_scores_below`` (ROLL's sample-level masks): the rows left out of the advantage, per rule.
- ``float32_whitening`` (warning, unit ``steps``): only with ``advantage.whiten_one_pass`` (slime): steps
  whose one-pass whitening statistics differ between float32 and float64 (``E[x²] − E[x]²`` cancels).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ..ops import kl as kl_ops
from ..ops.batch import RowTable
from ..ops.groups import GroupIndex
from ..ops.ragged import Ragged

MAX_EXAMPLES = 10

# each kind's meaning in one line: what the terminal summary prints after its count (every item also
# carries it as "meaning"; the long "explanation" stays in the JSON, Markdown and HTML reports)
MEANINGS = {
    "groups_of_one": "groups with one row, nothing to compare it with: its advantage is 0, its score or NaN, "
                     "by framework",
    "all_equal_groups": "groups of 2 or more rows that all scored the same: nothing in them says which answer "
                        "was better",
    "float32_cancellation": "advantages that are float32 rounding noise: in float64 the group's spread is 0 (or "
                            "all but) and its advantages are small or 0",
    "dropped_rewards": "rewards placed on a mask=0 token and discarded: these rows train on no outcome reward",
    "kl_input_clamp": "tokens whose log-ratio was clamped before the KL estimate: their KL penalty is bounded, "
                      "not the true value",
    "kl_output_clamp": "tokens whose KL estimate was clamped: their KL penalty is bounded, not the true value",
    "nonfinite_advantages": "rows with NaN or infinite advantages on valid tokens: they poison the training loss",
    "float32_whitening": "steps whose one-pass whitening statistics differ between float32 and float64 "
                         "(E[x²] − E[x]² cancels)",
    "sample_masked": "rows the sample-level masks (ROLL max_len_mask, difficulty_mask, error_max_len_clip) left out "
                     "of the advantage",
    "float32_norm": "groups of nearly equal values whose normalised values the float32 rounding of their group "
                    "mean moves: that part is rounding, not signal",
    "float32_amplified_normalization": "steps normalised at the variance floor: their advantages are float32 "
                                       "residues ×1e4, not signal",
}
ATOL = 1e-4
RTOL = 1e-3
REL_STD = 1e-6


def _f(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def id_lookup(key_arrays: list | None) -> Callable[[list[int]], list]:
    """rows -> group ids read from the prompt_id arrays of the row pass (strings), or None each."""
    if not key_arrays:
        return lambda rows: [None] * len(rows)
    import pyarrow as pa

    from ..io.lists import take

    col = pa.chunked_array(key_arrays)

    def look(rows: list[int]) -> list:
        if not rows:
            return []
        return [v if isinstance(v, (str, int, float)) or v is None else str(v)
                for v in take(col, rows).to_pylist()]
    return look


def drops_masked_rewards(spec, params: dict) -> bool:
    """Does this configuration discard a reward that sits on a mask=0 token?"""
    if spec.level != "token":
        return False
    if params.get("holes") == "skip" or params.get("mask_rewards") or params.get("zero_masked"):
        return True
    return spec.drops_masked_rewards  # verl remax: G = reverse cumsum of r·m


def _cast_table(table: RowTable, dtype: torch.dtype) -> RowTable:
    cast = lambda t: t.to(dtype) if torch.is_tensor(t) and t.is_floating_point() else t  # noqa: E731
    return RowTable(score=cast(table.score), valid_len=table.valid_len, length=table.length, scopes=table.scopes,
                    groups=table.groups, columns={k: cast(v) for k, v in table.columns.items()}, labels=table.labels)


def _rule(spec, params: dict) -> str:
    eps = params.get("eps")
    text = f"estimator {spec.name} ({spec.source})"
    if getattr(spec, "float32_rule", ""):
        return f"{text}: {spec.float32_rule}"
    if any(isinstance(v, str) and "one_pass" in v for v in params.values()):
        text += " computes the variance in one pass, E[x²] − E[x]², which cancels catastrophically in float32;"
    if eps is not None:
        text += (f" divides by (σ + {eps:g}): for equal non-dyadic rewards the float32 group mean lands an ulp "
                 f"away from the value and σ comes out as a tiny residue instead of 0, which eps={eps:g} does "
                 "not absorb")
    else:
        text += " computes its group statistics in float32; for equal non-dyadic rewards they leave a residue"
    return text


class Diagnostics:
    """Collects the diagnostics of one run: row-level checks once, token-level ones per chunk."""

    def __init__(self, *, ids: Callable[[list[int]], list] | None = None, kl=None,
                 drops: bool = False, token_scores: bool = False, rule: str | None = None):
        self.ids = ids or (lambda rows: [None] * len(rows))
        self.rule = rule  # the framework's float32 rule, as the flavor names it (config diagnostics.rule)
        self.kl = kl  # the run spec's kl section (advcli.config.runspec.KL) when KL enters the reward, else None
        self.drops = drops
        self.token_scores = token_scores
        self.items: list[dict] = []
        self.groups: GroupIndex | None = None
        # token-level accumulators
        self.kl_in = {"count": 0, "rows": 0, "examples": []}
        self.kl_out = {"count": 0, "rows": 0, "examples": []}
        self.tls_dropped = {"count": 0, "tokens": 0, "examples": []}
        self.nonfinite = {"count": 0, "examples": []}
        self.canc = {"checked": False, "count": 0, "examples": [], "rules": [], "other": torch.float64}

    def _gid(self, rows: list[int], codes: list[int]) -> list:
        ids = self.ids(rows)
        return [i if i is not None else f"#{c}" for i, c in zip(ids, codes)]

    # ------------------------------------------------------------------------------- row level
    def rows(self, *, spec, params: dict, table: RowTable, adv_row: torch.Tensor | None, run_dtype: torch.dtype,
             reward_row: torch.Tensor | None = None, keep: torch.Tensor | None = None,
             mask_placed: bool = False, padding: torch.Tensor | None = None) -> None:
        """Checks on the per-row table (groups of one, all-equal groups, float32 cancellation,
        rewards placed on masked tokens). ``padding`` [R] bool: synthetic padding rows (verl's V1 trainer),
        left out of the group checks."""
        g = table.groups
        self.groups = g
        pad = padding if padding is not None and bool(padding.any()) else None
        if spec.uses_groups and g is not None and g.num_groups:
            self._singletons(g, table, adv_row, pad)
            self._all_equal(g, table, adv_row, pad)
            if spec.level == "row" and adv_row is not None:
                self._cancellation(spec, params, table, adv_row, run_dtype)
        if reward_row is not None and keep is not None and (self.drops or mask_placed) and not self.token_scores:
            bad = (table.length > 0) & ~keep & (reward_row != 0)
            rows = torch.nonzero(bad, as_tuple=True)[0][:MAX_EXAMPLES].tolist()
            why = ("reward.mask_placed multiplies the placed rewards by the mask (ROLL)" if mask_placed else
                   f"estimator {spec.name} reads rewards only at mask=1 tokens ({spec.source})")
            self.items.append({
                "kind": "dropped_rewards", "count": int(bad.sum()), "unit": "rows", "severity": "warning",
                "examples": [{"row": r, "reward": _f(reward_row[r]), "length": int(table.length[r]),
                              "valid_tokens": int(table.valid_len[r])} for r in rows],
                "explanation": "the row reward is placed on a token with mask=0 (a row ending in masked tokens) "
                               f"and is lost: {why}. These rows train on no outcome reward."})

    def _singletons(self, g: GroupIndex, table: RowTable, adv_row: torch.Tensor | None,
                    pad: torch.Tensor | None = None) -> None:
        single = g.row_size == 1
        if pad is not None:
            single = single & ~pad
        n = int(single.sum())
        rows = torch.nonzero(single, as_tuple=True)[0][:MAX_EXAMPLES].tolist()
        ex = []
        for r, gid in zip(rows, self._gid(rows, g.codes[rows].tolist())):
            e = {"row": r, "group": gid, "score": _f(table.score[r])}
            if adv_row is not None:
                e["advantage"] = _f(adv_row[r])
            ex.append(e)
        what = "no baseline can be formed from a single response"
        if adv_row is not None and n:
            a = adv_row[single].to(torch.float64)
            s = table.score[single].to(torch.float64)
            if bool(torch.isnan(a).any()):
                what += "; the estimator gives NaN (an unbiased std of one value)"
            elif bool((a == 0).all()):
                what += "; the estimator gives 0 (no learning signal)"
            elif bool(torch.allclose(a, s, rtol=1e-5, atol=1e-6)):
                what += "; the estimator passes the raw score through as the advantage (baseline 0, std 1)"
            else:
                what += "; the advantages these rows got are listed"
        self.items.append({"kind": "groups_of_one", "count": n, "unit": "groups", "severity": "info",
                           "examples": ex, "explanation": what + "."})

    def _all_equal(self, g: GroupIndex, table: RowTable, adv_row: torch.Tensor | None,
                   pad: torch.Tensor | None = None) -> None:
        s = table.score.to(torch.float64)
        smin = torch.full((g.num_groups,), math.inf, dtype=torch.float64).scatter_reduce_(0, g.codes, s, "amin")
        smax = torch.full((g.num_groups,), -math.inf, dtype=torch.float64).scatter_reduce_(0, g.codes, s, "amax")
        eq = (smin == smax) & (g.sizes > 1)
        if pad is not None:  # a group of padding rows only is no group
            real = torch.zeros(g.num_groups, dtype=torch.int64).scatter_add_(0, g.codes, (~pad).to(torch.int64))
            eq = eq & (real > 0)
        gids = torch.nonzero(eq, as_tuple=True)[0][:MAX_EXAMPLES].tolist()
        amax = None
        if adv_row is not None:
            amax = torch.zeros(g.num_groups, dtype=torch.float64).scatter_reduce_(
                0, g.codes, torch.nan_to_num(adv_row.to(torch.float64).abs(), nan=math.inf), "amax")
        ex = []
        for k in gids:
            rows = torch.nonzero(g.codes == k, as_tuple=True)[0].tolist()
            e = {"group": self._gid(rows[:1], [k])[0], "size": len(rows), "value": _f(smin[k]),
                 "rows": rows[:MAX_EXAMPLES]}
            if amax is not None:
                e["max_abs_advantage"] = _f(amax[k])
            ex.append(e)
        noisy = int(((amax > ATOL) & eq).sum()) if amax is not None else 0
        text = "every row of the group has the same score, so the group carries no learning signal and the " \
               "intended advantage is 0."
        if noisy:
            text += f" {noisy} of them got |advantage| > {ATOL:g} anyway (see float32_cancellation)."
        self.items.append({"kind": "all_equal_groups", "count": int(eq.sum()), "unit": "groups",
                           "severity": "info", "examples": ex, "explanation": text})

    def _cancellation(self, spec, params: dict, table: RowTable, adv: torch.Tensor, run_dtype: torch.dtype) -> None:
        if run_dtype not in (torch.float32, torch.float64):  # 16-bit scores (reward.dtype): the trainer's rounding
            return
        other = torch.float64 if run_dtype != torch.float64 else torch.float32
        try:
            a_other = spec.row_fn(_cast_table(table, other), params)
        except Exception:  # noqa: BLE001 - a diagnostic must never break a run
            return
        hazard = getattr(spec, "float32_hazard", None)
        self.compare_precisions(stage=f"estimator {spec.name}", values=table.score, run_result=adv,
                                other_result=a_other, run_dtype=run_dtype, groups=table.groups,
                                rule=self.rule or _rule(spec, params), extra=hazard(table, params) if hazard else None)

    def reward_normalization(self, norm_fn: Callable[[torch.Tensor], torch.Tensor], raw: torch.Tensor,
                             normalized: torch.Tensor, run_dtype: torch.dtype, groups: GroupIndex | None,
                             rule: str) -> None:
        """The same check on the reward post-processing stage (ROLL reward_norm, OpenRLHF group_norm
        shaping, ...): ``norm_fn`` is rerun on the raw rewards in the other precision."""
        other = torch.float64 if run_dtype != torch.float64 else torch.float32
        try:
            r_other = norm_fn(raw.to(other))
        except Exception:  # noqa: BLE001
            return
        self.compare_precisions(stage="reward normalisation", values=raw, run_result=normalized,
                                other_result=r_other, run_dtype=run_dtype, groups=groups, rule=rule)

    def compare_precisions(self, *, stage: str, values: torch.Tensor, run_result: torch.Tensor,
                           other_result: torch.Tensor, run_dtype: torch.dtype, groups: GroupIndex | None,
                           rule: str, extra: torch.Tensor | None = None) -> None:
        """Flag the groups (rows, without groups) where the float32 and float64 results disagree, or where
        the float64 spread of ``values`` is 0 while the float32 result is not small and the float64 one is
        (a length-shaped advantage of equal rewards is real), or that ``extra`` ([G] bool: the estimator's
        own hazard test, ``EstimatorSpec.float32_hazard``) marks."""
        g = groups if groups is not None else GroupIndex.from_codes(torch.arange(values.numel()))
        other = torch.float64 if run_dtype != torch.float64 else torch.float32
        a32, a64 = (run_result, other_result) if other == torch.float64 else (other_result, run_result)
        a32, a64 = a32.to(torch.float64), a64.to(torch.float64)
        s = values.to(torch.float64)
        n = g.sizes.to(torch.float64)
        mean = g.sum(s) / n.clamp(min=1)
        dev = s - mean[g.codes]
        std = torch.sqrt(g.sum(dev * dev) / (n - 1).clamp(min=1))
        degenerate = (g.sizes > 1) & ((std == 0) | (std < REL_STD * mean.abs()))
        gmax = lambda x: torch.zeros(g.num_groups, dtype=torch.float64).scatter_reduce_(  # noqa: E731
            0, g.codes, torch.nan_to_num(x, nan=0.0), "amax")
        max32, max64, dmax = gmax(a32.abs()), gmax(a64.abs()), gmax((a32 - a64).abs())
        flag = (degenerate & (max32 > ATOL) & (max64 <= ATOL)) | (dmax > ATOL + RTOL * max64)
        if extra is not None:
            flag = flag | extra
        gids = torch.nonzero(flag, as_tuple=True)[0]
        order = torch.argsort(dmax[gids], descending=True, stable=True)
        ex = []
        for k in gids[order][:MAX_EXAMPLES].tolist():
            rows = torch.nonzero(g.codes == k, as_tuple=True)[0].tolist()
            ex.append({"stage": stage, "group": self._gid(rows[:1], [k])[0], "size": len(rows), "rows": rows[:16],
                       "rewards": [_f(x) for x in s[rows[:16]].tolist()],
                       "mean_float64": _f(mean[k]), "std_float64": _f(std[k]),
                       "adv_float32": [_f(x) for x in a32[rows[:16]].tolist()],
                       "adv_float64": [_f(x) for x in a64[rows[:16]].tolist()],
                       "max_abs_diff": _f(dmax[k]), "rule": rule})
        self.canc["checked"] = True
        self.canc["count"] += int(flag.sum())
        self.canc["examples"] = (self.canc["examples"] + ex)[:MAX_EXAMPLES]
        self.canc["rules"].append(rule)
        self.canc["other"] = other

    def _cancellation_item(self) -> dict[str, Any] | None:
        c = self.canc
        if not c["checked"]:
            return None
        ex = c["examples"]
        summary = f"{c['count']} groups whose advantages are float32 rounding noise"
        if ex:
            e0 = ex[0]
            a32, a64 = e0["adv_float32"], e0["adv_float64"]  # its row where the two differ most
            i = max(range(len(a32)), key=lambda j: math.inf if a32[j] is None or a64[j] is None
                    else abs(a32[j] - a64[j]))
            summary += (f", e.g. group {e0['group']!r} ({e0['size']} rows, rewards {_g(e0['rewards'][0], 6)}...; "
                        f"{e0['stage']}): row {e0['rows'][i]}: float32 {_g(a32[i])}, float64 {_g(a64[i])}")
        mode = ("this run is float32 (the framework's numbers); --precision float64 gives the float64 values"
                if c["other"] == torch.float64 else
                "this run is float64; the framework (float32) would have given the float32 values")
        return {
            "kind": "float32_cancellation", "count": c["count"], "unit": "groups", "severity": "warning",
            "summary": summary, "examples": ex,
            "explanation": "groups whose advantages (or normalised rewards: see each example's stage) are large "
                           "only because of float32 rounding: the float64 std of their rewards is 0 (or < "
                           f"{REL_STD:g}·|mean|) while the float32 result exceeds {ATOL:g}, or float32 and float64 "
                           f"differ by more than {ATOL:g} + {RTOL:g}·|float64|. " + " ".join(dict.fromkeys(c["rules"]))
                           + f". They carry no learning signal but can dominate the batch; {mode}."}

    def whitening(self, mean: torch.Tensor, rstd: torch.Tensor, mean_other: torch.Tensor, rstd_other: torch.Tensor,
                  other: torch.dtype, run_dtype: torch.dtype, steps: list) -> None:
        """``float32_whitening``: steps whose one-pass whitening statistics (``advantage.whiten_one_pass``,
        slime ``distributed_masked_whiten``) differ between float32 and float64 — ``var = E[x²] − E[x]²``
        cancels in float32 when ``|μ| ≫ σ`` (down to a negative variance and NaN advantages)."""
        m32, r32, m64, r64 = (mean, rstd, mean_other, rstd_other) if other == torch.float64 else \
            (mean_other, rstd_other, mean, rstd)
        m32, r32, m64, r64 = (x.to(torch.float64) for x in (m32, r32, m64, r64))
        fin32, fin64 = torch.isfinite(r32) & torch.isfinite(m32), torch.isfinite(r64) & torch.isfinite(m64)
        rel = ((r32 - r64).abs() / r64.abs().clamp(min=1e-300)).nan_to_num(nan=math.inf)
        shift = ((m32 - m64).abs() * r64.abs()).nan_to_num(nan=math.inf)  # μ error in units of σ
        flag = (fin32 != fin64) | (fin64 & ((rel > RTOL) | (shift > ATOL)))
        ex = [{"step": steps[s] if s < len(steps) else s, "mean_float32": _f(m32[s]), "mean_float64": _f(m64[s]),
               "rstd_float32": _f(r32[s]), "rstd_float64": _f(r64[s])}
              for s in torch.nonzero(flag, as_tuple=True)[0][:MAX_EXAMPLES].tolist()]
        mode = ("this run is float32 (the framework's numbers); --precision float64 gives the float64 values"
                if run_dtype != torch.float64 else
                "this run is float64; the framework (float32) would have given the float32 statistics")
        self.items.append({
            "kind": "float32_whitening", "count": int(flag.sum()), "unit": "steps", "severity": "warning",
            "examples": ex, "summary": f"float32_whitening: {int(flag.sum())} steps whose one-pass float32 whitening "
                                       "statistics (slime distributed_masked_whiten) are rounding artefacts"
                                       + (f", e.g. step {ex[0]['step']}: 1/std float32 {ex[0]['rstd_float32']}, "
                                          f"float64 {ex[0]['rstd_float64']}" if ex else ""),
            "explanation": "steps whose whitening statistics are float32 artefacts: slime distributed_masked_whiten "
                           "(slime/utils/distributed_utils.py L111-170 @624b824a) puts Σx·m, Σx²·m and Σm in one "
                           "float32 tensor and takes var = Σx²m/N − (Σxm/N)², which cancels when |mean| ≫ std "
                           "(a negative variance gives NaN advantages); "
                           f"flagged where 1/std differs by more than {RTOL:g} "
                           f"(relative) or the mean by more than {ATOL:g} std between float32 and float64; {mode}."})

    # -------------------------------------------------------------------------------- per chunk
    def add_chunk(self, row0: int, layout: Ragged, mask: torch.Tensor, adv: torch.Tensor, tok: dict,
                  row_adv: tuple[torch.Tensor, torch.Tensor] | None = None, findings: dict | None = None) -> None:
        """One chunk of the write pass: KL clamps, token scores on masked tokens, non-finite advantages.

        ``row_adv`` = (advantage [B], valid tokens [B]) when every valid token of a row holds its
        row's advantage (row-level estimators, see :class:`advcli.pipeline.observe.RunObserver`): the
        non-finite check is then made on the rows (a row is flagged when it has a valid token and a
        non-finite value), with no pass over the tokens. ``findings``: the chunk's token-column checks
        (:meth:`token_findings`), made earlier where its columns were decoded; ``tok`` is then not read."""
        layout = layout.to("cpu")
        self.add_nonfinite(row0, *nonfinite_rows(layout, mask, adv, row_adv))
        if findings is None:
            findings = self.token_findings(row0, layout, mask, tok)
        self.add_findings(findings)

    def add_findings(self, findings: dict) -> None:
        """One chunk's :meth:`token_findings`, chunks in row order."""
        for name in ("kl_in", "kl_out", "tls_dropped"):
            acc, part = getattr(self, name), findings[name]
            if "checked" in part:
                acc["checked"] = part["checked"]
            for k in ("count", "rows", "tokens"):
                if k in part:
                    acc[k] += part[k]
            acc["examples"] += part["examples"][:max(MAX_EXAMPLES - len(acc["examples"]), 0)]

    def add_nonfinite(self, row0: int, count: int, first_rows: list[int]) -> None:
        """One chunk's rows with a non-finite valid advantage (:func:`nonfinite_rows`), chunks in row order."""
        self.nonfinite["count"] += int(count)
        for r in first_rows[:max(MAX_EXAMPLES - len(self.nonfinite["examples"]), 0)]:
            self.nonfinite["examples"].append({"row": row0 + int(r)})

    def token_findings(self, row0: int, layout: Ragged, mask: torch.Tensor, tok: dict,
                       kl_rows: torch.Tensor | None = None) -> dict:
        """The checks of one chunk's token columns that do not read its advantages (KL clamps, token
        scores on masked tokens; ``kl_rows``: bool [B], the rows whose KL term counts, :func:`advcli.pipeline.rows.
        kl_rows`), as counts and the first examples in row order:
        ``{"kl_in": ..., "kl_out": ..., "tls_dropped": ...}``, added to the run by :meth:`add_chunk`.
        Reads only this object's settings, so the statistics pass's workers call it on one of their own."""
        layout = layout.to("cpu")
        kl_in = {"count": 0, "rows": 0, "examples": []}
        kl_out = {"count": 0, "rows": 0, "examples": []}
        tls_dropped = {"count": 0, "tokens": 0, "examples": []}
        found = {"kl_in": kl_in, "kl_out": kl_out, "tls_dropped": tls_dropped}
        m = None
        if self.token_scores and self.drops and "token_level_scores" in tok:
            m = mask.detach().to("cpu") > 0
        c = self.kl
        policy = c.policy if c is not None else "old_log_probs"  # kl.policy; kl.missing=zeros: zeros
        zeros_ok = c is not None and c.missing == "zeros" and (policy in tok or "ref_log_probs" in tok)
        if c is not None and ((policy in tok and "ref_log_probs" in tok) or zeros_ok):
            z = torch.zeros_like(mask.detach().to("cpu"))
            lp = tok[policy].detach().to("cpu") if policy in tok else z
            ref = tok["ref_log_probs"].detach().to("cpu") if "ref_log_probs" in tok else z
            flags = kl_ops.kl_clamp_flags(lp, ref, c.estimator, c.input_clamp, c.output_clamp)
            for acc, flag in zip((kl_in, kl_out), flags):
                if flag is None:
                    acc["checked"] = False
                    continue
                acc["checked"] = True
                if flag.dim() == 0 and not bool(flag):  # the clamp provably changed nothing here
                    continue
                if m is None:
                    m = mask.detach().to("cpu") > 0
                f = flag & m if c.mask else flag
                if kl_rows is not None:  # kl.skip_flat_groups: those rows' KL term is 0
                    f = f & layout.broadcast(kl_rows.to("cpu"))
                if not bool(f.any()):
                    continue
                acc["count"] += int(f.sum())
                per_row = layout.row_sum(f.to(torch.int64))
                rows = torch.nonzero(per_row, as_tuple=True)[0]
                acc["rows"] += rows.numel()
                if len(acc["examples"]) < MAX_EXAMPLES:
                    x = ref - lp
                    maxabs = torch.zeros(layout.num_rows, dtype=x.dtype).scatter_reduce_(
                        0, layout.row_index, x.abs(), "amax")
                    for r in rows[:MAX_EXAMPLES - len(acc["examples"])].tolist():
                        acc["examples"].append({"row": row0 + r, "tokens": int(per_row[r]),
                                                "max_abs_log_ratio": _f(maxabs[r])})
        if self.token_scores and self.drops and "token_level_scores" in tok:
            s = tok["token_level_scores"].detach().to("cpu")
            f = (s != 0) & ~m
            if bool(f.any()):
                per_row = layout.row_sum(f.to(torch.int64))
                rows = torch.nonzero(per_row, as_tuple=True)[0]
                tls_dropped["count"] += rows.numel()
                tls_dropped["tokens"] += int(f.sum())
                for r in rows[:MAX_EXAMPLES - len(tls_dropped["examples"])].tolist():
                    tls_dropped["examples"].append({"row": row0 + r, "tokens": int(per_row[r])})
        return found

    def finish(self) -> list[dict[str, Any]]:
        out = self._finish()
        for d in out:
            if d["kind"] in MEANINGS:
                d.setdefault("meaning", MEANINGS[d["kind"]])
        return out

    def _finish(self) -> list[dict[str, Any]]:
        out = list(self.items)
        canc = self._cancellation_item()
        if canc is not None:
            out.append(canc)
        if self.token_scores and self.drops:
            out.append({"kind": "dropped_rewards", "count": self.tls_dropped["count"], "unit": "rows",
                        "severity": "warning", "examples": self.tls_dropped["examples"],
                        "explanation": f"non-zero token_level_scores on mask=0 tokens ({self.tls_dropped['tokens']} "
                                       "tokens): the estimator reads rewards only at mask=1 tokens, so they are lost."})
        if self.kl is not None:
            for kind, acc, what in (("kl_input_clamp", self.kl_in, f"|ref − logp| > {self.kl.input_clamp}"),
                                    ("kl_output_clamp", self.kl_out, f"|KL estimate| > {self.kl.output_clamp}")):
                if not acc.get("checked"):
                    continue
                out.append({"kind": kind, "count": acc["count"], "unit": "tokens", "severity": "info",
                            "examples": acc["examples"],
                            "explanation": f"{acc['count']} tokens in {acc['rows']} rows had {what} and were cut by "
                                           f"the clamp (KL estimator {self.kl.estimator}); their KL penalty "
                                           "is bounded, not the true value."})
        out.append({"kind": "nonfinite_advantages", "count": self.nonfinite["count"], "unit": "rows",
                    "severity": "warning", "examples": self.nonfinite["examples"],
                    "explanation": "rows with NaN or infinite advantages on valid tokens (e.g. an unbiased std of a "
                                   "group of one); they poison a training step's loss."})
        return out


def nonfinite_rows(layout: Ragged, mask: torch.Tensor, adv: torch.Tensor,
                   row_adv: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[int, list[int]]:
    """(how many, the first :data:`MAX_EXAMPLES`) rows of one chunk (indices within it) that hold a
    non-finite valid advantage; ``row_adv``: see :meth:`Diagnostics.add_chunk`."""
    if row_adv is not None:
        v, n = row_adv
        bad_rows = torch.nonzero((n.to("cpu") > 0) & ~torch.isfinite(v.to("cpu")), as_tuple=True)[0]
    elif bool(torch.isfinite(adv.detach().sum())):  # one reduction: no non-finite value anywhere
        return 0, []
    else:
        bad = ~torch.isfinite(adv.detach().to("cpu")) & (mask.detach().to("cpu") > 0)
        if not bool(bad.any()):
            return 0, []
        bad_rows = torch.unique(layout.to("cpu").row_index[bad])
    return int(bad_rows.numel()), bad_rows[:MAX_EXAMPLES].tolist()


def _g(x, digits: int = 4) -> str:
    """A number of an example, as JSON keeps it: a non-finite one is None there (an overflow)."""
    return "nan" if x is None else f"{x:.{digits}g}"
