"""The first stage that diverges (``first_stage`` of an audit that disagrees).

The pipeline's stages, in the order it runs them: reward postprocessing (the row reward placed on its
token), KL penalty, token rewards, estimator, whitening, clipping. Where the dump logs intermediate values
(``token_level_rewards``, ``returns``, per token) or the configuration whitens or clips, the
recomputation is redone stage by stage and compared with what was logged, stage after stage; the first
stage whose recomputation differs is named with its first row (input order) and token offset, the
expected (recomputed) and actual (logged) values, and the setting that reproduces the logged values where
one does:

- logged ``token_level_rewards`` differ: when the difference is the recomputed KL term times one
  factor over the row, the **KL penalty** (the coefficient that reproduces it: ``kl.coef``); when another
  KL estimator gives them, the **KL penalty** (``kl.estimator``); else the **reward postprocessing** (the
  token rewards recomputed with β = 0 hold the post-processed reward);
- logged ``returns`` differ: the **estimator**;
- only the advantages differ: with clipping configured, **clipping** when the logged values are the
  unclipped ones; without, **clipping** when every disagreeing logged value sits at one magnitude c that
  the recomputed values exceed (``advantage.clip=c``); with whitening, **whitening** when the logged
  advantages of the row's step are an affine map of the recomputed ones before whitening (the mean and
  standard deviation implied, recomputed vs logged); else the **estimator**.

Checks compare mask=1 tokens with the audit's tolerance; rows of padded (fixed-size) lists are left to the
audit's own comparison (no stage named).
"""
from __future__ import annotations

import copy

from .sidecar import SidecarRun

STAGES = ("reward postprocessing", "KL penalty", "token rewards", "estimator", "whitening", "clipping")
INTERMEDIATE = ("token_level_rewards", "returns")  # per-token columns a dump may log besides its advantages


def _recompute(tmp: str, name: str, inputs: list[str], cfg: dict, flavor: str, native: dict, columns: dict,
               chunk_rows: int, device: str) -> list[str]:
    """One recomputation into a temporary sidecar (every column the run produces): its files."""
    return SidecarRun(tmp, name, inputs, cfg, flavor, native, columns, chunk_rows, device, write=None).paths


def _other_kl_kind(tmp, inputs, ins, cfg, flavor, native, columns, mask_col, tol, chunk_rows, device) -> str | None:
    """The KL estimator (advcli.ops.kl.KL_KINDS, other than the configuration's) whose token rewards are the
    logged ones, or None: a trainer that ran k3 where the configuration says k1 is named by it."""
    from ..ops.kl import KL_KINDS  # the registry only: no math here

    for kind in KL_KINDS:
        if kind == cfg["kl"]["estimator"]:
            continue
        other = copy.deepcopy(cfg)
        other["kl"] = {**cfg["kl"], "estimator": kind}
        side = _recompute(tmp, f"stage-kl-{kind}", inputs, other, flavor, native, columns, chunk_rows, device)
        if _first_bad(ins, side, "token_level_rewards", "token_level_rewards", mask_col, *tol, chunk_rows) is None:
            return kind
    return None


def _tokens(ins, side: list[str], logged: str, mine: str, mask_col: str, chunk_rows: int):
    """Per chunk: (first row, offsets, logged values, recomputed values, mask) of column ``logged`` of the
    input against ``mine`` of the sidecar, float64 flat over each row's tokens."""
    import numpy as np

    from ..io.arrays import aligned_batches, list_parts
    from ..io.reader import open_parquet

    row0 = 0
    for i, p in enumerate(ins.paths):
        files = [open_parquet(p), open_parquet(side[i])]
        try:
            for b, s in aligned_batches(files, [[logged, mask_col], [mine]], chunk_rows):
                offs, m = list_parts(b.column(mask_col))
                lo, lv = list_parts(b.column(logged))
                so, sv = list_parts(s.column(mine))
                if not (np.array_equal(lo, offs) and np.array_equal(so, offs)):
                    return  # padded or ragged otherwise: the audit's own comparison covers it
                yield row0, offs, lv.astype(np.float64), sv.astype(np.float64), m != 0
                row0 += b.num_rows
        finally:
            for f in files:
                f.close()


def _bad(L, A, mask, rtol: float, atol: float):
    import numpy as np

    with np.errstate(invalid="ignore"):
        ok = (np.abs(L - A) <= atol + rtol * np.abs(A)) | (np.isnan(L) & np.isnan(A))
    return mask & ~ok


