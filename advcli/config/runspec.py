"""The run spec: the resolved configuration of one run, typed and frozen, one small dataclass per section.

The dataclasses below *are* the declaration of the canonical configuration's keys: each field made by
:func:`key` carries its default, type (``kind``), choices and doc, and its dotted key is the section's path plus
the field's name (``reward.normalize.mean`` is ``run.reward.normalize.mean``; the whitening section's fields sit
under ``advantage.`` as ``whiten_*`` keys, ``advantage.whiten_eps`` is ``run.whitening.eps``).
:func:`declared_keys` walks them; :data:`advcli.config.SCHEMA` (``--set`` validation, ``explain --keys``, the
refusal messages, docs/configuration.md) is made from it, so a key is declared here once.
:func:`RunSpec.from_config` reads a canonical configuration dict (flavor keys translated, values checked) once,
and each pipeline stage is handed the section it reads (``plan.run.reward``, ``plan.run.kl``, ...).
Nothing here imports torch.
"""
from __future__ import annotations

import copyreg
import dataclasses
import types
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from ..records import record


def frozen_mapping(m: Mapping | None) -> Mapping:
    """A read-only view of a copy of ``m`` (a run spec's and a plan's mappings cannot be changed in place)."""
    return m if isinstance(m, types.MappingProxyType) else types.MappingProxyType(dict(m or {}))


# a read-only view travels to Ray's workers and the server's children pickled (and is copied) as the dict it shows
copyreg.pickle(types.MappingProxyType, lambda m: (frozen_mapping, (dict(m),)))


def frozen_value(value: Any) -> Any:
    """A configuration value made read-only, all the way down: a list becomes a tuple and a dict a read-only
    mapping (``reward.components``, ``rollout_correction.rs``' [name, lo, hi] entries); anything else as it is."""
    if isinstance(value, (list, tuple)):
        return tuple(frozen_value(v) for v in value)
    if isinstance(value, dict):
        return types.MappingProxyType({k: frozen_value(v) for k, v in value.items()})
    return value


def key(default: Any, doc: str, choices: tuple | None = None, kind: str = "any", *, name: str | None = None):
    """A configuration key's one declaration: a dataclass field with its default, doc, choices and kind
    (``bool``, ``float``, ``int``, ``str``, ``clip``, ``list``, ``any``); ``name``: the key's last part when it is
    not the field's name. A list default is held as a tuple, as every list a spec holds (:func:`frozen_value`)."""
    meta = {"doc": doc, "choices": choices, "kind": kind, "name": name}
    return field(default=frozen_value(default), metadata=meta)


def section(cls, path: str | None = None):
    """A nested section of keys; ``path``: its dotted prefix when it is not the field's name ("" for the top
    level's own keys)."""
    return field(default_factory=cls, metadata={"section": path})


