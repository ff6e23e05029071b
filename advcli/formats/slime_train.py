"""``slime-train``: slime's train dumps, ``--save-debug-train-data TEMPLATE`` or ``--dump-details DIR``
(``DIR/train_data/{rollout_id}.pt``), written after the step's training with the advantages slime trained on
(THUDM/slime @ 624b824a, writer ``slime/observability/train_data_utils.py`` L105-239, since #2266).

A file is ``torch.save({"format_version": 2, "rollout_id", "rank", "samples": [...], "dp_shards": [...],
"raw_reward": [...]})``: tensors, lists and numbers, loaded with ``torch.load(weights_only=True)``. ``samples``
holds one dict per trained sample, every data-parallel shard gathered and sorted by ``rollout_position`` (the
sample's place in the rollout, as the rollout dump lists it); each holds that sample's slice of the training
columns. One canonical row per sample:

* ``step`` = ``rollout_id``; ``reward`` = ``raw_reward[rollout_position]`` (the whole batch's rewards before
  slime's group normalisation, ``_post_process_rewards`` in slime/ray/rollout.py L608-633, stored once at the
  top), or the rollout dump's ``reward`` where it sits beside it and differs (a reward function's
  ``metadata["raw_reward"]`` overwrites raw_reward, rollout.py L702-707, not the reward slime normalised); the
  normalised ``rewards`` are kept as ``normalized_reward``;
* ``response_mask`` = ``loss_masks``; ``old_log_probs`` = ``log_probs`` (the actor's recompute),
  ``ref_log_probs``, ``values``, ``rollout_log_probs``, ``teacher_log_probs``: per response token;
* ``logged_advantages`` / ``logged_returns`` = ``advantages`` / ``returns``: what slime trained on, which
  ``advcli audit`` checks;
* ``prompt_id``: slime groups by position (blocks of ``n_samples_per_prompt``), and the train dump holds no group
  key; where the rollout dump of the same rollout sits beside it (``DIR/rollout_data/{rollout_id}.pt``, as
  ``--dump-details`` writes both), each sample's ``group_index`` is taken from it at ``rollout_position``, so the
  group size is known and checked. Without it, give ``--set n_samples_per_prompt=N``.

slime before #2266 (v0.3.1 and older) wrote one file per rank (``train_data/{rollout_id}_{rank}.pt``) without the
samples' places in the rollout: refused (:mod:`advcli.formats.slime`).
"""
from __future__ import annotations

import numbers
import os
import re

from . import Context, Format, number, number_list, tally_note
from ._common import F32, F32_LIST, I64, MASK
from .slime import Damaged, check_loss_mask, first, load

# --dump-details DIR/train_data/{rollout_id}.pt; --save-debug-train-data TEMPLATE with a {rank} placeholder
# (train_data/{rollout_id}_{rank}.pt, the name slime's per-rank dumps had before #2266) or as slime's debugging
# guide names it (train_{rollout_id}.pt): .pt names a rollout dump may also have, told apart by content
PATTERN = r"(^|/)train(?:_data/|_)(?P<step>\d+)(?:_\d+)?\.pt$|(^|/)train[^/]*\.pt$"
VERSION = 2
# the per-token fields read (slime's name -> the canonical column), then the logged ones
TOKEN_FIELDS = {"log_probs": "old_log_probs", "ref_log_probs": "ref_log_probs", "values": "values",
                "rollout_log_probs": "rollout_log_probs", "teacher_log_probs": "teacher_log_probs",
                "advantages": "logged_advantages", "returns": "logged_returns", "kl": "logged_kl",
                "entropy": "entropy"}
SCALAR_FIELDS = {"sample_index": "sample_index", "rollout_position": "rollout_position",
                 "data_parallel_rank": "data_parallel_rank", "response_lengths": "response_length",
                 "total_lengths": "total_length", "truncated": "truncated", "rollout_ids": "sample_rollout_id",
                 "rollout_mask_sums": "rollout_mask_sum", "round_number": "round_number"}
