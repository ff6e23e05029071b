"""``verl-jsonl``: verl's ``trainer.rollout_data_dir`` / ``validation_data_dir`` files, ``{step}.jsonl``
(verl-project/verl @ 1dda039b: ``verl/trainer/ppo/v1/trainer_base.py`` L1137-1171 and L1208-1251 (v1),
``verl/trainer/ppo/ray_trainer.py`` L454-477 and L514-546 (legacy v0)).

One JSON object per line: ``input``, ``output`` (decoded text), ``gts``, ``score`` (the task reward
before any KL), ``step``; the v1 trainer adds ``uid`` = ``{prompt_uid}_{session}_{output_index}``, the
legacy trainer the reward function's extra keys (``reward_extra_info``: ``acc``, ``pred``, ...). No token
data: a response-level dump.

Reward extras: the v1 trainer dropped them until verl pull request #7588 (open as of verl-project/verl
@ 1dda039b, read from its diff), which writes them again beside ``score`` as the legacy trainer does. Every
extra key is a column; numeric and boolean ones (booleans as 0/1, as verl's GDPO takes
``non_tensor_batch[key]`` as floats) are reward components (``reward.components``: a GDPO that runs on one
reward per response, NeMo's ``gdpo_loo`` or TRL's ``normalize_then_sum``; verl's own ``gdpo`` whitens over
tokens and is refused on this dump) or a reward of their own (``--column reward=acc``); text (``pred``) is
kept.

Group: with ``uid``, ``prompt_id = uid.rsplit("_", 2)[0]``. Every output of a multi-output agent loop
(output_index > 0) is trained, so every one is a row. verl's GRPO computes each session's advantage from
its last output only and broadcasts it to every output of ``{prompt_uid}_{session}``
(``verl/trainer/ppo/v1/utils.py`` L148-193, ``compute_advantage_for_multi_trajectories``): the rows carry
``is_last_step`` (true on each session's last output; v1 writes a session's outputs contiguous, sorted by
index) and GRPO on such a dump runs with ``grouping.trajectories=last_step``. verl hands every other
estimator all the outputs as rows of the prompt's group, which is what the rows are. Without ``uid``
(legacy trainer, every verl before bc6fb966): rows with identical ``input`` text; ``prompt_id`` is a hash
of it (two dataset rows with the same prompt then merge into one group).

Padding rows: the V1 trainer pads a batch whose size is not a multiple of its DP / mini-batch multiple with
synthetic no-op rows and dumps the padded batch (:data:`PAD`). They are rows of the batch (verl computes the
advantages with them in it: GPG's α = B / #{s ≠ 0} counts them), with ``is_padding`` true and a one-token
response of mask 0, as verl gives them; every figure, filter and group count leaves them out, as verl's
metrics do (``non_padding_mask``, v1/trainer_base.py), and one note says how many.
"""
from __future__ import annotations

import re

from ..errors import AdvcliError
from ..estimators import all_specs
from . import Context, Format, extras, iter_json_lines, number, require, reward_note
from ._common import BOOL, F32, I64, STR, text_key

UID = re.compile(r"^(?P<prompt>.+)_(?P<session>\d+)_(?P<index>\d+)$")
# verl's V1 trainer's synthetic padding rows (verl/trainer/ppo/padding_utils.py @1dda039b, also in 0.9.1:
# upsample_batch_to_divisible_size, called from v1/trainer_base.py _balance_batch): key f"pad{uuid4().hex}_{i}_0",
# a prompt and a response of one EOS token (decoded with skip_special_tokens: ""), rm_scores 0, the first
# sample's reward_model (so its gts); _log_rollout_data dumps the padded batch
PAD = re.compile(r"^pad[0-9a-f]{32}_\d+_0$")


