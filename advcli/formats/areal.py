"""``areal-jsonl``: AReaL's ``rollout/{version}/{task_id}.jsonl`` (inclusionAI/AReaL @ 4aef98d8,
``areal/infra/workflow_executor.py`` L818-921, ``rollout.dump_to_file=true``).

One JSON object per line, one file per prompt group (``GroupedRolloutWorkflow`` puts the n samples of one
prompt in one task): ``task_id``, ``sample_idx``, ``seqlen``, ``prompt_len``, ``head_version``,
``tail_version``, ``version_rle``, ``reward``, ``prompt``, ``completion``. No token data (only lengths): a
response-level dump, with ``response_length`` = the trained tokens, the counts of ``version_rle`` (since AReaL
#1408 ``prompt_len`` is where the first trained token starts, so ``seqlen − prompt_len`` would also count a
multi-turn row's tool and context tokens), else ``seqlen − prompt_len``.

Rollout-time reward normalisation (``gconfig.reward_normalization``, AReaL #1516 @ 95d70052, extended to
``RolloutControllerV2`` by #1619): the workflow replaces each reward by its group's population z-score
``(r − mean)/(std(ddof=0) + 1e-8)`` (``areal/infra/remote_inf_engine.py`` L180-215 @ cbff54d6) and keeps the raw
one; the writer then adds ``original_reward`` to the record (``workflow_executor.py`` L1033-1035 @ cbff54d6).
Such a record's ``reward`` is already an advantage-like normalised value: advcli recomputes from the raw
``original_reward`` (``original_rewards`` also accepted) and keeps the logged one as ``normalized_reward``, the
reward AReaL's trainer took: ``--flavor areal`` reads it (``gconfig.reward_normalization``, which such records
show), another flavor recomputes from the raw reward.

Group: ``task_id``, keyed with the file (several executor processes can reuse a task id): ``prompt_id`` =
``{version}/{task_id}`` plus a hash of the prompt. Step: the version directory. Evaluation rollouts
(``eval-rollout/``) met in a directory walk are skipped; point at one of their files to read it.
"""
from __future__ import annotations

import os
import re

from . import Context, Format, extras, iter_json_lines, number, require, reward_note, shown_setting
from ._common import F32, I64, STR, text_key

PATTERN = r"(^|/)(?P<kind>eval-rollout|rollout)/(?P<step>\d+)/(?P<task>\d+)\.jsonl$"


RAW_KEYS = ("original_reward", "original_rewards")  # the JSONL writer's name, and the batch key's


def read(path: str, ctx: Context):
    for line, rec in iter_json_lines(path, ctx):
        require(ctx, line, rec, ("task_id", "reward"))
        tid = rec["task_id"]
        if not isinstance(tid, int) or isinstance(tid, bool):  # a null became a group of its own ({step}/None/...)
            raise ctx.error(line, f"field 'task_id' is {tid!r}; expected an integer: AReaL's task id, which groups "
                            "the prompt's samples", hint="repair the record's task_id (the file's other records "
                            "carry it) or remove that line")
        stem = os.path.basename(path)[: -len(".jsonl")]
        if stem.isdigit() and int(stem) != tid:  # AReaL writes task t's samples to {t}.jsonl, each with task_id t
            raise ctx.error(line, f"field 'task_id' is {tid}, but the file is {stem}.jsonl: AReaL writes task {stem}'s "
                            f"samples there, each with task_id {stem}; this record would be a group of its own",
                            hint="a record moved or edited by hand? repair its task_id or move it to its task's file")
        seqlen, plen = rec.get("seqlen"), rec.get("prompt_len")
        row = {"prompt_id": f"{ctx.step}/{rec['task_id']}/{text_key(_file_key(path, ctx), rec.get('prompt', ''))}",
               "step": ctx.step if ctx.step is not None else rec.get("tail_version"),
               "reward": number(ctx, line, rec["reward"], "reward")}
        raw_key = next((k for k in RAW_KEYS if k in rec), None)
        if raw_key is not None:
            raw = rec[raw_key]
            if isinstance(raw, list) and len(raw) == 1:  # a one-element tensor written as a list
                raw = raw[0]
            row["normalized_reward"] = row["reward"]
            row["reward"] = number(ctx, line, raw, raw_key)
            reward_note(ctx, f"reward = {raw_key}, the raw reward; the dump's reward, AReaL's rollout-time group "
                             "z-score (gconfig.reward_normalization), is kept as normalized_reward: AReaL trained "
                             "on it, and --flavor areal reads it as the reward (another flavor: --column "
                             "reward=normalized_reward)")
            shown_setting(ctx, "gconfig.reward_normalization", True)  # the writer adds original_reward only then
        elif "gconfig.reward_normalization" not in ctx.state.get("shown_settings", {}):
            # no original_reward: the reward was not normalised at rollout time, whatever the config says (AReaL
            # normalises InteractionWithTokenLogpReward workflows only, cli_args.py L243-253 @cbff54d6)
            shown_setting(ctx, "gconfig.reward_normalization", False)
        if isinstance(seqlen, int) and isinstance(plen, int):
            if plen < 0 or seqlen < plen:  # AReaL's seqlen counts the prompt's tokens and the response's
                raise ctx.error(line, f"fields 'seqlen' {seqlen} and 'prompt_len' {plen}: the response would have "
                                f"{seqlen - plen} tokens (AReaL writes seqlen = prompt_len + the response's length)",
                                hint="repair the record's seqlen or prompt_len, or remove that line")
            row["response_length"] = seqlen - plen
            trained = _trained_tokens(rec.get("version_rle"))
            if trained is not None and trained <= seqlen - plen:
                row["response_length"] = trained
        row.update(extras(rec, ("reward",) + RAW_KEYS))
        yield line, row


