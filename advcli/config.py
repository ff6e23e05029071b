"""advcli's canonical configuration: every stage of the pipeline and its switches.

A configuration is a nested dict with the keys of :data:`SCHEMA` (dotted paths) plus
``estimator.*``, whose keys depend on the estimator (see ``advcli.estimators``). Flavors translate a
framework's own keys into this form; ``--flavor advcli`` takes it directly. ``--set KEY=VALUE``
parses VALUE as YAML. Nothing here imports torch.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .column_roles import ROLES
from .errors import AdvcliError, did_you_mean


@dataclass(frozen=True)
class Key:
    default: Any
    doc: str
    choices: tuple | None = None
    kind: str = "any"  # "bool", "float", "int", "str", "clip", "list", "any"


# The pipeline, in order: columns -> grouping -> reward -> kl -> estimator -> advantage -> output.
SCHEMA: dict[str, Key] = {
    # ----------------------------------------------------------------------------- grouping/scope
    "grouping.by": Key("auto", "how rows form groups: `id` (the prompt_id column, rows anywhere in the "
                       "file), `position` (consecutive blocks of grouping.size rows), `runs` (each maximal run of "
                       "consecutive rows with equal prompt_id, any size: AReaL's per-prompt trajectory dicts), "
                       "`none`, or `auto` (id when the column exists)", ("auto", "id", "position", "runs", "none"),
                       "str"),
    "grouping.size": Key(None, "group size for grouping.by=position", None, "int"),
    "grouping.fallback": Key("error", "with grouping.by=position, a scope whose row count is not grouping.scope_rows "
                             "(null: not a multiple of grouping.size): `error` (the run stops), `scope` (that scope "
                             "is one group: slime's silent whole-batch fallback, rollout.py L620-623) or `tail` "
                             "(blocks of grouping.size rows and one short block of the rest: AReaL 1.0.4's remainder "
                             "slice, which a NormConfig's `slices` leaves at mean 0 and std 0, AReaL #1673)",
                             ("error", "scope", "tail"), "str"),
    "grouping.id_check": Key("strict", "with grouping.by=position and a prompt_id column whose ids disagree with the "
                             "blocks (a block holds several ids, or an id spans several blocks): `strict` stops the "
                             "run, `warn` keeps the blocks and adds a warning (slime, which never reads the ids)",
                             ("strict", "warn"), "str"),
    "grouping.scope_rows": Key(None, "with grouping.by=position: the rows every scope must have for the blocks of "
                               "grouping.size to apply (slime: rollout_batch_size × n_samples_per_prompt); null: any "
                               "multiple of grouping.size", None, "int"),
    "grouping.scope": Key("step", "scope of batch statistics: `step` (each value of the step column is "
                          "its own batch, in ascending order; the whole input when there is no step "
                          "column), `step_domain` (per step and domain, ROLL) or `all`",
                          ("step", "step_domain", "all"), "str"),
    "grouping.trajectories": Key("none", "`last_step`: rows are the turns of step-wise trajectories (a contiguous run "
                                 "of rows ending at a row whose is_last_step column is true); a row-level estimator "
                                 "runs on the last-step rows only (grouped by their prompt_id) and every turn of a "
                                 "trajectory gets its last step's value (SkyRL generator.step_wise_trajectories)",
                                 ("none", "last_step"), "str"),
    # ----------------------------------------------------------------------------------- reward
    "reward.source": Key("auto", "the row reward: `reward` (scalar column), `token_level_scores` "
                         "(token list column, verl), `components` (weighted sum of reward.components) "
                         "or `auto` (token_level_scores if present, else reward)",
                         ("auto", "reward", "token_level_scores", "components"), "str"),
    "reward.nan": Key("refuse", "missing (null or NaN) row rewards: `refuse` (the run stops, naming the row) or "
                      "`allow` (TRL: a reward function's None is NaN; NaN components count as 0 in the weighted "
                      "sum, a row with no reward at all is unscorable and gets advantage 0) or `zero` (TRL "
                      "0.16.0-1.5.1: NaN components count as 0 and a row with no reward at all scores 0)",
                      ("refuse", "allow", "zero"), "str"),
    "reward.components": Key(None, "component reward columns, e.g. [acc, fmt]; a name with `*` stands for "
                             "every matching column, sorted by name (NeMo gdpo: [\"reward/*\"])", None, "list"),
    "reward.weights": Key(None, "weights of the components (default all 1)", None, "list"),
    "reward.normalize.mean": Key("none", "subtract the `batch` or `group` mean of the row reward "
                                 "before it is placed on tokens, or `loo` (the mean of the group's other "
                                 "rows, OpenRLHF rloo)", ("none", "batch", "group", "loo"), "str"),
    "reward.normalize.std": Key("none", "divide by the `batch` or `group` std (unbiased) + eps",
                                ("none", "batch", "group"), "str"),
    "reward.normalize.eps": Key(1e-6, "epsilon added to the std", None, "float"),
    "reward.normalize.centre_first": Key(False, "take the std of the centred rewards r − mean (slime "
                                         "_post_process_rewards); the same math, other float32 bits", None, "bool"),
    "reward.clip": Key(None, "clamp of the (normalised) row reward: c for [-c, c], or [lo, hi]", None, "clip"),
    # AReaL's reward shaping (PPOActor._compute_advantages L186-212 @cbff54d6), applied in this order
    # before reward.normalize / reward.norm: overlong penalty, then clip((r + bias)·scale)
    "reward.overlong.tokens": Key(None, "DAPO overlong penalty: "
                                  "r += min(−(n − (max_tokens − tokens))/tokens·factor, 0) "
                                  "with n = Σ mask (trained tokens), before bias/scale; null: off", None, "int"),
    "reward.overlong.factor": Key(None, "overlong penalty factor", None, "float"),
    "reward.overlong.max_tokens": Key(1024, "overlong penalty: the maximum response length", None, "int"),
    "reward.bias": Key(0.0, "r ← (r + bias)·scale, before normalisation", None, "float"),
    "reward.scale": Key(1.0, "r ← (r + bias)·scale, before normalisation", None, "float"),
    "reward.shape_clip": Key(None, "clamp of (r + bias)·scale, before normalisation: c for [-c, c], or [lo, hi]",
                             None, "clip"),
    "reward.norm": Key(None, "AReaL NormConfig normalisation of the row reward, instead of reward.normalize: a "
                       "mapping {mean_level: batch|group|null, mean_leave1out, std_level: batch|group|null, "
                       "std_unbiased, eps}; float64 statistics, std about the chosen mean, (r − mean)/(std + eps), "
                       "std_level null: std 1 and eps 0; groups are grouping.by's (AReaL: runs); slices: N (AReaL "
                       "1.0.4's fixed slices of N rows: a shorter group, the rest of a step, keeps group mean and "
                       "std 0)", None, "any"),
    "reward.zero_truncated": Key(False, "rows whose `truncated` column is true get row reward 0 after "
                                 "normalisation (AReaL mask_no_eos_with_zero)", None, "bool"),
    "reward.dtype": Key("run", "the dtype of the rewards an estimator that keeps it (keeps_reward_dtype: verl's grpo, "
                        "rloo, gpg, rloo_vectorized) and the positional group normalisation (OpenRLHF before "
                        "0.11.2) compute in: `run` (the run's precision), `bfloat16` / "
                        "`float16` (the trainer's scores were, e.g. a custom reward manager's or a reward model's), "
                        "`input` (a float16 reward column stays float16, any other the run's precision); with KL in "
                        "the reward the rewards are float32, as verl's apply_kl_penalty promotes them",
                        ("run", "input", "bfloat16", "float16"), "str"),
    "reward.placement": Key("last", "where the row reward lands: `last` (position L_i-1, verl/ROLL) or "
                            "`last_valid` (last mask=1 token, OpenRLHF/NeMo gae) or "
                            "`all` (every position of the row: NeMo RL's REINFORCE++ and raw_reward)",
                            ("last", "last_valid", "all"), "str"),
    "reward.unplaced": Key("drop", "a row with no mask=1 token under reward.placement=last_valid: `drop` (its "
                           "reward lands nowhere) or `error` (the run stops, as slime's reinforce_plus_plus asserts)",
                           ("drop", "error"), "str"),
    "reward.empty_row": Key("zero", "the row score of an empty response (no token at all): `zero` (its reward lands "
                            "nowhere) or `score` (verl's reward managers write it at index L−1 = −1, the padded "
                            "batch's last column, so the row-sum estimators count it; token-level ones never see it)",
                            ("zero", "score"), "str"),
    "reward.mask_placed": Key(False, "multiply the placed token rewards by the mask (ROLL: a row ending "
                              "in a masked token loses its reward)", None, "bool"),
    "reward.whiten_tokens": Key(False, "whiten the token-level rewards (after KL and kl.token_clip) over the "
                                "mask=1 tokens of each scope, then multiply by the mask (ROLL whiten_rewards: "
                                "unbiased, rsqrt(var + 1e-8); skipped in a scope with <= 1 valid token)", None, "bool"),
    # --------------------------------------------------------------------------------------- kl
    "kl.in_reward": Key(False, "token_level_rewards = scores − β·KL before the estimator", None, "bool"),
    "kl.estimator": Key("k1", "per-token KL estimate of logp − ref: k1, abs, k2, k3", ("k1", "abs", "k2", "k3"), "str"),
    "kl.input_clamp": Key(None, "clamp of ref − logp before the estimate (verl k3: 20)", None, "float"),
    "kl.output_clamp": Key(None, "clamp of the estimate (verl k3: 10)", None, "float"),
    "kl.policy": Key("old_log_probs", "the policy log-probs the KL (and advantage.distill_coef) read: "
                     "`old_log_probs` (recomputed) or `rollout_log_probs` (the inference engine's: slime "
                     "--use-rollout-logprobs, AReaL's decoupled loss)", ("old_log_probs", "rollout_log_probs"), "str"),
    "kl.missing": Key("refuse", "a missing policy or reference log-prob column: `refuse`, or `zeros` (AReaL: no ref "
                      "model means ref = 0)", ("refuse", "zeros"), "str"),
    "kl.coef": Key(0.001, "β (the initial β of an adaptive controller)", None, "float"),
    "kl.coef_min": Key(None, "lower bound of the β a step applies (SkyRL: 0, rewards −= kl·max(0, β)); an "
                       "adaptive controller keeps updating its own, unbounded value", None, "float"),
    "kl.controller": Key("fixed", "`fixed` or `adaptive` (Ziegler et al.: β ← β·(1 + clip(kl/target − 1, "
                         "±0.2)·n/horizon) after each step; a step uses β from before its update)",
                         ("fixed", "adaptive"), "str"),
    "kl.target": Key(0.1, "adaptive controller target KL", None, "float"),
    "kl.horizon": Key(10000, "adaptive controller horizon", None, "float"),
    "kl.mask": Key(True, "multiply the KL by the response mask before subtracting it", None, "bool"),
    "kl.score_sum": Key("exact", "how a row-level estimator's score s_i = Σ_t token_level_rewards is summed when KL "
                        "enters the reward: `exact` (r − β·Σ_t KL, the sum in float64, rounded once) or "
                        "`right_aligned` (the float32 torch.sum of the row laid out right-aligned in its step's "
                        "[B, longest row] grid, as SkyRL sums it: the same last bits, which a group of equal "
                        "rewards, told apart only by the KL term, divides by its tiny std)",
                        ("exact", "right_aligned"), "str"),
    "kl.token_clip": Key(None, "clamp of the token-level rewards after the KL term (ROLL's second "
                         "reward_clip)", None, "clip"),
    # ------------------------------------------------------------------------ rollout correction
    # (advcli.ops.rollout_correction; docs/rollout-correction.md): between the KL penalty and the estimator
    "rollout_correction.mode": Key("off", "`off`; `auto`: run when the input has a rollout_log_probs column "
                                   "(verl: whenever the batch holds them); `on`: require it",
                                   ("off", "auto", "on"), "str"),
    "rollout_correction.is_level": Key(None, "IS weights: null (none), `token` exp(clamp(lr, ±20)), `sequence` "
                                       "exp(clamp(Σ lr·m, ±20)); lr = old_log_probs − rollout_log_probs",
                                       (None, "token", "sequence"), "any"),
    "rollout_correction.is_upper": Key(2.0, "TIS: w = min(w, upper); with is_lower, IcePop's upper bound "
                                       "(null: no weights)", None, "float"),
    "rollout_correction.is_lower": Key(None, "IcePop: weights outside [is_lower, is_upper] become 0 (null: TIS)",
                                       None, "float"),
    "rollout_correction.is_batch_normalize": Key(False, "divide the weights by their step mean (token: token-"
                                                 "weighted; sequence: one vote per non-empty row)", None, "bool"),
    "rollout_correction.rs": Key(None, "rejection options, each [name, lo, hi] on the option's statistic (name "
                                 "token_kX, seq_sum_kX, seq_mean_kX, seq_max_kX; k1 = −clamp(lr), k2 = ½l², k3 = "
                                 "eˡ−1−l; lo null: no lower test); a row or token is kept when every option "
                                 "passes", None, "list"),
    # OpenRLHF's gated coefficient (algo.advantage.is_correction_*, PolicyLoss.forward): applied in the loss,
    # after the advantages; the estimator keeps the input mask
    "rollout_correction.gate_level": Key(None, "OpenRLHF's IS correction: null (off), `token` (each token's "
                                         "statistic) or `seq` (the row's masked mean: the ratio's geometric mean, a "
                                         "divergence's mean); with it, is_level and rs stay null",
                                         (None, "token", "seq"), "any"),
    "rollout_correction.gate_mode": Key("mask", "`mask`: a unit outside [low, high] gets coefficient 0, the others "
                                        "their token ratio exp(lr) (unclamped); `clip`: coefficient "
                                        "clamp(exp(lr), low, high) (token level, ratio gate only)",
                                        ("mask", "clip"), "str"),
    "rollout_correction.gate_stat": Key("ratio", "the gated statistic: `ratio` exp(lr); `binary_kl` p·log(p/q) + "
                                        "(1−p)·log((1−p)/(1−q)); `tv` |p − q|; p = exp(rollout_log_probs), q = "
                                        "exp(old_log_probs), both clamped to [1e-6, 1 − 1e-6]",
                                        ("ratio", "binary_kl", "tv"), "str"),
    "rollout_correction.gate_bounds": Key([0.5, 5.0], "[low, high] on the gated statistic (inclusive)", None,
                                          "list"),
    # -------------------------------------------------------------------------------- advantage
    "advantage.whiten": Key(False, "whiten the advantages over the mask=1 tokens of each scope", None, "bool"),
    "advantage.distill_coef": Key(None, "on-policy distillation term after the estimator, before whitening: "
                                  "A_t −= coef·(logp_t − teacher_log_probs_t) on every position (slime --use-opd, "
                                  "loss.py L663-700); null: off", None, "float"),
    "advantage.distill_returns": Key(False, "the distillation term also lands in the returns (slime "
                                     "reinforce_plus_plus_baseline, whose returns are the advantages' list)",
                                     None, "bool"),
    "advantage.whiten_one_pass": Key(False, "whitening statistics in one pass in the run's precision: S1 = Σxm, S2 = "
                                     "Σx²m, N = Σm rounded to it, var = S2/N − (S1/N)², × N/(N−1) only when N ≥ 2 "
                                     "(slime distributed_masked_whiten; float32 cancels when |μ| ≫ σ)", None, "bool"),
    "advantage.whiten_unbiased": Key(True, "unbiased (N/(N−1)) variance in whitening", None, "bool"),
    "advantage.whiten_eps": Key(1e-8, "whitening epsilon", None, "float"),
    "advantage.whiten_eps_mode": Key("add", "`add`: rsqrt(var + eps); `max`: rsqrt(max(var, eps))", ("add", "max"),
                                     "str"),
    "advantage.whiten_divisor": Key("n_eps", "what the masked mean and variance divide their sums by: `n_eps` "
                                    "Σm + 1e-8 (verl, ROLL, NeMo gae), `n` Σm (OpenRLHF, NeMo "
                                    "reinforce_plus_plus: a scope with no valid token gives NaN), `max1` "
                                    "max(Σm, 1) (NeMo raw_reward)", ("n_eps", "n", "max1"), "str"),
    "advantage.whiten_scale": Key(True, "divide by the std (false: centre only)", None, "bool"),
    "advantage.whiten_small": Key("error", "a scope with <= 1 valid token: `error` (verl masked_var raises), "
                                  "`skip` (ROLL: no whitening in that scope), `compute` (OpenRLHF, NeMo: no "
                                  "check; an unbiased variance of one token is NaN, none at all NaN or 0 "
                                  "by whiten_divisor) or `error_empty` (slime: only a scope with no valid token "
                                  "raises)", ("error", "skip", "compute", "error_empty"), "str"),
    "advantage.remask": Key(False, "zero the final advantages at mask=0 positions: `true` multiplies by the mask "
                            "(A·M: a NaN or inf there stays NaN; verl, ROLL), `fill` sets them to 0 whatever they "
                            "hold (masked_fill; NeMo gae)", (False, True, "fill"), "any"),
    "advantage.whiten_mask": Key("response_mask", "the tokens the whitening and batch_normalize statistics count: "
                                 "`response_mask` (the mask=1 tokens) or `all` (every position of the row: SkyRL, "
                                 "whose estimators take a response mask that covers observation tokens; its loss "
                                 "mask, the response_mask column, masks only the KL term)",
                                 ("response_mask", "all"), "str"),
    "advantage.batch_normalize": Key(False, "after the estimator (and its whitening), per scope: mean = Σ A / (B·T) "
                                     "over the [B rows, T = longest row] grid whose padding cells are 0, var = "
                                     "Σ (A − mean)² / N over the N tokens advantage.whiten_mask counts (biased), "
                                     "A ← (A − mean)·rsqrt(max(var, 1e-8)) (SkyRL advantage_batch_normalize); "
                                     "returns unchanged", None, "bool"),
    "advantage.clip": Key(None, "clamp of the final advantages: c for [-c, c], or [lo, hi]", None, "clip"),
    "advantage.returns": Key("estimator", "the `returns` column: the estimator's returns (`estimator`) or the "
                             "final advantages (`advantages`: verl gdpo and reinforce_plus_plus_baseline return "
                             "the whitened advantages)", ("estimator", "advantages"), "str"),
    "padded": Key("auto", "token lists are right-padded to a fixed width with mask 0: a row's length L_i "
                  "(where `reward.placement=last` puts the reward) is then its last mask=1 position + 1. "
                  "`auto`: true when the mask column is a fixed-size list", ("auto", True, False), "any"),
    # ------------------------------------------------------------------------------ diagnostics
    "diagnostics.rule": Key(None, "the framework rule the float32 diagnostics name for the estimator's "
                            "artefacts (a flavor sets it; default: the estimator's own source)", None, "str"),
    # ---------------------------------------------------------------------------------- numeric
    "precision": Key("float32", "`float32` reproduces the frameworks (float32 artefacts included); "
                     "`float64` computes the intended math", ("float32", "float64"), "str"),
}



def default_config() -> dict:
    cfg: dict = {}
    for path, key in SCHEMA.items():
        set_path(cfg, path, copy.deepcopy(key.default))
    cfg["columns"] = {}
    cfg["estimator"] = {"name": "grpo"}
    return cfg


def set_path(cfg: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    node = cfg
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def parse_value(text: str) -> Any:
    """A --set VALUE, parsed as YAML (``true``, ``0.95``, ``null``, ``[acc,fmt]``)."""
    import yaml

    try:
        return yaml.safe_load(text) if text.strip() != "" else ""
    except yaml.YAMLError as e:
        raise AdvcliError(f"cannot parse value {text!r} as YAML: {str(e).splitlines()[0]}") from None


def parse_set(items: list[str] | None) -> list[tuple[str, Any]]:
    """``["a.b=1", ...]`` -> ``[("a.b", 1), ...]`` in order."""
    out = []
    for item in items or []:
        if "=" not in item:
            raise AdvcliError(f"--set {item!r}: expected KEY=VALUE, e.g. --set algorithm.gamma=0.99")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k:
            raise AdvcliError(f"--set {item!r}: the key is empty")
        out.append((k, parse_value(v)))
    return out


def parse_column_maps(items: list[str] | None) -> dict[str, str]:
    """``--column reward=score`` -> {"reward": "score"}."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise AdvcliError(f"--column {item!r}: expected ROLE=NAME, e.g. --column reward=score")
        role, name = (s.strip() for s in item.split("=", 1))
        if role not in ROLES and not role.startswith("reward/"):
            raise AdvcliError(f"--column {item!r}: unknown role {role!r}.{did_you_mean(role, ROLES)} "
                              f"Roles: {', '.join(ROLES)}")
        out[role] = name
    return out


