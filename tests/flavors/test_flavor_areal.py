"""--flavor areal against numbers produced by AReaL's own code, and the properties it must keep.

EXPECTED below was computed by running AReaL's unmodified ``PPOActor._compute_advantages``
(areal/trainer/ppo/actor.py), with ``Normalization`` / ``KLEstimator`` (areal/utils/data.py),
``_compute_token_level_gae`` / ``_compute_turn_level_gae`` (gae.py), the λ functions (lambda_fn.py)
and ``reward_overlong_penalty`` (utils/functional/functional.py) at areal-project/AReaL @
cbff54d645d2cd8ee1f1c358a82f3f473588433d, on CPU (torch 2.13, float32), on ROWS: each step one
batch, full sequences = P_i prompt tokens + the response, padded to the batch width W, with the
rows flagged ``truncated`` given P_i = W − L_i (AReaL flags exactly the rows whose length is W) and
``values[:, W−1]`` = their ``bootstrap_value``; ``traj_group_sizes`` = the runs of equal prompt_id.
Outputs were read at the response positions and rounded to 9 significant digits. These inputs are
well conditioned (no near-equal normalised groups), so the comparison tolerance is far below 1e-4.
"""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from _flavor_rows import assert_rows_close

import advcli
from advcli.errors import AdvcliError

# (step, prompt_id, reward, mask, rollout_log_probs, old_log_probs, ref_log_probs, values, truncated,
#  bootstrap_value, turn_ids). Step 0: groups a (3 rows), b (2 rows, equal rewards 0.7), c (alone);
# step 1: d (3 rows) and a again (alone: a new trajectory group). Interior masked spans, masked
# tails (rows 0, 3, 6: their outcome is lost by GAE), a row of length 1, a first masked token, a
# log-ratio past the ±10 KL clamp (row 5), truncated rows 1, 3 and 7.
ROWS = [
 (0, "a", 1.0, [1, 1, 1, 0], [-0.5, -1.0, -0.2, -3.0], [-0.6, -0.9, -0.3, -2.0], [-0.7, -0.9, -2.5, -1.0], [0.1, 0.2, 0.3, 0.4], False, 0.0, [0, 0, 1, -1]),
 (0, "a", 0.0, [1], [-0.3], [-0.35], [-0.2], [0.5], True, 0.8, [0]),
 (0, "a", 1.0, [1, 0, 0, 1, 1], [-1.0, -2.0, -0.5, -0.1, -0.3], [-1.2, -2.0, -0.4, -0.2, -0.3], [-1.1, -2.5, -0.6, -0.2, -0.35], [0.3, 0.1, -0.2, 0.4, 0.6], False, 0.0, [0, -1, -1, 2, 2]),
 (0, "b", 0.7, [0, 1, 1, 1, 0, 0], [-0.2, -0.4, -0.6, -0.8, -1.0, -1.2], [-0.2, -0.5, -0.5, -0.9, -1.0, -1.1], [-0.25, -0.3, -0.9, -0.7, -1.1, -1.0], [0.0, 0.1, 0.2, 0.3, 0.2, 0.1], True, -0.4, [-1, 0, 0, 1, -1, -1]),
 (0, "b", 0.7, [1, 1], [-0.1, -0.2], [-0.1, -0.25], [-0.15, -0.1], [0.9, 0.8], False, 0.0, [0, 0]),
 (0, "c", 0.5, [1, 1, 1, 1, 1], [-0.5, -0.5, -0.5, -0.5, -0.5], [-0.45, -0.55, -0.5, -0.5, -0.6], [-0.4, -0.6, -0.3, -0.7, -12.0], [0.2, 0.2, 0.2, 0.2, 0.2], False, 0.0, [0, 1, 2, 3, 4]),
 (1, "d", 0.0, [1, 1, 0], [-0.3, -0.6, -0.9], [-0.3, -0.7, -0.9], [-0.2, -0.9, -0.8], [0.4, 0.5, 0.6], False, 0.0, [0, 1, -1]),
 (1, "d", 1.0, [1, 0, 1], [-1.5, -0.2, -0.1], [-1.4, -0.2, -0.2], [-1.4, -0.3, -0.3], [-0.1, 0.0, 0.1], True, 0.3, [0, -1, 0]),
 (1, "d", 0.0, [1, 1], [-0.05, -0.15], [-0.06, -0.1], [-0.1, -0.1], [0.3, 0.3], False, 0.0, [0, 1]),
 (1, "a", 0.3, [0, 1, 1, 1], [-0.4, -0.3, -0.2, -0.1], [-0.4, -0.35, -0.2, -0.15], [-0.5, -0.2, -0.3, -0.2], [0.5, 0.4, 0.3, 0.2], False, 0.0, [-1, 0, 0, 0]),
]

CASES = {  # name: (with the values column, settings)
    'grpo_recipe': (False, {'actor.reward_scaling': 10.0, 'actor.reward_bias': -0.5, 'actor.kl_ctl': 0.0, 'actor.use_decoupled_loss': True, 'actor.recompute_logprob': True, 'actor.reward_norm.mean_level': 'group', 'actor.reward_norm.std_level': 'group', 'actor.reward_norm.group_size': 8, 'actor.adv_norm.mean_level': 'batch', 'actor.adv_norm.std_level': 'batch'}),
    'defaults': (False, {}),
    'defaults_critic': (True, {}),
    'ppo': (True, {'actor.discount': 0.99, 'actor.gae_lambda': 0.95, 'actor.kl_ctl': 0.05, 'actor.kl_estimator': 'k3', 'actor.adv_norm.std_unbiased': False, 'actor.mask_no_eos_with_zero': True}),
    'rloo_loo': (False, {'actor.kl_ctl': 0.0, 'actor.reward_norm.mean_level': 'group', 'actor.reward_norm.mean_leave1out': True, 'actor.reward_norm.std_level': None, 'actor.adv_norm.mean_level': 'group', 'actor.adv_norm.mean_leave1out': True, 'actor.adv_norm.std_level': 'group', 'actor.adv_norm.std_unbiased': False}),
    'drgrpo': (False, {'actor.kl_ctl': 0.0, 'actor.reward_norm.mean_level': 'group', 'actor.reward_norm.std_level': None, 'actor.adv_norm.mean_level': None, 'actor.adv_norm.std_level': 'batch', 'actor.adv_norm.eps': 0.01}),
    'overlong_k2_recompute': (False, {'actor.overlong_reward_penalty': True, 'actor.overlong_tokens': 2, 'actor.overlong_penalty_factor': 0.5, 'actor.max_new_tokens': 4, 'actor.kl_estimator': 'k2', 'actor.recompute_logprob': True, 'actor.reward_clip': 0.6, 'actor.reward_norm.mean_level': 'batch', 'actor.reward_norm.std_level': 'group'}),
    'vapo': (True, {'actor.discount': 0.9, 'actor.gae_lambda': 'areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae', 'actor.gae_lambda_kwargs.alpha': 0.5, 'actor.adv_norm.mean_level': 'group', 'actor.adv_norm.std_level': 'batch'}),
    'relpos': (True, {'actor.gae_lambda': 'areal.trainer.ppo.lambda_fn.relative_position_gae_lambda', 'actor.gae_lambda_kwargs.q': 0.5, 'actor.kl_ctl': 0.0}),
    'turn': (True, {'actor.gae_timestep_unit': 'turn', 'actor.discount': 0.9, 'actor.gae_lambda': 0.8, 'actor.kl_ctl': 0.1, 'actor.mask_no_eos_with_zero': True}),
    'turn_vapo_norm': (True, {'actor.gae_timestep_unit': 'turn', 'actor.gae_lambda': 'areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae', 'actor.gae_lambda_kwargs.alpha': 1.0, 'actor.adv_norm.mean_level': 'group', 'actor.adv_norm.std_level': 'group'}),
}