@record(frozen=True)
class Grouping:
    """How rows form groups (``grouping.*``): by id, position or runs, their layout and scope, and trajectories."""

    by: str = key('auto', 'how rows form groups: `id` (the prompt_id column, rows anywhere in the file), '
            '`position` (consecutive blocks of grouping.size rows), `runs` (each maximal run of consecutive rows '
            "with equal prompt_id, any size: AReaL's per-prompt trajectory dicts), `none`, or `auto` (id when the "
            'column exists)', ('auto', 'id', 'position', 'runs', 'none'), kind='str')
    size: int | None = key(None, 'group size for grouping.by=position', kind='int')
    layout: str = key('blocks', 'with grouping.by=position, how a scope\'s rows form groups of grouping.size: '
            '`blocks` (grouping.size consecutive rows per prompt, view(-1, n)) or `strided` (the scope is '
            'grouping.size copies of its prompts one after another, so row r of a scope of S rows is in group '
            "r mod S/grouping.size: TRL's old RLOOTrainer, queries.repeat(rloo_k, 1) and reshape(rloo_k, -1))",
            ('blocks', 'strided'), kind='str')
    fallback: str = key('error', 'with grouping.by=position, a scope whose row count is not grouping.scope_rows '
            '(null: not a multiple of grouping.size): `error` (the run stops), `scope` (that scope is one group: '
            "slime's silent whole-batch fallback, rollout.py L620-623) or `tail` (blocks of grouping.size rows and "
            "one short block of the rest: AReaL 1.0.4's remainder slice, which a NormConfig's `slices` leaves at "
            'mean 0 and std 0, AReaL #1673)', ('error', 'scope', 'tail'), kind='str')
    id_check: str = key('strict', 'with grouping.by=position and a prompt_id column whose ids disagree with the '
            'blocks (a block holds several ids, or an id spans several blocks): `strict` stops the run, `warn` '
            'keeps the blocks and adds a warning (slime, which never reads the ids)', ('strict', 'warn'), kind='str')
    keep_mean_between: list | None = key(None, '[low, high]: the groups whose mean reward (the reward column as '
            'read, summed in float64 in row order; a NaN drops its group) is not strictly inside (low, high) are taken '
            'out before anything is computed, as if never sampled, and the output holds the kept rows (OpenRLHF '
            'dynamic filtering; the run\'s groups: blocks of grouping.size rows with grouping.by=position, or none '
            'with a grouping.size; else the prompt_id groups of each step); null: off', kind='list')
    scope_rows: int | None = key(None, 'with grouping.by=position: the rows every scope must have for the blocks '
            'of grouping.size to apply (slime: rollout_batch_size × n_samples_per_prompt); null: any multiple of '
            'grouping.size', kind='int')
    scope: str = key('step', 'scope of batch statistics: `step` (each value of the step column is its own batch, '
            'in ascending order; the whole input when there is no step column), `step_domain` (per step and '
            'domain, ROLL) or `all`', ('step', 'step_domain', 'all'), kind='str')
    trajectories: str = key('none', '`last_step`: rows are the turns of step-wise trajectories (a contiguous run '
            'of rows ending at a row whose is_last_step column is true); a row-level estimator runs on the '
            "last-step rows only (grouped by their prompt_id) and every turn of a trajectory gets its last step's "
            'value (SkyRL generator.step_wise_trajectories)', ('none', 'last_step'), kind='str')
    trajectory_copy: str = key('own_mask', "with grouping.trajectories=last_step, how a turn takes its last step's "
            "value: `own_mask` (on each of the turn's own positions: SkyRL from 0.2.0) or `last_row` (the last "
            "step's padded row copied column by column: position t of a turn gets the value where t is below the "
            "last step's length and 0 from that length on, the turn's own mask not applied: SkyRL 0.1.0, "
            "trainer.py compute_advantages_and_returns) or `first_valid` (the value the last step holds at its first "
            "valid token, on each of the turn's own positions: 0 for every turn where the last step has no valid "
            "token; verl's v1 multi-output sessions, compute_advantage_for_multi_trajectories)",
            ('own_mask', 'last_row', 'first_valid'), kind='str')


@record(frozen=True)
class RewardNormalize:
    """The row reward's normalisation before it is placed on tokens (``reward.normalize.*``)."""

    mean: str = key('none', 'subtract the `batch` or `group` mean of the row reward before it is placed on tokens, '
            "or `loo` (the mean of the group's other rows, OpenRLHF rloo)",
            ('none', 'batch', 'group', 'loo'), kind='str')
    std: str = key('none', 'divide by the `batch` or `group` std (unbiased) + eps',
            ('none', 'batch', 'group'), kind='str')
    eps: float = key(1e-06, 'epsilon added to the std', kind='float')
    centre_first: bool = key(False, 'take the std of the centred rewards r − mean (slime _post_process_rewards); '
            'the same math, other float32 bits', kind='bool')
    onepass: bool = key(False, 'the `group` mean as NeMo RL forms it (calculate_baseline_and_std_per_prompt: one '
            'matmul per group), so an all-equal non-dyadic group keeps its float32 residue; grouped by id',
            kind='bool')


@record(frozen=True)
class Overlong:
    """DAPO's overlong penalty on the row reward (``reward.overlong.*``)."""

    tokens: float | None = key(None, 'DAPO overlong penalty: r += min(−(n − (max_tokens − tokens))/tokens·factor, 0) '
            'with n = Σ mask (trained tokens), before bias/scale; null: off', kind='float')
    factor: float | None = key(None, 'overlong penalty factor', kind='float')
    max_tokens: int = key(1024, 'overlong penalty: the maximum response length', kind='int')
    length: str = key('mask', 'the n of the overlong penalty: `mask` (Σ mask, AReaL), `span` (last − first mask=1 '
            "position + 1, 0 for a row without one: OpenRLHF's response_length from 0.9.1), `first_run` (the mask's "
            "first run of ones, 0 for a row without one: NeMo RL's first assistant message), `tokens` (the row's "
            "tokens: OpenRLHF 0.8.9-0.9.0's generated ids) or `tokens_eos` (the row's tokens, + 1 where the "
            "`truncated` column is true: OpenRLHF 0.8.7-0.8.8 appends an EOS to a response without one)",
            ('mask', 'span', 'first_run', 'tokens', 'tokens_eos'), kind='str')
    cap: bool = key(False, 'cap the excess n − (max_tokens − tokens) at tokens, so the penalty is at most factor '
            '(OpenRLHF)', kind='bool')
    exact: bool = key(False, 'the penalty computed in float64 and rounded once to the reward\'s dtype before it is '
            "added (OpenRLHF's Python floats); false: computed in the reward's dtype (AReaL's tensors)", kind='bool')


