"""``--flavor prime-rl``: prime-rl's orchestrator-side credit assignment (PrimeIntellect-ai/prime-rl @
559b4477; ``[orchestrator.algo]`` of the ``rl`` TOML, ``prime_rl.configs.algorithm.AlgoConfig``).

Each rollout group (cohort: the rows of one ``prompt_id``, per ``step``) is scored over its trainable
traces (``trainable`` column, and at least one sampled token) by ``orchestrator.algo.type``; the scalar
lands on every sampled (mask=1) token, 0.0 elsewhere. No KL in the reward, no std, no whitening, no
clipping. ``opd``, ``opsd`` and ``sft`` assign no advantage and are refused.
"""
from __future__ import annotations

import math

from ..config import Key, default_config
from ..errors import AdvcliError
from . import Flavor
from ._releases import Release

P = "orchestrator.algo."
TYPES = ("grpo", "echo", "max_rl", "rae", "hierarchical_grpo", "opd", "opsd", "sft")
LP_DEFAULTS = (0.25, 0.1, 0.1)  # LinearLengthPenaltyConfig (algorithm.py L95-107)
LP_WEIGHTS = ("num_output_tokens_weight", "num_input_tokens_weight", "num_turns_weight")
DECAY_DEFAULT = 0.95  # RAEAlgoConfig.decay (algorithm.py L242-260)

KEYS = {
    P + "type": Key("grpo", "algorithm: grpo (r − cohort mean), echo (same advantages), max_rl ((r−μ)/μ, 0 if μ ≤ 0), "
                    "hierarchical_grpo (r − mean over (agent, episode) or (agent) peers), rae (r − per-agent EMA "
                    "baseline over the whole ordered input); opd, opsd and sft assign no advantage", TYPES, "str"),
    P + "length_penalty.type": Key(None, "`linear` turns on the pass-rate-scaled length penalty (grpo and echo "
                                   "only); unset: off unless a weight below is set", ("linear",), "str"),
    P + "length_penalty.num_output_tokens_weight": Key(None, "weight of num_output_tokens / cohort max (0.25 when "
                                                       "the penalty is on); setting it turns the penalty on",
                                                       None, "float"),
    P + "length_penalty.num_input_tokens_weight": Key(None, "weight of (num_total_tokens − num_output_tokens) / "
                                                      "cohort max (0.1 when the penalty is on)", None, "float"),
    P + "length_penalty.num_turns_weight": Key(None, "weight of num_turns / cohort max (0.1 when the penalty is on)",
                                               None, "float"),
    P + "decay": Key(DECAY_DEFAULT, "rae only: EMA decay in [0, 1); b ← decay·b + (1 − decay)·r after each trace",
                     None, "float"),
    P + "episode_agents": Key(None, "hierarchical_grpo only (required, at least one): the roles compared within "
                              "one episode, e.g. [solver]", None, "list"),
}


def _refuse_extra(algo: str, key: str) -> AdvcliError:
    cls = {"max_rl": "MaxRLAlgoConfig", "rae": "RAEAlgoConfig", "hierarchical_grpo": "HierarchicalGRPOAlgoConfig",
           "grpo": "GRPOAlgoConfig", "echo": "EchoAlgoConfig"}[algo]
    return AdvcliError(f"key {P}{key} is not a setting of orchestrator.algo.type={algo}: prime-rl refuses it "
                       f"({cls} forbids extra keys: 'Extra inputs are not permitted')",
                       hint=f"drop {P}{key}, or choose the algorithm that has it")


def _length_penalty(v: dict) -> list[float] | None:
    weights = [v[P + "length_penalty." + w] for w in LP_WEIGHTS]
    if v[P + "length_penalty.type"] is None and all(w is None for w in weights):
        return None
    out = []
    for name, w, default in zip(LP_WEIGHTS, weights, LP_DEFAULTS):
        w = default if w is None else w
        if not math.isfinite(w) or w < 0:  # Field(ge=0, allow_inf_nan=False)
            raise AdvcliError(f"key {P}length_penalty.{name} must be finite and >= 0 (got {w:g}); prime-rl's "
                              "LinearLengthPenaltyConfig refuses it", hint="0 disables the term")
        out.append(float(w))
    return out


