"""The column roles: every part an input column can play, with its default name, kind and meaning.

One table, read by the configuration (``--column ROLE=NAME`` checks), the column detection
(:mod:`advcli.config.columns`) and the plan. No imports: ``advcli --help`` and the light commands read it freely.
"""
from __future__ import annotations

# role -> (default column name, kind: key | scalar | tokens | int, meaning)
ROLE_INFO: dict[str, tuple[str, str, str]] = {
    "prompt_id": ("prompt_id", "key", "group key (string or integer)"),
    "reward": ("reward", "scalar", "response-level reward"),
    "token_level_scores": ("token_level_scores", "tokens", "token-level scores (verl)"),
    "response_mask": ("response_mask", "tokens", "1 = trained token"),
    "old_log_probs": ("old_log_probs", "tokens", "policy log-probs of the sampled tokens"),
    "ref_log_probs": ("ref_log_probs", "tokens", "reference log-probs"),
    "values": ("values", "tokens", "critic values"),
    "reward_baseline": ("reward_baseline", "scalar", "greedy response reward (ReMax)"),
    "sum_pi_squared": ("sum_pi_squared", "tokens", "Σ_v π(v)² per token (optimal token baselines)"),
    "teacher_log_probs": ("teacher_log_probs", "tokens", "teacher log-probs (NeMo opd)"),
    "rollout_is_weights": ("rollout_is_weights", "tokens", "rollout importance-sampling weights (verl "
                           "optimal token baselines, optional)"),
    "rollout_log_probs": ("rollout_log_probs", "tokens", "the inference engine's log-probs of the sampled tokens "
                          "(rollout correction; slime --use-rollout-logprobs; AReaL's KL)"),
    "truncated": ("truncated", "scalar", "true when the response was cut off (no EOS; vLLM's finish_reason "
                  "'length'): AReaL bootstraps its GAE from bootstrap_value and mask_no_eos_with_zero zeroes its "
                  "reward; OpenRLHF's and NeMo RL's stop-properly penalty scales it"),
    "bootstrap_value": ("bootstrap_value", "scalar", "critic value after a truncated response's last token "
                        "(AReaL's values[W−1])"),
    "turn_ids": ("turn_ids", "tokens", "turn index of each token (≥ 0 on trained tokens; AReaL turn-level GAE)"),
    "step": ("step", "int", "training step: each step is its own batch"),
    "accuracy": ("acc", "scalar", "correctness of the response, 1 = correct (verl's reward extra-info `acc`; "
                 "CoDaPO's difficulty)"),
    "domain": ("domain", "key", "ROLL domain"),
    # per-trace inputs of prime-rl's estimators
    "trainable": ("trainable", "scalar", "false (0) = errored or untrainable trace: left out of every statistic, "
                  "advantage 0 (prime-rl); missing = every row trainable"),
    "sample_mask": ("sample_loss_mask", "scalar", "0 = a row the trainer left out of the loss (NeMo RL's "
                    "sample_loss_mask): out of grpo's group baseline and std where valid_mask is on (NeMo RL "
                    "#3837); missing = every row counts"),
    "num_output_tokens": ("num_output_tokens", "scalar", "provider usage completion tokens of the trace "
                          "(prime-rl length penalty)"),
    "num_total_tokens": ("num_total_tokens", "scalar", "provider usage prompt + cached + completion tokens of "
                         "the trace (prime-rl length penalty)"),
    "num_turns": ("num_turns", "scalar", "sampled turns of the trace (prime-rl length penalty)"),
    "agent_name": ("agent_name", "key", "agent role of the trace (prime-rl hierarchical_grpo, rae)"),
    "episode_id": ("episode_id", "key", "episode the trace belongs to (prime-rl hierarchical_grpo)"),
    "is_padding": ("is_padding", "scalar", "true on a synthetic padding row (verl's V1 trainer pads a batch to its "
                   "DP/mini-batch multiple, uid pad<hex>_<i>_0): in the batch for the advantages, out of every "
                   "figure, filter and group count"),
    "is_last_step": ("is_last_step", "scalar", "true on the last turn of a step-wise trajectory (SkyRL "
                     "generator.step_wise_trajectories; rows of a trajectory are contiguous)"),
}

ROLES: tuple[str, ...] = tuple(ROLE_INFO)


# (column names) -> the hint's words for columns that are a trainer dump's, '' else: set by advcli.formats when
# inputs are opened (formats.registry.dump_like_hint), which the config may not import; read by columns.require
DUMP_HINT = None