@record(frozen=True)
class Reward:
    """Reward postprocessing (``reward.*``): which column, missing values, components, clip, placement."""

    source: str = key('auto', 'the row reward: `reward` (scalar column), `token_level_scores` (token list column, '
            'verl), `components` (weighted sum of reward.components) or `auto` (token_level_scores if present, '
            'else reward)', ('auto', 'reward', 'token_level_scores', 'components'), kind='str')
    nan: str = key('refuse', 'missing (null or NaN) row rewards: `refuse` (the run stops, naming the row) or '
            "`allow` (TRL: a reward function's None is NaN; NaN components count as 0 in the weighted sum, a row "
            'with no reward at all is unscorable and gets advantage 0) or `zero` (TRL 0.16.0-1.5.1: NaN components '
            'count as 0 and a row with no reward at all scores 0)', ('refuse', 'allow', 'zero'), kind='str')
    components: list | None = key(None, 'component reward columns, e.g. [acc, fmt]; a name with `*` stands for '
            'every matching column, sorted by name (NeMo gdpo: ["reward/*"]); `{n}` for a number, the columns '
            'sorted by it (NeMo RL v0.6.0-v0.7.0 gdpo: ["reward{n}"], reward1, reward2, ..., reward10)', kind='list')
    weights: list | None = key(None, 'weights of the components (default all 1)', kind='list')
    normalize: RewardNormalize = section(RewardNormalize)
    clip: Any = key(None, 'clamp of the (normalised) row reward: c for [-c, c], or [lo, hi]', kind='clip')
    overlong: Overlong = section(Overlong)
    range_map: list | None = key(None, '[source_min, source_max, target_min, target_max]: the reward column and '
            'each component, as read, become tmin + (clamp(r, smin, smax) − smin)/(smax − smin)·(tmax − tmin), '
            'before anything else (NeMo RL grpo.reward_scaling); null: off', kind='list')
    bias: float = key(0.0, 'r ← (r + bias)·scale, before normalisation', kind='float')
    scale: float = key(1.0, 'r ← (r + bias)·scale, before normalisation', kind='float')
    shape_clip: Any = key(None, 'clamp of (r + bias)·scale, before normalisation: c for [-c, c], or [lo, hi]',
            kind='clip')
    norm: Any = key(None, 'AReaL NormConfig normalisation of the row reward, instead of reward.normalize: a '
            'mapping {mean_level: batch|group|null, mean_leave1out, std_level: batch|group|null, std_unbiased, '
            'eps}; float64 statistics, std about the chosen mean, (r − mean)/(std + eps), std_level null: std 1 '
            "and eps 0; groups are grouping.by's (AReaL: runs); slices: N (AReaL 1.0.4's fixed slices of N rows: a "
            'shorter group, the rest of a step, keeps group mean and std 0)')
    no_eos_value: float | None = key(None, 'rows whose `truncated` column is true (no EOS) get this row reward '
            'instead of theirs, before normalisation (TRL 0.9-0.10 RLOOTrainer non_eos_penalty with '
            'penalty_reward_value); null: off', kind='float')
    no_eos_penalty: float | None = key(None, 'rows whose `truncated` column is true (no EOS) get their row reward '
            'minus this, before normalisation (TRL 0.11-0.21 RLOOTrainer missing_eos_penalty); null: off',
            kind='float')
    truncated_factor: float | None = key(None, 'rows whose `truncated` column is true (stopped by the length limit) '
            'get r·c for c ≥ 0, c itself for c < 0, after the overlong penalty (OpenRLHF --reward.'
            'stop_properly_penalty_coef, ProRL); null: off', kind='float')
    zero_truncated: bool = key(False, 'rows whose `truncated` column is true get row reward 0 after normalisation '
            '(AReaL mask_no_eos_with_zero)', kind='bool')
    dtype: str = key('run', "the dtype of the trainer's row rewards: every estimator sees the reward column rounded "
            'to it, and an estimator that keeps it (keeps_reward_dtype: verl\'s grpo, rloo, gpg, rloo_vectorized, '
            'opo, grpo_passk), the reward normalisation and the reward clip after it (OpenRLHF before 0.11.2, ROLL) '
            "compute in it: `run` (the run's precision), `bfloat16` / `float16` (the trainer's scores were, e.g. a "
            "custom reward manager's or a reward model's), `input` (a float16 reward column stays float16, any "
            "other the run's precision); with KL in the reward the rewards are the rounded scores − β·KL in "
            "float32, as verl's apply_kl_penalty promotes them", ('run', 'input', 'bfloat16', 'float16'), kind='str')
    promote: bool = key(False, 'with a 16-bit reward.dtype: the scores are rounded to it, then everything after runs '
            "in the run's precision (OpenRLHF 0.11.2 promotes its bf16 rewards to float32: experience_maker.py "
            'L242-245); false: the steps reward.dtype names compute in it', kind='bool')
    placement: str = key('last', 'where the row reward lands: `last` (position L_i-1, verl/ROLL) or `last_valid` '
            "(last mask=1 token, OpenRLHF/NeMo gae) or `all` (every position of the row: NeMo RL's REINFORCE++ and "
            'raw_reward)', ('last', 'last_valid', 'all'), kind='str')
    unplaced: str = key('drop', 'a row with no mask=1 token under reward.placement=last_valid: `drop` (its reward '
            "lands nowhere) or `error` (the run stops, as slime's reinforce_plus_plus asserts)",
            ('drop', 'error'), kind='str')
    empty_row: str = key('zero', 'the row score of an empty response (no token at all): `zero` (its reward lands '
            "nowhere) or `score` (verl's reward managers write it at index L−1 = −1, the padded batch's last "
            'column, so the row-sum estimators count it; token-level ones never see it) or `error` (the run stops, as '
            "SkyRL's trainer does: per_token_reward[-1] on an empty list; row rewards only)",
            ('zero', 'score', 'error'), kind='str')
    mask_placed: bool = key(False, 'multiply the placed token rewards by the mask (ROLL: a row ending in a masked '
            'token loses its reward)', kind='bool')
    whiten_tokens: bool = key(False, 'whiten the token-level rewards (after KL and kl.token_clip) over the mask=1 '
            'tokens of each scope, then multiply by the mask (ROLL whiten_rewards: unbiased, rsqrt(var + 1e-8); '
            'skipped in a scope with <= 1 valid token)', kind='bool')