def is_padding(rec: dict) -> bool:
    """Whether a record is one of verl's synthetic padding rows (:data:`PAD`, empty input and output, score 0)."""
    return (isinstance(rec.get("uid"), str) and PAD.match(rec["uid"]) is not None and rec.get("input") == ""
            and rec.get("output") == "" and rec.get("score") == 0)


def read(path: str, ctx: Context):
    pending = None  # (session, index, line, row, outputs so far): a v1 row waits for the next one to know
    # whether it ends its session
    ended: set = set()  # sessions already closed in this file (a session's outputs are contiguous)
    several = 0  # sessions with more than one output
    local: dict = {}  # this file's first row with a uid, and its first row without one (_check_uid_mix)
    for line, rec in iter_json_lines(path, ctx):
        require(ctx, line, rec, ("input", "output", "score"))
        step = rec.get("step", ctx.step)
        if not isinstance(step, int) or isinstance(step, bool):
            raise ctx.error(line, f"field 'step' is {step!r}; expected an integer")
        first = ctx.state.setdefault("step_files", {}).setdefault(step, path)
        if first != path:  # verl writes one file a step ("w" mode): a second one is another run or a copy
            raise ctx.error(line, f"step {step} is already in {first}; verl writes each step to one file",
                            hint="two runs (or a rerun) share this directory; point advcli at one of them")
        if ctx.step is not None and step != ctx.step:  # grouped by step, such a row was cut from its prompt's group
            raise ctx.error(line, f"field 'step' is {step}, but the file is step {ctx.step}'s; verl writes each step "
                            "to {step}.jsonl, every record with that step",
                            hint="the row was moved or edited: repair its step, or remove it (a renamed file: give "
                                 "it its step's name)")
        row = {"step": step, "reward": number(ctx, line, rec["score"], "score"), "is_padding": is_padding(rec)}
        row.update(extras(rec, ("step", "score", "reward", "is_padding")))
        _reward_of_record(ctx, line, rec, row)
        _note_extras(ctx, rec, row)
        uid = rec.get("uid")
        _check_uid_mix(ctx, path, line, rec, uid, local)
        if uid is None:
            if "text_grouping" not in ctx.state:  # said in run's summary too (reward_note's channel)
                ctx.state["text_grouping"] = True
                reward_note(ctx, "no uid (legacy verl trainer, or a validation dump before v1): rows grouped by "
                                 "identical input text, so two dataset rows with the same prompt make one group")
            row["prompt_id"] = text_key(rec["input"])
            if pending is not None:  # a file mixing rows with and without uid keeps its order
                pending[3]["is_last_step"] = True
                yield pending[2], pending[3]
                pending = None
            yield line, row
            continue
        m = UID.match(str(uid))
        if not m:
            raise ctx.error(line, f"field 'uid' is {uid!r}; expected {{prompt_uid}}_{{session}}_{{output_index}}")
        row["prompt_id"] = m.group("prompt")
        session, index = f"{m.group('prompt')}_{m.group('session')}", int(m.group("index"))
        if pending is not None and pending[0] == session:
            if index <= pending[1]:
                raise ctx.error(line, f"uid {uid!r}: output {index} of session {session} comes after output "
                                f"{pending[1]}; verl writes a session's outputs sorted by index",
                                hint="pass the file as verl wrote it (sorted by prompt uid, session, output index)")
            several += pending[4] == 1
            pending[3]["is_last_step"] = False
            yield pending[2], pending[3]
            outputs = pending[4] + 1
        else:
            outputs = 1
            if pending is not None:
                pending[3]["is_last_step"] = True
                ended.add(pending[0])
                yield pending[2], pending[3]
        if session in ended:
            raise ctx.error(line, f"uid {uid!r}: session {session} already ended earlier in the file; verl writes "
                            "a session's outputs contiguously",
                            hint="pass the file as verl wrote it (sorted by prompt uid, session, output index)")
        pending = (session, index, line, row, outputs)
    if pending is not None:
        pending[3]["is_last_step"] = True
        yield pending[2], pending[3]
    if several:
        # the estimators verl computes from a session's last output (agent_loop_tq.py L154-200 @1dda039b)
        last_step = tuple(n for n, s in sorted(all_specs().items()) if s.last_step_of_sessions)
        ctx.notes.append(f"{path}: {several} agent-loop session(s) with several outputs: every output is a row; "
                         f"{', '.join(last_step)} computes each session's advantage from its last output and gives "
                         "it to all of its outputs, as verl does (grouping.trajectories=last_step)")
        ctx.state["last_step_estimators"] = last_step


