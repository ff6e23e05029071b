"""How two sets of advantages differ, row by row and group by group (``advcli compare``).

Two forms:

- :func:`compare_files`: two advcli outputs of the same rows (same order, same list lengths).
- :func:`compare_configurations`: two configurations on one dump; both run into a temporary
  directory, then they are compared as two outputs.
- :func:`compare_runs`: several configurations on one dump (``--estimators grpo,rloo,...``), each run
  once, every pair compared.

Figures (tokens are the mask=1 tokens of A's ``response_mask``, every token when there is none):

- tokens: Pearson correlation of A and B, sign agreement (sign(a) = sign(b), 0 its own sign) and its
  complement, the tokens whose advantage changes sign (count and share), mean and max |A−B|, RMSE; the
  same correlation for ``returns``.
- rows: each row's mean advantage over its valid tokens (for the group estimators, the row's
  advantage itself): Pearson and Spearman correlation, sign agreement, the rows whose sign flips.
- groups (by ``prompt_id``, within a step): per group mean |ΔA| over rows, sign agreement, the spread
  of A and of B; the groups that differ most.

Streams both files in lock step; holds only per-row figures in memory. No torch for two files.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import TYPE_CHECKING

from ..errors import AdvcliError
from ..io.temps import scratch_prefix

if TYPE_CHECKING:  # numpy is imported where it is used
    import numpy as np


def _label(flavor: str, native: dict) -> str:
    given = " ".join(f"{k.split('.')[-1]}={json.dumps(v)}" for k, v in native.items())
    return f"{flavor} {given}".strip()


# ---------------------------------------------------------------------------------- comparison
class _Moments:
    def __init__(self):
        self.n = 0
        self.sa = self.sb = self.saa = self.sbb = self.sab = 0.0

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        import numpy as np
        a = a.astype(np.float64)
        b = b.astype(np.float64)
        self.n += a.size
        self.sa += float(a.sum())
        self.sb += float(b.sum())
        self.saa += float(a @ a)
        self.sbb += float(b @ b)
        self.sab += float(a @ b)

    def pearson(self) -> float | None:
        import numpy as np
        if self.n < 2:
            return None
        n = self.n
        cov = self.sab - self.sa * self.sb / n
        va = self.saa - self.sa ** 2 / n
        vb = self.sbb - self.sb ** 2 / n
        if va <= 1e-300 or vb <= 1e-300:
            return None
        return float(cov / np.sqrt(va * vb))


def _pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    import numpy as np
    if a.size < 2:
        return None
    a = a - a.mean()
    b = b - b.mean()
    d = np.sqrt((a @ a) * (b @ b))
    return float((a @ b) / d) if d > 0 else None


def _spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    import pandas as pd

    if a.size < 2:
        return None
    return _pearson(pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy())


def _no_token_data(paths: list[str]) -> str | None:
    from ..formats import no_token_data

    return no_token_data(paths)


def _inputs(dump: str | list[str]) -> list[str]:
    """The run's inputs: one path (a file, directory or glob) or a list of them."""
    return [dump] if isinstance(dump, str) else list(dump)


def _named(dump: str | list[str]) -> str:
    """The dump as the report names it: its path, or its paths joined."""
    return dump if isinstance(dump, str) else ", ".join(dump)


def _one_file(spec: str, tmp: str, name: str) -> str:
    """``spec`` as one Parquet file: the file itself, or the rows of a directory or glob of several files, in the
    order ``advcli run`` reads them, written one after another into ``tmp/name.parquet``."""
    import pyarrow.parquet as pq

    from ..io.reader import expand_inputs, file_chunk_rows, open_parquet

    files = expand_inputs([spec])
    if len(files) == 1:
        return files[0]
    target = os.path.join(tmp, name + ".parquet")
    writer = None
    try:
        for path in files:
            f = open_parquet(path)
            if writer is None:
                schema = f.schema_arrow
                writer = pq.ParquetWriter(target, schema)
            elif not f.schema_arrow.equals(schema, check_metadata=False):
                raise AdvcliError(f"{path}: its columns differ from {files[0]}'s; compare reads the files of {spec} "
                                  "as one output")
            for batch in f.iter_batches(batch_size=file_chunk_rows(f, schema.names, 65536)):
                writer.write_batch(batch)
    finally:
        if writer is not None:
            writer.close()
    return target