EXPECTED = {
    'grpo_recipe': {
        'advantages': [[-0.0893065333, -0.0893065333, -0.0893065333, -0.0], [-3.12572765], [1.42890418, 0.0, 0.0, 1.42890418, 1.42890418], [-0.0, -0.0893065333, -0.0893065333, -0.0893065333, -0.0, -0.0], [-0.0893065333, -0.0893065333], [-0.0893065333, -0.0893065333, -0.0893065333, -0.0893065333, -0.0893065333], [-0.203328177, -0.203328177, -0.0], [1.62662566, 0.0, 1.62662566], [-1.11830521, -1.11830521], [-0.0, -0.203328177, -0.203328177, -0.203328177]],
        'returns': [[0.0, 0.0, 0.0, 0.0], [-1.15469849], [0.577349305, 0.577349305, 0.577349305, 0.577349305, 0.577349305], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.15469849, 1.15469849, 1.15469849], [-0.577349305, -0.577349305], [0.0, 0.0, 0.0, 0.0]],
        'token_level_rewards': [[0.0, 0.0, 0.0, 0.577349305], [-1.15469849], [0.0, 0.0, 0.0, 0.0, 0.577349305], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -0.577349305], [0.0, 0.0, 1.15469849], [0.0, -0.577349305], [0.0, 0.0, 0.0, 0.0]],
    },
    'defaults': {
        'advantages': [[-0.239999995, -0.219999999, -0.230000004, 0.0], [0.0100000007], [0.975000024, 0.985000014, 0.985000014, 0.985000014, 0.995000005], [-0.00999999233, -0.00999999233, -0.0199999921, 0.0100000026, 0.0, 0.0], [0.704999983, 0.709999979], [-0.5, -0.50999999, -0.49999997, -0.519999981, -0.5], [-0.0199999958, -0.0299999956, 0.0], [0.99000001, 0.980000019, 0.980000019], [0.0, 0.00500000035], [0.290000021, 0.290000021, 0.280000031, 0.290000021]],
        'returns': [[-0.239999995, -0.219999999, -0.230000004, 0.0], [0.0100000007], [0.975000024, 0.985000014, 0.985000014, 0.985000014, 0.995000005], [-0.00999999233, -0.00999999233, -0.0199999921, 0.0100000026, 0.0, 0.0], [0.704999983, 0.709999979], [-0.5, -0.50999999, -0.49999997, -0.519999981, -0.5], [-0.0199999958, -0.0299999956, 0.0], [0.99000001, 0.980000019, 0.980000019], [0.0, 0.00500000035], [0.290000021, 0.290000021, 0.280000031, 0.290000021]],
        'token_level_rewards': [[-0.0199999996, 0.0100000026, -0.230000004, 1.0], [0.0100000007], [-0.0100000026, 0.0, 0.0, -0.0100000007, 0.995000005], [0.0, 0.00999999978, -0.0299999956, 0.0100000026, 0.0, 0.699999988], [-0.00500000035, 0.709999979], [0.00999999978, -0.0100000026, 0.0199999996, -0.0199999996, -0.5], [0.0100000007, -0.0299999956, 0.0], [0.0100000026, 0.0, 0.980000019], [-0.00500000035, 0.00500000035], [0.0, 0.0100000007, -0.0100000007, 0.290000021]],
    },
    'defaults_critic': {
        'advantages': [[-0.340000004, -0.420000017, -0.530000031, 0.0], [0.310000002], [0.675000072, 0.585000038, 0.585000038, 0.585000038, 0.394999981], [-0.51000005, -0.51000005, -0.620000064, -0.690000057, 0.0, 0.0], [-0.194999993, -0.0900000334], [-0.699999988, -0.709999979, -0.699999988, -0.719999969, -0.699999988], [-0.419999987, -0.529999971, 0.0], [1.38999999, 1.17999995, 1.17999995], [-0.300000012, -0.295000017], [-0.109999999, -0.109999999, -0.0199999958, 0.0900000185]],
        'returns': [[-0.24000001, -0.220000014, -0.230000019, 0.400000006], [0.810000002], [0.975000083, 0.685000062, 0.38500005, 0.985000014, 0.995000005], [-0.51000005, -0.410000056, -0.420000076, -0.390000045, 0.200000003, 0.100000001], [0.704999983, 0.709999979], [-0.5, -0.50999999, -0.5, -0.519999981, -0.5], [-0.0199999809, -0.0299999714, 0.600000024], [1.28999996, 1.17999995, 1.27999997], [0.0, 0.00499999523], [0.389999986, 0.290000021, 0.280000031, 0.290000021]],
        'token_level_rewards': [[-0.0199999996, 0.0100000026, -0.230000004, 1.0], [0.0100000007], [-0.0100000026, 0.0, 0.0, -0.0100000007, 0.995000005], [0.0, 0.00999999978, -0.0299999956, 0.0100000026, 0.0, 0.699999988], [-0.00500000035, 0.709999979], [0.00999999978, -0.0100000026, 0.0199999996, -0.0199999996, -0.5], [0.0100000007, -0.0299999956, 0.0], [0.0100000026, 0.0, 0.980000019], [-0.00500000035, 0.00500000035], [0.0, 0.0100000007, -0.0100000007, 0.290000021]],
    },
    'ppo': {
        'advantages': [[-0.097743459, -0.408737212, -0.738455236, 0.0], [1.09884191], [2.0428412, 0.0, 0.0, 1.87112355, 1.39924073], [-0.0, -0.90172255, -1.26558089, -1.64424467, 0.0, 0.0], [-0.272968143, 0.0104916943], [-0.172055066, -0.194546521, -0.218510076, -0.241544574, -0.266430736], [-1.0052532, -1.45777059, 0.0], [1.75665891, 0.0, 1.07731509], [-0.6705966, -0.72431314], [-0.0, -0.0383930355, 0.334759206, 0.727593303]],
        'returns': [[-0.0392425284, -0.0512556881, -0.0700129271, 0.400000006], [0.791741431], [0.931749403, 0.669900417, 0.369900405, 0.96990037, 0.999938548], [-0.428818256, -0.328818262, -0.359872103, -0.396258533, 0.200000003, 0.100000001], [0.697645307, 0.699741423], [0.0339920521, 0.0258911252, 0.0172599703, 0.00896345079, 0.0], [0.022571981, -0.00204092264, 0.600000024], [0.283139169, 0.196063489, 0.296063483], [0.014728725, -6.35683537e-05], [0.388823062, 0.288823068, 0.291580647, 0.299758136]],
        'token_level_rewards': [[-0.000936537981, -0.000258547079, -0.070012942, 1.0], [-0.000258547807], [-0.000241869697, 0.0, 0.0, -0.000241871559, 0.999938548], [0.0, -0.000258548564, -0.00204091077, -0.000258547079, 0.0, 0.0], [-6.1469902e-05, 0.699741423], [-0.000258548564, -0.000241869697, -0.00107013888, -0.000936537981, 0.0], [-0.000258547807, -0.00204091077, 0.0], [-0.000258547079, 0.0, -0.000936536526], [-6.1472696e-05, -6.35538236e-05], [0.0, -0.000258547807, -0.000241871923, 0.299758136]],
    },
    'rloo_loo': {
        'advantages': [[-0.144335076, -0.144335076, -0.144335076, -0.0], [-2.16502595], [0.866010427, 0.0, 0.0, 0.866010427, 0.866010427], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [-0.267257661, -0.267257661, -0.0], [1.33628833, 0.0, 1.33628833], [-1.06903064, -1.06903064], [0.0, 0.0, 0.0, 0.0]],
        'returns': [[0.0, 0.0, 0.0, 0.0], [-1.0], [0.5, 0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [-0.5, -0.5], [0.0, 0.0, 0.0, 0.0]],
        'token_level_rewards': [[0.0, 0.0, 0.0, 0.5], [-1.0], [0.0, 0.0, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -0.5], [0.0, 0.0, 1.0], [0.0, -0.5], [0.0, 0.0, 0.0, 0.0]],
    },
    'drgrpo': {
        'advantages': [[0.0, 0.0, 0.0, 0.0], [-2.89252329], [1.44626153, 0.0, 0.0, 1.44626153, 1.44626153], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.7421087, 0.0, 1.7421087], [-0.871054411, -0.871054411], [0.0, 0.0, 0.0, 0.0]],
        'returns': [[0.0, 0.0, 0.0, 0.0], [-0.666666687], [0.333333313, 0.333333313, 0.333333313, 0.333333313, 0.333333313], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.666666627, 0.666666627, 0.666666627], [-0.333333343, -0.333333343], [0.0, 0.0, 0.0, 0.0]],
        'token_level_rewards': [[0.0, 0.0, 0.0, 0.333333313], [-0.666666687], [0.0, 0.0, 0.0, 0.0, 0.333333313], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -0.333333343], [0.0, 0.0, 0.666666627], [0.0, -0.333333343], [0.0, 0.0, 0.0, 0.0]],
    },
    'overlong_k2_recompute': {
        'advantages': [[-0.242500007, -0.242000014, -0.242000014, 0.0], [-0.937684476], [0.748622596, 0.74912262, 0.74912262, 0.74912262, 0.74912262], [-0.0120000001, -0.0120000001, -0.00999999978, -0.00199999986, 0.0, 0.0], [0.914875925, 0.915000916], [-1.58757758, -1.58745253, -1.58732748, -1.58532751, -1.58332753], [-0.00249999994, -0.00199999986, 0.0], [1.25146198, 1.25146198, 1.25146198], [-0.465094417, -0.465014428], [-0.114248872, -0.114248872, -0.113123871, -0.11262387]],
        'returns': [[-0.242500007, -0.242000014, -0.242000014, 0.0], [-0.937684476], [0.748622596, 0.74912262, 0.74912262, 0.74912262, 0.74912262], [-0.0120000001, -0.0120000001, -0.00999999978, -0.00199999986, 0.0, 0.0], [0.914875925, 0.915000916], [-1.58757758, -1.58745253, -1.58732748, -1.58532751, -1.58332753], [-0.00249999994, -0.00199999986, 0.0], [1.25146198, 1.25146198, 1.25146198], [-0.465094417, -0.465014428], [-0.114248872, -0.114248872, -0.113123871, -0.11262387]],
        'token_level_rewards': [[-0.000499999675, 0.0, -0.242000014, 0.749247611], [-0.937684476], [-0.000500000257, 0.0, 0.0, 0.0, 0.74912262], [0.0, -0.00199999986, -0.00799999945, -0.00199999986, 0.0, 0.400804967], [-0.00012500002, 0.915000916], [-0.000124999919, -0.000125000064, -0.00199999986, -0.00199999986, -1.58332753], [-0.000500000082, -0.00199999986, -0.465014428], [0.0, 0.0, 1.25146198], [-8.00000125e-05, -0.465014428], [0.0, -0.00112499984, -0.000500000082, -0.11262387]],
    },
    'vapo': {
        'advantages': [[-0.0946968049, -0.541002274, -2.28674221, -0.0], [0.655080855], [0.246903017, 0.0, 0.0, 0.726691306, 1.29376614], [0.0, 0.970801651, 0.202443957, -1.71361184, 0.0, 0.0], [0.0863192454, 0.454047024], [0.87289232, 0.641150713, 0.355363429, -0.388917804, -1.48048878], [-0.0683451593, -1.34172237, -0.0], [0.233812243, 0.0, 2.28416538], [-0.273380458, -0.834529817], [-0.0, -0.207769156, -0.104388207, 0.312157363]],
        'returns': [[0.136299998, 0.121000007, -0.230000019, 0.400000006], [0.729999959], [0.424549997, 0.348500013, 0.0485000163, 0.648500025, 0.995000005], [0.0435000062, 0.1435, 0.0450000316, -0.349999964, 0.200000003, 0.100000001], [0.714999974, 0.709999979], [0.10798002, 0.0481111556, -0.025720045, -0.218000039, -0.5], [0.459999979, -0.0299999714, 0.600000024], [0.100000001, 1.14999998, 1.25], [0.265000015, 0.00499999523], [0.349099994, 0.2491, 0.196999997, 0.290000021]],
        'token_level_rewards': [[-0.0199999996, 0.0100000026, -0.230000004, 1.0], [0.0100000007], [-0.0100000026, 0.0, 0.0, -0.0100000007, 0.995000005], [0.0, 0.00999999978, -0.0299999956, 0.0100000026, 0.0, 0.699999988], [-0.00500000035, 0.709999979], [0.00999999978, -0.0100000026, 0.0199999996, -0.0199999996, -0.5], [0.0100000007, -0.0299999956, 0.0], [0.0100000026, 0.0, 0.980000019], [-0.00500000035, 0.00500000035], [0.0, 0.0100000007, -0.0100000007, 0.290000021]],
    },
    'relpos': {
        'advantages': [[0.0207106844, -0.112132028, -0.300000012, 0.0], [0.300000012], [0.44142136, 0.482842714, 0.482842714, 0.482842714, 0.399999976], [-0.179289341, -0.179289341, -0.394974768, -0.700000048, 0.0, 0.0], [-0.149999976, -0.100000024], [0.150000021, 0.178381085, 0.212132052, 0.25226894, 0.300000012], [-0.150000006, -0.5, 0.0], [0.799999952, 1.19999993, 1.19999993], [-0.150000006, -0.300000012], [-0.120710678, -0.120710678, -0.0292893276, 0.100000009]],
        'returns': [[0.120710686, 0.0878679752, 0.0, 0.400000006], [0.800000012], [0.741421342, 0.582842708, 0.282842696, 0.88284272, 1.0], [-0.179289341, -0.0792893395, -0.194974765, -0.400000036, 0.200000003, 0.100000001], [0.75, 0.699999988], [0.350000024, 0.378381073, 0.412132055, 0.452268958, 0.5], [0.25, 0.0, 0.600000024], [0.699999928, 1.19999993, 1.29999995], [0.150000006, 0.0], [0.379289329, 0.279289335, 0.270710677, 0.300000012]],
        'token_level_rewards': [[0.0, 0.0, 0.0, 1.0], [0.0], [0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.699999988], [0.0, 0.699999988], [0.0, 0.0, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.300000012]],
    },
    'turn': {
        'advantages': [[-0.0659999996, -0.0360000022, -0.530000031, -0.0], [0.229999974], [0.482000023, 0.0, 0.0, 0.590000033, 0.595000029], [-0.0, -0.29519999, -0.335199982, -0.649999976, -0.0, -0.0], [-0.204999983, -0.189999983], [0.038388595, 0.057206396, 0.141120002, 0.176000014, -0.699999988], [-0.300000042, -0.529999971, -0.0], [0.379999995, 0.0, 0.349999994], [-0.251000017, -0.295000017], [-0.0, -0.0899999961, -0.109999992, -0.109999992]],
        'returns': [[0.0539999977, 0.0539999977, 0.0, 0.400000006], [0.719999969], [0.792000055, 0.100000001, -0.200000003, 1.0, 1.0], [0.0, -0.205199987, -0.205199987, -0.359999955, 0.200000003, 0.100000001], [0.699999988, 0.699999988], [0.228388608, 0.267206401, 0.321120024, 0.396000028, 0.5], [0.0899999738, 0.0, 0.600000024], [0.270000011, 0.0, 0.270000011], [0.0539999902, 0.0], [0.5, 0.300000012, 0.300000012, 0.300000012]],
        'token_level_rewards': [[-0.0199999996, 0.0100000026, -0.230000004, 1.0], [0.0100000007], [-0.0100000026, 0.0, 0.0, -0.0100000007, 0.995000005], [0.0, 0.00999999978, -0.0299999956, 0.0100000026, 0.0, 0.0], [-0.00500000035, 0.709999979], [0.00999999978, -0.0100000026, 0.0199999996, -0.0199999996, -0.5], [0.0100000007, -0.0299999956, 0.0], [0.0100000026, 0.0, -0.0200000014], [-0.00500000035, 0.00500000035], [0.0, 0.0100000007, -0.0100000007, 0.290000021]],
    },
    'turn_vapo_norm': {
        'advantages': [[-0.446336865, -0.370441526, -1.86304998, -0.0], [0.262019575], [0.464407176, -0.0, -0.0, 0.970376134, 0.983025372], [0.0, 0.613277733, 0.439298213, -1.77894032, 0.0, 0.0], [0.330561161, 0.395803452], [0.131182685, 0.141902581, 0.210301891, 0.218301803, -0.701688945], [-0.47739768, -0.92246151, -0.0], [1.29144621, -0.0, 1.25721061], [-0.494515508, -0.654282093], [0.0, 0.0133331949, -0.00666660117, -0.00666660117]],
        'returns': [[0.150000006, 0.150000006, 0.0, 0.400000006], [0.800000012], [0.700000048, 0.100000001, -0.200000003, 1.0, 1.0], [0.0, -0.0500000045, -0.0500000045, -0.400000036, 0.200000003, 0.100000001], [0.699999988, 0.699999988], [0.32288003, 0.353600025, 0.39200002, 0.439999998, 0.5], [0.25, 0.0, 0.600000024], [1.29999995, 0.0, 1.29999995], [0.150000006, 0.0], [0.5, 0.300000012, 0.300000012, 0.300000012]],
        'token_level_rewards': [[-0.0199999996, 0.0100000026, -0.230000004, 1.0], [0.0100000007], [-0.0100000026, 0.0, 0.0, -0.0100000007, 0.995000005], [0.0, 0.00999999978, -0.0299999956, 0.0100000026, 0.0, 0.699999988], [-0.00500000035, 0.709999979], [0.00999999978, -0.0100000026, 0.0199999996, -0.0199999996, -0.5], [0.0100000007, -0.0299999956, 0.0], [0.0100000026, 0.0, 0.980000019], [-0.00500000035, 0.00500000035], [0.0, 0.0100000007, -0.0100000007, 0.290000021]],
    },
}


