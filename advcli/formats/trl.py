"""``trl-completions``: TRL GRPOTrainer's ``completions/completions_{step:05d}.parquet``
(huggingface/trl @ f2cd5771, ``trl/trainer/grpo_trainer.py`` L3293-3327, ``log_completions=True``).

Columns: ``step``, ``prompt``, ``completion``, one column per reward function (unweighted, NaN where
the function returned None), extra ``log_extra`` columns, and ``advantage`` (the scalar TRL trained on,
which ``--flavor trl`` reproduces). No token data: a response-level dump.

Group: TRL's groups are ``num_generations`` consecutive rows with the same prompt
(``rewards.view(-1, G)``); ``prompt_id`` numbers the runs of equal ``prompt`` in each file (so the
positional blocks of ``--flavor trl`` are checked against it). ``reward`` = the unweighted nansum of the
reward-function columns (every numeric column other than ``step`` and ``advantage``); for weights, name
them: ``--flavor trl --set 'reward_funcs=[a,b]' --set 'reward_weights=[1.0,0.5]'``.

Conversations (TRL pull request #5309, open as of huggingface/trl @ f2cd5771, read from its diff): the
``prompt`` and ``completion`` columns hold the conversation lists (``[{"role", "content", ...}]``) instead
of decoded text. Runs of equal conversations are the groups; both columns are kept as JSON text (the
whole conversation), and ``advcli audit`` shows a disagreeing row's last user message.
"""
from __future__ import annotations

import json
import math

from . import Context, Format, shown_setting
from ._common import F32, F64, I64, STR, schema_record, text_key

FIXED = ("step", "prompt", "completion", "advantage")


def read(path: str, ctx: Context):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..io.reader import parquet_batches, refuse_duplicate_columns

    try:
        f = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001
        raise ctx.error(None, f"not a readable Parquet file ({str(e).splitlines()[0]})") from None
    schema = f.schema_arrow
    refuse_duplicate_columns(path, schema.names)
    missing = [c for c in ("prompt", "completion", "advantage") if c not in schema.names]
    if missing:
        raise ctx.error(None, f"missing column(s) {', '.join(missing)} of a TRL completions file")
    # TRL writes each reward function's column from a float32 tensor's .tolist() (grpo_trainer.py L1614, L2756
    # @f2cd5771): floats, never integers; an integer column is log_extra's (num_tool_calls), not a reward
    funcs = [n for n in schema.names if n not in FIXED and pa.types.is_floating(schema.field(n).type)]
    key = ctx.state.get("funcs")
    if key is not None and key != funcs:
        typed = [n for n in key if n in schema.names and n not in funcs]  # there, but not of floats here
        if typed:
            n = typed[0]
            raise ctx.error(None, f"column {n!r} holds {schema.field(n).type} values here, and floats (one reward "
                                  "function's scores, as TRL writes them) in the first file",
                            hint="repair the file's column (TRL writes each function's scores as floats, NaN where "
                                 "a function gave none), or leave this file out")
        raise ctx.error(None, f"reward-function columns {funcs} differ from {key} in the first file",
                        hint="one TRL run writes the same reward functions to every completions file: are two "
                             "runs' files in one directory? point advcli at one run's completions")
    if not funcs:
        others = [f"{n!r} ({schema.field(n).type})" for n in schema.names if n not in FIXED]
        raise ctx.error(None, "no reward-function column (TRL writes one column of floats per reward function)"
                        + (f"; the other columns: {', '.join(others)}" if others else ""))
    ctx.state.setdefault("funcs", funcs)
    if "noted" not in ctx.state:
        ctx.notes.append(f"reward = unweighted nansum of {', '.join(funcs)}" + (
            f" (--flavor trl reads the {len(funcs)} functions themselves, as TRL does; to weight them: --set "
            f"'reward_funcs=[{','.join(funcs)}]' --set 'reward_weights=[...]')" if len(funcs) > 1 else ""))
        ctx.state["noted"] = True
        if len(funcs) > 1:  # TRL's reward_funcs, in its column order: GDPO and the weights need each function
            shown_setting(ctx, "reward_funcs", funcs)
    row_no = -1  # a Parquet row, counted from 0 as advcli's own Parquet messages count them
    run, prev = -1, object()
    for batch in parquet_batches(f, ctx.path, batch_size=4096):
        for rec in batch.to_pylist():
            row_no += 1
            p = rec["prompt"]
            if p is None:  # TRL writes every prompt; the groups are runs of equal prompt, which a null would cut
                raise ctx.error(None, f"column 'prompt', row {row_no}: null value: the rows of a group are the run "
                                      "of equal prompts around it, which a missing prompt cuts",
                                hint="repair the row's prompt (the group's other rows carry it) or drop the row")
            if isinstance(p, (list, dict)):  # a conversation (#5309): grouped by it, kept as JSON text
                if "conversations" not in ctx.state:
                    ctx.state["conversations"] = True
                    ctx.notes.append("prompt/completion are conversations (lists of {role, content}): rows "
                                     "grouped by runs of equal conversations, both kept as JSON text")
                rec["prompt"] = p = json.dumps(p, ensure_ascii=False, default=str)
            if isinstance(rec["completion"], (list, dict)):
                rec["completion"] = json.dumps(rec["completion"], ensure_ascii=False, default=str)
            if p != prev:
                run += 1
                prev = p
            vals = [rec[c] for c in funcs]
            fin = [float(v) for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))]
            step = rec.get("step") if rec.get("step") is not None else ctx.step
            row = {"prompt_id": f"{step}:{run}:{text_key(p)}", "step": step,
                   "reward": _float32_sum(fin) if fin else float("nan")}
            row.update({k: v for k, v in rec.items() if k not in ("step",)})
            yield row_no, row


def _float32_sum(values: list[float]) -> float:
    """Σ values as TRL adds its float32 rewards_per_func across a row (``(rewards_per_func * w).nansum(dim=1)``,
    grpo_trainer.py L2683 @f2cd5771): each value float32, added left to right in float32. With three or more
    functions a float64 sum rounds otherwise (−1.0, −0.8, 0.1: −1.6999999 in TRL, −1.7 in float64), which an
    all-equal group's tiny std then magnifies."""
    import numpy as np

    total = np.float32(0.0)
    for v in values:
        total = np.float32(total + np.float32(v))
    return float(total)


def sniff(rec: dict) -> bool:
    return {"prompt", "completion", "advantage"} <= set(rec)


FORMAT = Format(
    name="trl-completions", title="TRL completions_{step}.parquet",
    pattern=r"(^|/)completions_(?P<step>\d+)\.parquet$",
    level="response",
    group_key="runs of equal prompt",
    group_rule="consecutive rows with the same prompt (TRL's blocks of num_generations); prompt_id numbers "
               "those runs",
    columns={"prompt_id": STR, "step": I64, "reward": F32, "prompt": STR, "completion": STR,
             "advantage": F64},
    read=read, sniff=sniff, first_record=schema_record, required=("prompt", "completion", "advantage"),
    logged="advantage", runs_hold_groups=True,
    example="advcli run outputs/completions --output out.parquet --flavor trl --set num_generations={n}",
)