def _first_bad(ins, side, logged, mine, mask_col, rtol, atol, chunk_rows):
    """(row, token offset, logged, recomputed, the row's (logged, recomputed, mask) arrays) of the first
    disagreeing mask=1 token, or None."""
    import numpy as np

    for row0, offs, L, A, mask in _tokens(ins, side, logged, mine, mask_col, chunk_rows):
        bad = np.flatnonzero(_bad(L, A, mask, rtol, atol))
        if bad.size:
            t = int(bad[0])
            r = int(np.searchsorted(offs, t, side="right") - 1)
            a, b = int(offs[r]), int(offs[r + 1])
            return {"row": row0 + r, "position": t - a, "actual": float(L[t]), "expected": float(A[t]),
                    "arrays": (L[a:b], A[a:b], mask[a:b])}
    return None


def _row_tokens(ins, side, logged, mine, mask_col, chunk_rows, row: int):
    for row0, offs, L, A, mask in _tokens(ins, side, logged, mine, mask_col, chunk_rows):
        if row0 <= row < row0 + len(offs) - 1:
            a, b = int(offs[row - row0]), int(offs[row - row0 + 1])
            return L[a:b], A[a:b], mask[a:b]
    return None


def _fit(x, y):
    """y ≈ a·x + b by least squares -> (a, b, largest residual)."""
    import numpy as np

    if x.size < 2 or float(np.ptp(x)) == 0.0:
        return None
    a, b = np.polyfit(x, y, 1)
    return float(a), float(b), float(np.max(np.abs(a * x + b - y)))


def _step_tokens(ins, side, logged, mine, mask_col, chunk_rows, steps, step):
    """The mask=1 tokens of every row of ``step``: (logged, recomputed) flat."""
    import numpy as np

    Ls, As = [], []
    for row0, offs, L, A, mask in _tokens(ins, side, logged, mine, mask_col, chunk_rows):
        rows = np.arange(row0, row0 + len(offs) - 1)
        sel = (steps[rows] == step) if steps is not None else np.ones(rows.size, bool)
        tok = np.repeat(sel, np.diff(offs)) & mask
        Ls.append(L[tok])
        As.append(A[tok])
    return np.concatenate(Ls) if Ls else np.zeros(0), np.concatenate(As) if As else np.zeros(0)