def _trained_tokens(rle) -> int | None:
    """The row's trained (loss-mask) tokens from ``version_rle``, [[version, count], ...] over the mask=1 tokens
    (``_compute_output_versions``, workflow_executor.py L860-874 @cbff54d6; ``[[v, sum(mask)]]`` without
    versions), or None where the record has none. Since #1408 ``prompt_len`` is the first trained token's position
    (``_split_trajectory_for_dump``), so ``seqlen − prompt_len`` also counts a multi-turn row's tool and context
    tokens, which AReaL's adv_norm and overlong penalty do not."""
    if not isinstance(rle, list) or not rle:
        return None
    counts = [p[1] for p in rle if isinstance(p, (list, tuple)) and len(p) == 2]
    if len(counts) != len(rle) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        return None
    return sum(counts)


def run_config(path: str) -> str | None:
    """The trial's ``config.yaml`` beside ``…/{trial}/rollout/{version}/{task_id}.jsonl``: AReaL's
    ``load_expr_config`` saves the whole experiment configuration there (``save_config`` into
    ``StatsLogger.get_log_path``, areal/api/cli_args.py in the areal 1.0.4 wheel), the directory the rollout
    dumps go under. None when it is not there."""
    import os

    p = path.replace("\\", "/")
    m = re.search(PATTERN, p)
    if not m:
        return None
    found = os.path.join(p[:m.start("kind")] or ".", "config.yaml")
    return found if os.path.isfile(found) else None


def _file_key(path: str, ctx: Context) -> str:
    """The file's part of its groups' key: its path below the trial directories of the dump (the one trial's
    directory, the folder above ``rollout/``; their common folder where the dump holds several trials), so that
    the same dump gives the same ids wherever it lies (a copy, a follower's snapshot of the step)."""
    bases = ctx.state.get("areal_trials")
    if bases is None:
        trials = set()
        for f in ctx.files or [path]:
            m = re.search(PATTERN, f.replace("\\", "/"))
            trials.add(os.path.abspath(f[:m.start("kind")] or ".") if m else os.path.dirname(os.path.abspath(f)))
        bases = ctx.state["areal_trials"] = os.path.commonpath(sorted(trials)) if trials else ""
    rel = os.path.relpath(os.path.abspath(path), bases) if bases else path
    return rel.replace("\\", "/")


def _key(path: str):
    """(kind, version, task): two trials under one root repeat it; one task's appends share one file."""
    m = re.search(PATTERN, path.replace("\\", "/"))
    return (m.group("kind"), int(m.group("step")), int(m.group("task"))) if m else path


def sniff(rec: dict) -> bool:
    return {"task_id", "reward"} <= set(rec) and ("sample_idx" in rec or "seqlen" in rec)


FORMAT = Format(
    name="areal-jsonl", title="AReaL rollout/{version}/{task_id}.jsonl",
    pattern=PATTERN, level="response", mask_length="response_length", group_key="task_id (one file per group)",
    group_rule="task_id (one file per prompt group), keyed with its file and version",
    columns={"prompt_id": STR, "step": I64, "reward": F32, "response_length": I64, "prompt": STR,
             "completion": STR, "normalized_reward": F32},
    read=read, sniff=sniff, required=("task_id", "sample_idx", "reward"),
    companions=(r"(^|/)eval-rollout/\d+/\d+\.jsonl$",), key=_key,
    example="advcli run logs/$USER/exp/trial/rollout --output out.parquet --flavor areal", run_config=run_config,
    run_config_where="AReaL saves config.yaml in the trial directory, above rollout/",
)