def load_config_file(path: str) -> dict:
    """A YAML or TOML file of the same keys as --set (nested or dotted), as a flat {key: value}.

    A file that does not parse is refused naming the file and the line and column of the error."""
    p = Path(path)
    if not p.is_file():
        raise AdvcliError(f"config file {path}: no such file")
    text = p.read_text()
    try:
        if p.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text) or {}
    except Exception as e:  # noqa: BLE001 - any parse error is the user's file
        raise AdvcliError(f"config file {path}{_parse_error_place(e, text)}: cannot parse: {_parse_error_text(e)}",
                          hint="fix the file there: " + ("TOML is key = value, strings quoted, [section] headers"
                                                         if p.suffix.lower() == ".toml" else
                                                         "YAML is key: value, nested keys indented by spaces, "
                                                         "brackets and quotes closed")) from None
    if not isinstance(data, dict):
        raise AdvcliError(f"config file {path}: expected a mapping of keys to values")
    return flatten_keys(data)


def _parse_error_place(e: Exception, text: str) -> str:
    """``, line L, column C`` (1-based) of a YAML or TOML parse error, or "" when it names none."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)  # PyYAML's MarkedYAMLError
    if mark is not None:
        return f", line {mark.line + 1}, column {mark.column + 1}"
    if getattr(e, "lineno", None):  # tomllib from Python 3.14
        return f", line {e.lineno}, column {e.colno}"
    m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))  # tomllib up to 3.13: in the message
    if m:
        return f", line {m.group(1)}, column {m.group(2)}"
    if "end of document" in str(e):
        lines = text.splitlines() or [""]
        return f", line {len(lines)}, column {len(lines[-1]) + 1} (the end of the file)"
    return ""


def _parse_error_text(e: Exception) -> str:
    """The parser's own words without the place (said once, before them)."""
    problem = getattr(e, "problem", None)
    if problem:  # PyYAML: "expected ',' or ']', but got ':'" (+ "while parsing a flow sequence")
        context = getattr(e, "context", None)
        return f"{problem} ({context})" if context else str(problem)
    msg = getattr(e, "msg", None) or str(e).splitlines()[0]
    return re.sub(r"\s*\((at line \d+, column \d+|at end of document)\)", "", str(msg))


