"""Auditing logged advantages: compare a dump's own advantages with advcli's recomputation, say how
they differ, and which configuration would reproduce them (``advcli audit``).

Pure numpy functions over flat token arrays (a row's tokens are ``values[offs[i]:offs[i+1]]``);
advcli.audit.recompute runs the pipeline and streams the chunks through them.

Agreement of a logged value ``L`` with a recomputed one ``A`` (``numpy.isclose``)::

    |L − A| <= atol + rtol·|A|      (NaN agrees with NaN, ±inf with the same inf)

Only mask=1 tokens decide the verdict; differences on mask=0 tokens are reported apart ("masked
positions": the loss never reads them). A logged *scalar* column (one advantage per row, TRL's
``advantage``) is compared with every token of its row.

What a disagreement looks like is tested as hypotheses, each a transform of ``A`` fitted on all
mask=1 tokens (:func:`fit_params`) and checked token by token (:func:`hypothesis_agreement`):

- ``clip``: ``L = clamp(A, lo, hi)`` with ``lo``, ``hi`` the smallest and largest logged values (the run
  clipped its advantages: NeMo RL's ``grpo.advantage_clip_low/high``, ROLL's ``advantage_clip``);
- ``float32``: ``L`` agrees with the float64 recomputation ``A64``, or lies within twice the
  float32/float64 gap of ``A`` (float32 noise: cancellation in a near-uniform group, a tiny std);
- ``scale``: ``L = c·A`` with one constant ``c = ΣLA/ΣA²`` (another normalisation, a factor);
- ``shift``: ``L = A + d``, ``d = mean(L − A)``;
- ``sign``: ``L = −A``;
- ``group_scale`` / ``group_shift``: ``c`` (or ``d``) fitted per group — std normalisation on/off or
  another epsilon gives one factor per group, another baseline one offset per group;
- ``mixup`` (rows, :func:`mixup_rows`): each disagreeing row's logged value is the recomputed value
  of another row of the same step (rows permuted, or grouped under other ids).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HYPOTHESES = ("clip", "float32", "sign", "scale", "shift", "group_scale", "group_shift")  # most specific first

EXPLAIN = {
    "clip": "a clamp: logged = clamp(recomputed, {lo}, {hi}) (the run clipped its advantages{keys})",
    "float32": "float32 noise: the float64 recomputation agrees with the logged values (or they lie within the "
               "float32/float64 gap): summation order or cancellation, not a different formula",
    "scale": "a constant scale: logged = {c:.6g} × recomputed (a different normalisation or a constant factor)",
    "shift": "a constant shift: logged = recomputed + {d:.6g}",
    "sign": "the sign is flipped: logged = −recomputed",
    "group_scale": "a scale per group: logged = c_g × recomputed (std normalisation on/off, another epsilon or "
                   "another std: unbiased vs biased, leave-one-out)",
    "group_shift": "a shift per group: logged = recomputed + d_g (another baseline: mean vs leave-one-out, or rows "
                   "left out of the group statistics)",
    "mixup": "a group mix-up: the logged values of the disagreeing rows are the recomputed values of other rows "
             "(rows permuted, or grouped under other ids)",
    "nonfinite": "non-finite logged values: NaN or ±inf on mask=1 tokens where advcli's values are finite (a "
                 "division by a zero std, an overflow, a NaN reward)",
    "masked": "masked positions: values differ on mask=0 tokens, which the loss does not read (not counted)",
    "isolated": "isolated rows: a few rows disagree while every other row agrees; no transform explains them "
                "(corrupted, planted or overwritten values)",
    "unexplained": "no simple transform (a clamp, a sign, a scale or a shift, overall or per group) maps the "
                   "recomputed values onto the logged ones",
}


# what an audit of a flavor's dump cannot see, named as possible causes when the logged values disagree:
# flavor -> ((kind, explanation), ...)
UNSEEN = {
    "trl": (("subclass", "a possible cause advcli cannot see in the dump: TRL logs the advantages in "
                         "GRPOTrainer._generate_and_score_completions, and a trainer subclass that transforms them "
                         "after that (overriding the method, or the _transform_advantages hook of TRL #7298, open) "
                         "trains on values the log does not hold; if the run used one, compare with its values"),
            ("setting", "a setting the dump does not record: GRPOConfig.reward_weights (the completions file logs "
                        "each reward function's unweighted score; weights change every advantage) or "
                        "scale_rewards / loss settings of the run; give the run's GRPOConfig with --config, or "
                        "--set reward_weights=[...]")),
    "slime": (("reward", "a reward the train dump alone cannot tell: a reward function's metadata[\"raw_reward\"] "
                         "overwrites raw_reward (rollout.py L702-707 @624b824a) after slime normalised the sample's "
                         "own reward; without the rollout dump of the same rollout beside it, advcli reads "
                         "raw_reward. Each sample's rewards field (normalized_reward) is the reward slime trained "
                         "on: keep the rollout dump beside it (DIR/rollout_data/{rollout_id}.pt), or audit with "
                         "--column reward=normalized_reward (and --set rewards_normalization=false for the group "
                         "estimators, whose normalisation it holds)"),),
    "prime-rl": (("setting", "a setting the traces do not record: orchestrator.algo.length_penalty (a "
                             "pass-rate-scaled penalty on long responses) or the algorithm's other keys; give the "
                             "run's rl.toml with --config, or --set orchestrator.algo.length_penalty.type=linear"),),
}


def clip_explanation(flavor, lo: float | None, hi: float | None) -> str:
    """The ``clip`` finding's explanation: the bounds the logged values show (None: a bound no token reaches, not
    known) and the settings of ``flavor`` (its text ``NAME[@RELEASE]``) that clamp there, where it has them."""
    name = str(flavor).partition("@")[0].strip()
    keys = ""
    if name == "nemo":
        keys = "".join(f" --set grpo.advantage_clip_{side}={b:.6g}" for side, b in (("low", lo), ("high", hi))
                       if b is not None)
    elif name == "roll" and lo is not None and hi is not None and np.isclose(lo, -hi):
        keys = f" --set advantage_clip={hi:.6g}"
    return EXPLAIN["clip"].format(lo="none seen" if lo is None else f"{lo:.6g}",
                                  hi="none seen" if hi is None else f"{hi:.6g}", keys=f":{keys}" if keys else "")


def unseen_causes(flavor) -> list[dict]:
    """The findings for what an audit of ``flavor`` (a :class:`advcli.flavors.FlavorAt`, or its text ``NAME`` /
    ``NAME@RELEASE``) cannot know (:data:`UNSEEN`)."""
    found = UNSEEN.get(str(flavor).partition("@")[0].strip(), ())
    return [{"kind": kind, "explanation": text} for kind, text in found]


def close(logged: np.ndarray, recomputed: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """``numpy.isclose(logged, recomputed, rtol, atol, equal_nan=True)`` (``recomputed`` is the reference)."""
    return np.isclose(logged, recomputed, rtol=rtol, atol=atol, equal_nan=True)


def row_of_token(offs: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(offs.size - 1, dtype=np.int64), np.diff(offs))


def segment_sum(offs: np.ndarray, x: np.ndarray) -> np.ndarray:
    c = np.concatenate([[0.0], np.cumsum(x, dtype=np.float64)])
    return c[offs[1:]] - c[offs[:-1]]


def segment_max(offs: np.ndarray, x: np.ndarray, empty: float = -np.inf) -> np.ndarray:
    """Max per row (``empty`` for a row of no tokens)."""
    n = np.diff(offs)
    out = np.full(n.size, empty, np.float64)
    ne = n > 0
    if x.size:
        out[ne] = np.maximum.reduceat(x, offs[:-1][ne])
    return out


def _first_per_row(R: int, rows: np.ndarray, idx: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """Index of the first selected token of each row (-1: none); ``rows`` is non-decreasing."""
    out = np.full(R, -1, np.int64)
    r = rows[sel]
    if r.size:
        start = np.r_[True, r[1:] != r[:-1]]
        out[r[start]] = idx[sel][start]
    return out


@dataclass
class RowTable:
    """Per-row figures of a comparison (input order over every file)."""

    n_valid: np.ndarray  # mask=1 tokens
    bad_valid: np.ndarray  # mask=1 tokens that disagree
    bad_masked: np.ndarray  # mask=0 tokens that disagree
    max_err: np.ndarray  # max |L − A| over mask=1 tokens (0 for none; inf for a NaN on one side only)
    worst_pos: np.ndarray  # token position of that max (-1: none)
    worst_logged: np.ndarray
    worst_recomputed: np.ndarray
    logged_rep: np.ndarray  # the logged value at the row's first mask=1 token (NaN: none)
    recomputed_rep: np.ndarray
    s_la: np.ndarray  # Σ L·A over mask=1 finite tokens (for the scale fits)
    s_aa: np.ndarray
    s_d: np.ndarray  # Σ (L − A)
    n_fin: np.ndarray  # mask=1 tokens where both are finite
    nonfinite_logged: np.ndarray  # mask=1 tokens whose logged value is NaN/inf
    nonfinite_recomputed: np.ndarray
    l_min: np.ndarray  # min / max of the finite logged values over mask=1 tokens (±inf: none)
    l_max: np.ndarray

    @staticmethod
    def concat(parts: list[RowTable]) -> RowTable:
        names = RowTable.__dataclass_fields__
        return RowTable(**{k: np.concatenate([getattr(p, k) for p in parts]) if parts else np.zeros(0)
                           for k in names})


def compare_chunk(offs: np.ndarray, logged: np.ndarray, recomputed: np.ndarray, mask: np.ndarray,
                  rtol: float, atol: float) -> RowTable:
    """The per-row figures of one chunk (flat float64 ``logged``/``recomputed``, bool ``mask``)."""
    offs = np.asarray(offs, np.int64)
    L = np.asarray(logged, np.float64)
    A = np.asarray(recomputed, np.float64)
    m = np.asarray(mask, bool)
    ok = close(L, A, rtol, atol)
    n_valid = segment_sum(offs, m).astype(np.int64)
    bad_valid = segment_sum(offs, m & ~ok).astype(np.int64)
    bad_masked = segment_sum(offs, ~m & ~ok).astype(np.int64)
    with np.errstate(invalid="ignore"):
        err = np.abs(L - A)
    err = np.where(np.isnan(err) & ~ok, np.inf, np.where(ok & ~np.isfinite(err), 0.0, err))
    err_v = np.where(m, err, -1.0)
    rmax = segment_max(offs, err_v, empty=-1.0)
    rows = row_of_token(offs)
    idx = np.arange(L.size, dtype=np.int64)
    hit = (err_v == rmax[rows]) & m
    first_hit = _first_per_row(offs.size - 1, rows, idx, hit)
    has = first_hit >= 0
    worst_pos = np.where(has, first_hit - offs[:-1], -1)
    wl = np.full(offs.size - 1, np.nan)
    wr = np.full(offs.size - 1, np.nan)
    wl[has], wr[has] = L[first_hit[has]], A[first_hit[has]]
    first_v = _first_per_row(offs.size - 1, rows, idx, m)  # first mask=1 token of each row
    hv = first_v >= 0
    lrep = np.full(offs.size - 1, np.nan)
    arep = np.full(offs.size - 1, np.nan)
    lrep[hv], arep[hv] = L[first_v[hv]], A[first_v[hv]]
    fin = m & np.isfinite(L) & np.isfinite(A)
    Lf, Af = np.where(fin, L, 0.0), np.where(fin, A, 0.0)
    return RowTable(n_valid, bad_valid, bad_masked, np.maximum(rmax, 0.0), worst_pos, wl, wr, lrep, arep,
                    segment_sum(offs, Lf * Af), segment_sum(offs, Af * Af), segment_sum(offs, Lf - Af),
                    segment_sum(offs, fin).astype(np.int64),
                    segment_sum(offs, m & ~np.isfinite(L)).astype(np.int64),
                    segment_sum(offs, m & ~np.isfinite(A)).astype(np.int64),
                    -segment_max(offs, np.where(m & np.isfinite(L), -L, -np.inf), empty=-np.inf),
                    segment_max(offs, np.where(m & np.isfinite(L), L, -np.inf), empty=-np.inf))


def fit_params(rt: RowTable, group: np.ndarray | None) -> dict:
    """The fitted parameters of the hypotheses: global ``c``, ``d`` and, with ``group`` codes (one per
    row), per-group ``cg``, ``dg`` (indexed by group code)."""
    s_aa, s_la, s_d, n = rt.s_aa.sum(), rt.s_la.sum(), rt.s_d.sum(), rt.n_fin.sum()
    p = {"c": float(s_la / s_aa) if s_aa > 0 else 1.0, "d": float(s_d / n) if n else 0.0}
    if rt.l_min.size and np.isfinite(rt.l_min).any():
        p["lo"], p["hi"] = float(rt.l_min.min()), float(rt.l_max.max())
    if group is not None and group.size:
        G = int(group.max()) + 1
        gaa = np.bincount(group, rt.s_aa, G)
        gla = np.bincount(group, rt.s_la, G)
        gd = np.bincount(group, rt.s_d, G)
        gn = np.bincount(group, rt.n_fin.astype(np.float64), G)
        with np.errstate(invalid="ignore", divide="ignore"):
            p["cg"] = np.where(gaa > 0, gla / np.where(gaa > 0, gaa, 1.0), 1.0)
            p["dg"] = np.where(gn > 0, gd / np.where(gn > 0, gn, 1.0), 0.0)
    return p


def hypothesis_agreement(offs: np.ndarray, logged: np.ndarray, recomputed: np.ndarray, mask: np.ndarray,
                         rows_group: np.ndarray | None, params: dict, rtol: float, atol: float,
                         recomputed64: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per hypothesis, per row: how many mask=1 tokens disagree once the hypothesis' transform is
    applied to the recomputed values (``rows_group``: the group code of each row of the chunk)."""
    L = np.asarray(logged, np.float64)
    A = np.asarray(recomputed, np.float64)
    m = np.asarray(mask, bool)
    rows = row_of_token(offs)
    out = {}

    def bad(pred):
        return segment_sum(offs, m & ~close(L, pred, rtol, atol)).astype(np.int64)

    if recomputed64 is not None:
        A64 = np.asarray(recomputed64, np.float64)
        with np.errstate(invalid="ignore"):
            within = np.abs(L - A) <= 2 * np.abs(A - A64) + atol
        out["float32"] = segment_sum(offs, m & ~(close(L, A64, rtol, atol) | within)).astype(np.int64)
    if params.get("lo") is not None and params["lo"] < params["hi"]:
        out["clip"] = bad(np.clip(A, params["lo"], params["hi"]))
        lo, hi = params["lo"], params["hi"]  # the tokens each bound clamps, beyond it by more than the tolerance
        with np.errstate(invalid="ignore"):  # (a bound no token reaches is unknown)
            out["clip_low_hits"] = segment_sum(offs, m & (A < lo) & ~close(lo, A, rtol, atol)).astype(np.int64)
            out["clip_high_hits"] = segment_sum(offs, m & (A > hi) & ~close(hi, A, rtol, atol)).astype(np.int64)
    out["scale"] = bad(params["c"] * A)
    out["shift"] = bad(A + params["d"])
    out["sign"] = bad(-A)
    if rows_group is not None and "cg" in params:
        g = rows_group[rows]
        out["group_scale"] = bad(params["cg"][g] * A)
        out["group_shift"] = bad(A + params["dg"][g])
    return out


