"""``nemo-jsonl``: NeMo RL's ``train_data_step{N}.jsonl`` (NVIDIA-NeMo/RL @ 7ea279ab,
``nemo_rl/utils/logger.py`` L1071-1098 ``log_batched_dict_as_jsonl``, called by ``grpo_train``,
``nemo_rl/algorithms/grpo.py`` L3630-3655).

Every field of a line is a one-element list (``make_microbatch_iterator(1)``): scalars ``[x]``, per-token
rows ``[[...]]`` over the full right-padded sequence (prompt + response + padding). A row's response is
the positions ``s .. L-1``, with ``s`` the first position where ``token_loss_mask`` is 1 and ``L`` =
``input_lengths``: ``response_mask`` = ``token_loss_mask[s:L]`` (0 on tool/env tokens inside), all 0 on a
row whose ``sample_loss_mask`` is 0 (NeMo hands its estimators ``token_mask · sample_mask``, ``grpo.py``
L3289-3292, ``ppo.py`` L266: a dropped row is out of reinforce_plus_plus's and raw_reward's statistics),
``old_log_probs`` = ``prev_logprobs[s:L]``, ``rollout_log_probs`` = ``generation_logprobs[s:L]`` and
``logged_advantages`` = ``advantages[s:L]`` (NeMo's own result, which ``--flavor nemo`` reproduces).

Group: NeMo groups rows whose initial prompt token ids are equal
(``calculate_baseline_and_std_per_prompt``); the dump has no id, so ``prompt_id`` is a hash of
``token_ids[:s]``, the tokens before the first generated one (exact for single-turn rows). Reward:
``filtered_rewards`` when present (dynamic sampling: ``rewards`` is then the unfiltered list and does not
line up with the rows), else ``rewards``. Step: the N of the file name.

Rollout identity (NeMo RL pull request #3882, open as of NVIDIA-NeMo/RL @ 7ea279ab, read from its diff at
fc1a3c19; backported to the ``super-v3.5-posttraining`` branch by #3959): GRPO groups the completions
sampled together for one prompt instance, the single controller's sample ids being ``{group_id}_g{index}``.
Where a row carries such an id (``sample_id``, or ``sample_ids`` as a one-element list), ``prompt_id`` is
its ``group_id`` instead of the prompt-token hash, so two prompt instances with equal tokens (same text,
different image or environment state) stay two groups; rows without one keep the hash.
"""
from __future__ import annotations

import re

from . import Context, Format, iter_json_lines, number, require
from ._common import F32, F32_LIST, I64, MASK, STR, text_key

LISTS = ("token_ids", "token_loss_mask", "advantages", "generation_logprobs", "prev_logprobs")
ID_KEYS = ("sample_id", "sample_ids")  # the single controller's {group_id}_g{index} rollout ids (#3882)
KNOWN = set(LISTS) | {"rewards", "filtered_rewards", "input_lengths", "sample_loss_mask", "idx", "content",
                      "agent_ref"} | set(ID_KEYS)
ROLLOUT_ID = re.compile(r"^(?P<group>.+)_g(?P<index>\d+)$")


def _rollout_group(ctx: Context, line: int, rec: dict) -> str | None:
    """The ``group_id`` of the row's ``{group_id}_g{index}`` rollout id, or None when the row has none."""
    key = next((k for k in ID_KEYS if k in rec), None)
    if key is None:
        return None
    v = rec[key]
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    m = ROLLOUT_ID.match(str(v)) if isinstance(v, (str, int)) and not isinstance(v, bool) else None
    if m is None:
        raise ctx.error(line, f"field {key!r} is {v!r}; expected a rollout id {{group_id}}_g{{index}} (NeMo RL "
                        "groups a prompt's completions by its group_id)",
                        hint="rename the field if it is not NeMo's rollout id, or fix the writer")
    if "rollout_ids" not in ctx.state:
        ctx.state["rollout_ids"] = True
        ctx.notes.append(f"rows grouped by rollout identity: the group_id of {key} ({{group_id}}_g{{index}}), "
                         "not the prompt tokens")
    return m.group("group")


def _one(ctx: Context, line: int, rec: dict, key: str):
    v = rec[key]
    if not isinstance(v, list) or len(v) != 1:
        raise ctx.error(line, f"field {key!r} is not a one-element list (NeMo RL writes every field as [value])",
                        hint="is this a NeMo RL train_data_step file? force another format with --from")
    return v[0]


def _tokens(ctx: Context, line: int, rec: dict, key: str, n: int, width: int | None = None) -> list:
    """Field ``key``'s token list: at least ``n`` (input_lengths) values, and ``width`` (token_ids' own count)
    where given: NeMo writes every token field of a record from one padded [B, T] batch (grpo.py L3641-3649
    @7ea279ab: ``train_data[...].tolist()``), so a list of another length lost or gained a value somewhere, and
    every position after it would be read against the wrong token."""
    v = _one(ctx, line, rec, key)
    if not isinstance(v, list) or len(v) < n:
        raise ctx.error(line, f"field {key!r} holds {len(v) if isinstance(v, list) else type(v).__name__} "
                        f"values; input_lengths is {n}")
    if width is not None and len(v) != width:
        raise ctx.error(line, f"field {key!r} holds {len(v)} values and 'token_ids' {width}: NeMo RL writes every "
                              "token field of a record at the same padded length, so one of them lost or gained "
                              "values and its positions no longer line up with the tokens",
                        hint="this record was changed after NeMo RL wrote it: take the line from the original dump")
    return v