def _check_uid_mix(ctx: Context, path: str, line: int, rec: dict, uid, local: dict) -> None:
    """Refuse rows without a uid among rows with one: the v1 trainer writes a uid on every row, so a ``"uid": null``
    anywhere in a dump with uids (or a row without the field in a file whose other rows have it) is a damaged row
    whose group is unknown; grouped by its input text it became a group of its own, and the dump was said to be
    a legacy trainer's. A dump where no row has a uid (legacy verl) is grouped by input text as before; files
    without the field beside files with it (a run resumed across a verl upgrade) are read each their way."""
    def refuse(at: tuple, other: tuple):
        what = "is null" if at[2] else "is missing"
        return AdvcliError(f"{at[0]}:{at[1]}: field 'uid' {what}, but {other[0]}:{other[1]} has uid {other[2]!r}; "
                           "verl's v1 trainer writes a uid ({prompt_uid}_{session}_{output_index}) on every row, "
                           "so this row's group is unknown",
                           hint="repair the row's uid or remove the row (only a dump where no row has a uid, from "
                                "the legacy trainer, is grouped by input text)")

    here = (path, line, "uid" in rec)  # without a uid: where, and whether the field is there (null) or absent
    if uid is not None:
        at = (path, line, uid)
        ctx.state.setdefault("uid_at", at)
        local.setdefault("uid_at", at)
        if "null_uid_at" in ctx.state:
            raise refuse(ctx.state["null_uid_at"], at)
        if "no_uid_at" in local:
            raise refuse(local["no_uid_at"], at)
        return
    if here[2]:
        ctx.state.setdefault("null_uid_at", here)
        if "uid_at" in ctx.state:
            raise refuse(here, ctx.state["uid_at"])
    local.setdefault("no_uid_at", here)
    if "uid_at" in local:
        raise refuse(here, local["uid_at"])


BASE = {"input", "output", "gts", "score", "step", "uid", "reward", "is_padding"}


def _reward_of_record(ctx: Context, line: int, rec: dict, row: dict) -> None:
    """The row's reward where the record holds more than ``score``: a validation dump's ``reward`` field, or the
    DAPO reward manager's logged overlong penalty (``overlong_buffer_cfg.log``: ``overlong_reward``) added to a
    score that does not hold it. The manager adds it to the reward function's score (workers/reward_manager/
    dapo.py L119-132, experimental/reward_loop/reward_manager/dapo.py L105-116 @1dda039b, a float32 tensor) and
    writes the reward into the batch; the dump's ``score`` is that reward's sum, but the reward's extra keys are
    written over it (_write_generations L468-470): a reward function that returns a dict (``math_dapo``:
    score, acc, pred) puts its own score, before the penalty, in ``score``. One that returns a number leaves the
    reward in ``score`` and that number in ``acc``: there score = acc + overlong_reward already, in float32, and
    nothing is added. The row keeps the dump's score as ``score``. A validation dump's ``reward`` field is the
    manager's reward tensor's sum (ray_trainer.py _validate L678, v1/trainer_base.py L1041): the row's reward
    wherever it is there."""
    import numpy as np

    total = rec.get("reward")
    if isinstance(total, (int, float)) and not isinstance(total, bool):  # validation: the reward tensor's sum
        row["score"], row["reward"] = row["reward"], float(total)
        reward_note(ctx, "reward = the record's reward field (verl's validation dump: the reward manager's reward, "
                         "ray_trainer.py _validate; its score field can be the reward function's own); the dump's "
                         "score is kept as score")
        return
    penalty = rec.get("overlong_reward")
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)):
        return
    score = row["score"] = row["reward"]
    if not penalty:
        return
    f32 = np.float32
    acc = rec.get("acc")
    if (isinstance(acc, (int, float)) and not isinstance(acc, bool)
            and f32(f32(acc) + f32(penalty)) == f32(score)):  # a number-returning reward function: in the score
        return
    row["reward"] = float(f32(f32(score) + f32(penalty)))
    reward_note(ctx, "reward = score + overlong_reward: the DAPO reward manager's overlong penalty, logged beside "
                     "the reward function's own score, which verl's dump writes in place of the reward "
                     "(dapo.py L119-132, ray_trainer.py _write_generations); the dump's score is kept as score")


