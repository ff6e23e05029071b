"""``advcli compare``: how two sets of advantages differ, row by row and group by group.

Two forms:

- ``advcli compare A.parquet B.parquet``: two advcli outputs of the same rows (same order, same
  list lengths).
- ``advcli compare DUMP --flavor F --set K=V ... --flavor F2 --set K=V ...``: two configurations on
  one dump. Each ``--flavor`` starts a configuration and the ``--set``/``--config`` after it belong to
  it; those before the first ``--flavor`` apply to both. Both run into a temporary directory, then
  they are compared as two outputs.

Figures (tokens are the mask=1 tokens of A's ``response_mask``, every token when there is none):

- tokens: Pearson correlation of A and B, sign agreement (sign(a) = sign(b), 0 its own sign), mean
  and max |A−B|, RMSE; the same correlation for ``returns``.
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

import typer

from ..errors import AdvcliError
from . import options as opt
from .helpstyle import Command

if TYPE_CHECKING:  # numpy is imported where it is used: `advcli --help` never loads it
    import numpy as np

EPILOG = """
[bold]Examples[/]

  # how would RLOO have differed from GRPO on my run?
  advcli compare sample_data/rollouts.parquet \\
      --flavor verl --set algorithm.adv_estimator=grpo \\
      --flavor verl --set algorithm.adv_estimator=rloo

  # the same estimator with and without std normalisation
  advcli compare sample_data/rollouts.parquet --flavor verl --set algorithm.adv_estimator=grpo \\
      --flavor verl --set algorithm.adv_estimator=grpo --set algorithm.norm_adv_by_std_in_grpo=false

  # two outputs you already have
  advcli run sample_data/rollouts.parquet -o grpo.parquet --set algorithm.adv_estimator=grpo
  advcli run sample_data/rollouts.parquet -o rloo.parquet --set algorithm.adv_estimator=rloo
  advcli compare grpo.parquet rloo.parquet --top 5 --json