def flatten_keys(data: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys; leaves (including lists) kept as values."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten_keys(v, path + "."))
        else:
            out[path] = v
    return out


def coerce(path: str, value: Any, key: Key) -> Any:
    """Check and normalise one canonical value; raise AdvcliError naming the key."""
    if value is None:
        return None
    kind = key.kind
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            raise ValueError
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind == "str":
            value = str(value)
        if kind == "list":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, (list, tuple)):
                raise ValueError
            return list(value)
        if kind == "clip":
            return normalize_clip(value)
    except (TypeError, ValueError):
        raise AdvcliError(f"key {path}: {value!r} is not a valid {kind} ({key.doc})") from None
    if key.choices is not None and value not in key.choices:
        raise AdvcliError(f"key {path}: unknown value {value!r}.{did_you_mean(value, key.choices)} "
                          f"Valid: {', '.join(map(str, key.choices))}")
    return value


def normalize_clip(value: Any) -> list[float] | None:
    """``c`` -> [-c, c]; ``[lo, hi]`` kept; 0/false/null -> None."""
    if value is None or value is False:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        c = float(value)
        return [-abs(c), abs(c)]
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo = None if value[0] is None else float(value[0])
        hi = None if value[1] is None else float(value[1])
        return [lo, hi]
    raise ValueError