def mixup_rows(rt: RowTable, step: np.ndarray | None, bad_rows: np.ndarray, rtol: float, atol: float) -> int:
    """How many of ``bad_rows`` have a logged value (first mask=1 token) equal to the recomputed value of
    another row of the same step. Vectorised: sort the recomputed values per step, search each logged one."""
    if bad_rows.size == 0:
        return 0
    R = rt.recomputed_rep.size
    st = np.zeros(R, np.int64) if step is None else np.asarray(step, np.int64)
    ok = np.isfinite(rt.recomputed_rep)
    key_s, key_v = st[ok], rt.recomputed_rep[ok]
    order = np.lexsort((key_v, key_s))
    key_s, key_v = key_s[order], key_v[order]
    qs, qv = st[bad_rows], rt.logged_rep[bad_rows]
    # position of (qs, qv) in the sorted (step, value) pairs: search in a combined float key per step
    found = np.zeros(bad_rows.size, bool)
    for s in np.unique(qs):  # a loop over steps (a handful), not rows
        lo, hi = np.searchsorted(key_s, s, "left"), np.searchsorted(key_s, s, "right")
        vals = key_v[lo:hi]
        sel = qs == s
        if vals.size == 0:
            continue
        q = qv[sel]
        i = np.clip(np.searchsorted(vals, q), 0, vals.size - 1)
        j = np.clip(i - 1, 0, vals.size - 1)
        found[sel] = close(q, vals[i], rtol, atol) | close(q, vals[j], rtol, atol)
    return int(found.sum())


