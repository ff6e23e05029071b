"""``primerl-traces``: prime-rl's ``rollouts/step_N/train/{all,effective}/traces.jsonl``
(PrimeIntellect-ai/prime-rl @ 559b4477, ``src/prime_rl/monitors/file.py`` L43-59; record format
verifiers @ a60a606e, ``verifiers/v1/episode.py`` ``Episode.to_record`` L149-155 and
``verifiers/v1/trace.py`` / ``graph.py``).

Each line is one **episode** (orjson of ``model_dump(mode="json", exclude_none=True)``) holding its
traces. One canonical row per trace:

* ``prompt_id`` = ``episode.group.id`` (the cohort uuid); ``step`` = the step of the file where the
  cohort **first** appears (a cohort can straddle two step files);
* ``reward`` = Σ over ``trace.rewards`` of ``score × weight`` (``Trace.reward``, None entries skipped), plus
  Σ ``trace.reward_shaping`` where the trace has that field: prime-rl's reward-shaping layer (prime-rl pull
  request #3376 with verifiers #2436, both open as of the commits above; read from their diffs) records each
  shaper's additive term there, and ``grpo``, ``max_rl``, ``echo``, ``rae`` and ``hierarchical_grpo`` score
  ``training_reward = trace.reward + sum(trace.reward_shaping.values())``. The unshaped reward is then kept
  as ``env_reward`` and each term as ``reward_shaping/<name>``;
* tokens: the trace's branch (root-to-leaf path over ``nodes[].parent``), concatenated ``token_ids``; the
  response starts at the first sampled token (``mask`` true): ``response_mask`` = the mask from there,
  interior zeros being observations and scaffold; ``rollout_log_probs`` = the compact ``logprobs`` spread
  onto the sampled positions, 0 elsewhere (``Branch.spread``). A trace with several branches (a fork, a
  regenerated answer) is trained by prime-rl as one sample per branch, all with the trace's advantage
  (prime-rl @ 559b4477 ``src/prime_rl/orchestrator/trajectories.py`` ``iter_trainable_branches`` /
  ``trace_to_samples``): the row holds those branches one after the other, in leaf order, a sampled node
  that several branches share trained in the first and context (mask 0) in the others, a branch left with
  nothing to train skipped (:func:`trained_nodes`), so the row's mask=1 tokens are the tokens the trainer
  trains;
* ``trainable`` = ``trace.ok`` and ``agent.trainable``; ``agent_name``, ``episode_id``;
* ``num_output_tokens`` = Σ over branches of their calls' ``usage.completion_tokens``, ``num_total_tokens``
  = Σ over branches of the last call's ``prompt + cached + completion`` tokens, ``num_turns`` = sampled
  nodes (``Trace.num_output_tokens`` / ``num_total_tokens`` / ``num_turns``: usage counts, not the mask).

Recompute from ``all`` (every completed episode, complete cohorts). ``effective`` (the traces shipped
to the trainer, zero-advantage ones filtered out) is read only for the logged advantages: its
``info.advantage`` per trace id becomes ``logged_advantage`` (null for traces not shipped). Read alone,
``effective`` files give rows with a note that cohorts are incomplete there.
"""
from __future__ import annotations

import re

from . import Context, Format, iter_json_lines, number, number_list, require, reward_note, tally_note
from ._common import BOOL, F32, F32_LIST, I64, MASK, STR

PATTERN = r"(^|/)rollouts/step_(?P<step>\d+)/train/(?P<subset>all|effective)/traces\.jsonl$"


def _subset(path: str) -> str:
    m = re.search(PATTERN, path.replace("\\", "/"))
    return m.group("subset") if m else "all"


