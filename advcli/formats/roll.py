"""``roll-dump``: ROLL's ``rollout_dump_data.step_{N}.jsonl`` (alibaba/ROLL @ 8eb27cc2, RLVR writer
``roll/pipeline/rlvr/utils.py`` L19-72, agentic writer ``roll/pipeline/agentic/utils.py`` L298-332,
``rollout_dump_dir=/abs/path``).

Despite the name, the file is **one JSON object on one line** whose keys map to equal-length lists (one
entry per sample), so a file is read whole (one step's batch). Two layouts, no token data in either (a
response-level dump):

* RLVR: the dataset's columns (``id``, ``prompt``, ``messages``, ``tag``, ``domain``, ...) plus
  ``responses``, ``scores`` (the raw reward), ``sampling_params``, ``global_step``. Group: ROLL groups
  ``num_return_sequences`` consecutive rows inside each domain; ``prompt_id`` = (tag or domain, id), or a
  hash of the prompt (messages) when there is no id; the same dataset row drawn again later in the step
  (a later run of rows) gets ``#run`` appended: another group, as in ROLL. ``domain`` is kept (ROLL
  normalises per domain).
* agentic (agent_native env manager): ``trajectory_data`` (JSON text), ``messages``, ``tools``,
  ``exp_name``, ``global_step``. Group: ROLL's ``traj_group_id`` =
  ``{tag}_{group_id}_{episode_id}_{seed}`` from ``trajectory_data.env_info``; reward =
  ``reward_info.episode_reward``. The proxy env manager's smaller record has no ``env_info`` and is
  refused (its group is not recoverable without parsing ids whose parts contain ``_``).
"""
from __future__ import annotations

import json
import re

from . import Context, Format, number, reward_note, shown_setting
from ._common import F32, I64, STR, text_key
from .records import json_where


def _load(path: str, ctx: Context) -> dict:
    try:
        with open(path, "rb") as fh:
            text = fh.read()
    except OSError as e:
        raise ctx.error(None, f"cannot open it ({e.strerror})") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) != 1:
        raise ctx.error(2 if len(lines) > 1 else None,
                        f"expected one JSON object on one line (ROLL's columnar dump), found {len(lines)} lines")
    try:
        obj = json.loads(lines[0])
    except ValueError as e:
        cut = not text.rstrip(b"\r\n").endswith(b"}")
        raise ctx.error(1, ("truncated (the file ends inside the object)" if cut else "invalid JSON")
                        + f": {json_where(e)}") from None
    if not isinstance(obj, dict):
        raise ctx.error(1, f"expected one JSON object of equal-length lists, got {type(obj).__name__}")
    lens = {k: len(v) for k, v in obj.items() if isinstance(v, list)}
    bad = [k for k, v in obj.items() if not isinstance(v, list)]
    if bad:
        raise ctx.error(1, f"field {bad[0]!r} is not a list; ROLL writes one list per column")
    if len(set(lens.values())) > 1:
        n = max(set(lens.values()), key=list(lens.values()).count)
        odd = next(k for k, v in lens.items() if v != n)
        raise ctx.error(1, f"column {odd!r} has {lens[odd]} entries but the others have {n}")
    return obj


def read(path: str, ctx: Context):
    obj = _load(path, ctx)
    n = len(next(iter(obj.values()))) if obj else 0
    if "trajectory_data" in obj:
        yield from _agentic(obj, n, ctx)
        return
    if "scores" not in obj:
        raise ctx.error(1, "missing column 'scores' (RLVR) or 'trajectory_data' (agentic) of a ROLL dump")
    keys = list(obj)
    prev, run = None, -1
    for i in range(n):
        rec = {k: obj[k][i] for k in keys}
        step = rec.get("global_step", ctx.step)
        scope = rec.get("tag") or rec.get("domain") or ""
        if rec.get("id") is not None:
            pid = f"{scope}/{rec['id']}"
        else:
            pid = f"{scope}/{text_key(rec.get('prompt', rec.get('messages')))}"
        if pid != prev:  # a run of rows: the same dataset row drawn again later in the batch is another group
            run, prev = run + 1, pid
        row = {"prompt_id": pid if run == _first_run(ctx, pid, run) else f"{pid}#{run}", "step": step,
               "reward": number(ctx, 1, rec["scores"], f"scores[{i}]")}
        for k, v in rec.items():
            if k in ("scores", "global_step"):
                continue
            row[k] = json.dumps(v, ensure_ascii=False, default=str) if isinstance(v, (dict, list)) else v
        if "id" in row and row["id"] is not None:
            row["id"] = str(row["id"])
        yield 1, row