def write(path, rows=ROWS, values=True, names=None):
    names = names or {}
    f32 = pa.float32()
    cols = {"step": pa.array([r[0] for r in rows], pa.int64()), "prompt_id": pa.array([r[1] for r in rows]),
            "reward": pa.array([r[2] for r in rows], f32),
            "response_mask": pa.array([r[3] for r in rows], pa.list_(pa.int8())),
            "rollout_log_probs": pa.array([r[4] for r in rows], pa.list_(f32)),
            "old_log_probs": pa.array([r[5] for r in rows], pa.list_(f32)),
            "ref_log_probs": pa.array([r[6] for r in rows], pa.list_(f32)),
            "truncated": pa.array([r[8] for r in rows], pa.bool_()),
            "bootstrap_value": pa.array([r[9] for r in rows], f32),
            "turn_ids": pa.array([r[10] for r in rows], pa.list_(pa.int32()))}
    if values:
        cols["values"] = pa.array([r[7] for r in rows], pa.list_(f32))
    pq.write_table(pa.table({names.get(k, k): v for k, v in cols.items()}), path)
    return path


def run(tmp_path, settings, values=True, chunk_rows=3, precision=None, rows=ROWS, columns=None, names=None):
    src = write(os.path.join(tmp_path, "in.parquet"), rows, values, names)
    out = os.path.join(tmp_path, "out.parquet")
    res = advcli.run(src, out, flavor="areal", settings=settings, chunk_rows=chunk_rows, device="cpu", force=True,
                     precision=precision, columns=columns)
    t = pq.read_table(out)
    return {c: t.column(c).to_pylist() for c in ("advantages", "returns", "token_level_rewards")}, res


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_areal(tmp_path, name):
    values, settings = CASES[name]
    got, _ = run(tmp_path, settings, values=values)
    for col in ("advantages", "returns", "token_level_rewards"):
        assert_rows_close(got[col], EXPECTED[name][col])