def first_stage(tmp: str, inputs: list[str], ins, cfg: dict, flavor: str, native: dict | None, columns: dict,
                logged_col: str, is_list: bool, mask_col: str, steps, rtol: float, atol: float, chunk_rows: int,
                device: str) -> dict | None:
    """The first stage whose recomputation differs (module docstring), or None where nothing tells."""
    import numpy as np

    names = ins.schema.names
    logged = [c for c in INTERMEDIATE if c in names and c != logged_col]
    from ..config.runspec import RunSpec

    run = RunSpec.from_config(cfg)  # what the run does, read once; the variants below are configurations
    adv = cfg["advantage"]
    whiten = run.whitening.on
    clip = run.advantage.clip
    if not is_list or not (logged or whiten or clip is not None):
        return None
    native = native or {}
    tol = (rtol, atol)
    main = _recompute(tmp, "stage-main", inputs, cfg, flavor, native, columns, chunk_rows, device)
    have = set(_sidecar_columns(main[0]))

    def found(stage, hit, column, **extra):
        return {"stage": stage, "column": column, "row": hit["row"], "position": hit["position"],
                "expected": hit["expected"], "actual": hit["actual"], **extra}

    if "token_level_rewards" in logged:
        kl = cfg["kl"]
        zero = copy.deepcopy(cfg)  # the token rewards with no KL term: the post-processed reward, placed
        zero["kl"] = {**kl, "in_reward": True, "coef": 0.0, "controller": "fixed", "coef_min": None,
                      "missing": "zeros"}
        placed = _recompute(tmp, "stage-reward", inputs, zero, flavor, native, columns, chunk_rows, device)
        ref = main if "token_level_rewards" in have else placed
        hit = _first_bad(ins, ref, "token_level_rewards", "token_level_rewards", mask_col, *tol, chunk_rows)
        if hit is not None:
            if run.kl.in_reward:
                L, A, m = hit["arrays"]
                row = _row_tokens(ins, placed, "token_level_rewards", "token_level_rewards", mask_col, chunk_rows,
                                  hit["row"])
                term = (row[1] - A)[m] if row is not None else np.zeros(0)  # β·KL per token, recomputed
                diff = (L - A)[m]
                if term.size and float(np.dot(term, term)) > 0:
                    k = float(np.dot(diff, term) / np.dot(term, term))
                    if np.all(np.abs(diff - k * term) <= atol + rtol * np.abs(A[m])):
                        beta = float(run.kl.coef or 0.0)
                        out = found("KL penalty", hit, "token_level_rewards",
                                    note=f"the logged token rewards are the recomputed ones with the KL term "
                                         f"times {1 - k:.6g}")
                        if run.kl.controller != "adaptive" and beta:
                            out["reproduce"] = f"kl.coef={beta * (1 - k):.6g}"
                        return out
                # another KL estimator that gives the logged token rewards (a trainer that ran k3 where the
                # configuration says k1): the KL penalty, named by that estimator
                kind = _other_kl_kind(tmp, inputs, ins, cfg, flavor, native, columns, mask_col, tol, chunk_rows,
                                      device)
                if kind is not None:
                    return found("KL penalty", hit, "token_level_rewards", reproduce=f"kl.estimator={kind}",
                                 note=f"the logged token rewards are the recomputed ones with the {kind} KL")
                # the logged reward part, the logged token rewards with the recomputed KL term added back, summed
                # over the row, against the recomputed placed reward: equal, the KL term differs (by no one factor)
                if row is not None:
                    got, want = float(np.sum((L + (row[1] - A))[m])), float(np.sum(row[1][m]))
                    if abs(got - want) <= atol + rtol * abs(want):
                        return found("KL penalty", hit, "token_level_rewards")
            return found("reward postprocessing", hit, "token_level_rewards")
    if "returns" in logged and "returns" in have:
        hit = _first_bad(ins, main, "returns", "returns", mask_col, *tol, chunk_rows)
        if hit is not None:
            return found("estimator", hit, "returns")
    hit = _first_bad(ins, main, logged_col, "advantages", mask_col, *tol, chunk_rows)
    if hit is None:
        return None
    if clip is not None:
        free = copy.deepcopy(cfg)
        free["advantage"] = {**adv, "clip": None}
        unclipped = _recompute(tmp, "stage-unclipped", inputs, free, flavor, native, columns, chunk_rows, device)
        if _first_bad(ins, unclipped, logged_col, "advantages", mask_col, *tol, chunk_rows) is None:
            return found("clipping", hit, logged_col, reproduce="advantage.clip=null",
                         note="the logged advantages are the recomputed ones before clipping")
    else:
        L, A, m = hit["arrays"]
        bad = _bad(L, A, m, rtol, atol)
        mags = np.abs(L[bad])
        if mags.size and np.allclose(mags, mags[0], rtol=0, atol=atol) and np.all(np.abs(A[bad]) > mags[0]):
            return found("clipping", hit, logged_col, reproduce=f"advantage.clip={mags[0]:.6g}",
                         note=f"the logged advantages stop at ±{mags[0]:.6g}")
    if whiten:
        raw = copy.deepcopy(cfg)
        raw["advantage"] = {**adv, "whiten": False, "batch_normalize": False, "clip": None}
        pre = _recompute(tmp, "stage-prewhiten", inputs, raw, flavor, native, columns, chunk_rows, device)
        step = int(steps[hit["row"]]) if steps is not None else None
        x_l, y_l = _step_tokens(ins, pre, logged_col, "advantages", mask_col, chunk_rows, steps, step)
        # logged = (pre − μ')/σ': the affine map from the pre-whitening values to the logged ones
        f_log = _fit(y_l, x_l)
        if f_log is not None and f_log[2] <= atol + rtol * float(np.max(np.abs(x_l))) and f_log[0] != 0:
            a, b, _ = f_log
            f_rec = _fit(y_l, _step_tokens(ins, main, logged_col, "advantages", mask_col, chunk_rows, steps,
                                           step)[1])
            out = found("whitening", hit, logged_col,
                        actual_moments={"mean": -b / a, "std": 1 / a})
            if f_rec is not None and f_rec[0] != 0:
                out["expected_moments"] = {"mean": -f_rec[1] / f_rec[0], "std": 1 / f_rec[0]}
            if abs(a - 1) <= 1e-6 and abs(b) <= atol:
                out["reproduce"] = "advantage.whiten=false"
            return out
    return found("estimator", hit, logged_col)


def _sidecar_columns(path: str) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_schema(path).names