Each --flavor starts a configuration; the --set/--config after it belong to it, those before the
first --flavor apply to both.
"""


class RawArgsCommand(Command):
    """Keeps the raw argument list (click loses the interleaving of --flavor and --set)."""

    def parse_args(self, ctx, args):
        ctx.meta["advcli_raw_args"] = list(args)
        return super().parse_args(ctx, args)


# ------------------------------------------------------------------------------ configurations
_FLAGS = {"--flavor": "flavor", "-f": "flavor", "--set": "set", "-s": "set", "--config": "config", "-c": "config"}


def split_configurations(raw: list[str]) -> list[dict]:
    """[{flavor, set: [...], config}] from the raw arguments: each --flavor starts one."""
    common: dict = {"set": [], "config": None}
    configs: list[dict] = []
    i = 0
    while i < len(raw):
        tok = raw[i]
        if tok == "--":
            break
        name, value = tok, None
        if tok.startswith("--") and "=" in tok:
            name, value = tok.split("=", 1)
        kind = _FLAGS.get(name)
        if kind is None:
            i += 1
            continue
        if value is None:
            if i + 1 >= len(raw):
                break
            value = raw[i + 1]
            i += 2
        else:
            i += 1
        if kind == "flavor":
            configs.append({"flavor": value, "set": list(common["set"]), "config": common["config"]})
            continue
        target = configs[-1] if configs else common
        if kind == "set":
            target["set"].append(value)
        else:
            target["config"] = value
    if not configs and (common["set"] or common["config"]):
        raise AdvcliError("compare: --set/--config need two configurations; give --flavor before each one's "
                          "--set (e.g. --flavor verl --set algorithm.adv_estimator=grpo --flavor verl --set "
                          "algorithm.adv_estimator=rloo)")
    return configs


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


def compare_files(path_a: str, path_b: str, *, labels: tuple[str, str] | None = None, top: int = 10,
                  batch_rows: int = 8192, column_overrides: dict | None = None) -> dict:
    """The comparison of two advcli outputs of the same rows, as a JSON-able dict."""
    import numpy as np
    import pyarrow as pa

    from ..io.reader import open_parquet
    from ..io.arrays import keys_codes, list_parts, numeric

    ov = column_overrides or {}
    fa, fb = open_parquet(path_a), open_parquet(path_b)
    sa, sb = fa.schema_arrow, fb.schema_arrow
    for p, s in ((path_a, sa), (path_b, sb)):
        if "advantages" not in s.names:
            raise AdvcliError(f"{p}: no 'advantages' column; compare needs two advcli outputs",
                              hint="run `advcli run` first, or compare two configurations on one dump: "
                                   "advcli compare DUMP --flavor F --set ... --flavor F --set ...")
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
    cols_b = ["advantages"] + (["returns"] if has_ret else [])
    tok, ret_m = _Moments(), _Moments()
    agree = 0
    abs_sum = sq_sum = 0.0
    abs_max = 0.0
    row_a, row_b, row_valid, pids, rewards, steps = [], [], [], [], [], []
    row0 = 0
    for ba, bb in _aligned(fa, fb, cols_a, cols_b, batch_rows):
        oa, va = list_parts(ba.column("advantages"))
        ob, vb = list_parts(bb.column("advantages"))
        if not np.array_equal(oa, ob):
            bad = int(np.flatnonzero(np.diff(oa) != np.diff(ob))[0])
            raise AdvcliError(f"{path_b}: row {row0 + bad}: 'advantages' has {int(np.diff(ob)[bad])} tokens but "
                              f"{path_a} has {int(np.diff(oa)[bad])}; are these outputs of the same dump?")
        if mask_col in ba.schema.names:
            om, m = list_parts(ba.column(mask_col))
            if not np.array_equal(om, oa):
                raise AdvcliError(f"{path_a}: '{mask_col}' and 'advantages' disagree in length")
            m = m.astype(bool)
        else:
            m = np.ones(va.size, dtype=bool)
        a, b = va[m].astype(np.float64), vb[m].astype(np.float64)
        tok.add(a, b)
        agree += int((np.sign(a) == np.sign(b)).sum())
        d = np.abs(a - b)
        if d.size:
            abs_sum += float(d.sum())
            sq_sum += float(d @ d)
            abs_max = max(abs_max, float(d.max()))
        if has_ret:
            _, rta = list_parts(ba.column("returns"))
            _, rtb = list_parts(bb.column("returns"))
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
        "rows": int(ra), "valid_tokens": int(n),
        "tokens": {"pearson": tok.pearson(), "sign_agreement": agree / n if n else None,
                   "mean_abs_diff": abs_sum / n if n else None, "max_abs_diff": abs_max if n else None,
                   "rmse": float(np.sqrt(sq_sum / n)) if n else None,
                   "mean_a": tok.sa / n if n else None, "mean_b": tok.sb / n if n else None,
                   "std_a": float(np.sqrt(max(tok.saa / n - (tok.sa / n) ** 2, 0))) if n else None,
                   "std_b": float(np.sqrt(max(tok.sbb / n - (tok.sb / n) ** 2, 0))) if n else None,
                   "returns_pearson": ret_m.pearson() if has_ret else None},
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
        if steps:
            st = np.concatenate(steps)
            _, key = np.unique(np.stack([st, codes]), axis=1, return_inverse=True)
            key = key.ravel()
        else:
            _, key = np.unique(codes, return_inverse=True)
        out["groups"] = _group_figures(key, A, B, ok, pid_vals, R_all, top)
    return out


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


def _group_figures(key: np.ndarray, A, B, ok, pids, rewards, top: int) -> dict:
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
        e = {"prompt_id": str(pids[first[g]]), "size": int(size[g]), "mean_abs_diff": _f(mad[g]),
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
def print_comparison(res: dict) -> None:
    from rich.table import Table

    from ..report import fmt_num
    from ..report.terminal import stdout_console

    con = stdout_console(highlight=False)
    con.print(f"[bold]A[/] {res['a']['label']}  ({res['a']['path']})")
    con.print(f"[bold]B[/] {res['b']['label']}  ({res['b']['path']})")
    t = Table(show_edge=False)
    t.add_column("")
    t.add_column("tokens (mask=1)", justify="right")
    t.add_column("rows", justify="right")
    tk, rw = res["tokens"], res["row_level"]
    pct = lambda v: "–" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    t.add_row("count", fmt_num(res["valid_tokens"]), fmt_num(rw["rows_with_valid_tokens"]))
    t.add_row("correlation (Pearson)", fmt_num(tk["pearson"]), fmt_num(rw["pearson"]))
    t.add_row("rank correlation (Spearman)", "", fmt_num(rw["spearman"]))
    t.add_row("sign agreement", pct(tk["sign_agreement"]), pct(rw["sign_agreement"]))
    t.add_row("mean |A−B|", fmt_num(tk["mean_abs_diff"]), "")
    t.add_row("max |A−B|", fmt_num(tk["max_abs_diff"]), "")
    t.add_row("mean A / B", f"{fmt_num(tk['mean_a'])} / {fmt_num(tk['mean_b'])}", "")
    t.add_row("std A / B", f"{fmt_num(tk['std_a'])} / {fmt_num(tk['std_b'])}", "")
    if tk.get("returns_pearson") is not None:
        t.add_row("returns correlation", fmt_num(tk["returns_pearson"]), "")
    t.add_row("rows whose sign flips", "", fmt_num(rw["sign_flips"]))
    con.print(t)
    g = res.get("groups")
    if g:
        con.print(f"groups: {g['count']:,}; {g['with_sign_flip']:,} with a sign flip; mean |A−B| per group "
                  f"{fmt_num(g['mean_abs_diff'])}; flat (all rows equal) in A only: {g['flat_in_a_not_b']:,}, "
                  f"in B only: {g['flat_in_b_not_a']:,}")
        if g["most_different"]:
            con.print("[bold]groups that differ most[/] (rows in input order)")
            vals = lambda xs: " ".join("nan" if x is None else f"{x:+.3g}" for x in xs[:8]) + (  # noqa: E731
                " …" if len(xs) > 8 else "")
            for e in g["most_different"]:
                con.print(f"  {e['prompt_id']}  n={e['size']}  mean |A−B| {fmt_num(e['mean_abs_diff'])}  "
                          f"sign agreement {pct(e['sign_agreement'])}  spread A {fmt_num(e['spread_a'])} "
                          f"B {fmt_num(e['spread_b'])}")
                if e.get("rewards") is not None:
                    con.print(f"      reward {vals(e['rewards'])}")
                con.print(f"      A      {vals(e['a'])}")
                con.print(f"      B      {vals(e['b'])}")
    flips = res["row_level"].get("flip_examples") or []
    if flips:
        con.print("[bold]rows whose sign flips[/]: " + ", ".join(
            f"row {e['row']} ({fmt_num(e['a'])} → {fmt_num(e['b'])})" for e in flips))


# -------------------------------------------------------------------------------------- command
def compare_cmd(
    ctx: typer.Context,
    paths: list[str] = typer.Argument(..., metavar="PATH",
                                      help="Two advcli outputs, or one dump with --flavor/--set twice.",
                                      show_default=False),
    flavor: list[str] | None = typer.Option(None, "--flavor", "-f", metavar="NAME",
                                               help="Starts a configuration (give it twice, each followed by its "
                                                    "--set)."),
    set_: list[str] | None = typer.Option(None, "--set", "-s", metavar="KEY=VALUE",
                                             help="A key of the configuration started by the last --flavor."),
    config: list[str] | None = typer.Option(None, "--config", "-c", metavar="PATH",
                                               help="YAML/TOML keys for the configuration."),
    column: list[str] | None = opt.COLUMN,
    top: int = typer.Option(10, "--top", metavar="N", help="How many differing groups and flipped rows to list."),
    chunk_rows: int = opt.chunk_rows(),
    device: str = opt.device("auto", "auto, cpu or cuda (for the two configurations)."),
    json_out: bool = opt.json_out("the comparison"),
    from_: str | None = opt.FROM,
):
    """Compare two sets of advantages: correlation, sign agreement, per-group differences."""
    from ..config import parse_column_maps

    columns = parse_column_maps(column)
    raw = ctx.meta.get("advcli_raw_args") or []
    configs = split_configurations(raw) if raw else [
        {"flavor": f, "set": list(set_ or []), "config": (config or [None])[0]} for f in (flavor or [])]
    from ..formats import name_dumps, open_inputs

    paths = open_inputs(paths, from_)  # trainer dumps (and response-level outputs) -> canonical Parquet
    if len(paths) == 2:
        if configs:
            raise AdvcliError("compare: give either two outputs, or one dump with two configurations "
                              "(--flavor ... --set ... twice), not both")
        res = compare_files(paths[0], paths[1], top=top, column_overrides=columns)
    elif len(paths) == 1:
        if len(configs) != 2:
            raise AdvcliError(f"compare: one input needs exactly two configurations; got {len(configs)}",
                              hint="advcli compare DUMP --flavor verl --set algorithm.adv_estimator=grpo "
                                   "--flavor verl --set algorithm.adv_estimator=rloo")
        res = compare_configurations(paths[0], configs, columns=columns, top=top, chunk_rows=chunk_rows,
                                     device=device, quiet=json_out)
    else:
        raise AdvcliError(f"compare: expected two outputs or one dump, got {len(paths)} paths")
    res = name_dumps(res)  # the dumps the user gave, not their temporary Parquet
    if json_out:
        typer.echo(json.dumps(res, default=str))
    else:
        print_comparison(res)


def compare_configurations(dump: str, configs: list[dict], *, columns: dict | None = None, top: int = 10,
                           chunk_rows: int = 4096, device: str = "auto", quiet: bool = True) -> dict:
    """Run ``dump`` under two configurations ({flavor, set: ["K=V"], config}) and compare the outputs."""
    from ..config import parse_set
    from ..flavors import resolve
    from ..pipeline import run_pipeline

    tmp = tempfile.mkdtemp(prefix="advcli-compare-")
    try:
        outs, labels = [], []
        for i, c in enumerate(configs):
            cfg, native = resolve(c["flavor"], parse_set(c["set"]), c.get("config"))
            label = _label(c["flavor"], native)
            if not quiet:
                typer.echo(f"{'AB'[i]}: {label} ...", err=True)
            out = os.path.join(tmp, f"{'ab'[i]}.parquet")
            run_pipeline([dump], out, cfg, flavor=c["flavor"], native=native, column_overrides=columns or {},
                         chunk_rows=chunk_rows, device=device)
            outs.append(out)
            labels.append(label)
        res = compare_files(outs[0], outs[1], labels=(labels[0], labels[1]), top=top, column_overrides=columns)
        res["a"]["path"] = res["b"]["path"] = dump
        res["a"]["configuration"], res["b"]["configuration"] = configs[0], configs[1]
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