@pytest.mark.parametrize("name", ["grpo_recipe", "ppo", "rloo_loo", "turn_vapo_norm", "relpos"])
def test_chunk_size_independent(tmp_path, name):
    values, settings = CASES[name]
    ref, _ = run(tmp_path, settings, values=values, chunk_rows=4096)
    for chunk in (1, 2, 7):
        got, _ = run(tmp_path, settings, values=values, chunk_rows=chunk)
        assert got == ref, f"chunk_rows={chunk}"


def test_normconfig_section_defaults(tmp_path):
    """One sub-key turns a NormConfig on with the other defaults (batch mean, batch unbiased std, eps
    1e-5); no sub-key leaves it off."""
    off, _ = run(tmp_path, {"actor.kl_ctl": 0.0})
    on, _ = run(tmp_path, {"actor.kl_ctl": 0.0, "actor.adv_norm.std_unbiased": True})
    explicit, _ = run(tmp_path, {"actor.kl_ctl": 0.0, "actor.adv_norm.mean_level": "batch",
                                 "actor.adv_norm.std_level": "batch", "actor.adv_norm.eps": 1e-5})
    assert on == explicit and on != off
    # the float64 batch whitening over the mask=1 tokens of each step, by hand
    for step in (0, 1):
        rows = [i for i, r in enumerate(ROWS) if r[0] == step]
        x = np.array([a for i in rows for a, m in zip(off["advantages"][i], ROWS[i][3]) if m], dtype=np.float64)
        mu, sd = x.mean(), x.std(ddof=1)
        for i in rows:
            for a, b, m in zip(on["advantages"][i], off["advantages"][i], ROWS[i][3]):
                assert a == pytest.approx((b - mu) / (sd + 1e-5) * m, rel=1e-5, abs=1e-6)