GIVE_SIZE = "move it out and give the group size: --set n_samples_per_prompt=N"
JOIN_HINT = ("keep the rollout dump of the same rollout beside it (--dump-details DIR writes DIR/rollout_data/"
             "{rollout_id}.pt), or give the group size: --set n_samples_per_prompt=N")


def _scalar(v):
    """A per-sample number (a 0-d tensor, a one-element list) as a Python number."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, (list, tuple)) and len(v) == 1:
        v = v[0]
    return v


def rollout_dump_of(path: str, rollout_id=None) -> str:
    """The rollout dump of the same rollout as the train dump ``path``: ``../rollout_data/{rollout_id}.pt``, as
    ``--dump-details`` writes both; for a train dump outside a ``train_data/`` folder, ``data_{rollout_id}.pt`` or
    ``rollout_{rollout_id}.pt`` beside it where there (the templates of slime's debugging and fault-tolerance
    guides). The rollout id from the file's name (its first number) where not given."""
    if rollout_id is None:
        nums = re.findall(r"\d+", os.path.basename(path))
        rollout_id = nums[0] if nums else ""
    folder = os.path.dirname(os.path.abspath(path))
    details = os.path.join(os.path.dirname(folder), "rollout_data", f"{rollout_id}.pt")
    if os.path.basename(folder) != "train_data":
        for name in (f"data_{rollout_id}.pt", f"rollout_{rollout_id}.pt"):
            if os.path.isfile(os.path.join(folder, name)):
                return os.path.join(folder, name)
    return details


def _beside(path: str, rollout_id, ctx: Context) -> tuple[list, list, list] | None:
    """The ``group_index``, ``reward`` and ``index`` of each sample of the rollout dump beside the train dump
    (:func:`rollout_dump_of`), in its order (a reward that is no plain number, a dict of rewards, is None; an index
    not given, None), or None where there is none. A dump of another rollout (its ``rollout_id``) is refused: a
    rerun into the same folder that stopped between the two dumps leaves one."""
    other = rollout_dump_of(path, rollout_id)
    if not os.path.isfile(other) or os.path.getsize(other) == 0:
        return None
    obj = load(other)
    samples = obj.get("samples") if isinstance(obj, dict) else None
    if not isinstance(samples, list):
        why = obj if isinstance(obj, Exception) else "it holds no samples list"
        raise ctx.error(None, f"the rollout dump beside it, {other}, cannot give the samples' groups: {why}",
                        hint=GIVE_SIZE)
    theirs = obj.get("rollout_id")
    if isinstance(theirs, numbers.Integral) and not isinstance(theirs, bool) and isinstance(rollout_id, int) \
            and int(theirs) != rollout_id:
        raise ctx.error(None, f"the rollout dump beside it, {other}, is of rollout {theirs}, this train dump of "
                        f"rollout {rollout_id}: its groups and rewards are another rollout's",
                        hint=f"put rollout {rollout_id}'s rollout dump there (a rerun into the same folder that "
                             f"stopped between the two dumps leaves a stale one), or {GIVE_SIZE}")
    groups, rewards, indices = [], [], []
    for s in samples:
        gi = s.get("group_index") if isinstance(s, dict) else None
        if not isinstance(gi, numbers.Integral) or isinstance(gi, bool):
            raise ctx.error(None, f"the rollout dump beside it, {other}, has a sample whose group_index is {gi!r}",
                            hint=GIVE_SIZE)
        groups.append(int(gi))
        r = s.get("reward")
        rewards.append(float(r) if isinstance(r, numbers.Real) else None)
        i = s.get("index")
        indices.append(int(i) if isinstance(i, numbers.Integral) and not isinstance(i, bool) else None)
    return groups, rewards, indices