def compare_files(path_a: str, path_b: str, *, labels: tuple[str, str] | None = None, top: int = 10,
                  batch_rows: int = 8192, column_overrides: dict | None = None, dump: list[str] | None = None) -> dict:
    """The comparison of two advcli outputs of the same rows, as a JSON-able dict; each may be a directory or
    glob of several files (one output per input of a run), read as one. ``dump``: the (opened) inputs both were
    run on, where the outputs are a command's own scratch files (whether the dump has token data is theirs)."""
    from ..io.reader import expand_inputs

    if len(expand_inputs([path_a])) == 1 and len(expand_inputs([path_b])) == 1:
        return _compare_files(path_a, path_b, path_a, path_b, labels, top, batch_rows, column_overrides, dump)
    tmp = tempfile.mkdtemp(prefix=scratch_prefix("compare"))
    try:
        return _compare_files(_one_file(path_a, tmp, "a"), _one_file(path_b, tmp, "b"), path_a, path_b, labels, top,
                              batch_rows, column_overrides, dump)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _compare_files(file_a: str, file_b: str, path_a: str, path_b: str, labels, top: int, batch_rows: int,
                   column_overrides: dict | None, dump: list[str] | None = None) -> dict:
    """:func:`compare_files` on two single files (``path_a``/``path_b``: what the user named, for messages)."""
    import numpy as np
    import pyarrow as pa

    from ..config.columns import is_list_type
    from ..io.arrays import keys_codes, list_parts, numeric
    from ..io.reader import open_parquet

    ov = column_overrides or {}
    fa, fb = open_parquet(file_a), open_parquet(file_b)
    sa, sb = fa.schema_arrow, fb.schema_arrow
    for p, s in ((path_a, sa), (path_b, sb)):
        if "advantages" not in s.names:
            raise AdvcliError(f"{p}: no 'advantages' column; compare needs two advcli outputs",
                              hint="run `advcli run` first, or compare two configurations on one dump: "
                                   "advcli compare DUMP --flavor F --set ... --flavor F --set ...")
        t = s.field("advantages").type
        inner = t.value_type if is_list_type(t) else t
        if not (pa.types.is_floating(inner) or pa.types.is_integer(inner)):
            raise AdvcliError(f"{p}: column 'advantages' holds {t}, not numbers (one per token, or one per "
                              "response)", hint="compare two advcli outputs (advcli run writes numbers there)")
    ra, rb = fa.metadata.num_rows, fb.metadata.num_rows
    if ra != rb:
        raise AdvcliError(f"{path_b}: {rb:,} rows but {path_a} has {ra:,}; compare needs the same rows in the "
                          "same order")
    mask_col = ov.get("response_mask", "response_mask")
    pid_col = ov.get("prompt_id", "prompt_id")
    rew_col = ov.get("reward", "reward")
    step_col = ov.get("step", "step")
    cols_a = ["advantages"] + [c for c in (mask_col, pid_col, rew_col, step_col) if c in sa.names]
    has_ret = "returns" in sa.names and "returns" in sb.names
    if has_ret:
        cols_a.append("returns")
    # the row keys both hold: compared row by row, so that outputs in another order are refused, not paired
    keys = [c for c in (pid_col, step_col) if c in sa.names and c in sb.names]
    cols_b = (["advantages"] + (["returns"] if has_ret else []) + ([mask_col] if mask_col in sb.names else [])
              + keys)
    nonfinite = nonfinite_one = 0
    tok, ret_m = _Moments(), _Moments()
    agree = 0
    abs_sum = sq_sum = 0.0
    abs_max = 0.0
    row_a, row_b, row_valid, pids, rewards, steps = [], [], [], [], [], []
    row0 = 0
    for ba, bb in _aligned(fa, fb, cols_a, cols_b, batch_rows):
        for k in keys:
            ka, kb = ba.column(k), bb.column(k)
            if not ka.equals(kb):
                import pyarrow.compute as pc

                same = np.asarray(pc.equal(ka, kb).fill_null(False)) & ~np.asarray(ka.is_null()) | \
                    (np.asarray(ka.is_null()) & np.asarray(kb.is_null()))
                bad = int(np.flatnonzero(~same)[0])
                raise AdvcliError(f"{path_b}: row {row0 + bad}: {k} {kb[bad].as_py()!r} but {path_a} has "
                                  f"{ka[bad].as_py()!r} there; compare pairs the rows in order, so both need the same "
                                  "rows in the same order", hint="compare outputs of one run's rows as written (sort "
                                                                  "one like the other first: pandas sort_values)")
        oa, va = _values_of(ba.column("advantages"))
        ob, vb = _values_of(bb.column("advantages"))
        if not np.array_equal(oa, ob):
            bad = int(np.flatnonzero(np.diff(oa) != np.diff(ob))[0])
            raise AdvcliError(f"{path_b}: row {row0 + bad}: 'advantages' has {int(np.diff(ob)[bad])} tokens but "
                              f"{path_a} has {int(np.diff(oa)[bad])}; are these outputs of the same dump?")
        # the tokens that count: mask=1 in each output that has a mask (both: in both, whichever comes first;
        # a sidecar has none)
        m = np.ones(va.size, dtype=bool)
        for batch, path in ((ba, path_a), (bb, path_b)):
            if mask_col in batch.schema.names:
                om, mk = list_parts(batch.column(mask_col))
                if not np.array_equal(om, oa):
                    raise AdvcliError(f"{path}: '{mask_col}' and 'advantages' disagree in length")
                m &= mk.astype(bool)
        fa_, fb_ = np.isfinite(va.astype(np.float64)), np.isfinite(vb.astype(np.float64))
        nonfinite += int((m & ~(fa_ & fb_)).sum())  # left out of every figure below, and counted
        nonfinite_one += int((m & (fa_ != fb_)).sum())
        m &= fa_ & fb_
        a, b = va[m].astype(np.float64), vb[m].astype(np.float64)
        tok.add(a, b)
        agree += int((np.sign(a) == np.sign(b)).sum())
        d = np.abs(a - b)
        if d.size:
            abs_sum += float(d.sum())
            sq_sum += float(d @ d)
            abs_max = max(abs_max, float(d.max()))
        if has_ret:
            _, rta = _values_of(ba.column("returns"))
            _, rtb = _values_of(bb.column("returns"))
            ret_m.add(rta[m], rtb[m])
        c = np.concatenate([[0], np.cumsum(m, dtype=np.int64)])
        valid = c[oa[1:]] - c[oa[:-1]]
        idx = np.repeat(np.arange(len(oa) - 1), np.diff(oa))[m]
        sum_a = np.bincount(idx, weights=a, minlength=len(oa) - 1)
        sum_b = np.bincount(idx, weights=b, minlength=len(oa) - 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            row_a.append(sum_a / valid)
            row_b.append(sum_b / valid)
        row_valid.append(valid)
        if pid_col in ba.schema.names:
            pids.append(ba.column(pid_col))
        if rew_col in ba.schema.names:
            rewards.append(numeric(ba.column(rew_col), rew_col, path_a).astype(np.float64))
        if step_col in ba.schema.names:
            steps.append(numeric(ba.column(step_col), step_col, path_a))
        row0 += ba.num_rows
    A = np.concatenate(row_a) if row_a else np.zeros(0)
    B = np.concatenate(row_b) if row_b else np.zeros(0)
    V = np.concatenate(row_valid) if row_valid else np.zeros(0, np.int64)
    ok = V > 0
    n = tok.n
    la, lb = labels or (os.path.basename(path_a), os.path.basename(path_b))
    out: dict = {
        "a": {"path": path_a, "label": la},
        "b": {"path": path_b, "label": lb},
        "rows": int(ra), "valid_tokens": int(n), "no_token_data": _no_token_data(dump or [path_a, path_b]),
        "tokens": {"pearson": tok.pearson(), "sign_agreement": agree / n if n else None,
                   "sign_changes": n - agree, "sign_change_share": (n - agree) / n if n else None,
                   "mean_abs_diff": abs_sum / n if n else None, "max_abs_diff": abs_max if n else None,
                   "rmse": float(np.sqrt(sq_sum / n)) if n else None,
                   "mean_a": tok.sa / n if n else None, "mean_b": tok.sb / n if n else None,
                   "std_a": float(np.sqrt(max(tok.saa / n - (tok.sa / n) ** 2, 0))) if n else None,
                   "std_b": float(np.sqrt(max(tok.sbb / n - (tok.sb / n) ** 2, 0))) if n else None,
                   "returns_pearson": ret_m.pearson() if has_ret else None,
                   "nonfinite": nonfinite, "nonfinite_in_one": nonfinite_one},
    }
    Ar, Br = A[ok], B[ok]
    flips = np.flatnonzero(ok & (np.sign(np.nan_to_num(A)) != np.sign(np.nan_to_num(B))))
    pid_vals = None
    if pids:
        codes, uniq = keys_codes(pa.chunked_array(pids))
        pid_vals = uniq[codes]
    R_all = np.concatenate(rewards) if rewards else None
    out["row_level"] = {
        "rows_with_valid_tokens": int(ok.sum()), "pearson": _pearson(Ar, Br), "spearman": _spearman(Ar, Br),
        "sign_agreement": float((np.sign(Ar) == np.sign(Br)).mean()) if Ar.size else None,
        "sign_flips": int(flips.size),
        "flip_examples": [_row_example(i, A, B, pid_vals, R_all) for i in flips[:top]],
    }
    if pid_vals is not None:
        key = codes
        st = None
        if steps:
            st = np.concatenate(steps)
            _, key = np.unique(np.stack([st, codes]), axis=1, return_inverse=True)
            key = key.ravel()
        else:
            _, key = np.unique(codes, return_inverse=True)
        out["groups"] = _group_figures(key, A, B, ok, pid_vals, R_all, top, st)
    if out["no_token_data"]:  # one value a response: no token count to give (advcli.formats.no_token_data)
        del out["valid_tokens"]
    else:
        del out["no_token_data"]
    return out


def _values_of(col):
    """(offsets, flat values) of a list column, or of a scalar one (a response-level output: one value a row)."""
    import numpy as np
    import pyarrow as pa

    from ..config.columns import is_list_type
    from ..io.arrays import list_parts

    if is_list_type(col.type):
        return list_parts(col)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return np.arange(len(col) + 1, dtype=np.int64), col.to_numpy(zero_copy_only=False)


def _aligned(fa, fb, cols_a, cols_b, batch_rows):
    from ..io.arrays import aligned_batches

    yield from aligned_batches([fa, fb], [cols_a, cols_b], batch_rows)


def _f(x) -> float | None:
    import numpy as np
    return None if x is None or not np.isfinite(x) else float(x)


def _row_example(i: int, A, B, pids, rewards) -> dict:
    e = {"row": int(i), "a": _f(A[i]), "b": _f(B[i])}
    if pids is not None:
        e["prompt_id"] = str(pids[i])
    if rewards is not None:
        e["reward"] = float(rewards[i])
    return e


def _group_figures(key: np.ndarray, A, B, ok, pids, rewards, top: int, steps=None) -> dict:
    """Per group (``key``: prompt_id within a step) the differences, and the ``top`` groups that differ most,
    each with its step where the outputs have one (a prompt_id may recur in several steps)."""
    import numpy as np
    G = int(key.max()) + 1 if key.size else 0
    w = ok.astype(np.float64)
    a0, b0 = np.where(ok, A, 0.0), np.where(ok, B, 0.0)
    size = np.bincount(key, minlength=G)
    nv = np.bincount(key, weights=w, minlength=G)
    dif = np.bincount(key, weights=np.abs(a0 - b0), minlength=G)
    agree = np.bincount(key, weights=(ok & (np.sign(a0) == np.sign(b0))).astype(np.float64), minlength=G)

    def spread(x):
        import numpy as np
        s1 = np.bincount(key, weights=x, minlength=G)
        s2 = np.bincount(key, weights=x * x, minlength=G)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(np.maximum(s2 / nv - (s1 / nv) ** 2, 0))

    with np.errstate(invalid="ignore", divide="ignore"):
        mad = dif / nv
        agr = agree / nv
    sa, sb = spread(a0), spread(b0)
    first = np.full(G, -1, dtype=np.int64)
    first[key[::-1]] = np.arange(key.size)[::-1]
    rmean = None
    if rewards is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            rmean = np.bincount(key, weights=rewards, minlength=G) / size
    has = nv > 0
    order = np.argsort(-np.nan_to_num(mad, nan=-1.0), kind="stable")[:top]
    worst = []
    for g in order:
        if not has[g]:
            continue
        rows = np.flatnonzero(key == g)
        e = {"prompt_id": str(pids[first[g]]), **({"step": int(steps[first[g]])} if steps is not None else {}),
             "size": int(size[g]), "mean_abs_diff": _f(mad[g]),
             "sign_agreement": _f(agr[g]), "spread_a": _f(sa[g]), "spread_b": _f(sb[g]),
             "a": [_f(A[i]) for i in rows[:16]], "b": [_f(B[i]) for i in rows[:16]]}
        if rmean is not None:
            e["reward_mean"] = _f(rmean[g])
            e["rewards"] = [float(rewards[i]) for i in rows[:16]]
        worst.append(e)
    zero_a = has & (sa == 0)
    zero_b = has & (sb == 0)
    return {"count": G, "with_sign_flip": int((has & (agr < 1)).sum()),
            "mean_abs_diff": _f(float(np.nanmean(mad[has]))) if has.any() else None,
            "flat_in_a_not_b": int((zero_a & ~zero_b).sum()), "flat_in_b_not_a": int((zero_b & ~zero_a).sum()),
            "most_different": worst}


# ---------------------------------------------------------------------------------------- print


CONFIGURATION_KEYS = {"flavor", "set", "settings", "config", "estimator"}  # of one compare configuration


def compare_configurations(dump: str | list[str], configs: list[dict], *, columns: dict | None = None, top: int = 10,
                           chunk_rows: int = 4096, device: str = "auto", announce=None) -> dict:
    """Run ``dump`` under two configurations ({flavor, set: ["K=V"], settings: {K: V}, config, estimator}) and compare
    the outputs.
    ``announce(i, label)``, when given, is called before configuration ``i`` (0: A, 1: B) runs."""
    from ..config import parse_set
    from ..pipeline import run_pipeline, scratch_output
    from .resolution import resolve_run

    resolved = []  # both resolved before either runs: a mistake in B stops the command before A's work
    for i, c in enumerate(configs):
        unknown = sorted(set(c) - CONFIGURATION_KEYS)
        if unknown or "flavor" not in c:
            raise AdvcliError(f"compare: configuration {'AB'[i]} " + (
                f"has {', '.join(map(repr, unknown))}, which is not one of its keys" if unknown else
                "names no flavor") + f" ({', '.join(sorted(CONFIGURATION_KEYS))})",
                              hint="{'flavor': 'verl', 'estimator': 'grpo', 'settings': {...}}")
        own = c.get("settings") or {}
        if not hasattr(own, "items"):
            raise AdvcliError(f"compare: configuration {'AB'[i]}'s 'settings' is a {type(own).__name__}; expected "
                              "a mapping of the flavor's keys to values",
                              hint="{'flavor': 'verl', 'settings': {'algorithm.adv_estimator': 'grpo'}}")
        given = c.get("set") or []
        settings = parse_set([given] if isinstance(given, str) else given) + list(own.items())
        # as `advcli run` resolves it on this dump (what the dump tells the flavor: its group size, the run's saved
        # configuration, the settings its records show); the estimator as run's: the flavor's own, advcli's or yours
        choice = resolve_run(_inputs(dump), c["flavor"], settings, estimator=c.get("estimator"),
                             config=c.get("config"), columns=columns)
        fa, cfg, native = choice.flavor, choice.cfg, choice.native
        refuse_group_filter(cfg, fa.spec)
        resolved.append((fa, cfg, native, _label(fa.spec, native)))
    tmp = tempfile.mkdtemp(prefix=scratch_prefix("compare"))
    try:
        outs = []
        for i, (fa, cfg, native, label) in enumerate(resolved):
            if announce is not None:
                announce(i, label)
            out = scratch_output(_inputs(dump), tmp, "ab"[i])
            run_pipeline(_inputs(dump), out, cfg, flavor=fa, native=native, column_overrides=columns or {},
                         chunk_rows=chunk_rows, device=device)
            outs.append(out)
        labels = [r[3] for r in resolved]
        res = compare_files(outs[0], outs[1], labels=(labels[0], labels[1]), top=top, column_overrides=columns,
                            dump=_inputs(dump))
        res["a"]["path"] = res["b"]["path"] = _named(dump)
        res["a"]["configuration"], res["b"]["configuration"] = configs[0], configs[1]
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def refuse_group_filter(cfg: dict, label: str) -> None:
    """compare runs every row of the dump under each configuration and pairs them row by row; a configuration
    that takes groups out first (grouping.keep_mean_between: OpenRLHF's dynamic filtering) would leave other
    rows, so it is refused, with the way to compare on the kept rows."""
    between = (cfg.get("grouping") or {}).get("keep_mean_between")
    if between is not None:
        raise AdvcliError(f"compare: {label} drops groups before the run (dynamic filtering, grouping.keep_mean_between"
                          f"={between}), and compare pairs every row of the dump under each configuration",
                          hint="run once with the filter (advcli run DUMP -o kept.parquet ...), then compare the "
                               "kept rows with the filter's key left off in both configurations")


def estimator_runs(inputs: list[str], names, flavor=None, settings=(), config: str | None = None,
                   columns: dict | None = None) -> list[dict]:
    """The runs of ``--estimators A,B,...`` (``advcli compare`` and :func:`advcli.compare` both): each estimator
    resolved in the one flavor's pipeline as ``advcli run --estimator NAME`` resolves it
    (:func:`advcli.runs.resolution.resolve_run`, the same flavor, settings and --config file for all), as
    :func:`compare_runs` takes them. ``names``: comma-separated, or a list (the library's may hold functions,
    kept as user estimators); ``columns``: the --column maps, which the resolution reads as run does (TRL's
    reward column over the dump's reward functions)."""
    from .resolution import resolve_run

    if isinstance(names, str):
        wanted = [n.strip() for n in names.split(",") if n.strip()]
    else:
        wanted = list(names or [])
        if any(callable(n) for n in wanted):
            from ..estimators.user import register_function

            wanted = [register_function(n) if callable(n) else n for n in wanted]
        names = ",".join(str(n) for n in wanted)
    if len(wanted) < 2 or len(set(wanted)) != len(wanted):
        raise AdvcliError(f"--estimators {names!r}: name at least two different estimators, comma-separated "
                          "(e.g. grpo,rloo)")
    runs = []
    for name in wanted:
        try:
            choice = resolve_run(inputs, flavor, list(settings), estimator=name, config=config, columns=columns)
        except AdvcliError as e:  # which of the estimators: the refusal names it
            e.message = f"--estimators {names}: {name}: {e.message}"
            e.args = (e.message,)
            raise
        runs.append({"label": name, "cfg": choice.cfg, "flavor": choice.flavor, "native": choice.native})
    return runs


def compare_runs(dump: str | list[str], runs: list[dict], *, columns: dict | None = None, top: int = 10,
                 chunk_rows: int = 4096, device: str = "auto", announce=None) -> dict:
    """Run ``dump`` under each of ``runs`` ({label, cfg, flavor, native}: resolved configurations, at least
    two) into a temporary directory and compare every pair (i < j) with :func:`compare_files`:
    ``{"input", "runs": [{label, estimator}], "pairs": [compare_files' dict for (i, j)]}``.
    ``announce(i, label)``, when given, is called before run ``i``."""
    from ..pipeline import run_pipeline, scratch_output

    if len(runs) < 2:
        raise AdvcliError(f"compare: {len(runs)} estimator(s) given; name at least two (--estimators grpo,rloo)")
    for r in runs:
        refuse_group_filter(r["cfg"], r["label"])
    tmp = tempfile.mkdtemp(prefix=scratch_prefix("compare"))
    try:
        outs = []
        for i, r in enumerate(runs):
            if announce is not None:
                announce(i, r["label"])
            out = scratch_output(_inputs(dump), tmp, f"run{i}")
            run_pipeline(_inputs(dump), out, r["cfg"], flavor=r["flavor"], native=r["native"],
                         column_overrides=columns or {}, chunk_rows=chunk_rows, device=device)
            outs.append(out)
        pairs = []
        for i in range(len(runs)):
            for j in range(i + 1, len(runs)):
                res = compare_files(outs[i], outs[j], labels=(runs[i]["label"], runs[j]["label"]), top=top,
                                    column_overrides=columns, dump=_inputs(dump))
                res["a"]["path"] = res["b"]["path"] = _named(dump)
                pairs.append(res)
        from ..flavors import release_dict

        return {"input": _named(dump), "pairs": pairs,
                "runs": [{"label": r["label"], "estimator": (r["cfg"].get("estimator") or {}),
                          "flavor": str(r["flavor"]), "release": release_dict(r["flavor"]),
                          "settings": dict(r["native"] or {})} for r in runs]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