def read(path: str, ctx: Context):
    step = ctx.step
    noted = False
    for line, rec in iter_json_lines(path, ctx):
        require(ctx, line, rec, ("token_ids", "token_loss_mask", "input_lengths"))
        if "filtered_rewards" not in rec and "rewards" not in rec:
            require(ctx, line, rec, ("rewards",))
        L = _one(ctx, line, rec, "input_lengths")
        if not isinstance(L, int) or L < 0:
            raise ctx.error(line, f"field 'input_lengths' is {L!r}; expected a non-negative integer")
        ids = _tokens(ctx, line, rec, "token_ids", L)
        mask = _tokens(ctx, line, rec, "token_loss_mask", L, len(ids))
        odd = next((i for i in range(L) if mask[i] not in (0, 1)), None)
        if odd is not None:  # NeMo multiplies by the mask: a 2 would weigh a token twice, not be read as 1
            raise ctx.error(line, f"field 'token_loss_mask' holds {mask[odd]!r} at position {odd}; a loss mask is "
                                  "0 or 1", hint="fix the dump's mask (advcli does not guess what another value "
                                                 "means)")
        s = next((i for i in range(L) if mask[i]), None)
        if s is None:  # no generated token: the previous row's prompt if it is a prefix (rows of a prompt
            prev = ctx.state.get("prev_prompt")  # are contiguous, repeat_interleave), else the whole row
            s = len(prev) if prev is not None and len(prev) <= L and ids[:len(prev)] == prev else L
            if "maskless" not in ctx.state:
                ctx.state["maskless"] = True
                ctx.notes.append(f"{path}:{line}: a row without token_loss_mask=1 (no generated token): grouped "
                                 "with the previous row's prompt when it starts with it, else on its own")
        ctx.state["prev_prompt"] = ids[:s]
        rkey = "filtered_rewards" if "filtered_rewards" in rec else "rewards"
        if rkey == "filtered_rewards" and not noted:
            ctx.notes.append("reward = filtered_rewards (dynamic sampling: the rewards field is the unfiltered list)")
            noted = True
        sample_mask = (number(ctx, line, _one(ctx, line, rec, "sample_loss_mask"), "sample_loss_mask")
                       if "sample_loss_mask" in rec else 1)
        if sample_mask not in (0, 1):
            raise ctx.error(line, f"field 'sample_loss_mask' is {sample_mask!r}; a loss mask is 0 or 1")
        kept = sample_mask != 0
        group = _rollout_group(ctx, line, rec)
        row = {"prompt_id": f"rollout:{group}" if group is not None else text_key(ids[:s]), "step": step,
               "reward": number(ctx, line, _one(ctx, line, rec, rkey), rkey),
               "response_mask": [1 if m and kept else 0 for m in mask[s:L]], "prompt_length": s, "input_lengths": L}
        if "prev_logprobs" in rec:
            row["old_log_probs"] = _tokens(ctx, line, rec, "prev_logprobs", L, len(ids))[s:L]
        if "generation_logprobs" in rec:
            row["rollout_log_probs"] = _tokens(ctx, line, rec, "generation_logprobs", L, len(ids))[s:L]
        if "advantages" in rec:
            row["logged_advantages"] = _tokens(ctx, line, rec, "advantages", L, len(ids))[s:L]
        if rkey == "filtered_rewards" and "rewards" in rec:
            row["rewards"] = number(ctx, line, _one(ctx, line, rec, "rewards"), "rewards", allow_none=True)
        if "sample_loss_mask" in rec:
            row["sample_loss_mask"] = number(ctx, line, _one(ctx, line, rec, "sample_loss_mask"), "sample_loss_mask")
        if group is not None:
            row["rollout_group_id"] = group
        if "idx" in rec:  # the writer adds it unwrapped: {**sample, "idx": i} (logger.py L1096)
            row["idx"] = rec["idx"][0] if isinstance(rec["idx"], list) and len(rec["idx"]) == 1 else rec["idx"]
        if "content" in rec:
            import json

            row["content"] = json.dumps(_one(ctx, line, rec, "content"), ensure_ascii=False, default=str)
        for k, v in rec.items():
            if k not in KNOWN and isinstance(v, list) and len(v) == 1 and not isinstance(v[0], (list, dict)):
                row[k] = v[0]
        yield line, row


def sniff(rec: dict) -> bool:
    return ("token_ids" in rec and "token_loss_mask" in rec and isinstance(rec.get("token_ids"), list)
            and len(rec["token_ids"]) == 1)


FORMAT = Format(
    name="nemo-jsonl", title="NeMo RL train_data_step{N}.jsonl",
    pattern=r"(^|/)train_data_step(?P<step>\d+)\.jsonl$",
    level="token",
    group_rule="the group_id of a {group_id}_g{index} sample_id where the rows carry one (NeMo's rollout "
               "identity); else rows whose prompt tokens (token_ids before the first token_loss_mask=1) are equal "
               "(NeMo's initial-prompt grouping), prompt_id = a hash of those tokens",
    columns={"prompt_id": STR, "step": I64, "reward": F32, "response_mask": MASK, "old_log_probs": F32_LIST,
             "rollout_log_probs": F32_LIST, "logged_advantages": F32_LIST, "prompt_length": I64,
             "input_lengths": I64, "rewards": F32, "sample_loss_mask": F32, "idx": I64, "content": STR,
             "rollout_group_id": STR},
    read=read, sniff=sniff, required=("token_ids", "token_loss_mask", "input_lengths", "rewards"),
    companions=(r"(^|/)val_data_step\d+\.jsonl$",), logged="logged_advantages",
    example="advcli run logs/exp_001 --output out.parquet --flavor nemo",
    field_names={"old_log_probs": "prev_logprobs", "rollout_log_probs": "generation_logprobs",
                 "logged_advantages": "advantages"},
)