@record(frozen=True)
class KL:
    """The KL penalty (``kl.*``): its estimate and clamps, the policy it reads, the coefficient and its controller."""

    in_reward: bool = key(False, 'token_level_rewards = scores − β·KL before the estimator', kind='bool')
    estimator: str = key('k1', 'per-token KL estimate of logp − ref: k1, abs, k2, k3',
            ('k1', 'abs', 'k2', 'k3'), kind='str')
    input_clamp: float | None = key(None, 'clamp of ref − logp before the estimate (verl k3: 20)', kind='float')
    output_clamp: float | None = key(None, 'clamp of the estimate (verl k3: 10)', kind='float')
    policy: str = key('old_log_probs', 'the policy log-probs the KL (and advantage.distill_coef) read: '
            "`old_log_probs` (recomputed) or `rollout_log_probs` (the inference engine's: slime "
            "--use-rollout-logprobs, AReaL's decoupled loss)", ('old_log_probs', 'rollout_log_probs'), kind='str')
    missing: str = key('refuse', 'a missing policy or reference log-prob column: `refuse`, or `zeros` (AReaL: no '
            'ref model means ref = 0)', ('refuse', 'zeros'), kind='str')
    coef: float = key(0.001, 'β (the initial β of an adaptive controller)', kind='float')
    coef_min: float | None = key(None, 'lower bound of the β a step applies (SkyRL: 0, rewards −= kl·max(0, β)); '
            'an adaptive controller keeps updating its own, unbounded value', kind='float')
    controller: str = key('fixed', '`fixed` or `adaptive` (Ziegler et al.: β ← β·(1 + clip(kl/target − 1, '
            '±0.2)·n/horizon) after each step; a step uses β from before its update)',
            ('fixed', 'adaptive'), kind='str')
    target: float = key(0.1, 'adaptive controller target KL', kind='float')
    horizon: float = key(10000, 'adaptive controller horizon', kind='float')
    update_rows: int | None = key(None, "the n of the adaptive controller's update: null = the step's rows (verl, "
            'ROLL, SkyRL); a count (OpenRLHF: rollout.batch_size × n_samples_per_prompt)', kind='int')
    mask: bool = key(True, 'multiply the KL by the response mask before subtracting it', kind='bool')
    score_sum: str = key('exact', "how a row-level estimator's score s_i = Σ_t token_level_rewards is summed when "
            'KL enters the reward: `exact` (r − β·Σ_t KL, the sum in float64, rounded once), `right_aligned` '
            "(the float32 torch.sum of the row laid out right-aligned in its step's [B, longest row] grid, as "
            'SkyRL sums it) or `left_aligned` (the same with the row right-padded, as verl sums it): the same last '
            'bits, which a group of equal rewards, told apart only by the KL term, divides by its tiny std',
            ('exact', 'right_aligned', 'left_aligned'), kind='str')
    token_clip: Any = key(None, "clamp of the token-level rewards after the KL term (ROLL's second reward_clip)",
            kind='clip')
    skip_flat_groups: str = key('off', "rows of groups that carry no reward signal get no KL term (SkyRL's "
            'zero_variance_filter zeroes their loss masks before the penalty; their rows then count as KL 0 in an '
            'adaptive controller): `off`; `range` (SkyRL from 0.3.0: a group with more than one live row, Σ mask > 0, '
            'whose live rows\' rewards lie within kl.flat_tol of each other); `std` (SkyRL 0.1.0-0.2.0: a group of '
            "more than one row whose rewards' numpy float64 std is 0). Groups: the run's, else its steps; rewards: "
            'the reward column as read, in float64', ('off', 'range', 'std'), kind='str')
    flat_tol: float = key(0.0, 'kl.skip_flat_groups=range: the largest max − min of a flat group (SkyRL '
            'zero_variance_filter_tol)', kind='float')