def test_gae_by_hand_float64(tmp_path):
    """PPO token GAE with a critic, a bootstrap for truncated rows and masked spans carried, from a
    Python loop written here (float64): δ = r + γ·nv − V, g = δ + γλ·g over trained tokens only."""
    gamma, lam, beta = 0.9, 0.7, 0.05
    got, _ = run(tmp_path, {"actor.discount": gamma, "actor.gae_lambda": lam, "actor.kl_ctl": beta,
                            "actor.kl_estimator": "k2"}, precision="float64")
    f32 = lambda xs: [float(np.float32(x)) for x in xs]  # noqa: E731 - the Parquet columns are float32
    for i, (_step, _pid, r, m, rl, _ol, ref, v, trunc, boot, _) in enumerate(ROWS):
        (r, boot), rl, ref, v = f32([r, boot]), f32(rl), f32(ref), f32(v)
        L = len(m)
        kl = [-beta * min(max(0.5 * (a - b) ** 2, -10), 10) * mm for a, b, mm in zip(rl, ref, m)]
        rew = [k + (r if t == L - 1 else 0.0) for t, k in enumerate(kl)]
        nv, g, adv = (boot if trunc else 0.0), 0.0, [0.0] * L
        for t in reversed(range(L)):
            if m[t]:
                g = rew[t] + gamma * nv - v[t] + gamma * lam * g
                nv = v[t]
            adv[t] = g
        assert got["token_level_rewards"][i] == pytest.approx(rew, rel=1e-6, abs=1e-8)
        assert got["advantages"][i] == pytest.approx(adv, rel=1e-6, abs=1e-7)
        assert got["returns"][i] == pytest.approx([a + b for a, b in zip(adv, v)], rel=1e-6, abs=1e-7)