def _first_run(ctx: Context, pid: str, run: int) -> int:
    """The run in which ``pid`` first appeared in this file (its later runs get a ``#run`` suffix)."""
    seen = ctx.state.setdefault(("runs", ctx.path), {})
    return seen.setdefault(pid, run)


def _agentic(obj: dict, n: int, ctx: Context):
    if n and "agentic" not in ctx.state:
        ctx.state["agentic"] = True
        reward_note(ctx, "agentic dump: --flavor roll runs ROLL's RLVR chain (groups of n consecutive rows, grpo "
                         "forced to the group z-score, a group of one gives NaN); ROLL's agentic pipeline "
                         "normalises by reward_normalization instead (grouping key and norm types, nothing by "
                         "default; a group of one or with |std| <= 1e-6 gives 0; agentic/utils.py L99-153)")
        # the agentic scores are float32, not the RLVR reward workers' float16: score_tensor is dtype=torch.float
        # (agent_native_env_manager.py L276 @8eb27cc2) and agentic_reward_norm takes .float() (utils.py L106)
        shown_setting(ctx, "advcli.reward_dtype", "run")
    for i in range(n):
        raw = obj["trajectory_data"][i]
        try:
            t = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            raise ctx.error(1, f"trajectory_data[{i}] is not valid JSON text") from None
        env = t.get("env_info") if isinstance(t, dict) else None
        if not isinstance(env, dict):
            raise ctx.error(1, f"trajectory_data[{i}] has no env_info (the proxy env manager's record): the "
                            "trajectory group cannot be recovered",
                            hint="only the agent_native env manager's dumps carry env_info.{tag,group_id,"
                                 "episode_id,seed}")
        reward = (t.get("reward_info") or {}).get("episode_reward")
        row = {"prompt_id": "_".join(str(env.get(k)) for k in ("tag", "group_id", "episode_id", "seed")),
               "step": obj.get("global_step", [ctx.step] * n)[i],
               "reward": number(ctx, 1, reward, f"trajectory_data[{i}].reward_info.episode_reward"),
               "trajectory_id": t.get("trajectory_id"), "tag": env.get("tag")}
        for k in obj:
            if k not in ("global_step",):
                v = obj[k][i]
                row[k] = json.dumps(v, ensure_ascii=False, default=str) if isinstance(v, (dict, list)) else v
        yield 1, row


def first(path: str) -> dict | None:
    """Top-level keys from the first 64 KiB (the file is one big object: not parsed twice)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536).decode("utf-8-sig", "replace")  # a BOM, as json.loads(bytes) accepts it
    except OSError:
        return None
    if not head.lstrip().startswith("{"):
        return None
    keys = re.findall(r'"([^"\\]+)"\s*:\s*\[', head)
    return {k: None for k in keys} or None


def sniff(rec: dict) -> bool:
    return "scores" in rec or "trajectory_data" in rec


FORMAT = Format(
    name="roll-dump", title="ROLL rollout_dump_data.step_{N}.jsonl",
    pattern=r"(^|/)rollout_dump_data\.step_(?P<step>\d+)\.jsonl$",
    level="response",
    group_key="prompt ids",
    group_rule="RLVR: (tag or domain, id), or the prompt text; agentic: {tag}_{group_id}_{episode_id}_{seed} "
               "from trajectory_data.env_info (ROLL itself groups num_return_sequences consecutive rows)",
    columns={"prompt_id": STR, "step": I64, "reward": F32, "domain": STR, "id": STR},
    read=read, sniff=sniff, first_record=first, required=("scores",),
    example="advcli run /abs/rollout_dump --output out.parquet --flavor roll --set adv_estimator=grpo "
            "--set actor_infer.generating_args.num_return_sequences={n}",
)