def classify(rt: RowTable, hyp_bad: dict[str, int], mixup: int, rows_total: int) -> list[dict]:
    """The findings, most specific first: each {kind, explanation, ...}. ``hyp_bad``: mask=1 tokens
    still disagreeing under each hypothesis."""
    bad_tokens = int(rt.bad_valid.sum())
    bad_rows = int((rt.bad_valid > 0).sum())
    masked = int(rt.bad_masked.sum())
    out = []
    if bad_tokens == 0:
        if masked:
            out.append({"kind": "masked", "tokens": masked, "rows": int((rt.bad_masked > 0).sum()),
                        "explanation": EXPLAIN["masked"]})
        return out
    if int(rt.nonfinite_logged.sum()) > int(rt.nonfinite_recomputed.sum()):
        out.append({"kind": "nonfinite", "explanation": EXPLAIN["nonfinite"],
                    "tokens": int(rt.nonfinite_logged.sum()), "rows": int((rt.nonfinite_logged > 0).sum())})
    explained = [h for h in HYPOTHESES if h in hyp_bad and hyp_bad[h] == 0]
    if "clip" in explained:  # values at the bounds, every other one as recomputed: not noise of another order
        explained = [h for h in explained if h != "float32"]
    for h in explained:
        out.append({"kind": h, "explanation": EXPLAIN[h], "tokens": bad_tokens, "rows": bad_rows})
    if not explained and bad_rows >= 2 and mixup == bad_rows:
        out.append({"kind": "mixup", "explanation": EXPLAIN["mixup"], "tokens": bad_tokens, "rows": bad_rows})
    if not explained and not any(f["kind"] == "mixup" for f in out):
        # partial explanations: a hypothesis that explains most of the disagreeing tokens
        best = min(((v, h) for h, v in hyp_bad.items()), default=None)
        if bad_rows <= max(3, rows_total // 100) and bad_rows < rows_total:
            out.append({"kind": "isolated", "explanation": EXPLAIN["isolated"], "tokens": bad_tokens,
                        "rows": bad_rows})
        else:
            out.append({"kind": "unexplained", "explanation": EXPLAIN["unexplained"], "tokens": bad_tokens,
                        "rows": bad_rows})
            if best is not None and best[0] < bad_tokens // 2:
                out[-1]["closest"] = {"hypothesis": best[1], "tokens_left": int(best[0])}
    if masked:
        out.append({"kind": "masked", "tokens": masked, "rows": int((rt.bad_masked > 0).sum()),
                    "explanation": EXPLAIN["masked"]})
    return out


def worst_rows(rt: RowTable, top: int, group_ids: list | None, group: np.ndarray | None,
               step: np.ndarray | None) -> list[dict]:
    """The ``top`` rows with the largest |logged − recomputed| over mask=1 tokens (disagreeing rows only)."""
    cand = np.flatnonzero(rt.bad_valid > 0)
    if cand.size == 0:
        return []
    order = cand[np.argsort(-rt.max_err[cand], kind="stable")][:top]

    def num(x):  # NaN kept as NaN: a NaN logged value is what the row holds ("nan" in JSON, not null)
        return float(x)

    out = []
    for i in order.tolist():
        e = {"row": i, "position": int(rt.worst_pos[i]), "logged": num(rt.worst_logged[i]),
             "recomputed": num(rt.worst_recomputed[i]), "abs_diff": num(rt.max_err[i]),
             "tokens_disagreeing": int(rt.bad_valid[i]), "tokens": int(rt.n_valid[i])}
        if group is not None and group_ids is not None:
            e["group"] = group_ids[group[i]]
        if step is not None:
            e["step"] = int(step[i])
        out.append(e)
    return out