def _logged(ctx: Context) -> dict:
    """trace id -> info.advantage over every effective file of the dump (one float per shipped trace)."""
    if "logged" in ctx.state:
        return ctx.state["logged"]
    out: dict = {}
    for p in ctx.files:
        if _subset(p) != "effective":
            continue
        sub = Context(fmt=ctx.fmt, path=p)
        for line, ep in iter_json_lines(p, sub):
            for tr in ep.get("traces") or []:
                adv = (tr.get("info") or {}).get("advantage")
                if tr.get("id") is not None and adv is not None:
                    out[tr["id"]] = number(sub, line, adv, "info.advantage")
    ctx.state["logged"] = out
    return out


def _branches(nodes: list, ctx: Context | None = None, line: int = 0, trace=None) -> list[list[int]]:
    """Every root-to-leaf path, leaves in node order (verifiers graph.leaves / Trace.branches). A parent
    that is not a node's index, or parent links that form a cycle, are refused (a loop would never end)."""
    def bad(msg: str):
        err = f"trace {trace}: {msg}; the trace's nodes must form a tree (parent: the index of an earlier node)"
        return ctx.error(line, err) if ctx is not None else ValueError(err)

    for i, n in enumerate(nodes):
        p = n.get("parent") if isinstance(n, dict) else None
        if not isinstance(n, dict):
            raise bad(f"node {i} is {type(n).__name__}, not an object")
        if p is not None and (not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < len(nodes)):
            raise bad(f"node {i} has parent {p!r}, not the index of one of its {len(nodes)} nodes")
    has_child = {n.get("parent") for n in nodes if n.get("parent") is not None}
    out = []
    for leaf in (i for i in range(len(nodes)) if i not in has_child):
        path, nid = [], leaf
        while nid is not None:
            if len(path) > len(nodes):
                raise bad(f"the parent links from node {leaf} form a cycle")
            path.append(nid)
            nid = nodes[nid].get("parent")
        out.append(path[::-1])
    if nodes and not out:  # every node has a child: there is no leaf, only cycles
        raise bad("the parent links form a cycle (no node is a leaf)")
    return out


def trained_nodes(nodes: list, branches: list[list[int]]) -> list[tuple[int, bool]]:
    """The row's nodes in order, each with whether its sampled tokens are trained there: every branch that
    trains a token, in leaf order, a sampled node shared by several branches trained only in the first that
    holds it (prime-rl @ 559b4477 ``orchestrator/trajectories.py`` ``iter_trainable_branches``); a trace with no
    such branch gives its last branch, as it is (all context)."""
    done: set[int] = set()
    out: list[tuple[int, bool]] = []
    for path in branches:
        seg, trains = [], False
        for i in path:
            mask = nodes[i].get("mask") or []
            sampled = bool(nodes[i].get("sampled", True)) and any(mask)
            keep = not (sampled and i in done)
            if sampled and keep:
                done.add(i)
            seg.append((i, keep))
            trains = trains or (keep and any(mask))
        if trains:
            out += seg
    return out or [(i, True) for i in (branches[-1] if branches else [])]


def _counts(tr: dict, branches: list[list[int]]) -> tuple[int, int]:
    """Trace.num_output_tokens (Σ over branches of their calls' completion tokens) and num_total_tokens (Σ over
    branches of the last call's prompt + cached + completion tokens), verifiers trace.py."""
    by_node = {c.get("node"): c for c in tr.get("calls") or [] if c.get("node") is not None}
    out = total = 0
    for path in branches:
        usage = [by_node[i].get("usage") for i in path if i in by_node and by_node[i].get("usage")]
        out += sum(int(u.get("completion_tokens") or 0) for u in usage)
        if usage:
            u = usage[-1]
            total += int(u.get("prompt_tokens") or 0) + int(u.get("cached_input_tokens") or 0) + \
                int(u.get("completion_tokens") or 0)
    return out, total


