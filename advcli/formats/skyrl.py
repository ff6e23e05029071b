"""``skyrl-evals``: SkyRL's evaluation dumps, ``dumped_evals/global_step_{N}_evals/{data_source}.jsonl``
(NovaSky-AI/SkyRL @ a9564572, ``skyrl/train/utils/trainer_utils.py`` L324-372, written when
``trainer.dump_eval_results`` is on (the default)).

One JSON object per line: ``input_prompt``, ``output_response``, ``score`` (a float, or a list of
token-level rewards, summed here), ``stop_reason``, ``env_class``, ``env_extras``, ``data_source``.
Evaluation data, no token data: a response-level dump. ``aggregated_results.jsonl`` (eval metrics) sits
beside them and is skipped.

Group: identical ``input_prompt`` within one data source (``eval_n_samples_per_prompt`` repeats), and
the same ``env_extras.extra_info.index`` when the dataset has one (two dataset rows with one prompt stay
apart); ``prompt_id`` is a hash of (data source, prompt, index). Step: the N of the directory (``eval_only``: 0).
"""
from __future__ import annotations

import re

from . import Context, Format, extras, iter_json_lines, number, require, reward_note
from ._common import F32, I64, STR, text_key

PATTERN = r"(^|/)dumped_evals/(global_step_(?P<step>\d+)_evals|eval_only)/[^/]+\.jsonl$"


def read(path: str, ctx: Context):
    step = ctx.step if ctx.step is not None else 0
    for line, rec in iter_json_lines(path, ctx):
        require(ctx, line, rec, ("input_prompt", "output_response", "score"))
        reward_note(ctx, "the rows are SkyRL's evaluation samples (trainer.dump_eval_results: "
                         "eval_n_samples_per_prompt of each prompt), scored as a training batch of them would be; "
                         "SkyRL dumps no training batch")
        score = rec["score"]
        if isinstance(score, list):
            if "list_score" not in ctx.state:
                ctx.state["list_score"] = True
                ctx.notes.append("score lists (token-level rewards) are summed into one reward per response")
            score = sum(number(ctx, line, v, "score") for v in score)
        extra = (rec.get("env_extras") or {}).get("extra_info") if isinstance(rec.get("env_extras"), dict) else None
        index = extra.get("index") if isinstance(extra, dict) else None  # the dataset row, when it has one
        row = {"prompt_id": text_key(rec.get("data_source", ""), rec["input_prompt"], index), "step": step,
               "reward": number(ctx, line, score, "score")}
        row.update(extras(rec, ("score",)))
        yield line, row


def sniff(rec: dict) -> bool:
    return {"input_prompt", "output_response", "score"} <= set(rec)


def key(path: str):
    m = re.search(PATTERN, path.replace("\\", "/"))
    return (m.group(2) if m else path, path.rsplit("/", 1)[-1])


FORMAT = Format(
    name="skyrl-evals", title="SkyRL dumped_evals JSONL",
    pattern=PATTERN, level="response",
    group_rule="identical input_prompt (and env_extras.extra_info.index, when present) within a data source",
    columns={"prompt_id": STR, "step": I64, "reward": F32, "input_prompt": STR, "output_response": STR},
    read=read, sniff=sniff, required=("input_prompt", "output_response", "score"),
    companions=(r"(^|/)aggregated_results\.jsonl$",), key=key,
    example="advcli run exports/dumped_evals --output out.parquet --flavor skyrl",
)
