"""prime-rl's per-cohort estimators: a scalar per trace, broadcast to its sampled tokens.

prime-rl scores each rollout group ("cohort": the rows of one ``prompt_id``, per ``step``) on the
orchestrator, over its **trainable** traces only (``iter_trainable_traces``, base.py L35-42: no
error, ``agent.trainable``, at least one sampled token). Here a row takes part when its
``trainable`` column (optional, default true) is true and its mask has a 1; every other row is left
out of every statistic and gets 0.0. Matched against PrimeIntellect-ai/prime-rl @ 559b4477
(``src/prime_rl/orchestrator/algo/``, line numbers there):

- ``grpo_cohort``: ``A = r − mean_C(r)`` in float32, no std (grpo.py L25-45; echo scores the same),
  optionally with the pass-rate-scaled linear length penalty.
- ``max_rl_cohort``: ``A = (r − μ)/μ`` if ``μ > 0`` else 0 (max_rl.py L22-28), float32, no eps.
- ``grpo_peers``: ``A = r − mean`` over peers keyed ``(agent, episode)`` for the agents listed in
  ``episode_agents``, ``(agent)`` for the others (hierarchical_grpo.py L33-42), Python float64.
- ``ema_baseline``: ``A = r − b[agent]``, then ``b ← d·b + (1−d)·r``, trace by trace in scoring
  order over the whole input (rae.py L34-43), float64; a discounted scan per agent, no row loop.

The cohort reductions stack equal-size cohorts (:meth:`GroupIndex.mean_f32`), which gives the bits of
``torch.mean`` of each cohort's 1-D float32 tensor, so max_rl's zero-mean hazard comes out as
prime-rl's.
"""
from __future__ import annotations

import math
from contextvars import ContextVar

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch
from ..ops.batch import RowTable
from ..ops.groups import GroupIndex
from ..ops.ragged import Ragged
from . import EstimatorSpec, register

SOURCE = "prime-rl @ 559b4477 src/prime_rl/orchestrator/algo/"
TRAINABLE = "rows with trainable=false or no mask=1 token are left out of every statistic and get 0"


def active_rows(table: RowTable) -> torch.Tensor:
    """bool [R]: the traces prime-rl scores (``iter_trainable_traces``, base.py L35-42): ``trainable``
    (when the column exists; errored and untrainable-agent traces are false) and at least one mask=1 token."""
    act = table.valid_len > 0
    t = table.columns.get("trainable")
    if t is not None:
        act = act & (t != 0)
    return act


def _cohort_groups(table: RowTable) -> GroupIndex:
    if table.groups is None:
        raise AdvcliError("prime-rl scores each rollout group (cohort): give a prompt_id column (the group id, "
                          "episode.group.id)", hint="map it with --column prompt_id=NAME")
    return table.groups


def _first_row(codes: torch.Tensor) -> torch.Tensor:
    """int64 [R]: the first row (input order) holding each row's code."""
    n = codes.numel()
    rows = torch.arange(n)
    if not n:
        return rows
    first = torch.full((int(codes.max()) + 1,), n, dtype=torch.int64).scatter_reduce_(0, codes, rows, "amin")
    return first[codes]


def episode_order(table: RowTable, rows: torch.Tensor) -> torch.Tensor:
    """``rows`` reordered as prime-rl visits a cohort's traces (``iter_trainable_traces``): episodes in
    arrival order (first appearance of their ``episode_id`` in the cohort), then traces in row order.
    Without an episode_id column every row is its own episode: row order. Only the cohort-internal
    order changes (it decides the float32 summation order of the cohort mean)."""
    ep = table.columns.get("episode_id")
    if ep is None or table.groups is None or not rows.numel():
        return rows
    pair = table.groups.codes * (int(ep.max()) + 1) + ep  # (cohort, episode)
    _, pair = torch.unique(pair, return_inverse=True)
    key = _first_row(pair.reshape(-1))[rows]
    return rows[torch.argsort(key, stable=True)]


def _active_cohorts(table: RowTable) -> tuple[torch.Tensor, GroupIndex]:
    """(indices of the active rows, in prime-rl's order inside each cohort (:func:`episode_order`), and
    their cohorts renumbered 0..G'-1)."""
    idx = episode_order(table, torch.nonzero(active_rows(table), as_tuple=True)[0])
    codes = _cohort_groups(table).codes[idx]
    _, inv = torch.unique(codes, return_inverse=True)
    return idx, GroupIndex.from_codes(inv.reshape(-1))


