"""The plan of a run: which columns, estimator, reward source, grouping, KL and outputs a
configuration needs, checked against the input's schema before any data is read. A :class:`Plan` is
frozen once :func:`make_plan` has built it; what a run learns while it runs (the scopes' domains, the
block sizes, the grouping's warnings, the token columns already checked) is its :class:`RunState`.
"""
from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa

from ..config.column_roles import ROLE_INFO
from ..config.columns import ColumnMap, bypass_columns, is_list_type, resolve_columns
from ..config.runspec import RunSpec, frozen_mapping  # a plan's mappings: read-only views that pickle
from ..errors import AdvcliError
from ..estimators import EstimatorSpec, resolve_params
from ..estimators import get as get_estimator
from ..io.reader import InputSet
from ..lazy_torch import torch
from ..ops.whiten import WhitenSpec
from . import roles

ProgressFn = Callable[[str, int, int], None]  # (pass name, rows done, rows total)



@dataclass(frozen=True)
class Plan:
    """What a configuration asks of this input, resolved once (:func:`make_plan`) and never changed after:
    a pass that learns something records it in the run's :class:`RunState`. A variant (another device, the
    new columns chosen) is a new plan (``dataclasses.replace``). Its containers cannot be changed in place
    either: lists are kept as tuples, mappings as read-only views (the column map's too), whatever the
    constructor was given."""

    run: RunSpec  # the resolved configuration; each stage reads its section
    spec: EstimatorSpec
    params: Mapping  # the estimator's parameters, resolved (read-only)
    cmap: ColumnMap
    device_name: str  # auto, cpu or cuda (checked): :attr:`device` imports torch on first use
    reward_source: str
    components: tuple[str, ...]
    kl_on: bool
    group_by: str
    token_roles: tuple[str, ...]  # token columns the math reads
    verify_roles: tuple[str, ...]  # the dump's other token-role columns: checked (lengths, nulls), not read by the math
    # the new columns written, in this order (those of NEW_COLUMNS the run produces; --write-columns)
    output_columns: tuple[str, ...]
    padded: bool = False  # fixed-width lists: L_i = last mask=1 position + 1
    check_values: bool = False  # verify_roles' values too (finite floats, 0/1 masks): `advcli validate`
    correction: object = None  # rollout correction spec (advcli.correction.plan.plan_correction), None: off
    warnings: tuple = ()  # found while planning, reported with the run's
    dump_tokens: int = 0  # the dump's tokens from its Parquet metadata (an upper bound): --device auto's rule
    # log-prob roles read only by a KL whose input clamp makes −inf finite (verl ≥ 0.4.1's k3, NeMo, SkyRL's k3):
    # a −inf there passes the read check, as the trainer computes with it (other non-finite values do not)
    neg_inf_roles: tuple[str, ...] = ()
    # log-prob roles read only by verl's rollout correction, whose every sum and mean is masked_sum's
    # torch.where(mask, x, 0): a NaN or ±inf at a mask=0 token changes no number there (a token-level weight at
    # that token is NaN, as verl's), so only the mask=1 tokens are checked
    masked_only_roles: tuple[str, ...] = ()

    def __post_init__(self):
        """The containers given, frozen (part of building the plan: nothing changes once it is made)."""
        for name in ("components", "token_roles", "verify_roles", "output_columns", "warnings", "neg_inf_roles",
                     "masked_only_roles"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "params", frozen_mapping(self.params))
        if not isinstance(self.cmap.names, types.MappingProxyType):
            object.__setattr__(self, "cmap", dataclasses.replace(self.cmap, names=frozen_mapping(self.cmap.names)))

    @cached_property
    def _device_choice(self) -> tuple:
        """(torch device, why) of the math, picked on first use (a plan that runs no math imports no torch):
        a value derived from the plan's fields and the machine, computed once (``cached_property`` keeps it
        beside the fields; no field changes)."""
        if self.device_name == "auto":
            from ..ops.fused import auto_device, triton_available

            name, why = auto_device(bool(torch.cuda.is_available()), triton_available, self.spec.level,
                                    self.dump_tokens)
            return torch.device(name), f"{name} (--device auto: {why})"
        dev = pick_device(self.device_name)
        return dev, f"{dev.type} (--device {self.device_name})"

    @property
    def device(self) -> torch.device:
        """The torch device of the math, picked on first use (a plan that runs no math imports no torch)."""
        return self._device_choice[0]

    @property
    def device_why(self) -> str | None:
        """How the device was picked (the summary's line), None when no math has asked for it yet."""
        choice = self.__dict__.get("_device_choice")
        return None if choice is None else choice[1]

    @property
    def dtype(self) -> torch.dtype:
        return torch.float64 if self.run.precision == "float64" else torch.float32

    @property
    def whiten(self) -> bool:
        return self.run.whitening.on

    def whiten_spec(self) -> WhitenSpec:
        w = self.run.whitening
        return WhitenSpec(unbiased=w.unbiased, eps=w.eps, eps_mode=w.eps_mode, divisor=w.divisor, scale=w.scale,
                          one_pass=self.dtype if w.one_pass else None)


