"""``open-instruct-traces``: open-instruct's GRPO rollout traces, ``{run_name}_rollouts_{shard:06d}.jsonl``
(allenai/open-instruct @ e6c3044a, ``open_instruct/rl_utils.py`` ``RolloutRecord`` and ``_save_rollouts``
L31-43 and L88-127; written when ``--save_traces`` with ``--rollouts_save_path DIR``, called from
``open_instruct/data_loader.py`` L1486-1497).

One JSON object per line and sample (``asdict(RolloutRecord)``): ``step``, ``sample_idx`` (its position in
the step's batch), ``prompt_idx`` (= ``sample_idx // num_samples_per_prompt_rollout``), ``prompt_tokens``,
``response_tokens``, ``reward`` (the score the advantage was computed from), ``advantage`` (the value
trained on), ``finish_reason``, ``dataset``, ``ground_truth``, ``request_info`` (tool calls), ``logprobs``.
Shards are appended to across steps (a new shard every 10,000 samples), so one file holds several steps;
``{run_name}_metadata.jsonl`` beside them is skipped.

No token mask (open-instruct's response masks, with tool output masked, are not written): a response-level
dump, with ``response_length`` = ``len(response_tokens)`` and ``prompt_length`` = ``len(prompt_tokens)``;
the token lists and log-probs are not copied. Group: ``prompt_id`` = ``{step}:{prompt_idx}``, which
``--flavor open-instruct``'s positional blocks of ``num_samples_per_prompt_rollout`` rows are checked
against (open-instruct's own ``reshape(-1, n)`` over the step's batch).
"""
from __future__ import annotations

from . import Context, Format, extras, iter_json_lines, number, number_list, require
from ._common import F32, F64, I64, STR

SKIP = ("step", "reward", "prompt_tokens", "response_tokens", "logprobs", "advantage")
REQUIRED = ("step", "sample_idx", "prompt_idx", "reward", "advantage")


def read(path: str, ctx: Context):
    for line, rec in iter_json_lines(path, ctx):
        require(ctx, line, rec, REQUIRED)
        step, pidx = rec["step"], rec["prompt_idx"]
        for key, v in (("step", step), ("prompt_idx", pidx)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise ctx.error(line, f"field {key!r} is {v!r}; expected an integer")
        row = {"prompt_id": f"{step}:{pidx}", "step": step, "reward": number(ctx, line, rec["reward"], "reward"),
               "advantage": number(ctx, line, rec["advantage"], "advantage")}
        if rec.get("logprobs") is not None:  # not copied, but a null or a string there is a damaged record
            number_list(ctx, line, rec["logprobs"], "logprobs", "one log-prob per response token",
                        hint="open-instruct writes a number per response token: repair or remove that line")
        for key, name in (("response_tokens", "response_length"), ("prompt_tokens", "prompt_length")):
            if isinstance(rec.get(key), list):
                row[name] = len(rec[key])
        row.update(extras(rec, SKIP))
        yield line, row


def sniff(rec: dict) -> bool:
    return set(REQUIRED) <= set(rec)


FORMAT = Format(
    name="open-instruct-traces", title="open-instruct {run_name}_rollouts_{shard}.jsonl",
    pattern=r"(^|/)[^/]*_rollouts_\d{6}\.jsonl$",
    level="response", mask_length="response_length", group_key="prompt_idx",
    group_rule="step and prompt_idx (open-instruct's blocks of num_samples_per_prompt_rollout rows)",
    columns={"prompt_id": STR, "step": I64, "reward": F32, "advantage": F64, "response_length": I64,
             "prompt_length": I64},
    read=read, sniff=sniff, required=REQUIRED, companions=(r"(^|/)[^/]*_metadata\.jsonl$",),
    logged="advantage", flavor="open-instruct",
    example="advcli run rollouts --output out.parquet --flavor open-instruct --set num_samples_per_prompt_rollout={n}",
)