def read(path: str, ctx: Context):
    obj = load(path)
    if isinstance(obj, Exception):  # (refused before: refuse below)
        raise ctx.error(None, str(obj))
    version = obj.get("format_version")
    if version != VERSION:
        raise ctx.error(None, f"format_version {version!r}; advcli reads slime's train dump format_version {VERSION}",
                        hint="read the rollout dump of the same rollout (rollout_data/{rollout_id}.pt) instead")
    samples = obj.get("samples")
    if not isinstance(samples, list):
        raise ctx.error(None, "no 'samples' list (slime's train dumps are {'format_version', 'samples', ...})")
    step = obj.get("rollout_id", ctx.step)
    if not isinstance(step, int) or isinstance(step, bool):
        step = ctx.step
    raw = obj.get("raw_reward")
    raw = raw.tolist() if hasattr(raw, "tolist") else raw
    if not isinstance(raw, list):
        raise ctx.error(None, "no 'raw_reward' list: the whole rollout's rewards before slime's normalisation, which "
                        "its train dumps hold at the top", hint="re-dump the rollout with a slime that writes "
                        "format_version 2 (after #2266), or read its rollout dump instead")
    beside = _beside(path, step, ctx) if samples else None
    joined = beside is not None
    groups, rewards, indices = beside if joined else ((), (), ())
    if samples and ctx.state.setdefault("joined", joined) != joined:
        raise ctx.error(None, "the rollout dump of this rollout is " + ("beside it" if joined else "missing") +
                        " where another step's was " + ("missing" if joined else "beside it") +
                        ": the groups of some steps would come from it, the others' from position",
                        hint="keep every step's rollout dump beside its train dump, or read the train dumps alone "
                             "from a folder of their own with --set n_samples_per_prompt=N")
    if joined and "join_note" not in ctx.state:
        ctx.state["join_note"] = True
        ctx.notes.append("groups (prompt_id) from the rollout dumps beside the train dumps: each sample's "
                         "group_index at its rollout_position")
    if samples and len(samples) < len(raw):  # rollout.py L608-631 normalises over raw_reward, every sample
        tally_note(ctx, "untrained", f"rollout {step}", lambda c, at: (
            f"{c} sample(s) of the rollouts (first: {at}) are in raw_reward but not in the train dump: slime's "
            "data-parallel schedule left them out of training (global_batch_size not dividing the rollout, "
            "dp_schedule.py), after normalising the rewards over every sample; advcli reads the samples trained, so "
            "a group that lost some is normalised over those kept (and rollout_batch_size counts them), where "
            "slime's normalisation counted all"), add=len(raw) - len(samples))
    for i, s in enumerate(samples):
        where = f"sample {i}"
        if not isinstance(s, dict):
            raise ctx.error(None, f"{where} is {type(s).__name__}; expected a dict", hint="re-dump that rollout")
        pos = _scalar(s.get("rollout_position"))
        if pos is None:
            raise ctx.error(None, f"{where}: no rollout_position (the sample's place in the rollout, which slime "
                            "writes whenever it dumps): its raw_reward and group cannot be found",
                            hint="re-dump the rollout with slime after #2266, or read its rollout dump instead")
        if not isinstance(pos, numbers.Integral) or isinstance(pos, bool) or not 0 <= pos < len(raw):
            raise ctx.error(None, f"{where}: rollout_position {pos!r} is not a place in raw_reward (of {len(raw)} "
                            "rewards)", hint="re-dump that rollout")
        mask = s.get("loss_masks")
        if mask is None:
            raise ctx.error(None, f"{where}: no field 'loss_masks' (a slime train sample's loss mask)")
        mask = number_list(ctx, None, mask, "loss_masks", "one 0 or 1 per response token", where=f"{where}: ")
        n = len(mask)
        check_loss_mask(ctx, where, "loss_masks", mask)
        given = _scalar(raw[pos])
        known = joined and pos < len(rewards) and rewards[pos] is not None  # the rollout dump's reward, read below
        if isinstance(given, dict) and not known:  # rollout.py L704-707: a sample's whole reward beside others'
            # metadata raw_reward
            tally_note(ctx, "dict", where, lambda c, at: (
                f"{c} sample(s) (first: {at}) have a dict raw_reward: slime writes a sample's whole reward there "
                "where a reward function gave other samples a metadata raw_reward, and normalised the one its "
                "--reward-key picks, which the dump does not record; their reward is read as missing. Each "
                "sample's rewards field is the reward slime trained on: --column reward=normalized_reward (with "
                "--set rewards_normalization=false for the group estimators)"))
            given = None
        reward = None if isinstance(given, dict) else number(ctx, None, given, f"raw_reward[{pos}]", allow_none=True)
        row = {"step": step, "reward": reward, "raw_reward": reward, "response_mask": [1 if x else 0 for x in mask]}
        if joined:
            if pos >= len(groups):
                raise ctx.error(None, f"{where}: rollout_position {pos} is past the {len(groups)} samples of the "
                                "rollout dump beside it", hint=f"that dump is of another run: {JOIN_HINT}")
            mine = _scalar(s.get("sample_index"))
            if isinstance(mine, numbers.Integral) and indices[pos] is not None and int(mine) != indices[pos]:
                raise ctx.error(None, f"{where}: sample_index {mine}, where the rollout dump beside it holds sample "
                                f"{indices[pos]} at rollout_position {pos}: that dump is of another rollout or run",
                                hint=f"put this rollout's rollout dump there, or {GIVE_SIZE}")
            row["prompt_id"] = str(groups[pos])
            # the reward slime normalised is the rollout dump's (Sample.get_reward_value); raw_reward is overwritten
            # by a reward function's metadata["raw_reward"] where it gives one (rollout.py L702-707)
            if rewards[pos] is not None and rewards[pos] != row["reward"]:
                row["reward"] = rewards[pos]
                tally_note(ctx, "raw", where, lambda c, at: f"{c} sample(s) (first: {at}) have a raw_reward other "
                           "than the rollout dump's reward (a reward function's metadata raw_reward): the rollout "
                           "dump's reward, the one slime normalised, is read; raw_reward is kept as a column")
        if s.get("rewards") is not None:
            row["normalized_reward"] = number(ctx, None, _scalar(s["rewards"]), f"{where}: rewards")
        for field, column in TOKEN_FIELDS.items():
            if s.get(field) is None:
                continue
            vals = number_list(ctx, None, s[field], field, f"{n} values, one per response token", where=f"{where}: ",
                               hint="re-dump that rollout")
            if len(vals) != n:
                raise ctx.error(None, f"{where}: {field} has {len(vals)} values but loss_masks has {n}",
                                hint="re-dump that rollout")
            row[column] = [float(x) for x in vals]
        for field, column in SCALAR_FIELDS.items():
            v = _scalar(s.get(field))
            if isinstance(v, numbers.Real):
                row[column] = int(v) if isinstance(v, numbers.Integral) else float(v)
        toks = s.get("tokens")
        if toks is not None:
            row["tokens"] = [int(t) for t in (toks.tolist() if hasattr(toks, "tolist") else toks)]
        yield i + 1, row