@dataclass
class RunState:
    """What one run learns while it runs, kept apart from its frozen :class:`Plan`: made by the engine (or
    :func:`advcli.pipeline.prepare_run`), filled by the passes that learn it, read by the later ones (it
    travels in :class:`advcli.pipeline.rows.Prepared` as ``res.state``)."""

    scope_domains: list | None = None  # grouping.scope=step_domain: the domain of every scope
    block_sizes: list | None = None  # grouping.by=position: the block size of every scope (grouping.fallback)
    group_warnings: list = field(default_factory=list)  # grouping.id_check=warn, whole-step/tail fallbacks
    checked_roles: set = field(default_factory=set)  # token roles a finished pass has checked (nulls, lengths, values)
    # the run's KL controller (advcli.ops.kl.KLController), stepped over its scopes in order by kl_coefs:
    # None until then (made from the plan: kl.coef), or given by the engine with the coefficient carried in
    # (Ray's per-step driver: its one controller, as the earlier steps left it)
    kl: object = None


def check_device_name(name: str) -> None:
    """Refuses a device name other than auto, cpu or cuda (without importing torch)."""
    if name not in ("auto", "cpu", "cuda"):
        raise AdvcliError(f"--device {name!r}: expected auto, cpu or cuda")


def pick_device(name: str) -> torch.device:
    check_device_name(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise AdvcliError("--device cuda: no CUDA device is available here", hint="use --device auto or cpu")
    return torch.device(name)


STEP_WISE_010 = ("step-wise trajectories copied as SkyRL 0.1.0 copies them (grouping.trajectory_copy=last_row): "
                 "each turn gets its trajectory's last step's whole padded advantage row, column by column, so a "
                 "turn's position t holds the last step's value where t is below the last step's length and 0 from "
                 "there on, whatever the turn's own mask (trainer.py compute_advantages_and_returns @skyrl-v0.1.0; "
                 "from 0.2.0 each turn gets the value on its own positions). A turn longer than its last step has "
                 "0 on its tail; a shorter one's padding (which advcli does not write) held the value in SkyRL's "
                 "[B, T] tensor")


def make_plan(cfg: dict, inputs: InputSet, column_overrides: dict[str, str], device: str = "auto",
              check_values: bool = False) -> Plan:
    if column_overrides:  # --column NAME=COL joins the configuration's `columns` section, so the output's
        # recorded configuration names the columns the run read (advcli stats, audit and a rerun read it back)
        cfg = {**cfg, "columns": {**(cfg.get("columns") or {}), **column_overrides}}
    run = RunSpec.from_config(cfg)
    cmap = bypass_columns(resolve_columns(inputs.schema, dict(run.columns), inputs.paths[0]), run.correction.bypass)
    spec = get_estimator(run.estimator.name)
    params = resolve_params(spec, run.estimator.given)
    if spec.build is not None:  # an estimator made of others (mix): the spec of its terms
        spec, params = spec.build(params)
    file = inputs.paths[0]
    if run.grouping.trajectories == "last_step" and run.grouping.trajectory_copy == "last_row" and \
            run.whitening.on and run.whitening.mask != "all":
        raise AdvcliError("keys grouping.trajectory_copy=last_row (SkyRL 0.1.0's step-wise copy) with "
                          f"advantage.whiten_mask={run.whitening.mask}: the copy's statistics are those of SkyRL's "
                          "response positions (every position of a turn)", hint="set advantage.whiten_mask=all")
    if run.grouping.trajectories == "last_step":  # SkyRL step-wise trajectories
        from ..estimators.stepwise import last_step
        spec = last_step(spec, run.grouping.trajectory_copy)
    # --- slime: the OPD term after the estimator, and the policy log-probs the KL/OPD read ---
    distill = run.advantage.distill_coef
    if distill is not None:
        from ..estimators.distill_term import with_distill_term
        spec = with_distill_term(spec, float(distill), bool(run.advantage.distill_returns), run.kl.policy)

    if not cmap.has("response_mask") and cmap.candidate("response_mask") is None:
        from ..formats.discovery import named_but_lacking  # a trainer's dump that lacks what its reader needs?

        lacking = named_but_lacking(inputs.paths[0], inputs.schema.names)
        if lacking is not None:
            raise lacking
    cmap.require("response_mask", "every estimator needs the token mask; it also gives each row's length")
    source = run.reward.source
    components = expand_components(list(run.reward.components or []), inputs.schema.names, file)
    if source == "auto":
        source = "components" if components and not spec.reward_from_components else (
            "token_level_scores" if cmap.has("token_level_scores") else "reward")
    if source == "components" and not components:
        raise AdvcliError("key reward.source=components needs reward.components (a list of columns)")
    if source == "reward" and not spec.reward_from_components:
        cmap.require("reward", "the response-level reward")
    if source == "token_level_scores":
        cmap.require("token_level_scores", "reward.source=token_level_scores")
        if run.reward.normalize.mean != "none" or run.reward.normalize.std != "none":
            raise AdvcliError("reward.normalize works on a scalar reward; it cannot be used with token_level_scores")
    for c in components:
        if c not in inputs.schema.names:
            from ..errors import did_you_mean
            raise AdvcliError(f"{file}: reward component column {c!r} not found.{did_you_mean(c, inputs.schema.names)}"
                              f" Columns present: {', '.join(inputs.schema.names)}")
        from ..config.columns import check_type
        check_type(inputs.schema, "reward", c, file)
    bounds = run.reward.range_map
    if bounds is not None:
        try:
            smin, smax, _, _ = (float(b) for b in bounds)
        except (TypeError, ValueError):
            raise AdvcliError(f"key reward.range_map: expected [source_min, source_max, target_min, target_max], "
                              f"got {bounds!r}") from None
        if not smax > smin:  # NeMo's scale_rewards divides by source_max − source_min
            raise AdvcliError(f"key reward.range_map: source_max ({smax:g}) must be above source_min ({smin:g})")
    if source == "components" and len(run.reward.weights or components) != len(components):
        raise AdvcliError(f"key reward.weights: {len(run.reward.weights)} weights for {len(components)} components")
    if run.reward.no_eos_value is not None or run.reward.no_eos_penalty is not None:
        cmap.require("truncated", "reward.no_eos_value / no_eos_penalty score the responses without EOS (TRL's "
                     "RLOOTrainer non_eos_penalty / missing_eos_penalty): a bool column, true where the response "
                     "has no EOS token")
    if run.reward.truncated_factor is not None:
        cmap.require("truncated", "reward.truncated_factor scales the rewards of the responses stopped by the "
                     "length limit (OpenRLHF's stop_properly_penalty_coef: vLLM's finish_reason == 'length'): a bool "
                     "column, true where the response was truncated")
    if run.reward.overlong.tokens is not None and run.reward.overlong.length == "tokens_eos":
        cmap.require("truncated", "reward.overlong.length=tokens_eos counts the EOS OpenRLHF 0.8.7-0.8.8 appends to "
                     "a response that has none: a bool column, true where the response was truncated")
    kl_on = bool(run.kl.in_reward)
    klr = roles.kl_roles(run.kl, cmap) if kl_on else []
    if kl_on:
        kl = run.kl
        if kl.controller == "adaptive":  # checked before any data is read
            if not kl.horizon:  # a negative horizon runs (OpenRLHF, ROLL): the update turns the other way
                raise AdvcliError(f"key kl.horizon must not be 0 or null for the adaptive controller (got "
                                  f"{kl.horizon}): the update divides by it")
            if kl.update_rows is not None and kl.update_rows < 1:
                raise AdvcliError(f"key kl.update_rows must be at least 1 (got {kl.update_rows}), or null for the "
                                  "step's rows")
            if not kl.target:  # a negative target runs: clip(kl/target − 1) is −0.2, β shrinks each step
                raise AdvcliError(f"key kl.target must not be 0 or null for the adaptive controller (got "
                                  f"{kl.target}): β is updated by clip(kl/target − 1, ±0.2)",
                                  hint="set the target KL, or use kl.controller=fixed")
    spec.check(params, cmap, components)  # its parameters, the columns it needs (the estimator's own rules)
    w = run.whitening
    if w.mean_span != "mask" and (w.one_pass or w.batch_normalize or spec.level == "row"):
        what = ("advantage.whiten_one_pass" if w.one_pass else "advantage.batch_normalize" if w.batch_normalize
                else f"the row-level estimator {spec.name}")
        raise AdvcliError(f"key advantage.whiten_mean_span={w.mean_span} cannot be combined with {what}: the mean "
                          "over other positions than the counted tokens is OpenRLHF's replay buffer (token-level, "
                          "two-pass, no batch normalisation)", hint="leave advantage.whiten_mean_span at mask")
    group_by = run.grouping.by
    if group_by == "auto":
        group_by = "id" if cmap.has("prompt_id") else "none"
    if group_by == "position" and not run.grouping.size:
        raise AdvcliError("grouping.by=position needs grouping.size (the number of responses per prompt)")
    needs_groups = spec.uses_groups or bool({"group", "loo"} & {run.reward.normalize.mean, run.reward.normalize.std})
    needs_groups = needs_groups or roles.norm_uses_groups(run)
    if group_by == "runs":  # AReaL: groups only where a group level asks for them
        if needs_groups:
            cmap.require("prompt_id", "grouping.by=runs groups consecutive rows of equal prompt_id")
        elif not cmap.has("prompt_id"):
            group_by = "none"
    if group_by == "id" and not needs_groups and not cmap.has("prompt_id"):
        group_by = "none"  # the flavor groups by id, but nothing this run computes reads a group
    if group_by == "id":
        cmap.require("prompt_id", f"estimator {spec.name} groups rows by it" if spec.uses_groups
                     else "reward.normalize groups rows by it")
    if needs_groups and group_by == "none":
        raise AdvcliError(f"{file}: estimator {spec.name} needs groups but the input has no "
                          f"{cmap.names.get('prompt_id', 'prompt_id')!r} column",
                          hint="map the group column with --column prompt_id=NAME, or group by position "
                               "with --set grouping.by=position --set grouping.size=N")
    token_roles = ["response_mask"] + [r for r in spec.needs if r in ("values", "sum_pi_squared",
                                                                       "teacher_log_probs", "old_log_probs",
                                                                       "ref_log_probs", "rollout_log_probs")]
    if source == "token_level_scores":
        token_roles.append("token_level_scores")
    if kl_on:
        token_roles += klr
    token_roles += [r for r in spec.optional if cmap.has(r) and roles.role_kind(r) == "tokens"]
    token_roles = list(dict.fromkeys(token_roles))
    # the other token columns the dump has: the math does not read them, but a trainer will read them
    # beside the new columns, so their lengths are checked too (values as well with check_values)
    verify_roles = [r for r, (_, kind, _) in ROLE_INFO.items() if kind == "tokens" and cmap.has(r)
                    and r not in token_roles and is_list_type(inputs.schema.field(cmap[r]).type)]
    check_device_name(device)
    plan = Plan(run=run, spec=spec, params=params, cmap=cmap, device_name=device,
                reward_source=source, components=components, kl_on=kl_on, group_by=group_by,
                token_roles=token_roles, verify_roles=verify_roles, padded=is_padded(run.padded, inputs, cmap),
                output_columns=list(NEW_COLUMNS[:3] if kl_on else NEW_COLUMNS[:2]), check_values=check_values,
                dump_tokens=inputs.list_tokens(cmap["response_mask"]))
    from ..correction.plan import plan_correction  # rollout correction: roles, output columns (advcli.correction.plan)
    warnings: list[str] = []
    if plan.padded and run.padded == "auto":  # said: the layout was read off the column's type
        warnings.append(f"{cmap.file}: column {cmap['response_mask']!r} is a fixed-size list, so its rows are read "
                        "as right-padded: a row's length is its last mask=1 position + 1 (where reward.placement="
                        "last puts the reward, and response_length counts); --ragged (padded=False) reads each "
                        "list whole")
    if run.grouping.trajectories == "last_step" and run.grouping.trajectory_copy == "last_row":
        warnings.append(STEP_WISE_010)
    if run.grouping.trajectories == "none" and spec.last_step_of_sessions and cmap.has("is_last_step") \
            and _has_inner_steps(inputs, cmap["is_last_step"]):
        warnings.append(f"{cmap.file}: column {cmap['is_last_step']!r} (is_last_step) is not read: every row is a "
                        f"row of its group for {spec.name}. To give each session (or step-wise trajectory) its last "
                        "row's advantage: --flavor advcli --set grouping.trajectories=last_step (verl's v1 "
                        "multi-output sessions: also --set grouping.trajectory_copy=first_valid); SkyRL: --set "
                        "generator.step_wise_trajectories=true")
    plan = plan_correction(plan, warnings)
    if kl_on and run.kl.input_clamp is not None:
        others = set(spec.needs) | ({"old_log_probs", "rollout_log_probs"} if plan.correction is not None else set())
        plan = dataclasses.replace(plan, neg_inf_roles=tuple(r for r in klr if r not in others))
    # a −inf rollout log-prob (the engine gave the sampled token probability 0) where only verl's correction reads
    # it: verl clamps old − rollout = +inf to +20 first (rollout_corr_helper.py L262/L575/L585 @1dda039b)
    if plan.correction is not None and plan.correction.gate is None and "rollout_log_probs" not in spec.needs \
            and not (kl_on and "rollout_log_probs" in klr):
        plan = dataclasses.replace(plan, neg_inf_roles=(*plan.neg_inf_roles, "rollout_log_probs"))
    token_weights_read = (plan.correction is not None and plan.correction.weights and plan.correction.level == "token"
                          and "rollout_is_weights" in (*spec.needs, *spec.optional))
    if plan.correction is not None and plan.correction.gate is None and not token_weights_read:
        # verl's correction (masked_sum throughout)
        # a log-prob the estimator or the KL reads is checked at every token (verl's kld·mask: NaN·0 = NaN), and
        # both where the estimator reads token-level weights (verl's optimal_token_baseline: w·rollout_is_weights²,
        # then a cumsum over the masked positions, core_algos.py L933/L937 @1dda039b: a NaN weight at a mask=0
        # token spreads)
        read_elsewhere = set(spec.needs) | (set(klr) if kl_on else set())
        plan = dataclasses.replace(plan, masked_only_roles=tuple(
            r for r in ("old_log_probs", "rollout_log_probs") if r not in read_elsewhere))
    return dataclasses.replace(plan, warnings=tuple(warnings)) if warnings else plan


def _has_inner_steps(inputs: InputSet, column: str) -> bool:
    """Whether the bool column ``column`` (is_last_step) is false on some row: a session or trajectory of more than
    one row (a dump of single-output sessions, every row its session's last, changes nothing when it is not read)."""
    import pyarrow.compute as pc

    for _, _, batch in inputs.iter_batches([column], 65536, prefetch=0):
        if pc.any(pc.invert(pc.fill_null(batch.column(0).cast(pa.bool_()), True))).as_py():
            return True
    return False


# token_level_rewards only when KL enters the reward; the last two from the rollout correction
NEW_COLUMNS = ("advantages", "returns", "token_level_rewards", "rollout_is_weights", "response_mask_after_rs")


def choose_output_columns(plan: Plan, wanted: list[str] | str | None) -> Plan:
    """The plan with its new columns restricted to ``wanted`` (names or one comma-separated string; None: all
    the run produces — advantages, returns, and token_level_rewards when KL enters the reward)."""
    if wanted is None:
        return plan
    if isinstance(wanted, str):
        wanted = [w.strip() for w in wanted.split(",") if w.strip()]
    from ..errors import did_you_mean

    for w in wanted:
        if w not in NEW_COLUMNS:
            raise AdvcliError(f"--write-columns: unknown column {w!r}; expected some of "
                              f"{', '.join(NEW_COLUMNS)}.{did_you_mean(w, NEW_COLUMNS)}")
        if w not in plan.output_columns:
            why = "KL does not enter the reward" if w == "token_level_rewards" else (
                "no rollout correction: it needs rollout_log_probs" if w == "response_mask_after_rs" else
                "no IS weights: algorithm.rollout_correction.rollout_is is not set")
            raise AdvcliError(f"--write-columns: this run produces no {w!r} ({why})",
                              hint=f"the run produces {', '.join(plan.output_columns)}")
    if not wanted:
        raise AdvcliError("--write-columns: name at least one of " + ", ".join(plan.output_columns))
    return dataclasses.replace(plan, output_columns=tuple(c for c in plan.output_columns if c in wanted))


def expand_components(components: list, names: list[str], file: str) -> list[str]:
    """A component name with ``*`` stands for every matching column, sorted by name (NeMo RL's GDPO
    takes every ``reward/*`` key, sorted: nemo_rl/algorithms/utils.py L35-39 @7ea279ab); one with ``{n}``
    for every column with a number there, sorted by that number (NeMo RL v0.6.0-v0.7.0: the keys ``reward``
    + digits, sorted by their number, get_gdpo_reward_component_keys, utils.py L35-38 @v0.7.0)."""
    import fnmatch
    import re

    out: list[str] = []
    for c in components:
        c = str(c)
        if "{n}" in c:
            head, _, tail = c.partition("{n}")
            rx = re.compile(re.escape(head) + r"(\d+)" + re.escape(tail) + r"\Z")
            numbered = [(int(m.group(1)), n) for n in names for m in [rx.match(n)] if m]
            hits = [n for _, n in sorted(numbered)]
            if not hits:
                raise AdvcliError(f"{file}: no column matches the reward components pattern {c!r} ({{n}}: a "
                                  f"number). Columns present: {', '.join(names)}")
            out += hits
        elif "*" in c:
            hits = sorted(n for n in names if fnmatch.fnmatchcase(n, c))
            if not hits:
                raise AdvcliError(f"{file}: no column matches the reward components pattern {c!r}. "
                                  f"Columns present: {', '.join(names)}")
            out += hits
        else:
            out.append(c)
    return list(dict.fromkeys(out))


def is_padded(setting, inputs: InputSet, cmap: ColumnMap) -> bool:
    """``padded``: true, false, or ``auto`` (true when the mask column is a fixed-size list)."""
    if setting == "auto":
        return pa.types.is_fixed_size_list(inputs.schema.field(cmap["response_mask"]).type)
    return bool(setting)


def open_and_plan(input_specs: list[str], cfg: dict, column_overrides: dict[str, str] | None, device: str,
                  chunk_rows: int | None, output_mode: str, write_columns: list[str] | str | None,
                  check_values: bool = False):
    """(InputSet, Plan) of a run, every engine's: the arguments checked, the inputs opened, the
    configuration planned against their schema, the new columns to write chosen (``check_values``:
    :attr:`Plan.check_values`, ``advcli validate``)."""
    if chunk_rows is not None and chunk_rows < 1:
        raise AdvcliError(f"--chunk-rows must be at least 1 (got {chunk_rows})")
    from ..io.modes import check_output_mode

    check_output_mode(output_mode)
    inputs = InputSet.open(input_specs)
    plan = choose_output_columns(make_plan(cfg, inputs, column_overrides or {}, device, check_values), write_columns)
    return inputs, _warn_replaced(plan, inputs, output_mode)


def _warn_replaced(plan: Plan, inputs: InputSet, output_mode: str) -> Plan:
    """A full output replaces an input column named like a new one: said when the input is not an advcli output
    (whose own columns a rerun replaces, as asked), since there they are values a trainer logged."""
    from ..io.arrays import provenance

    same = [c for c in plan.output_columns if c in inputs.schema.names]
    if output_mode != "full" or not same or provenance(inputs.schema) is not None:
        return plan
    msg = (f"replaced_columns: the input's {', '.join(same)} (not written by advcli: values a trainer logged?) are "
           "replaced by the recomputed ones in the output; the input keeps them. To have both in one file, rename "
           "them first, or write --output-mode sidecar (the new columns and row_index, to join on)")
    return dataclasses.replace(plan, warnings=(*plan.warnings, msg))


def strided_groups(plan) -> bool:
    """Positional groups laid out strided (grouping.layout=strided) with a reward normalisation that reads the
    groups: the [G, n] reshape of consecutive blocks does not apply, the group codes do."""
    ncfg = plan.run.reward.normalize
    return plan.run.grouping.layout == "strided" and (ncfg.mean in ("group", "loo") or ncfg.std == "group")