@record(frozen=True)
class Correction:
    """Rollout correction (``rollout_correction.*``): importance weights and rejection sampling."""

    mode: str = key('off', '`off`; `auto`: run when the input has a rollout_log_probs column (verl: whenever the '
            'batch holds them); `on`: require it', ('off', 'auto', 'on'), kind='str')
    is_level: Any = key(None, 'IS weights: null (none), `token` exp(clamp(lr, ±20)), `sequence` exp(clamp(Σ lr·m, '
            '±20)), `geometric` exp(clamp(Σ lr·m/(Σm + 1e-8), ±20)) (verl 0.6.0); lr = old_log_probs − '
            'rollout_log_probs', (None, 'token', 'sequence', 'geometric'))
    is_upper: float = key(2.0, "TIS: w = min(w, upper); with is_lower, IcePop's upper bound (null: no weights)",
            kind='float')
    is_lower: float | None = key(None, 'IcePop: weights outside [is_lower, is_upper] become 0 (null: TIS)',
            kind='float')
    is_batch_normalize: bool = key(False, 'divide the weights by their step mean (token: token-weighted; sequence: '
            'one vote per non-empty row)', kind='bool')
    rs: list | None = key(None, "rejection options, each [name, lo, hi] on the option's statistic (name token_kX, "
            'seq_sum_kX, seq_mean_kX, seq_max_kX; k1 = −clamp(lr), k2 = ½l², k3 = eˡ−1−l; lo null: no lower test); '
            'a row or token is kept when every option passes', kind='list')
    gate_level: Any = key(None, "OpenRLHF's IS correction: null (off), `token` (each token's statistic) or `seq` "
            "(the row's masked mean: the ratio's geometric mean, a divergence's mean); with it, is_level and rs "
            'stay null', (None, 'token', 'seq'))
    gate_mode: str = key('mask', '`mask`: a unit outside [low, high] gets coefficient 0, the others their token '
            'ratio exp(lr) (unclamped); `clip`: coefficient clamp(exp(lr), low, high) (token level, ratio gate '
            'only)', ('mask', 'clip'), kind='str')
    gate_stat: str = key('ratio', 'the gated statistic: `ratio` exp(lr); `binary_kl` p·log(p/q) + '
            '(1−p)·log((1−p)/(1−q)); `tv` |p − q|; p = exp(rollout_log_probs), q = exp(old_log_probs), both '
            'clamped to [1e-6, 1 − 1e-6]', ('ratio', 'binary_kl', 'tv'), kind='str')
    gate_bounds: list = key([0.5, 5.0], '[low, high] on the gated statistic (inclusive)', kind='list')
    is_metrics: str = key('applied', "the IS metrics: `applied` (of the weights as applied, the rows' fractions "
            'high/low of the raw ratios: verl ≥ 0.9.0), `applied_rows` (those fractions too of the applied weights: '
            'verl 0.8.0) or `raw` (of the ratios before truncation, std and ESS of them clamped to [lower, upper]: '
            'verl 0.6.0-0.7.1)', ('applied', 'applied_rows', 'raw'), kind='str')
    is_metrics_lower: float | None = key(None, "the metrics' lower threshold (null: is_lower, else 1/is_upper)",
            kind='float')
    norm_rows: str = key('valid', 'sequence-level batch normalisation: the mean over the rows with a mask=1 token '
            '(`valid`) or over every row (`all`, verl 0.6.1)', ('valid', 'all'), kind='str')
    veto: float | None = key(None, 'per-token veto (verl 0.6.0-0.7.0): a row with a mask=1 token whose log-ratio '
            'is below log(veto) is rejected whole (null: off)', kind='float')
    veto_metrics: bool = key(False, "report the veto's two metrics (0 when it is off; verl 0.6.0-0.7.0)",
            kind='bool')
    rejects: str = key('mask', 'what the veto (and the IcePop band) act on: `mask` (the veto rejects rows from '
            'the mask the estimator sees) or `weights` (they zero the weights, the mask stays: verl 0.6.0)',
            ('mask', 'weights'), kind='str')
    write_weights: bool = key(True, 'write the IS weights (false: metrics only, verl 0.6.0 without '
            'algorithm.rollout_is)', kind='bool')
    metric_names: str = key('rollout_corr', "the metrics' prefix: `rollout_corr` or `mismatch` (verl 0.6.0: "
            'mismatch/*, the off-policy figures as mismatch_*, no χ²)', ('rollout_corr', 'mismatch'), kind='str')
    bypass: bool = key(False, "verl's bypass mode: the input's rollout_log_probs stand for old_log_probs in every "
            'reader (the KL in the reward, the estimators), as its apply_bypass_mode sets them; the correction itself '
            'runs in the actor loss, so none here', kind='bool')
    ignored: tuple = ()  # flavor settings the correction does not model, reported as warnings (not a key)
    unused: tuple = ()  # (column role, why the flavor does not read it with the correction off): a warning