def test_float32_norm_hazard(tmp_path):
    """spec/areal.md §10: equal rewards + a tiny KL + adv_norm at group level. The float32 run keeps
    AReaL's operation order (its reverse GAE loop in float32, the float64 group mean stored in float32,
    float32 centring), checked here against the same torch calls written in this test; the float64 run
    gives the intended values; the diagnostics name the rule."""
    rng = np.random.default_rng(3)
    rows = []
    for g in range(4):
        for _ in range(3):
            L = int(rng.choice([4, 7, 12]))
            rl, ref = (-np.abs(rng.normal(0, 1, L))).tolist(), (-np.abs(rng.normal(0, 1, L))).tolist()
            rows.append((0, f"g{g}", 0.7, [1] * L, rl, rl, ref, [0.0] * L, False, 0.0, [0] * L))
    settings = {"actor.kl_ctl": 0.001, "actor.adv_norm.mean_level": "group", "actor.adv_norm.std_level": "group"}
    got32, res = run(tmp_path, settings, values=False, rows=rows)
    got64, _ = run(tmp_path, settings, values=False, rows=rows, precision="float64")
    # AReaL's float32 order (actor.py L253-313, gae.py L10-36, data.py Normalization) with torch here
    want32, want64 = [], []
    for dt in (torch.float32, torch.float64):
        advs = []
        for (_, _, r, m, rl, _, ref, _, _, _, _) in rows:
            lp, rf = torch.tensor(rl, dtype=torch.float32).to(dt), torch.tensor(ref, dtype=torch.float32).to(dt)
            rew = -0.001 * (lp - rf).clamp(-10, 10)
            rew[-1] = rew[-1] + torch.tensor(r, dtype=torch.float32).to(dt)
            g, out = torch.zeros((), dtype=dt), []
            for t in reversed(range(len(m))):
                g = rew[t] + 1.0 * 0.0 - 0.0 + 1.0 * g
                out.append(g)
            advs.append(torch.stack(out[::-1]))
        for gi in range(4):
            xs = advs[3 * gi:3 * gi + 3]
            flat = torch.cat(xs).to(torch.float64)
            mean = flat.mean()
            mean_stored = mean.to(dt)
            std = ((flat - mean_stored.to(torch.float64)) ** 2).sum().div(flat.numel() - 1).sqrt()
            std = std.to(dt) + 1e-5
            for x in xs:
                (want32 if dt == torch.float32 else want64).append(((x - mean_stored) / std).to(dt).tolist())
    assert got32["advantages"] == want32
    assert_rows_close(got64["advantages"], want64, rtol=1e-6, atol=1e-7)  # written as float32
    worst = max(abs(a - b) for r32, r64 in zip(got32["advantages"], got64["advantages"]) for a, b in zip(r32, r64))
    assert worst > 1e-5  # the artefact is real here
    flags = [d for d in res.diagnostics if d["kind"] == "float32_norm"]
    assert flags and flags[0]["count"] >= 1 and "Normalization" in flags[0]["explanation"]


def test_groups_are_runs(tmp_path):
    """AReaL normalises per trajectory dict: the two runs of prompt "a" (steps 0 and 1) are different
    groups, and a singleton group with a group mean gets 0."""
    got, _ = run(tmp_path, {"actor.kl_ctl": 0.0, "actor.reward_norm.mean_level": "group",
                            "actor.reward_norm.std_level": None})
    assert got["token_level_rewards"][5] == [0.0] * 5  # c: alone in step 0
    assert got["token_level_rewards"][9][-1] == 0.0  # a in step 1: alone
    assert got["token_level_rewards"][4][-1] == 0.0  # b: 0.7, 0.7 → exactly 0 (float64 statistics)
    assert got["token_level_rewards"][0][-1] == pytest.approx(1.0 - 2.0 / 3.0, rel=1e-6)


def test_column_mapping_and_roles(tmp_path):
    names = {"truncated": "cut", "bootstrap_value": "v_last", "rollout_log_probs": "engine_lp"}
    values, settings = CASES["ppo"]
    want, _ = run(tmp_path, settings)
    got, _ = run(tmp_path, settings, names=names,
                 columns={"truncated": "cut", "bootstrap_value": "v_last", "rollout_log_probs": "engine_lp"})
    assert got == want
    from advcli.config import ROLES
    from advcli.config.column_roles import ROLE_INFO
    for role in ("rollout_log_probs", "truncated", "bootstrap_value", "turn_ids"):
        assert role in ROLES and role in ROLE_INFO
    assert ROLES == tuple(ROLE_INFO)  # one role table: --column accepts exactly the roles the columns know