def _scatter(table: RowTable, idx: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(table.score)
    out[idx] = values.to(out.dtype)
    return out


def _count(table: RowTable, role: str, idx: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    col = table.columns[role]  # present: the spec requires it (:func:`length_penalty_columns`)
    return col[idx].to(dtype)  # torch.tensor([...ints], dtype=float32): round to nearest


def _group_max(g: GroupIndex, x: torch.Tensor) -> torch.Tensor:
    return torch.full((g.num_groups,), -math.inf, dtype=x.dtype).scatter_reduce_(0, g.codes, x, "amax")


# ------------------------------------------------------------------------------------- grpo / echo
def grpo_cohort_row(table: RowTable, p: dict) -> torch.Tensor:
    """prime-rl ``GRPOAlgorithm.score_group`` (grpo.py L25-45), per cohort C of trainable traces::

        A = r − mean_C(r)                                       (no length penalty)
        frac = w_out·out/max(max_C out, 1) + w_in·in/max(max_C in, 1) + w_turn·turns/max(max_C turns, 1)
        s = r − mean_C(r)·frac;   A = s − mean_C(s)             (length_penalty = [w_out, w_in, w_turn])

    with ``in = num_total_tokens − num_output_tokens``, every step in the run's dtype (float32:
    prime-rl's ``torch.tensor(..., dtype=float32)``; a cohort of one gets exactly 0)."""
    idx, g = _active_cohorts(table)
    r = table.score[idx]
    mean = g.per_row(g.mean_f32(r))
    lp = p["length_penalty"]
    if lp is None:
        return _scatter(table, idx, r - mean)
    w_out, w_in, w_turn = (float(w) for w in lp)

    def rel(x: torch.Tensor) -> torch.Tensor:  # x / x.max().clamp(min=1) within the cohort
        return x / g.per_row(_group_max(g, x).clamp(min=1))

    def term(w: float, x) -> torch.Tensor:
        # a zero weight adds ±0.0, which changes no sum: its column is not needed
        return torch.zeros_like(r) if w == 0 else w * rel(x())

    out = lambda: _count(table, "num_output_tokens", idx, r.dtype)  # noqa: E731
    inp = lambda: _count(table, "num_total_tokens", idx, r.dtype) - out()  # noqa: E731
    turns = lambda: _count(table, "num_turns", idx, r.dtype)  # noqa: E731
    frac = term(w_out, out) + term(w_in, inp) + term(w_turn, turns)
    shaped = r - mean * frac
    return _scatter(table, idx, shaped - g.per_row(g.mean_f32(shaped)))


def check_length_penalty(p: dict) -> None:
    """estimator.length_penalty: null, or three finite weights >= 0 [output tokens, input tokens, turns]."""
    lp = p["length_penalty"]
    if lp is None:
        return
    if len(lp) != 3:
        raise AdvcliError(f"key estimator.length_penalty: expected [w_out, w_in, w_turn], got {lp!r}")
    for name, w in zip(("output", "input", "turns"), lp):
        if not (isinstance(w, (int, float)) and math.isfinite(float(w)) and float(w) >= 0):
            raise AdvcliError(f"key estimator.length_penalty: the {name} weight must be finite and >= 0 (got {w!r})")


# the columns each length-penalty term reads (input tokens = total − output tokens)
PENALTY_COLUMNS = (("num_output_tokens",), ("num_total_tokens", "num_output_tokens"), ("num_turns",))


def length_penalty_columns(p: dict) -> tuple[tuple[str, str], ...]:
    """The count columns the length penalty's non-zero terms read (prime-rl trace.<role>, from the provider
    usage and the sampled nodes, not from the mask); a zero weight needs none."""
    lp = p["length_penalty"]
    if lp is None:
        return ()
    why = ("the length penalty needs it (prime-rl trace.{role}); or set the weight of its term to 0, or turn "
           "orchestrator.algo.length_penalty off")
    roles = [r for w, rs in zip(lp, PENALTY_COLUMNS) if float(w) != 0 for r in rs]
    return tuple((r, why.format(role=r)) for r in dict.fromkeys(roles))


register(EstimatorSpec(
    name="grpo_cohort", level="row", uses_groups=True, row_constant=True, row_fn=grpo_cohort_row,
    check_params=check_length_penalty, needs_for=length_penalty_columns,
    zero_for_uniform_groups=True,
    optional=("trainable", "episode_id", "num_output_tokens", "num_total_tokens", "num_turns"),
    formula="A_i = r_i − mean_C(r) over the cohort's trainable rows (no std; a cohort of one: 0); with "
            "length_penalty [w_o, w_i, w_t]: s_i = r_i − mean_C(r)·Σ_k w_k·x_ik/max(max_C x_k, 1) (x = output "
            "tokens, total − output tokens, turns), A_i = s_i − mean_C(s); " + TRAINABLE,
    source=SOURCE + "grpo.py GRPOAlgorithm.score_group (L25-45)",
    params={"length_penalty": Key(None, "weights [output tokens, input tokens, turns] of the pass-rate-scaled "
                                  "linear length penalty (prime-rl default when on: [0.25, 0.1, 0.1]); null: off",
                                  None, "list")},
    float32_rule="A = r − mean(r) of the cohort's float32 tensor (grpo.py L27-30), no std and no division: the "
                 "float32 mean's rounding error (~6e-8·|mean|, and the length penalty's terms alike) is never "
                 "amplified, so it shows only where the rewards are large against their spread"))


# ----------------------------------------------------------------------------------------- max_rl
def max_rl_cohort_row(table: RowTable, p: dict) -> torch.Tensor:
    """prime-rl ``MaxRLAlgorithm.score_group`` (max_rl.py L22-28): ``μ = mean_C(r)`` (float32);
    ``A = (r − μ)/μ`` if ``μ > 0``, else 0 for the whole cohort. No eps: a cohort whose rewards sum to
    ~0 with mixed signs divides by a float32 residue (see the diagnostics)."""
    idx, g = _active_cohorts(table)
    r = table.score[idx]
    mean = g.per_row(g.mean_f32(r))
    a = torch.where(mean <= 0, torch.zeros_like(r), (r - mean) / mean)
    return _scatter(table, idx, a)


REL_MEAN = 1e-6  # flag cohorts with |μ| < ~1e-6·max|r|


def max_rl_hazard(table: RowTable, p: dict) -> torch.Tensor:
    """[G] bool over ``table.groups``: cohorts whose mean is a rounding residue, ``|μ| < 1e-6·max|r|``
    (float64 mean of the trainable rewards), where ``(r − μ)/μ`` divides by noise or the ``μ ≤ 0`` test
    flips on it; a cohort whose mean is exactly 0 in float32 and float64 alike is left out (0 either way)."""
    g = _cohort_groups(table)
    idx, sub = _active_cohorts(table)
    r = table.score[idx]
    parent = torch.zeros(sub.num_groups, dtype=torch.int64)
    parent[sub.codes] = g.codes[idx]
    mu64 = sub.sum(r.to(torch.float64)) / sub.sizes.clamp(min=1).to(torch.float64)
    mu32 = sub.mean_f32(r.to(torch.float32)).to(torch.float64)
    amax = torch.zeros(sub.num_groups, dtype=torch.float64).scatter_reduce_(
        0, sub.codes, r.to(torch.float64).abs(), "amax")
    risky = (amax > 0) & (mu64.abs() < REL_MEAN * amax) & ~((mu64 == 0) & (mu32 == 0))
    out = torch.zeros(g.num_groups, dtype=torch.bool)
    out[parent[risky]] = True
    return out


register(EstimatorSpec(
    name="max_rl_cohort", level="row", uses_groups=True, row_constant=True, row_fn=max_rl_cohort_row,
    zero_for_uniform_groups=True,
    optional=("trainable", "episode_id"),
    formula="A_i = (r_i − μ_C)/μ_C with μ_C = mean_C(r) over the cohort's trainable rows if μ_C > 0, else 0 "
            "(no eps; a cohort of one: 0); " + TRAINABLE,
    source=SOURCE + "max_rl.py MaxRLAlgorithm.score_group (L22-28)",
    float32_rule="(r − μ)/μ with the float32 cohort mean μ, no eps, and A = 0 when μ <= 0 (max_rl.py L25-26): a "
                 "cohort whose rewards sum to ~0 with mixed signs has a float32 mean of exactly 0 or a residue "
                 "of ~1e-8, so the μ <= 0 test and the division by that residue decide between 0 and "
                 "advantages of order 1e7-1e8",
    float32_hazard=max_rl_hazard))


# ------------------------------------------------------------------------------ hierarchical_grpo
def _agents(table: RowTable) -> tuple[torch.Tensor, list]:
    """(agent code per row, agent names by code); without the column every trace is verifiers'
    default agent ``"agent"``."""
    codes = table.columns.get("agent_name")
    if codes is None:
        return torch.zeros(table.num_rows, dtype=torch.int64), ["agent"]
    return codes, list(table.labels.get("agent_name", []))


def check_episode_agents(p: dict) -> None:
    """At least one agent role compared within one episode (prime-rl: Field(min_length=1))."""
    if not p["episode_agents"]:
        raise AdvcliError("key estimator.episode_agents: grpo_peers (prime-rl's hierarchical_grpo) needs at least one "
                          "role compared within one episode, e.g. [solver] (prime-rl: Field(min_length=1))")


def grpo_peers_row(table: RowTable, p: dict) -> torch.Tensor:
    """prime-rl ``HierarchicalGRPOAlgorithm.score_group`` (hierarchical_grpo.py L33-42): inside each
    cohort, peers are keyed ``(agent, episode)`` when the agent is in ``episode_agents``, else
    ``(agent)``; ``A = r − Σ_peers r / n`` in float64 (Python floats); a peer set of one gets 0."""
    names = p["episode_agents"]  # not empty: :func:`check_episode_agents`
    idx, g = _active_cohorts(table)
    agent, labels = _agents(table)
    scoped_codes = [k for k, n in enumerate(labels) if str(n) in {str(x) for x in names}]
    agent = agent[idx]
    scoped = torch.isin(agent, torch.tensor(scoped_codes, dtype=torch.int64))
    episode = torch.full_like(agent, -1)
    if bool(scoped.any()):
        ep = table.columns.get("episode_id")
        if ep is None:
            raise AdvcliError(f"hierarchical_grpo compares the agents {list(names)} within one episode: the input "
                              "needs an episode_id column (episode.id)", hint="map it with --column episode_id=NAME")
        episode = torch.where(scoped, ep[idx], episode)
    key = torch.stack([g.codes, agent, episode], dim=1)
    _, inv = torch.unique(key, dim=0, return_inverse=True)
    peers = GroupIndex.from_codes(inv.reshape(-1))
    r = table.score[idx].to(torch.float64)
    baseline = peers.sum(r) / peers.sizes.to(torch.float64)
    return _scatter(table, idx, r - peers.per_row(baseline))


register(EstimatorSpec(
    name="grpo_peers", level="row", uses_groups=True, row_constant=True, row_fn=grpo_peers_row,
    check_params=check_episode_agents,
    zero_for_uniform_groups=True,
    optional=("trainable", "agent_name", "episode_id"),
    formula="A_i = r_i − mean of r over i's peers in its cohort: same agent_name and, for the agents in "
            "episode_agents, same episode_id (float64; a peer set of one: 0); " + TRAINABLE,
    source=SOURCE + "hierarchical_grpo.py HierarchicalGRPOAlgorithm.score_group (L33-42)",
    params={"episode_agents": Key(None, "agent roles compared within one episode (e.g. [solver]); the other "
                                  "roles are compared across the cohort", None, "list")},
    float32_rule="peer means in Python floats (float64), no float32 step"))


# --------------------------------------------------------------------------------------------- rae
def scoring_order(table: RowTable) -> torch.Tensor:
    """Row indices in prime-rl's scoring order: steps ascending, cohorts in order of first appearance
    within a step, then :func:`episode_order` inside a cohort (for a dump in scoring order: the row order)."""
    n = table.num_rows
    order = torch.arange(n)
    if table.groups is not None and n:
        order = episode_order(table, order)  # episodes in arrival order inside each cohort
        order = order[torch.argsort(_first_row(table.groups.codes)[order], stable=True)]
    return order[torch.argsort(table.scopes.codes[order], stable=True)]


def check_decay(p: dict) -> None:
    """estimator.decay in [0, 1) (prime-rl RAEAlgoConfig: ge=0, lt=1)."""
    d = float(p["decay"])
    if not (0.0 <= d < 1.0):
        raise AdvcliError(f"key estimator.decay must be in [0, 1) (got {d:g}; prime-rl RAEAlgoConfig: ge=0, lt=1)")


# The baselines an EMA run starts from and ends with, for a caller that runs a training run step by step
# (``advcli audit/stats/run --follow``): set it to ``{"start": {agent: b}}`` before a run; each call of
# :func:`ema_baseline_row` then starts from those baselines and records ``{repr(decay): {agent: b}}`` under
# "end" (keyed by the decay: an audit's search may run other decays on the same rows). Unset (None): every
# baseline starts at 0, as a run over the whole dump starts.
EMA_CARRY: ContextVar[dict | None] = ContextVar("advcli_ema_carry", default=None)


def ema_baseline_row(table: RowTable, p: dict) -> torch.Tensor:
    """prime-rl ``RAEAlgorithm.score_group`` (rae.py L34-43) over the whole input, one instance (one env)
    started at the first row: for each trainable trace in scoring order (:func:`scoring_order`),
    ``A = r − b[agent]``, then ``b[agent] ← d·b + (1 − d)·r``, ``b`` starting at 0; untrainable traces
    neither get an advantage nor move ``b``. Float64 as prime-rl's Python floats.

    The recurrence is solved one step (scope) at a time, steps ascending, per agent as one scan, not a
    loop over rows: with the agent's trainable rewards r_0, r_1, ... of the step in scoring order and the
    baseline b it enters the step with, ``z_{−1} = b``, ``z_k = (1 − d)·r_k + d·z_{k−1}`` (a discounted
    cumulative sum, :func:`advcli.ops.scans.reverse_discounted_cumsum` on the reversed sequence, the
    entering baseline its first element) and ``b_k = z_{k−1}``; the agent leaves the step with its last
    ``z``. Cut by step, a run over the whole dump and a run of one step at a time given the baselines the
    earlier steps left (:data:`EMA_CARRY`) do the same float operations: the same bits."""
    d = float(p["decay"])  # in [0, 1): :func:`check_decay`
    carry = EMA_CARRY.get()
    order = scoring_order(table)
    order = order[active_rows(table)[order]]
    agent, names = _agents(table)
    base = {str(k): float(v) for k, v in ((carry or {}).get("start") or {}).items()}
    out = torch.zeros(table.num_rows, dtype=torch.float64)
    steps = table.scopes.codes[order] if table.scopes is not None else torch.zeros_like(order)
    cuts = torch.unique_consecutive(steps, return_counts=True)[1].tolist() if order.numel() else []
    start = 0
    for n in cuts:  # one pass per step (scope), steps ascending: the scoring order's
        rows = order[start:start + n]
        start += n
        ema_step(table.score[rows].to(torch.float64), agent[rows], names, d, base, out, rows)
    if carry is not None:
        carry.setdefault("end", {})[repr(d)] = dict(base)
    return out.to(table.score.dtype)


def ema_step(r: torch.Tensor, agent: torch.Tensor, names: list, d: float, base: dict, out: torch.Tensor,
             rows: torch.Tensor) -> None:
    """One step of :func:`ema_baseline_row`: the rewards ``r`` (float64, scoring order) of agents ``agent``
    (codes into ``names``) at ``rows``; writes ``r − b`` into ``out[rows]`` and leaves each agent's baseline
    after the step in ``base`` (by name; an agent not met yet enters with 0)."""
    from ..ops.scans import reverse_discounted_cumsum

    perm = torch.argsort(agent, stable=True)  # each agent's traces in scoring order
    codes, counts = torch.unique_consecutive(agent[perm], return_counts=True)
    label = [str(names[c]) if c < len(names) else "agent" for c in codes.tolist()]
    seeds = torch.tensor([base.get(x, 0.0) for x in label], dtype=torch.float64)
    # each agent's sequence [b, (1 − d)·r_0, (1 − d)·r_1, ...]: its entering baseline, then its traces
    lengths = counts + 1
    ends = torch.cumsum(lengths, 0)
    first = ends - lengths
    x = torch.empty(int(ends[-1]), dtype=torch.float64)
    x[first] = seeds
    trace = torch.ones_like(x, dtype=torch.bool)
    trace[first] = False
    x[trace] = (1.0 - d) * r[perm]
    z = reverse_discounted_cumsum(x.flip(0), Ragged.from_lengths(lengths.flip(0)), d).flip(0)
    before = torch.ones_like(trace)
    before[ends - 1] = False  # z of each position but the agent's last: the baseline its next trace sees
    out[rows[perm]] = r[perm] - z[before]
    for name, value in zip(label, z[ends - 1].tolist()):
        base[name] = value


register(EstimatorSpec(
    name="ema_baseline", level="row", uses_groups=False, row_constant=True, row_fn=ema_baseline_row,
    check_params=check_decay,
    optional=("trainable", "agent_name", "episode_id"),
    formula="A_i = r_i − b[agent_i], then b[agent_i] ← decay·b + (1 − decay)·r_i, trace by trace in scoring "
            "order (steps ascending, cohorts in order of first appearance, rows in order), b = 0 at the first "
            "row (float64); " + TRAINABLE,
    source=SOURCE + "rae.py RAEAlgorithm.score_group (L34-43)",
    params={"decay": Key(0.95, "EMA decay of each agent's baseline, in [0, 1)", None, "float")},
    float32_rule="EMA baselines in Python floats (float64), no float32 step"))