@record(frozen=True)
class Whitening:
    """``advantage.whiten*`` and ``advantage.batch_normalize``: the batch-wide normalisation of the advantages."""
    whiten: bool = key(False, 'whiten the advantages over the mask=1 tokens of each scope', kind='bool')
    one_pass: bool = key(False, "whitening statistics in one pass in the run's precision: S1 = Σxm, S2 = Σx²m, N = "
            'Σm rounded to it, var = S2/N − (S1/N)², × N/(N−1) only when N ≥ 2 (slime distributed_masked_whiten; '
            'float32 cancels when |μ| ≫ σ)', kind='bool', name='whiten_one_pass')
    unbiased: bool = key(True, 'unbiased (N/(N−1)) variance in whitening', kind='bool', name='whiten_unbiased')
    eps: float = key(1e-08, 'whitening epsilon', kind='float', name='whiten_eps')
    eps_mode: str = key('add', '`add`: rsqrt(var + eps); `max`: rsqrt(max(var, eps))',
            ('add', 'max'), kind='str', name='whiten_eps_mode')
    divisor: str = key('n_eps', 'what the masked mean and variance divide their sums by: `n_eps` Σm + 1e-8 (verl, '
            'ROLL, NeMo gae; rounded to float32 in a float32 run, as their float32 tensors hold it, so the 1e-8 '
            'counts only for Σm = 0), `n` Σm (OpenRLHF, NeMo reinforce_plus_plus: a scope with no valid token '
            'gives NaN), `max1` max(Σm, 1) (NeMo raw_reward)', ('n_eps', 'n', 'max1'), kind='str',
            name='whiten_divisor')
    scale: bool = key(True, 'divide by the std (false: centre only)', kind='bool', name='whiten_scale')
    small: str = key('error', 'a scope with <= 1 valid token: `error` (verl masked_var raises), `skip` (ROLL: no '
            'whitening in that scope), `compute` (OpenRLHF, NeMo: no check; an unbiased variance of one token is '
            'NaN, none at all NaN or 0 by whiten_divisor), `error_empty` (slime: only a scope with no valid '
            'token raises) or `error_one` (ROLL before #476: a scope with one valid token raises, one with none is '
            'left unwhitened)', ('error', 'skip', 'compute', 'error_empty', 'error_one'), kind='str',
            name='whiten_small')
    mask: str = key('response_mask', 'the tokens the whitening and batch_normalize statistics count: '
            '`response_mask` (the mask=1 tokens) or `all` (every position of the row: SkyRL, whose estimators take '
            'a response mask that covers observation tokens; its loss mask, the response_mask column, masks only '
            'the KL term)', ('response_mask', 'all'), kind='str', name='whiten_mask')
    mean_span: str = key('mask', "the positions whose advantages the whitening mean sums (its count and the variance "
            'stay those of advantage.whiten_mask): `mask` the counted tokens; `row` every position of the row, '
            "mask=0 holes included (OpenRLHF 0.7.0's replay buffer: Σ A over all positions / Σm); `prefix` only the "
            "row's first Σm positions for every statistic, mean over all of them, count and variance over their "
            "mask=1 tokens, and 0 written beyond them, whitened or not (OpenRLHF before 0.7.0: "
            "remove_padding_in_sequences cuts Σ(1 − m) positions off the end of each row); `row` and `prefix` with a "
            "token-level estimator only", ('mask', 'row', 'prefix'),
            kind='str', name='whiten_mean_span')
    overflow: float | None = key(None, "the largest sum the trainer's whitening holds (verl with float16 scores: "
            '65504, its masked sums in float16): a scope whose Σ|x|·m or Σ(x − mean)²·m passes it is refused, the '
            "trainer's result being inf/NaN or every advantage 0 (null: no limit)", kind='float',
            name='whiten_overflow')
    batch_normalize: bool = key(False, 'after the estimator (and its whitening), per scope: mean = Σ A / (B·T) '
            'over the [B rows, T = longest row] grid whose padding cells are 0, var = Σ (A − mean)² / N over the N '
            'tokens advantage.whiten_mask counts (biased), A ← (A − mean)·rsqrt(max(var, 1e-8)) (SkyRL '
            'advantage_batch_normalize); returns unchanged', kind='bool')

    @property
    def on(self) -> bool:
        return bool(self.whiten or self.batch_normalize)