def test_missing_log_prob_columns_are_zeros(tmp_path):
    """No ref model: ref = 0, so the default kl_ctl = 0.1 gives −0.1·clamp(lp, ±10) per trained token."""
    src = write(os.path.join(tmp_path, "in.parquet"))
    t = pq.read_table(src).drop(["ref_log_probs", "values"])
    pq.write_table(t, src)
    out = os.path.join(tmp_path, "out.parquet")
    advcli.run(src, out, flavor="areal", settings={}, device="cpu", force=True)
    tlr = pq.read_table(out).column("token_level_rewards").to_pylist()
    for i, r in enumerate(ROWS):
        want = [-0.1 * max(min(float(np.float32(lp)), 10), -10) * m for lp, m in zip(r[4], r[3])]
        want[-1] += float(np.float32(r[2]))
        assert tlr[i] == pytest.approx(want, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("settings, words", [
    ({"actor.overlong_reward_penalty": True}, "overlong_tokens"),
    ({"actor.gae_lambda": "areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae"}, "alpha"),
    ({"actor.gae_lambda": "areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae",
      "actor.gae_lambda_kwargs.alpha": -1.0}, "positive"),
    ({"actor.gae_lambda": "areal.trainer.ppo.lambda_fn.relative_position_gae_lambda",
      "actor.gae_lambda_kwargs.q": 1.5}, "(0, 1]"),
    ({"actor.gae_lambda": "my.module.fn"}, "does not import"),
    ({"actor.gae_lambda": float("nan")}, "NaN is not a setting"),
    ({"actor.gae_lambda": float("inf")}, "finite"),
    ({"actor.adv_norm.mean_level": "rows"}, "mean_level"),
    ({"actor.kl_estimator": "k4"}, "k4"),
    ({"actor.gae_timestep_unit": "step"}, "step"),
])
def test_refused(tmp_path, settings, words):
    with pytest.raises(AdvcliError) as e:
        run(tmp_path, settings)
    assert words in str(e.value)


def test_turn_mode_needs_turn_ids(tmp_path):
    src = write(os.path.join(tmp_path, "in.parquet"))
    pq.write_table(pq.read_table(src).drop(["turn_ids"]), src)
    with pytest.raises(AdvcliError, match="turn_ids"):
        advcli.run(src, None, flavor="areal", settings={"actor.gae_timestep_unit": "turn"}, device="cpu")


def test_decreasing_turn_ids_refused(tmp_path):
    rows = list(ROWS)
    rows[5] = rows[5][:10] + ([0, 2, 1, 3, 4],)
    with pytest.raises(AdvcliError, match="non-decreasing"):
        run(tmp_path, {"actor.gae_timestep_unit": "turn"}, rows=rows)


def test_turn_ids_are_checked_under_a_lambda_function_in_token_mode(tmp_path):
    """A λ function builds its context from the turn ids whenever the data has them, and that validates them,
    token timesteps too (actor.py _compute_gae_lambda -> gae.py _build_gae_lambda_context L183 @cbff54d6); a
    constant λ never reads them."""
    rows = list(ROWS)
    rows[5] = rows[5][:10] + ([0, 2, 1, 3, 4],)
    fn = {"actor.gae_lambda": "areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae",
          "actor.gae_lambda_kwargs.alpha": 1.0}
    with pytest.raises(AdvcliError, match="non-decreasing"):
        run(tmp_path, fn, rows=rows)
    run(tmp_path, {}, rows=rows)  # constant λ: the ids are not read


def test_explain_keys_lists_defaults():
    from advcli.flavors import get
    from advcli.runs.explain import keys_text

    text = keys_text(get("areal"))
    for key, default in (("actor.kl_ctl", "0.1"), ("actor.reward_clip", "20.0"), ("actor.adv_norm.eps", "1e-05"),
                         ("actor.gae_timestep_unit", '"token"'), ("actor.max_new_tokens", "1024")):
        line = next(line for line in text.splitlines() if line.strip().startswith(key + " "))
        assert f"default {default}" in line


def test_kl_clamp_diagnostic_reads_the_policy_column(tmp_path):
    """AReaL clamps every KL estimate to ±10: row 5's last token (lp −0.5, ref −12: d = 11.5) is cut, and
    the diagnostics count it on the rollout_log_probs the KL reads."""
    _, res = run(tmp_path, {})
    flag = next(d for d in res.diagnostics if d["kind"] == "kl_output_clamp")
    assert flag["count"] == 1 and flag["examples"][0]["row"] == 5


def test_release_1_0_4_remainder_slice_is_what_the_release_computed(tmp_path):
    """Issue 41.9 / AReaL #1673: `--flavor areal@1.0.4` on a step of 6 rows with reward_norm at group level and
    group_size 4 runs (it was refused), as 1.0.4 computed it: the whole slice [1, 0, 0, 1] gets
    (r − 0.5)/(sqrt(1/3) + 1e-5); the 2 rows past it keep mean 0 and std 0, so 2/1e-5 and 3/1e-5. No KL, no
    critic, γ = λ = 1: every trained token carries the row's value. A warning names the bug."""
    from _released import advcli_run

    rewards = [1.0, 0.0, 0.0, 1.0, 2.0, 3.0]
    rows = [dict(prompt_id=f"p{i // 4}", reward=r, mask=[1, 1], old=[-1.0, -1.0], ref=[-1.0, -1.0])
            for i, r in enumerate(rewards)]
    settings = {"actor.kl_ctl": 0.0, "actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": "group",
                "actor.reward_norm.group_size": 4}
    s = (1 / 3) ** 0.5
    want = [0.5 / (s + 1e-5), -0.5 / (s + 1e-5), -0.5 / (s + 1e-5), 0.5 / (s + 1e-5), 2.0 / 1e-5, 3.0 / 1e-5]
    got = advcli_run(tmp_path, rows, "areal@1.0.4", settings, rename={"old_log_probs": "rollout_log_probs"})
    for i, (row, w) in enumerate(zip(got["advantages"], want)):
        assert row == pytest.approx([w, w], rel=1e-5), f"row {i}"
    res = advcli.run(os.path.join(tmp_path, "in.parquet"), os.path.join(tmp_path, "o2.parquet"), flavor="areal@1.0.4",
                     device="cpu", settings=settings)
    said = [w for w in res.warnings if "#1673" in w]
    assert said and "6 rows (the last 2)" in said[0], res.warnings


@pytest.mark.parametrize("unbiased,want", [(True, [2.0 / (1 + 1e-5), -3.0 / (1 + 1e-5)]),
                                           (False, [2.0 / (2 + 1e-5), -3.0 / (3 + 1e-5)])])
def test_release_1_0_4_group_size_one_leave_one_out_runs(tmp_path, unbiased, want):
    """AReaL 1.0.4 with reward_norm group_size 1 and mean_leave1out (was refused): each one-row slice's mean is 0
    (the release's special case); its std is 1 unbiased (another special case) or |r| biased (the std of one
    value about 0), so r/(1 + 1e-5) or r/(|r| + 1e-5)."""
    from _released import advcli_run

    rows = [dict(prompt_id="p0", reward=r, mask=[1], old=[-1.0], ref=[-1.0]) for r in (2.0, -3.0)]
    settings = {"actor.kl_ctl": 0.0, "actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": "group",
                "actor.reward_norm.group_size": 1, "actor.reward_norm.mean_leave1out": "true",
                "actor.reward_norm.std_unbiased": str(unbiased).lower()}
    got = advcli_run(tmp_path, rows, "areal@1.0.4", settings, rename={"old_log_probs": "rollout_log_probs"})
    assert [row[0] for row in got["advantages"]] == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("setting,word", [
    ({"actor.gae_lambda": "areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae", "actor.gae_lambda_kwargs.alpha": 2},
     "gae_lambda is a number"),
    ({"actor.gae_timestep_unit": "turn"}, "gae_timestep_unit"),
    ({"gconfig.reward_normalization": True}, "reward_normalization")])
@pytest.mark.parametrize("release", ["1.0.4", "2.0.0", "v2.0.0"])
def test_releases_before_the_commit_refuse_keys_they_do_not_have(setting, word, release):
    """AReaL 1.0.4's and v2.0.0's PPOActorConfig.gae_lambda is a float, with no gae_lambda_kwargs or
    gae_timestep_unit (api/cli_args.py L1514 of the 1.0.4 wheel, L1579 at tag v2.0.0: #1600 came after), and
    their GenerationHyperparameters has no reward_normalization (#1516 came after): such a config does not load
    there, so advcli does not run it under their label; the newest runs it."""
    from advcli.flavors import resolve

    with pytest.raises(AdvcliError, match=word):
        resolve(f"areal@{release}", list(setting.items()))
    resolve("areal", list(setting.items()))
    resolve(f"areal@{release}", [("actor.gae_lambda", 0.9)])  # a number it has


def test_release_2_0_0_normalises_each_prompts_rows_as_the_commit_does(tmp_path):
    """AReaL v2.0.0 has #1454 (ppo/actor.py passes meta.traj_group_sizes to reward_norm and adv_norm; utils/data.py
    is the same file at v2.0.0 and cbff54d6): groups of 3 and 1 rows with group_size left at 1 are the per-prompt
    z-scores, where 1.0.4 normalised each row alone (every advantage 0). No KL, no critic, γ = λ = 1, so every
    trained token carries the row's value: group p0 rewards [1, 0, 0] → mean 1/3, unbiased std sqrt(1/3), so
    (r − 1/3)/(sqrt(1/3) + 1e-5); the one-row group p1 → (r − r)/(1 + 1e-5) = 0."""
    from _released import advcli_run

    rows = [dict(prompt_id=p, reward=r, mask=[1, 1], old=[-1.0, -1.0], ref=[-1.0, -1.0])
            for p, r in (("p0", 1.0), ("p0", 0.0), ("p0", 0.0), ("p1", 2.0))]
    settings = {"actor.kl_ctl": 0.0, "actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": "group"}
    d = (1 / 3) ** 0.5 + 1e-5
    want = [(2 / 3) / d, (-1 / 3) / d, (-1 / 3) / d, 0.0]
    for flavor in ("areal@2.0.0", "areal"):
        got = advcli_run(tmp_path, rows, flavor, settings, rename={"old_log_probs": "rollout_log_probs"})
        for i, (row, w) in enumerate(zip(got["advantages"], want)):
            assert row == pytest.approx([w, w], rel=1e-5, abs=1e-12), f"{flavor} row {i}"
    got = advcli_run(tmp_path, rows, "areal@1.0.4", settings, rename={"old_log_probs": "rollout_log_probs"})
    assert [row[0] for row in got["advantages"]] == [0.0, 0.0, 0.0, 0.0]


def test_a_prompt_split_in_two_runs_is_two_groups_said_and_group_by_id_joins_them(tmp_path):
    """Rows a, b, a in one step: AReaL's runs make 'a' two groups (each a singleton: a group mean of itself,
    so 0), which the run says, naming the prompt and its rows; --set advcli.group_by=id makes 'a' one group of
    rewards 1 and 0 (mean 0.5: +0.5 and −0.5), as a reordered dump's user wants."""
    src = tmp_path / "split.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "b", "a"], "reward": [1.0, 0.25, 0.0],
                             "response_mask": [[1, 1], [1], [1, 1, 1]]}), str(src))
    settings = {"actor.kl_ctl": 0.0, "actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": None}
    res = advcli.run(str(src), str(tmp_path / "o.parquet"), flavor="areal", settings=settings, force=True)
    out = pq.read_table(tmp_path / "o.parquet").to_pydict()
    assert [r[-1] for r in out["token_level_rewards"]] == [0.0, 0.0, 0.0]
    said = [w for w in res.warnings if "come back after other prompts' rows" in w]
    assert len(said) == 1 and "'a'" in said[0] and "rows 0 and 2" in said[0] and "1 more group(s)" in said[0], said
    assert "settings={'advcli.group_by': 'id'}" in said[0]  # the library's keyword
    res = advcli.run(str(src), str(tmp_path / "o.parquet"), flavor="areal", force=True,
                     settings={**settings, "advcli.group_by": "id"})
    out = pq.read_table(tmp_path / "o.parquet").to_pydict()
    assert [r[-1] for r in out["token_level_rewards"]] == [0.5, 0.0, -0.5]
    assert not any("come back" in w for w in res.warnings)