def _check_token_fields(ctx: Context, line: int, tr: dict, i: int, n: dict) -> None:
    """A node's ``token_ids``, ``mask`` and ``logprobs``: each absent, null or a list, and every log-prob a number
    (a null or a string there raised TypeError, or was read as a number)."""
    for field in ("token_ids", "mask", "logprobs"):
        v = n.get(field)
        if v is not None and not isinstance(v, list):
            raise ctx.error(line, f"trace {tr.get('id')}: node {i}: field {field!r} is {v!r}; expected a list "
                            + ("(one log-prob per sampled token)" if field == "logprobs" else "(one value per token)"),
                            hint="the record is corrupt or was not written by prime-rl: repair or remove that line")
    number_list(ctx, line, n.get("logprobs") or [], "logprobs", "the log-prob of each sampled token",
                where=f"trace {tr.get('id')}: node {i}: ",
                hint="every sampled token has a number as its log-prob: repair or remove that line")


def _row(ctx: Context, line: int, ep: dict, tr: dict, step: int, logged: dict,
         branches: list[list[int]] | None = None, row_nodes: list[tuple[int, bool]] | None = None) -> dict:
    """The trace's row; ``branches`` (:func:`_branches`) and ``row_nodes`` (:func:`trained_nodes`) where the caller
    has them already (the trace stream, which folds its annotations along the branches and spreads them too)."""
    nodes = tr.get("nodes") or []
    branches = _branches(nodes, ctx, line, tr.get("id")) if branches is None else branches
    for i, n in enumerate(nodes):
        _check_token_fields(ctx, line, tr, i, n)
        if len(n.get("mask") or []) != len(n.get("token_ids") or []):
            raise ctx.error(line, f"trace {tr.get('id')}: node {i} has {len(n.get('token_ids') or [])} token_ids but "
                            f"{len(n.get('mask') or [])} mask values")
    if len(branches) > 1 and "branches" not in ctx.state:
        ctx.state["branches"] = True
        ctx.notes.append("traces with several branches: the row holds each branch prime-rl trains, one after the "
                         "other (it trains one sample per branch, each with the trace's advantage); a turn that "
                         "branches share is trained in the first and is context (mask 0) in the others")
    ids, mask, lps = [], [], []
    for i, keep in trained_nodes(nodes, branches) if row_nodes is None else row_nodes:
        n = nodes[i]
        t, lp = n.get("token_ids") or [], n.get("logprobs") or []
        if not keep:  # trained in an earlier branch: context here
            ids += t
            mask += [False] * len(t)
            lps += [0.0] * len(t)
            continue
        m = [bool(x) for x in (n.get("mask") or [])]
        k = 0
        for s in m:
            if s:
                lps.append(float(lp[k]) if k < len(lp) else 0.0)
                k += 1
            else:
                lps.append(0.0)
        if k > len(lp):  # sampled tokens without a log-prob: 0 there, said in the summary (issue 46)
            tally_note(ctx, "no_logprob", f"trace {tr.get('id')}, node {i}", lambda n, at: (
                f"{n} sampled token(s) have no log-prob in the dump (first: {at}): rollout_log_probs is 0 there, "
                "so estimators and corrections that read the rollout log-probs are wrong on those rows"),
                add=k - len(lp))
        ids += t
        mask += m
    start = next((i for i, s in enumerate(mask) if s), 0)  # no sampled token: the whole branch, all masked
    n_out, n_total = _counts(tr, branches)
    rewards = tr.get("rewards") or {}
    reward = 0.0
    if not any(r is not None and r.get("score") is not None for r in rewards.values()):
        tally_note(ctx, "unscored", f"trace {tr.get('id')}, line {line}", lambda n, at: (  # Trace.reward: 0
            f"{n} trace(s) have no reward score (first: {at}): reward 0, as Trace.reward sums the scores it has"))
    for name, r in rewards.items():
        if r is None or r.get("score") is None:
            continue
        reward += number(ctx, line, r["score"], f"rewards.{name}.score") * \
            number(ctx, line, r.get("weight", 1.0), f"rewards.{name}.weight")
    shaped = {}
    shaping = tr.get("reward_shaping")
    if shaping:  # prime-rl #3376 / verifiers #2436: training_reward = reward + Σ reward_shaping
        if not isinstance(shaping, dict):
            raise ctx.error(line, f"trace {tr.get('id')}: field 'reward_shaping' is {shaping!r}; expected an object "
                            "of shaper name -> additive term")
        shaped = {"env_reward": reward}
        for name, term in shaping.items():
            shaped[f"reward_shaping/{name}"] = number(ctx, line, term, f"reward_shaping.{name}")
            reward += shaped[f"reward_shaping/{name}"]
        reward_note(ctx, "reward = the shaped training reward, Trace.reward + Σ reward_shaping (prime-rl's reward "
                    f"shaping: {', '.join(shaping)}); the unshaped reward is env_reward")
    agent = tr.get("agent") or {}
    return {**shaped, "prompt_id": str((ep.get("group") or {}).get("id")), "step": step, "reward": reward,
            "response_mask": [1 if s else 0 for s in mask[start:]], "rollout_log_probs": lps[start:],
            "trainable": bool(tr.get("ok", True)) and bool(agent.get("trainable", True)),
            "num_output_tokens": n_out, "num_total_tokens": n_total,
            "num_turns": sum(1 for n in nodes if n.get("sampled")),
            "agent_name": agent.get("name", "agent"), "episode_id": ep.get("id"), "trace_id": tr.get("id"),
            "prompt_length": start, "env": (ep.get("env") or {}).get("name"),
            "logged_advantage": logged.get(tr.get("id")), "stop_condition": tr.get("stop_condition")}