@record(frozen=True)
class Advantage:
    """What happens to the estimator's advantages before they are written (``advantage.*`` but whitening)."""
    distill_coef: float | None = key(None, 'on-policy distillation term after the estimator, before whitening: A_t '
            '−= coef·(logp_t − teacher_log_probs_t) on every position (slime --use-opd, loss.py L663-700); a '
            'token-level estimator only; null: off', kind='float')
    distill_returns: bool = key(False, 'the distillation term also lands in the returns (slime '
            "reinforce_plus_plus_baseline, whose returns are the advantages' list)", kind='bool')
    remask: Any = key(False, 'zero the final advantages at mask=0 positions: `true` multiplies by the mask (A·M: a '
            'NaN or inf there stays NaN; verl, ROLL), `fill` sets them to 0 whatever they hold (masked_fill; NeMo '
            'gae)', (False, True, 'fill'))
    clip: Any = key(None, 'clamp of the final advantages: c for [-c, c], or [lo, hi]', kind='clip')
    drop_length: int | None = key(None, 'rows whose Σ mask equals this length (cut at the maximum) are left out of '
            'the advantage: mask 0 for the estimator, the whitening and the written advantages, returns and token '
            'rewards, not for the reward normalisation or the KL (ROLL max_len_mask); null: off', kind='int')
    drop_group_mean: list | None = key(None, '[low, high]: the rows of a group of more than one row whose mean row '
            'score (raw, in its dtype) is not strictly inside (low, high) are left out of the advantage, as '
            'drop_length (ROLL difficulty_mask); null: off', kind='list')
    keep_scores_below: float | None = key(None, 'only rows scored 1, or 0 with Σ mask below this, stay in the '
            'advantage; the others (a score of 0.5 too) are left out, as drop_length (ROLL error_max_len_clip with '
            'error_max_len_threshold); null: off', kind='float')
    returns: str = key('estimator', "the `returns` column: the estimator's returns (`estimator`) or the final "
            'advantages (`advantages`: verl gdpo and reinforce_plus_plus_baseline return the whitened advantages)',
            ('estimator', 'advantages'), kind='str')


@record(frozen=True)
class Estimator:
    """The advantage estimator by name and the parameters the configuration sets for it (``estimator.*``)."""

    name: str = "grpo"
    given: Mapping = field(default_factory=dict)  # the parameters the configuration sets (the estimator resolves them)

    def __post_init__(self):
        object.__setattr__(self, "given", frozen_mapping(self.given))  # read-only, whatever it was given