@pytest.mark.parametrize("sets", [
    ["actor.reward_norm.mean_level=group", "actor.reward_norm.std_level=group", "actor.reward_norm.group_size=8"],
    ["actor.adv_norm.mean_level=group", "actor.adv_norm.std_level=batch", "actor.reward_norm.mean_level=batch",
     "actor.reward_norm.std_level=batch"],
])
def test_the_canonical_configuration_explain_prints_runs_as_a_config_file(sets, tmp_path, capsys):
    """`advcli explain --flavor areal` prints the canonical configuration "to use with --flavor advcli"; fed back as a
    --config file, its normalisation mappings (reward.norm, the estimator's norm) were flattened by the loader and
    refused as unknown keys. They run now, with AReaL's numbers; so does the configuration an output records."""
    import json

    from conftest import SAMPLE, run_main

    settings = [a for s in sets for a in ("--set", s)]
    code, out, err = run_main(["explain", "--flavor", "areal", *settings], capsys)
    assert code == 0, err
    text = out[out.index("canonical configuration (use with --flavor advcli):"):]
    canonical = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
    (tmp_path / "canonical.yaml").write_text(json.dumps(canonical))  # JSON is YAML
    native, again, recorded = (tmp_path / n for n in ("native.parquet", "again.parquet", "recorded.parquet"))
    base = ["--set", "actor.kl_ctl=0", "-q"]
    code, _, err = run_main(["run", SAMPLE, "-o", native, "--flavor", "areal", *settings, *base], capsys)
    assert code == 0, err
    code, _, err = run_main(["run", SAMPLE, "-o", again, "--flavor", "advcli", "--config",
                             tmp_path / "canonical.yaml", "--set", "kl.coef=0", "-q"], capsys)
    assert code == 0, err
    config = json.loads(pq.read_schema(native).metadata[b"advcli"])["config"]
    (tmp_path / "recorded.yaml").write_text(json.dumps(config))
    code, _, err = run_main(["run", SAMPLE, "-o", recorded, "--flavor", "advcli", "--config", tmp_path / "recorded.yaml",
                             "-q"], capsys)
    assert code == 0, err
    want = pq.read_table(native)
    for got in (pq.read_table(again), pq.read_table(recorded)):
        for c in ("advantages", "returns"):
            assert got.column(c).equals(want.column(c)), c


def test_negative_overlong_tokens_runs_and_0_is_refused(tmp_path):
    """reward_overlong_penalty (utils/functional/functional.py L937-958 @cbff54d6) only asserts overlong_tokens is
    set: with T = −4, max_new_tokens 6 and factor 0.5 each row gets min(−(n − (6 + 4))/(−4)·0.5, 0) = (n − 10)/8
    (n = Σ loss mask); T = 0 divides by zero (±inf or NaN rewards) and is refused."""
    shaping = {"actor.overlong_reward_penalty": True, "actor.overlong_penalty_factor": 0.5,
               "actor.max_new_tokens": 6, "actor.kl_ctl": 0.0}
    got, _ = run(tmp_path, {**shaping, "actor.overlong_tokens": -4}, values=False)
    for i, r in enumerate(ROWS):
        assert got["token_level_rewards"][i][-1] == pytest.approx(r[2] + (sum(r[3]) - 10) / 8, rel=1e-6, abs=1e-7)
    with pytest.raises(AdvcliError, match="overlong_tokens must not be 0"):
        run(tmp_path, {**shaping, "actor.overlong_tokens": 0}, values=False)