def _note_extras(ctx: Context, rec: dict, row: dict) -> None:
    """The reward function's extra keys (verl's ``reward_extra_info``; v1 since #7588): booleans as 0/1, and
    one note naming the numeric ones, usable as GDPO components, and the others, kept as they are."""
    for k in rec:
        if k not in BASE and k in row and isinstance(rec[k], bool):
            row[k] = float(rec[k])
    if "extras_noted" in ctx.state:
        return
    names = [k for k in rec if k not in BASE]
    if not names:
        return
    ctx.state["extras_noted"] = True
    numeric = [k for k in names if isinstance(rec[k], (int, float))]
    other = [k for k in names if k not in numeric]
    text = "reward extra columns (verl's reward_extra_info)"
    if numeric:
        text += (f": {', '.join(numeric)} numeric (booleans as 0/1): reward components (e.g. NeMo's GDPO: --flavor "
                 f"advcli --set estimator.name=gdpo_loo --set 'reward.components=[{','.join(numeric)}]'; verl's "
                 f"own gdpo whitens over tokens, which this dump lacks) or the reward (--column "
                 f"reward={numeric[0]})")
    if other:
        text += f"{';' if numeric else ':'} {', '.join(other)} kept as they are"
    ctx.notes.append(text)


def sniff(rec: dict) -> bool:
    return {"input", "output", "score"} <= set(rec)


def run_config(path: str) -> str | None:
    """The run's Hydra configuration, ``.hydra/config.yaml`` (the whole resolved configuration Hydra saves in the
    run's output directory), where it sits in the directory of ``…/{step}.jsonl`` (trainer.rollout_data_dir) or in
    the one above it: a run whose rollout_data_dir is inside its Hydra output directory. None elsewhere (Hydra's
    default outputs/DATE/TIME/ is not beside the dump: the run's configuration is then given with --config)."""
    import os

    here = os.path.dirname(os.path.abspath(path))
    for d in (here, os.path.dirname(here)):
        found = os.path.join(d, ".hydra", "config.yaml")
        if os.path.isfile(found):
            return found
    return None


FORMAT = Format(
    name="verl-jsonl", title="verl rollout_data_dir {step}.jsonl",
    pattern=r"(^|/)(?P<step>\d+)\.jsonl$",
    level="response", group_key="uid (or input text)",
    group_rule="uid without its last two _ fields (v1 trainer); without uid, identical input text",
    columns={"prompt_id": STR, "step": I64, "reward": F32, "input": STR, "output": STR, "is_last_step": BOOL,
             "is_padding": BOOL},
    read=read, sniff=sniff, required=("input", "output", "score"),
    example="advcli run rollout_data --output out.parquet --flavor verl --set algorithm.adv_estimator=grpo",
    run_config=run_config,
    run_config_where="verl's Hydra saves the run's as .hydra/config.yaml in its output directory, outputs/DATE/TIME/ "
                     "by default: give it with --config",
)