@record(frozen=True)
class RunSpec:
    """One run's resolved configuration: every section, the column map, and the configuration it came from."""

    grouping: Grouping = section(Grouping)
    reward: Reward = section(Reward)
    kl: KL = section(KL)
    correction: Correction = section(Correction, "rollout_correction")
    whitening: Whitening = section(Whitening, "advantage")
    advantage: Advantage = section(Advantage)
    estimator: Estimator = field(default_factory=Estimator)
    columns: Mapping = field(default_factory=dict)  # role -> column name (the configuration's `columns` section)
    padded: Any = key("auto", "token lists are right-padded to a fixed width with mask 0: a row's length L_i "
                      "(where `reward.placement=last` puts the reward) is then its last mask=1 position + 1. "
                      "`auto`: true when the mask column is a fixed-size list", ("auto", True, False))
    diagnostics_rule: str | None = key(None, "the framework rule the float32 diagnostics name for the estimator's "
                                       "artefacts (a flavor sets it; default: the estimator's own source)",
                                       kind="str", name="diagnostics.rule")
    precision: str = key("float32", "`float32` reproduces the frameworks (float32 artefacts included); "
                         "`float64` computes the intended math", ("float32", "float64"), kind="str")
    # the canonical configuration it was resolved from: recorded in the output metadata, read by no stage
    source: Mapping = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        """Its mappings read-only (copies: the caller's dict changed afterwards does not change the spec)."""
        object.__setattr__(self, "columns", frozen_mapping(self.columns))
        object.__setattr__(self, "source", frozen_mapping(self.source))

    @classmethod
    def from_config(cls, cfg: dict) -> RunSpec:
        """The spec of a canonical configuration dict (``config.default_config`` overlaid and checked): each
        declared key read once from its dotted path; a key the dict lacks keeps its declared default."""
        kw = _read(cls, cfg, "")
        rc = cfg.get("rollout_correction") or {}
        kw["correction"] = dataclasses.replace(kw["correction"], ignored=tuple(rc.get("ignored") or ()),
                                               unused=tuple(tuple(u) for u in rc.get("unused") or ()))
        est = dict(cfg.get("estimator") or {})
        return cls(**kw, estimator=Estimator(name=est.pop("name", "grpo"), given=est),
                   columns=dict(cfg.get("columns") or {}), source=cfg)


_MISSING = object()


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _lookup(cfg: dict, path: str):
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _walk(cls, prefix: str):
    """(field, its dotted key or section path, is_section) of a declared dataclass, in declaration order."""
    for f in dataclasses.fields(cls):
        if "section" in f.metadata:
            path = f.metadata["section"]
            yield f, (_join(prefix, f.name) if path is None else path), True
        elif "doc" in f.metadata:
            yield f, _join(prefix, f.metadata["name"] or f.name), False


def _read(cls, cfg: dict, prefix: str) -> dict:
    kw = {}
    for f, path, is_section in _walk(cls, prefix):
        if is_section:
            kw[f.name] = f.default_factory(**_read(f.default_factory, cfg, path))
        else:
            value = _lookup(cfg, path)
            if value is not _MISSING:
                kw[f.name] = frozen_value(value) if isinstance(value, (list, tuple)) else value
    return kw


def declared_keys(cls=RunSpec, prefix: str = "") -> dict[str, dataclasses.Field]:
    """Every configuration key, dotted path -> its declaring field (metadata: doc, choices, kind), in the
    declaration's order."""
    out: dict[str, dataclasses.Field] = {}
    for f, path, is_section in _walk(cls, prefix):
        if is_section:
            out.update(declared_keys(f.default_factory, path))
        else:
            out[path] = f
    return out


def declared_default(f: dataclasses.Field) -> Any:
    """The default a declared field gives, as the configuration dict holds it (a list: a fresh copy of the spec's
    tuple; the spec itself holds the tuple)."""
    value = f.default_factory() if f.default is dataclasses.MISSING else f.default
    return thawed(value)


def thawed(value: Any) -> Any:
    """A value of the spec as the configuration (and the user) writes it: tuples, and lists of them, as lists."""
    return [thawed(v) for v in value] if isinstance(value, (list, tuple)) else value


def recorded_config(run: RunSpec, params: dict) -> dict:
    """The resolved canonical configuration as the output metadata records it, once: every section with its
    defaults filled in, and ``estimator`` holding the name with every parameter resolved (``params``)."""
    out = {k: v for k, v in run.source.items() if k != "estimator"}
    out["estimator"] = {"name": run.estimator.name, **params}
    return out