def sniff(rec: dict) -> bool:
    return "format_version" in rec and "samples" in rec


def refuse(path: str) -> str | None:
    obj = load(path) if path.endswith(".pt") else None
    if isinstance(obj, Damaged):
        return f"{obj}; take it again from the run, or dump that rollout again"
    if isinstance(obj, Exception):
        return f"{obj}; advcli never unpickles arbitrary classes"
    return None


FORMAT = Format(
    name="slime-train", title="slime train dump (.pt)", flavor="slime",
    pattern=PATTERN, level="token",
    group_key="rollout dump's group_index",
    group_rule="slime's blocks of n_samples_per_prompt; the group_index of the rollout dump beside it, when there",
    columns={"step": I64, "reward": F32, "raw_reward": F32, "response_mask": MASK, "normalized_reward": F32,
             "old_log_probs": F32_LIST, "ref_log_probs": F32_LIST, "values": F32_LIST, "rollout_log_probs": F32_LIST,
             "teacher_log_probs": F32_LIST, "logged_advantages": F32_LIST, "logged_returns": F32_LIST,
             "tokens": "list<int64>", "sample_index": I64, "rollout_position": I64, "response_length": I64},
    read=read, sniff=sniff, first_record=first, refuse=refuse, required=("format_version", "samples"),
    logged="logged_advantages", key=lambda p: FORMAT.step_of(p) if FORMAT.step_of(p) is not None else p,
    beside=lambda p: [q for q in (rollout_dump_of(p),) if os.path.isfile(q)],
    example="advcli audit dump_details/train_data --flavor slime",
)
