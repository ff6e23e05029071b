"""``verl-jsonl``: verl's ``trainer.rollout_data_dir`` / ``validation_data_dir`` files, ``{step}.jsonl``
(verl-project/verl @ 1dda039b: ``verl/trainer/ppo/v1/trainer_base.py`` L1137-1171 and L1208-1251 (v1),
``verl/trainer/ppo/ray_trainer.py`` L454-477 and L514-546 (legacy v0); ``spec/dumps.md`` §1).

One JSON object per line: ``input``, ``output`` (decoded text), ``gts``, ``score`` (the task reward
before any KL), ``step``; the v1 trainer adds ``uid`` = ``{prompt_uid}_{session}_{output_index}``, the
legacy trainer the reward function's extra keys. No token data: a response-level dump.

Group: with ``uid``, ``prompt_id = uid.rsplit("_", 2)[0]``. For a multi-output agent loop
(output_index > 0) verl's GRPO uses only the last output of each ``{prompt_uid}_{session}`` and
broadcasts its advantage (``verl/trainer/ppo/v1/utils.py`` L148-193): one row per session is kept, the
one with the highest output index (v1 writes them sorted). Without ``uid`` (legacy trainer, every verl
before bc6fb966): rows with identical ``input`` text; ``prompt_id`` is a hash of it (two dataset rows
with the same prompt then merge into one group).
"""
from __future__ import annotations

import re

from . import Context, Format, extras, iter_json_lines, number, require
from ._common import F32, I64, STR, text_key

UID = re.compile(r"^(?P<prompt>.+)_(?P<session>\d+)_(?P<index>\d+)$")


def read(path: str, ctx: Context):
    pending = None  # (session key, index, line, row): v1 multi-output, the last output of a session wins
    dropped = 0
    for line, rec in iter_json_lines(path, ctx):
        require(ctx, line, rec, ("input", "output", "score"))
        step = rec.get("step", ctx.step)
        if not isinstance(step, int) or isinstance(step, bool):
            raise ctx.error(line, f"field 'step' is {step!r}; expected an integer")
        row = {"step": step, "reward": number(ctx, line, rec["score"], "score")}
        row.update(extras(rec, ("step", "score", "reward")))
        uid = rec.get("uid")
        if uid is None:
            if "text_grouping" not in ctx.state:
                ctx.state["text_grouping"] = True
                ctx.notes.append("no uid (legacy verl trainer): rows grouped by identical input text")
            row["prompt_id"] = text_key(rec["input"])
            yield line, row
            continue
        m = UID.match(str(uid))
        if not m:
            raise ctx.error(line, f"field 'uid' is {uid!r}; expected {{prompt_uid}}_{{session}}_{{output_index}}")
        row["prompt_id"] = m.group("prompt")
        session, index = f"{m.group('prompt')}_{m.group('session')}", int(m.group("index"))
        if pending is not None and pending[0] == session:
            dropped += 1
            if index > pending[1]:
                pending = (session, index, line, row)
            continue
        if pending is not None:
            yield pending[2], pending[3]
        pending = (session, index, line, row)
    if pending is not None:
        yield pending[2], pending[3]
    if dropped:
        ctx.notes.append(f"{path}: {dropped} earlier agent-loop output(s) left out (verl's GRPO uses the last "
                         "output of each session)")
        # only GRPO takes the last output (v1/utils.py L148-217): verl hands every other estimator all
        # the outputs, each a row of its prompt's group (uid = the prompt uid, agent_loop_tq.py L154-200)
        ctx.state["only_estimators"] = (("grpo",), f"{path} holds agent loops with several outputs per session; "
                                        "verl's GRPO uses only each session's last output, which is what this "
                                        "import keeps, but verl gives every other estimator all the outputs as rows "
                                        "of the prompt's group")


def sniff(rec: dict) -> bool:
    return {"input", "output", "score"} <= set(rec)


FORMAT = Format(
    name="verl-jsonl", title="verl rollout_data_dir {step}.jsonl",
    pattern=r"(^|/)(?P<step>\d+)\.jsonl$",
    level="response", group_key="uid (or input text)",
    group_rule="uid without its last two _ fields (v1 trainer); without uid, identical input text",
    columns={"prompt_id": STR, "step": I64, "reward": F32, "input": STR, "output": STR},
    read=read, sniff=sniff, required=("input", "output", "score"),
    example="advcli run rollout_data --output out.parquet --flavor verl --set algorithm.adv_estimator=grpo",
)