def read(path: str, ctx: Context):
    subsets = {_subset(p) for p in ctx.files}
    if _subset(path) == "effective" and "all" in subsets:
        return  # effective files only give the logged advantages (read in _logged)
    if _subset(path) == "effective" and "effective_only" not in ctx.state:
        ctx.state["effective_only"] = True
        ctx.notes.append("reading effective/ files only: they hold the shipped traces, without the "
                         "zero-advantage ones, so cohorts are incomplete; recompute from all/")
    logged = _logged(ctx)
    first_step = ctx.state.setdefault("group_step", {})
    for line, ep in iter_json_lines(path, ctx):
        require(ctx, line, ep, ("group", "traces"))
        gid = (ep.get("group") or {}).get("id")
        if gid is None:
            raise ctx.error(line, "episode without group.id (the cohort key)")
        step = first_step.setdefault(gid, ctx.step)
        for tr in ep["traces"] or []:
            yield line, _row(ctx, line, ep, tr, step, logged)


def sniff(rec: dict) -> bool:
    """A first record of prime-rl's traces (this file's and the trace stream's): an episode with its group."""
    return "traces" in rec and "group" in rec


# the canonical columns of a trace's row (:func:`_row`), here and in the trace stream (:mod:`.primerl_stream`)
TRACE_COLUMNS = {"prompt_id": STR, "step": I64, "reward": F32, "response_mask": MASK, "rollout_log_probs": F32_LIST,
                 "trainable": BOOL, "num_output_tokens": I64, "num_total_tokens": I64, "num_turns": I64,
                 "agent_name": STR, "episode_id": STR, "trace_id": STR, "prompt_length": I64, "env": STR,
                 "logged_advantage": F32, "stop_condition": STR, "env_reward": F32}


FORMAT = Format(
    name="primerl-traces", title="prime-rl rollouts/step_N/train/{all,effective}/traces.jsonl",
    pattern=PATTERN, level="token",
    group_rule="episode.group.id (the cohort uuid), at the step of the file where the cohort first appears",
    columns=TRACE_COLUMNS,
    read=read, sniff=sniff, required=("group", "traces"),
    companions=(r"(^|/)rollouts/step_\d+/eval/",),
    key=lambda p: (FORMAT.step_of(p), _subset(p)), logged="logged_advantage", flavor="prime-rl",
    example="advcli run outputs/rollouts --output out.parquet --flavor prime-rl",
)