def translate(v: dict) -> dict:
    cfg = default_config()
    cfg["grouping"]["by"] = "id"  # the cohort: episode.group.id, per step
    cfg["reward"]["source"] = "reward"  # Trace.reward = Σ score·weight, one scalar per trace
    algo = v[P + "type"]
    if algo in ("opd", "opsd", "sft"):
        signal = "ce" if algo == "sft" else "ref_kl"
        raise AdvcliError(f"key {P}type={algo}: this algorithm assigns no advantage (advantages=None; its signal is "
                          f"the trainer's {signal} loss term), so there is nothing to recompute",
                          hint="choose grpo, echo, max_rl, hierarchical_grpo or rae")
    lp = _length_penalty(v)
    if lp is not None and algo not in ("grpo", "echo"):
        raise _refuse_extra(algo, "length_penalty")
    if v[P + "decay"] != DECAY_DEFAULT and algo != "rae":
        raise _refuse_extra(algo, "decay")
    agents = v[P + "episode_agents"]
    if agents is not None and algo != "hierarchical_grpo":
        raise _refuse_extra(algo, "episode_agents")
    if algo in ("grpo", "echo"):  # grpo.py L25-45; EchoAlgorithm(GRPOAlgorithm) scores the same
        cfg["estimator"] = {"name": "grpo_cohort", "length_penalty": lp}
    elif algo == "max_rl":
        cfg["estimator"] = {"name": "max_rl_cohort"}
    elif algo == "hierarchical_grpo":
        if not agents:
            raise AdvcliError(f"key {P}episode_agents is required for hierarchical_grpo (at least one role, e.g. "
                              "[solver]); prime-rl's HierarchicalGRPOAlgoConfig: Field(min_length=1)",
                              hint=f"--set '{P}episode_agents=[solver]'")
        cfg["estimator"] = {"name": "grpo_peers", "episode_agents": [str(a) for a in agents]}
    elif algo == "rae":
        d = v[P + "decay"]
        if not (0.0 <= d < 1.0):
            raise AdvcliError(f"key {P}decay must be in [0, 1) (got {d:g}); prime-rl's RAEAlgoConfig: ge=0, lt=1")
        cfg["grouping"]["by"] = "auto"  # cohorts only order the scoring; none needed (group_size=1 is allowed)
        cfg["estimator"] = {"name": "ema_baseline", "decay": d}
    return cfg


def estimator_note(v: dict) -> str | None:
    """Why an orchestrator.algo.type runs under another advcli name (translate above)."""
    algo = v[P + "type"]
    name = {"grpo": "grpo_cohort", "echo": "grpo_cohort", "max_rl": "max_rl_cohort", "hierarchical_grpo": "grpo_peers",
            "rae": "ema_baseline"}.get(algo)
    what = {"grpo_cohort": "the reward minus the mean of its cohort's trainable rows",
            "max_rl_cohort": "the reward minus the cohort mean, over that mean",
            "grpo_peers": "the reward minus the mean of its peers (same agent) in the cohort",
            "ema_baseline": "the reward minus a running (EMA) baseline per agent"}.get(name)
    return f"{P}type={algo} in prime-rl is {what}: advcli's {name}" if name else None


# the commits whose semantics advcli reproduces, oldest first (--flavor primerl@RELEASE); nothing that changes
# advantages was merged after it (#3376, a success-gated length penalty, is still open)
RELEASES = (
    Release("559b447", "2026-08-21", aliases=("559b44772e471d1538537b8805cc77f3824a5e64",),
            note="the commit advcli was matched against; its dump: primerl-traces; since #3444/#3465 (merged "
                 "2026-08-31/09-02, advantage code unchanged): primerl-stream"),
)

def _file_settings(values: dict, path: str) -> list:
    """An rl.toml giving one of its env sources an algorithm of its own ([orchestrator.train.source.algo]; the
    orchestrator runs each env's rows with its source's algorithm, else the top-level one: orchestrator.py L239,
    L563-568 @559b4477) is refused: advcli runs one algorithm over the whole input."""
    sources = values.get("orchestrator.train.source")
    named = [s.get("name", f"source {i}") for i, s in enumerate(sources or []) if isinstance(s, dict) and "algo" in s]
    if named:
        raise AdvcliError(f"config file {path}: orchestrator.train.source {', '.join(map(str, named))} has an "
                          "algorithm of its own; advcli runs one algorithm over the whole input",
                          hint="split the dump by env and run each part with its source's algorithm "
                               "(--set orchestrator.algo.type=...)")
    return []


FLAVOR = Flavor(
    title="prime-rl",  # the framework's name in prose (help, docs)
    name="prime-rl",
    framework="PrimeIntellect-ai/prime-rl @ 559b4477 (src/prime_rl/orchestrator/algo/, configs/algorithm.py)",
    keys=KEYS, translate=translate, estimator_note=estimator_note, estimator_key=P + "type",
    # an rl.toml's [orchestrator] holds the whole orchestrator (batch_size, group_size, train.sampling, eval, ...)
    # beside [orchestrator.algo]: ignored there, a near miss of an algo key still refused
    mixed_sections=("orchestrator",),
    # `length_penalty = {}` is LinearLengthPenaltyConfig() with its defaults (configs/algorithm.py L95-107)
    empty_tables={P + "length_penalty": (P + "length_penalty.type", "linear")},
    file_settings=_file_settings,
    notes="Credit per rollout group (cohort = prompt_id, per step) over its trainable traces only: a row with "
          "trainable=false or no mask=1 token is left out of every statistic and gets 0.0. grpo/echo: A = r − "
          "mean (float32, no std; a cohort of one gets 0), optionally with the length penalty s = r − "
          "mean(r)·(w_out·out/max out + w_in·in/max in + w_turn·turns/max turns) (maxima clamped to ≥ 1, counts "
          "from the num_output_tokens / num_total_tokens / num_turns columns), A = s − mean(s). max_rl: "
          "(r − μ)/μ, 0 for the cohort when μ ≤ 0, no eps (float32: a zero-sum mixed-sign cohort can give 0 or "
          "±1e7..1e8). hierarchical_grpo: r − mean over peers (agent_name, episode_id for the episode_agents; "
          "agent_name alone otherwise), float64. rae: r − b[agent_name], b ← decay·b + (1−decay)·r in scoring "
          "order over the whole input (rows in order, steps ascending), b = 0 at the first row, float64. The "
          "advantage lands on mask=1 tokens, 0.0 elsewhere.",
    releases=RELEASES)
