"""--flavor skyrl against numbers produced by SkyRL's own code (NovaSky-AI/SkyRL @ a9564572).

EXPECTED below was computed on CPU (torch 2.13, float32) by running, unmodified (copied out of the
sources by ``ast``, decorators and loggers stubbed), ``RayPPOTrainer.apply_reward_kl_penalty``,
``RayPPOTrainer.compute_advantages_and_returns`` and step 1 of ``RayPPOTrainer._normalize_advantages``
(skyrl/train/trainer.py) with ``compute_approx_kl``, ``masked_whiten``, the KL controllers and the five
estimators of skyrl/backends/skyrl_train/utils/ppo_utils.py, on ROWS laid out as SkyRL lays them out
(``convert_prompts_responses_to_batch_tensors``: right-aligned [B, T = max L_i] per step, reward on the
last response token, SkyRL response_mask = 1 on all L_i positions, loss_mask = the response_mask column),
one batch per ``step`` value. Only groups with dyadic or distinct scores are used there, so no literal
depends on float32 summation order; the float32 hazard is tested against the same torch calls SkyRL
makes, on the running machine.
"""
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from _flavor_rows import assert_rows_close
from conftest import output_lists, run_table

from advcli.errors import AdvcliError

A = "trainer.algorithm."

# (prompt_id, reward, response_mask, old_log_probs, ref_log_probs, values, step, is_last_step).
# Step 0: a = [1, 0, 0.5, 0] (scattered), b alone, d = 0.75 ×3 (all equal); step 1: c = [−1, 1, −1]
# (mean −1/3: maxrl flips sign), e alone. Interior masked spans, masked tails (rows 0, 3, 6), a row of
# length 1, log-ratios beyond ±20 (rows 0 and 5).
ROWS = [
 ("a", 1.0, [1,1,1,0], [-0.5,-1.0,-0.2,-3.0], [-0.7,-0.9,-25.0,-1.0], [0.1,0.2,0.3,0.4], 0, True),
 ("b", 0.7, [1], [-0.3], [-0.2], [0.5], 0, True),
 ("d", 0.75, [1,0,0,1,1], [-1.0,-2.0,-0.5,-0.1,-0.3], [-1.1,-2.5,-0.6,-0.2,-0.35], [0.3,0.1,-0.2,0.4,0.6], 0, True),
 ("a", 0.0, [0,1,1,1,0,0], [-0.2,-0.4,-0.6,-0.8,-1.0,-1.2], [-0.25,-0.3,-0.9,-0.7,-1.1,-1.0], [0.0,0.1,0.2,0.3,0.2,0.1], 0, True),
 ("c", -1.0, [1,1], [-0.1,-0.2], [-0.15,-0.1], [0.9,0.8], 1, True),
 ("a", 0.5, [1,1,1,1,1], [-0.5,-0.5,-0.5,-0.5,-0.5], [-0.4,-0.6,-0.3,-0.7,-22.0], [0.2,0.2,0.2,0.2,0.2], 0, True),
 ("d", 0.75, [1,1,0], [-0.3,-0.6,-0.9], [-0.2,-0.9,-0.8], [0.4,0.5,0.6], 0, True),
 ("c", 1.0, [1,0,1], [-1.5,-0.2,-0.1], [-1.4,-0.3,-0.3], [-0.1,0.0,0.1], 1, True),
 ("a", 0.0, [1,1], [-0.05,-0.15], [-0.1,-0.1], [0.3,0.3], 0, True),
 ("d", 0.75, [0,1,1,1], [-0.4,-0.3,-0.2,-0.1], [-0.5,-0.2,-0.3,-0.2], [0.5,0.4,0.3,0.2], 0, True),
 ("c", -1.0, [1,1,1], [-0.2,-0.2,-0.2], [-0.3,-0.1,-0.2], [0.1,0.2,0.3], 1, True),
 ("e", 0.25, [1,1], [-0.6,-0.6], [-0.5,-0.7], [0.0,0.5], 1, True),
]

SETTINGS = {
 "grpo": {},
 "grpo_nostd": {A + "grpo_norm_by_std": False},
 "rloo": {A + "advantage_estimator": "rloo"},
 "maxrl": {A + "advantage_estimator": "maxrl"},
 "grpo_kl_k3": {A + "use_kl_in_reward": True, A + "use_kl_loss": False, A + "kl_loss_coef": 0.05},
 "maxrl_kl_abs_adaptive": {A + "advantage_estimator": "maxrl", A + "use_kl_in_reward": True, A + "use_kl_loss": False,
                           A + "kl_estimator_type": "abs", A + "kl_loss_coef": 0.1, A + "kl_ctrl.type": "adaptive",
                           A + "kl_ctrl.kl_target": 0.05, A + "kl_ctrl.horizon": 20},
 "rpp_g09_kl_k2": {A + "advantage_estimator": "reinforce++", A + "gamma": 0.9, A + "use_kl_in_reward": True,
                   A + "use_kl_loss": False, A + "kl_estimator_type": "k2", A + "kl_loss_coef": 0.2},
 "gae_099_095": {A + "advantage_estimator": "gae", A + "gamma": 0.99, A + "lambd": 0.95},
 "grpo_bn": {A + "advantage_batch_normalize": True},
 "rpp_bn": {A + "advantage_estimator": "reinforce++", A + "advantage_batch_normalize": True},
 "rloo_kl_k1_neg": {A + "advantage_estimator": "rloo", A + "use_kl_in_reward": True, A + "use_kl_loss": False,
                    A + "kl_estimator_type": "k1", A + "kl_loss_coef": -0.3},
 # the adaptive controller drives β below 0 after step 0 (B = 8 > 5·horizon): step 1 has no KL penalty
 "grpo_kl_k1_adaptive_negative": {A + "use_kl_in_reward": True, A + "use_kl_loss": False, A + "kl_estimator_type": "k1",
                                  A + "kl_loss_coef": 0.05, A + "kl_ctrl.type": "adaptive",
                                  A + "kl_ctrl.kl_target": 100.0, A + "kl_ctrl.horizon": 1},
}

# Step-wise trajectories (one batch): t1 = rows 0-1 (uid a), t2 = row 2 (a), t3 = rows 3-5 (b: the earlier turns
# carry other ids and large rewards, which SkyRL ignores), t4 = row 6 (b).
SW = [
 ("a", 5.0, [1,1], [-0.1,-0.2], [-0.1,-0.3], [0,0], 0, False),
 ("a", 1.0, [1,0,1], [-0.3,-0.2,-0.1], [-0.2,-0.2,-0.2], [0,0,0], 0, True),
 ("a", 0.0, [1], [-0.5], [-0.4], [0], 0, True),
 ("x", 3.0, [1,1,1], [-0.1,-0.1,-0.1], [-0.2,-0.1,-0.3], [0,0,0], 0, False),
 ("y", 2.0, [0,1], [-0.2,-0.2], [-0.2,-0.1], [0,0], 0, False),
 ("b", 0.7, [1,1,1,1], [-0.3,-0.3,-0.3,-0.3], [-0.3,-0.2,-0.4,-0.3], [0,0,0,0], 0, True),
 ("b", 0.2, [1,1], [-0.6,-0.6], [-0.5,-0.5], [0,0], 0, True),
]

SW_SETTINGS = {"sw_grpo": {"generator.step_wise_trajectories": True},
               "sw_rloo_kl_bn": {"generator.step_wise_trajectories": True, A + "advantage_estimator": "rloo",
                                 A + "use_kl_in_reward": True, A + "use_kl_loss": False, A + "kl_loss_coef": 0.5,
                                 A + "advantage_batch_normalize": True}}

EXPECTED = {
    'grpo': {
        'adv': [[1.30557966, 1.30557966, 1.30557966, 1.30557966], [0.699999332], [0, 0, 0, 0, 0], [-0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785], [-0.577349782, -0.577349782], [0.261115938, 0.261115938, 0.261115938, 0.261115938, 0.261115938], [0, 0, 0], [1.15469968, 1.15469968, 1.15469968], [-0.783347785, -0.783347785], [0, 0, 0, 0], [-0.577349782, -0.577349782, -0.577349782], [0.249999762, 0.249999762]],
        'ret': [[1.30557966, 1.30557966, 1.30557966, 1.30557966], [0.699999332], [0, 0, 0, 0, 0], [-0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785], [-0.577349782, -0.577349782], [0.261115938, 0.261115938, 0.261115938, 0.261115938, 0.261115938], [0, 0, 0], [1.15469968, 1.15469968, 1.15469968], [-0.783347785, -0.783347785], [0, 0, 0, 0], [-0.577349782, -0.577349782, -0.577349782], [0.249999762, 0.249999762]],
        'tlr': [[0, 0, 0, 1], [0.699999988], [0, 0, 0, 0, 0.75], [0, 0, 0, 0, 0, 0], [0, -1], [0, 0, 0, 0, 0.5], [0, 0, 0.75], [0, 0, 1], [0, 0], [0, 0, 0, 0.75], [0, 0, -1], [0, 0.25]],
    },
    'grpo_nostd': {
        'adv': [[0.625, 0.625, 0.625, 0.625], [0.699999988], [0, 0, 0, 0, 0], [-0.375, -0.375, -0.375, -0.375, -0.375, -0.375], [-0.666666627, -0.666666627], [0.125, 0.125, 0.125, 0.125, 0.125], [0, 0, 0], [1.33333337, 1.33333337, 1.33333337], [-0.375, -0.375], [0, 0, 0, 0], [-0.666666627, -0.666666627, -0.666666627], [0.25, 0.25]],
        'ret': [[0.625, 0.625, 0.625, 0.625], [0.699999988], [0, 0, 0, 0, 0], [-0.375, -0.375, -0.375, -0.375, -0.375, -0.375], [-0.666666627, -0.666666627], [0.125, 0.125, 0.125, 0.125, 0.125], [0, 0, 0], [1.33333337, 1.33333337, 1.33333337], [-0.375, -0.375], [0, 0, 0, 0], [-0.666666627, -0.666666627, -0.666666627], [0.25, 0.25]],
        'tlr': [[0, 0, 0, 1], [0.699999988], [0, 0, 0, 0, 0.75], [0, 0, 0, 0, 0, 0], [0, -1], [0, 0, 0, 0, 0.5], [0, 0, 0.75], [0, 0, 1], [0, 0], [0, 0, 0, 0.75], [0, 0, -1], [0, 0.25]],
    },
    'rloo': {
        'adv': [[0.833333373, 0.833333373, 0.833333373, 0.833333373], [0], [0, 0, 0, 0, 0], [-0.5, -0.5, -0.5, -0.5, -0.5, -0.5], [-0.99999994, -0.99999994], [0.166666672, 0.166666672, 0.166666672, 0.166666672, 0.166666672], [0, 0, 0], [2, 2, 2], [-0.5, -0.5], [0, 0, 0, 0], [-0.99999994, -0.99999994, -0.99999994], [0, 0]],
        'ret': [[0.833333373, 0.833333373, 0.833333373, 0.833333373], [0], [0, 0, 0, 0, 0], [-0.5, -0.5, -0.5, -0.5, -0.5, -0.5], [-0.99999994, -0.99999994], [0.166666672, 0.166666672, 0.166666672, 0.166666672, 0.166666672], [0, 0, 0], [2, 2, 2], [-0.5, -0.5], [0, 0, 0, 0], [-0.99999994, -0.99999994, -0.99999994], [0, 0]],
        'tlr': [[0, 0, 0, 1], [0.699999988], [0, 0, 0, 0, 0.75], [0, 0, 0, 0, 0, 0], [0, -1], [0, 0, 0, 0, 0.5], [0, 0, 0.75], [0, 0, 1], [0, 0], [0, 0, 0, 0.75], [0, 0, -1], [0, 0.25]],
    },
    'maxrl': {
        'adv': [[1.66666222, 1.66666222, 1.66666222, 1.66666222], [0.699999988], [0, 0, 0, 0, 0], [-0.999997318, -0.999997318, -0.999997318, -0.999997318, -0.999997318, -0.999997318], [2.00000596, 2.00000596], [0.333332419, 0.333332419, 0.333332419, 0.333332419, 0.333332419], [0, 0, 0], [-4.0000124, -4.0000124, -4.0000124], [-0.999997318, -0.999997318], [0, 0, 0, 0], [2.00000596, 2.00000596, 2.00000596], [0.25, 0.25]],
        'ret': [[1.66666222, 1.66666222, 1.66666222, 1.66666222], [0.699999988], [0, 0, 0, 0, 0], [-0.999997318, -0.999997318, -0.999997318, -0.999997318, -0.999997318, -0.999997318], [2.00000596, 2.00000596], [0.333332419, 0.333332419, 0.333332419, 0.333332419, 0.333332419], [0, 0, 0], [-4.0000124, -4.0000124, -4.0000124], [-0.999997318, -0.999997318], [0, 0, 0, 0], [2.00000596, 2.00000596, 2.00000596], [0.25, 0.25]],
        'tlr': [[0, 0, 0, 1], [0.699999988], [0, 0, 0, 0, 0.75], [0, 0, 0, 0, 0, 0], [0, -1], [0, 0, 0, 0, 0.5], [0, 0, 0.75], [0, 0, 1], [0, 0], [0, 0, 0, 0.75], [0, 0, -1], [0, 0.25]],
    },
    'grpo_kl_k3': {
        'adv': [[1.49997842, 1.49997842, 1.49997842, 1.49997842], [0.699740767], [0.67615819, 0.67615819, 0.67615819, 0.67615819, 0.67615819], [-0.503301084, -0.503301084, -0.503301084, -0.503301084, -0.503301084, -0.503301084], [-0.57727164, -0.57727164], [-0.503097713, -0.503097713, -0.503097713, -0.503097713, -0.503097713], [-1.14741814, -1.14741814, -1.14741814], [1.15469968, 1.15469968, 1.15469968], [-0.493579745, -0.493579745], [0.471259892, 0.471259892, 0.471259892, 0.471259892], [-0.577427924, -0.577427924, -0.577427924], [0.249499336, 0.249499336]],
        'ret': [[1.49997842, 1.49997842, 1.49997842, 1.49997842], [0.699740767], [0.67615819, 0.67615819, 0.67615819, 0.67615819, 0.67615819], [-0.503301084, -0.503301084, -0.503301084, -0.503301084, -0.503301084, -0.503301084], [-0.57727164, -0.57727164], [-0.503097713, -0.503097713, -0.503097713, -0.503097713, -0.503097713], [-1.14741814, -1.14741814, -1.14741814], [1.15469968, 1.15469968, 1.15469968], [-0.493579745, -0.493579745], [0.471259892, 0.471259892, 0.471259892, 0.471259892], [-0.577427924, -0.577427924, -0.577427924], [0.249499336, 0.249499336]],
        'tlr': [[-0.000936537981, -0.000258547079, -0.5, 1], [0.699741423], [-0.000241869697, 0, 0, -0.000241869697, 0.749938548], [0, -0.000258547079, -0.00204091077, -0.000258547079, 0, 0], [-6.14702731e-05, -1.00025856], [-0.000258547079, -0.000241869697, -0.00107014179, -0.000936537981, 0], [-0.000258547079, -0.00204091077, 0.75], [-0.000258547079, 0, 0.999063492], [-6.14702731e-05, -6.35564356e-05], [0, -0.000258547079, -0.000241869697, 0.749758124], [-0.000241869697, -0.000258547079, -1], [-0.000258547079, 0.249758124]],
    },
    'maxrl_kl_abs_adaptive': {
        'adv': [[0.84146446, 0.84146446, 0.84146446, 0.84146446], [0.689999998], [0.00928063598, 0.00928063598, 0.00928063598, 0.00928063598, 0.00928063598], [-0.939025521, -0.939025521, -0.939025521, -0.939025521, -0.939025521, -0.939025521], [1.84863162, 1.84863162], [1.0853672, 1.0853672, 1.0853672, 1.0853672, 1.0853672], [-0.0116009824, -0.0116009824, -0.0116009824], [-3.71240091, -3.71240091, -3.71240091], [-0.987806082, -0.987806082], [0.00232009683, 0.00232009683, 0.00232009683, 0.00232009683], [1.86376917, 1.86376917, 1.86376917], [0.228399992, 0.228399992]],
        'ret': [[0.84146446, 0.84146446, 0.84146446, 0.84146446], [0.689999998], [0.00928063598, 0.00928063598, 0.00928063598, 0.00928063598, 0.00928063598], [-0.939025521, -0.939025521, -0.939025521, -0.939025521, -0.939025521, -0.939025521], [1.84863162, 1.84863162], [1.0853672, 1.0853672, 1.0853672, 1.0853672, 1.0853672], [-0.0116009824, -0.0116009824, -0.0116009824], [-3.71240091, -3.71240091, -3.71240091], [-0.987806082, -0.987806082], [0.00232009683, 0.00232009683, 0.00232009683, 0.00232009683], [1.86376917, 1.86376917, 1.86376917], [0.228399992, 0.228399992]],
        'tlr': [[-0.0199999996, -0.0100000026, -2.48000002, 1], [0.689999998], [-0.0100000026, 0, 0, -0.0100000007, 0.745000005], [0, -0.00999999978, -0.0299999956, -0.0100000026, 0, 0], [-0.00540000061, -1.0108], [-0.00999999978, -0.0100000026, -0.0199999996, -0.0199999996, -1.6500001], [-0.0100000007, -0.0299999956, 0.75], [-0.0108000031, 0, 0.978399992], [-0.00500000035, -0.00500000035], [0, -0.0100000007, -0.0100000007, 0.74000001], [-0.0108000012, -0.0108000003, -1], [-0.0108000031, 0.239199996]],
    },
    'rpp_g09_kl_k2': {
        'adv': [[-1.82771242, -2.0920403, -2.38590026, 0.601677716], [0.58708024], [0.576953292, 0.579648495, 0.582589328, 0.585856915, 0.589541435], [0.55274868, 0.552700639, 0.552701056, 0.553132653, 0.553181171, 0.553181171], [-0.881408215, -0.997718573], [-0.902112722, -1.06375825, -1.24336433, -1.44276488, -1.6643213], [0.582201481, 0.585479856, 0.589553595], [1.10688579, 1.21246791, 1.32848692], [0.553158164, 0.553169072], [0.57957834, 0.582511365, 0.585824192, 0.589505076], [-0.777445316, -0.881233454, -0.996553659], [0.428174376, 0.458344012]],
        'ret': [[-49.0941353, -54.5445938, -60.6039963, 1], [0.699000001], [0.490181983, 0.545757771, 0.60639751, 0.673775017, 0.749750018], [-0.00891899876, -0.00990999863, -0.00989999808, -0.00100000051, 0, 0], [-0.901149988, -1.00100005], [-30.0082283, -33.3413658, -37.0448532, -41.1565018, -45.7250023], [0.598399937, 0.665999949, 0.75], [0.805759966, 0.896399975, 0.995999992], [-0.000475000037, -0.000250000041], [0.544310987, 0.604789972, 0.673099995, 0.749000013], [-0.81189996, -0.900999963, -1], [0.223099992, 0.248999998]],
        'tlr': [[-0.00399999972, -0.00100000051, -61.5039978, 1], [0.699000001], [-0.00100000051, 0, 0, -0.00100000005, 0.749750018], [0, -0.000999999931, -0.00899999775, -0.00100000051, 0, 0], [-0.000250000041, -1.00100005], [-0.000999999931, -0.00100000051, -0.00399999972, -0.00399999972, -45.7250023], [-0.00100000016, -0.00899999775, 0.75], [-0.00100000051, 0, 0.995999992], [-0.000250000012, -0.000250000041], [0, -0.00100000016, -0.00100000016, 0.749000013], [-0.00100000016, -0.00100000005, -1], [-0.00100000051, 0.248999998]],
    },
    'gae_099_095': {
        'adv': [[1.64704609, 1.47520447, 1.29579687, 1.10834455], [-0.135120735], [0.252434224, 0.980657399, 2.07556772, 0.284782022, -0.290553898], [-0.634044945, -0.953503191, -1.28986645, -1.64420414, -1.36319792, -1.06771958], [-1.22885311, -1.2280556], [-0.0499136224, 0.00142104109, 0.0560033396, 0.114038721, 0.175745636], [0.225758016, -0.0260842592, -0.290553898], [1.2437737, 1.20500553, 1.16472709], [-1.64328861, -1.68945205], [-0.23939763, 0.137093052, 0.534096837, 0.952911377], [-0.484231442, -0.630435884, -0.784947634], [0.597438157, 0.145578891]],
        'ret': [[0.873290479, 0.918012142, 0.960300028, 1], [0.699999988], [0.624669313, 0.658925414, 0.71113807, 0.735074997, 0.75], [0.039505206, 0.0367413163, 0.0285394192, 0.0145554543, 0.00495000184, 0], [-0.900900006, -0.99999994], [0.427409559, 0.443922997, 0.461481094, 0.480150044, 0.5], [0.716088057, 0.735074997, 0.75], [0.889195681, 0.945449948, 1], [0.0148499906, 0], [0.666455984, 0.687566161, 0.715275049, 0.75], [-0.860673726, -0.925649941, -0.99999994], [0.259875, 0.25]],
        'tlr': [[0, 0, 0, 1], [0.699999988], [0, 0, 0, 0, 0.75], [0, 0, 0, 0, 0, 0], [0, -1], [0, 0, 0, 0, 0.5], [0, 0, 0.75], [0, 0, 1], [0, 0], [0, 0, 0, 0.75], [0, 0, -1], [0, 0.25]],
    },
    'grpo_bn': {
        'adv': [[1.98905742, 1.98905742, 1.98905742, 1.98905742], [1.05208254], [-0.0309806485, -0.0309806485, -0.0309806485, -0.0309806485, -0.0309806485], [-1.24300349, -1.24300349, -1.24300349, -1.24300349, -1.24300349, -1.24300349], [-0.88528055, -0.88528055], [0.373026967, 0.373026967, 0.373026967, 0.373026967, 0.373026967], [-0.0309806485, -0.0309806485, -0.0309806485], [1.41315031, 1.41315031, 1.41315031], [-1.24300349, -1.24300349], [-0.0309806485, -0.0309806485, -0.0309806485, -0.0309806485], [-0.88528055, -0.88528055, -0.88528055], [0.212612882, 0.212612882]],
        'ret': [[1.30557966, 1.30557966, 1.30557966, 1.30557966], [0.699999332], [0, 0, 0, 0, 0], [-0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785], [-0.577349782, -0.577349782], [0.261115938, 0.261115938, 0.261115938, 0.261115938, 0.261115938], [0, 0, 0], [1.15469968, 1.15469968, 1.15469968], [-0.783347785, -0.783347785], [0, 0, 0, 0], [-0.577349782, -0.577349782, -0.577349782], [0.249999762, 0.249999762]],
        'tlr': [[0, 0, 0, 1], [0.699999988], [0, 0, 0, 0, 0.75], [0, 0, 0, 0, 0, 0], [0, -1], [0, 0, 0, 0, 0.5], [0, 0, 0.75], [0, 0, 1], [0, 0], [0, 0, 0, 0.75], [0, 0, -1], [0, 0.25]],
    },
    'rpp_bn': {
        'adv': [[1.30246651, 1.30246651, 1.30246651, 1.30246651], [0.453031778], [0.594604254, 0.594604254, 0.594604254, 0.594604254, 0.594604254], [-1.52898252, -1.52898252, -1.52898252, -1.52898252, -1.52898252, -1.52898252], [-0.956324816, -0.956324816], [-0.113257982, -0.113257982, -0.113257982, -0.113257982, -0.113257982], [0.594604254, 0.594604254, 0.594604254], [1.29385114, 1.29385114, 1.29385114], [-1.52898252, -1.52898252], [0.594604254, 0.594604254, 0.594604254, 0.594604254], [-0.956324816, -0.956324816, -0.956324816], [0.450035185, 0.450035185]],
        'ret': [[1, 1, 1, 1], [0.699999988], [0.75, 0.75, 0.75, 0.75, 0.75], [0, 0, 0, 0, 0, 0], [-1, -1], [0.5, 0.5, 0.5, 0.5, 0.5], [0.75, 0.75, 0.75], [1, 1, 1], [0, 0], [0.75, 0.75, 0.75, 0.75], [-1, -1, -1], [0.25, 0.25]],
        'tlr': [[0, 0, 0, 1], [0.699999988], [0, 0, 0, 0, 0.75], [0, 0, 0, 0, 0, 0], [0, -1], [0, 0, 0, 0, 0.5], [0, 0, 0.75], [0, 0, 1], [0, 0], [0, 0, 0, 0.75], [0, 0, -1], [0, 0.25]],
    },
    'rloo_kl_k1_neg': {
        'adv': [[0.833333373, 0.833333373, 0.833333373, 0.833333373], [0], [0, 0, 0, 0, 0], [-0.5, -0.5, -0.5, -0.5, -0.5, -0.5], [-0.99999994, -0.99999994], [0.166666672, 0.166666672, 0.166666672, 0.166666672, 0.166666672], [0, 0, 0], [2, 2, 2], [-0.5, -0.5], [0, 0, 0, 0], [-0.99999994, -0.99999994, -0.99999994], [0, 0]],
        'ret': [[0.833333373, 0.833333373, 0.833333373, 0.833333373], [0], [0, 0, 0, 0, 0], [-0.5, -0.5, -0.5, -0.5, -0.5, -0.5], [-0.99999994, -0.99999994], [0.166666672, 0.166666672, 0.166666672, 0.166666672, 0.166666672], [0, 0, 0], [2, 2, 2], [-0.5, -0.5], [0, 0, 0, 0], [-0.99999994, -0.99999994, -0.99999994], [0, 0]],
        'tlr': [[0, 0, 0, 1], [0.699999988], [0, 0, 0, 0, 0.75], [0, 0, 0, 0, 0, 0], [0, -1], [0, 0, 0, 0, 0.5], [0, 0, 0.75], [0, 0, 1], [0, 0], [0, 0, 0, 0.75], [0, 0, -1], [0, 0.25]],
    },
    'grpo_kl_k1_adaptive_negative': {
        'adv': [[-0.14292489, -0.14292489, -0.14292489, -0.14292489], [0.704999328], [-0.872627437, -0.872627437, -0.872627437, -0.872627437, -0.872627437], [0.742287517, 0.742287517, 0.742287517, 0.742287517, 0.742287517, 0.742287517], [-0.577349782, -0.577349782], [-1.36009204, -1.36009204, -1.36009204, -1.36009204, -1.36009204], [-0.218145147, -0.218145147, -0.218145147], [1.15469968, 1.15469968, 1.15469968], [0.760729432, 0.760729432], [1.09081936, 1.09081936, 1.09081936, 1.09081936], [-0.577349782, -0.577349782, -0.577349782], [0.249999762, 0.249999762]],
        'ret': [[-0.14292489, -0.14292489, -0.14292489, -0.14292489], [0.704999328], [-0.872627437, -0.872627437, -0.872627437, -0.872627437, -0.872627437], [0.742287517, 0.742287517, 0.742287517, 0.742287517, 0.742287517, 0.742287517], [-0.577349782, -0.577349782], [-1.36009204, -1.36009204, -1.36009204, -1.36009204, -1.36009204], [-0.218145147, -0.218145147, -0.218145147], [1.15469968, 1.15469968, 1.15469968], [0.760729432, 0.760729432], [1.09081936, 1.09081936, 1.09081936, 1.09081936], [-0.577349782, -0.577349782, -0.577349782], [0.249999762, 0.249999762]],
        'tlr': [[-0.00999999978, 0.00500000129, -1.24000001, 1], [0.704999983], [-0.00500000129, 0, 0, -0.00500000035, 0.747500002], [0, 0.00499999989, -0.0149999978, 0.00500000129, 0, 0], [0, -1], [0.00499999989, -0.00500000129, 0.00999999978, -0.00999999978, -0.575000048], [0.00500000035, -0.0149999978, 0.75], [0, 0, 1], [-0.00250000018, 0.00250000018], [0, 0.00500000035, -0.00500000035, 0.745000005], [0, 0, -1], [0, 0.25]],
    },
    'sw_grpo': {
        'adv': [[0.707105756, 0.707105756], [0.707105756, 0.707105756, 0.707105756], [-0.707105756], [0.707104743, 0.707104743, 0.707104743], [0.707104743, 0.707104743], [0.707104743, 0.707104743, 0.707104743, 0.707104743], [-0.707104743, -0.707104743]],
        'ret': [[0.707105756, 0.707105756], [0.707105756, 0.707105756, 0.707105756], [-0.707105756], [0.707104743, 0.707104743, 0.707104743], [0.707104743, 0.707104743], [0.707104743, 0.707104743, 0.707104743, 0.707104743], [-0.707104743, -0.707104743]],
        'tlr': [[0, 5], [0, 0, 1], [0], [0, 0, 3], [0, 2], [0, 0, 0, 0.699999988], [0, 0.200000003]],
    },
    'sw_rloo_kl_bn': {
        'adv': [[1.23594332, 1.23594332], [1.23594332, 1.23594332, 1.23594332], [-2.14188313], [0.393816501, 0.393816501, 0.393816501], [0.393816501, 0.393816501], [0.393816501, 0.393816501, 0.393816501, 0.393816501], [-1.29975629, -1.29975629]],
        'ret': [[0.997581303, 0.997581303], [0.997581303, 0.997581303, 0.997581303], [-0.997581303], [0.500166774, 0.500166774, 0.500166774], [0.500166774, 0.500166774], [0.500166774, 0.500166774, 0.500166774, 0.500166774], [-0.500166774, -0.500166774]],
        'tlr': [[0, 4.99758148], [-0.00258547068, 0, 0.997581303], [-0.00258547068], [-0.00241869688, 0, 2.99063468], [0, 1.99741459], [0, -0.00258547068, -0.00241869688, 0.699999988], [-0.00258547068, 0.197414532]],
    },
}


def _write(path, rows, with_step=True, last_step_name="is_last_step", reward_type=pa.float32()):
    cols = {"prompt_id": pa.array([r[0] for r in rows]), "reward": pa.array([r[1] for r in rows], reward_type),
            "response_mask": pa.array([r[2] for r in rows], pa.list_(pa.int8()))}
    for k, name in ((3, "old_log_probs"), (4, "ref_log_probs"), (5, "values")):
        cols[name] = pa.array([[float(x) for x in r[k]] for r in rows], pa.list_(pa.float32()))
    if with_step:
        cols["step"] = pa.array([r[6] for r in rows], pa.int64())
    cols[last_step_name] = pa.array([r[7] for r in rows], pa.bool_())
    pq.write_table(pa.table(cols), path)
    return path


def _run(tmp_path, settings, rows=ROWS, chunk_rows=2, precision=None, columns=None, **kw):
    src = _write(os.path.join(tmp_path, "in.parquet"), rows, **kw)
    t, res = run_table(src, os.path.join(tmp_path, "out.parquet"), "skyrl", settings, chunk_rows=chunk_rows,
                       precision=precision, columns=columns)
    return output_lists(t), res


# ------------------------------------------------------------------------------ against SkyRL
@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_matches_skyrl(tmp_path, name):
    got, _ = _run(tmp_path, SETTINGS[name])
    exp = EXPECTED[name]
    assert_rows_close(got["advantages"], exp["adv"])  # every position: SkyRL's estimators write loss-masked tokens too
    assert_rows_close(got["returns"], exp["ret"])
    if SETTINGS[name].get(A + "use_kl_in_reward"):
        assert_rows_close(got["token_level_rewards"], exp["tlr"])
    else:
        assert "token_level_rewards" not in got


@pytest.mark.parametrize("name", sorted(SW_SETTINGS))
def test_step_wise_matches_skyrl(tmp_path, name):
    got, _ = _run(tmp_path, SW_SETTINGS[name], rows=SW)
    exp = EXPECTED[name]
    assert_rows_close(got["advantages"], exp["adv"])
    assert_rows_close(got["returns"], exp["ret"])


@pytest.mark.parametrize("name", ["grpo_kl_k3", "maxrl_kl_abs_adaptive", "rpp_g09_kl_k2", "gae_099_095",
                                  "grpo_bn", "rpp_bn"])
def test_chunk_size_does_not_change_a_bit(tmp_path, name):
    runs = [_run(tmp_path, SETTINGS[name], chunk_rows=c)[0] for c in (1, 3, 7, 1000)]
    assert all(r == runs[0] for r in runs[1:])
    sw = [_run(tmp_path, SW_SETTINGS["sw_rloo_kl_bn"], rows=SW, chunk_rows=c)[0] for c in (1, 2, 7)]
    assert all(r == sw[0] for r in sw[1:])


# ---------------------------------------------------------------------------------- by hand
def _score_rows(rows):
    return [float(np.float32(r[1])) for r in rows]


def test_maxrl_by_hand(tmp_path):
    """(s − μ)/(μ + 1e-6), a group of one s (SkyRL compute_maxrl_advantage), on every position."""
    got, _ = _run(tmp_path, {A + "advantage_estimator": "maxrl"}, precision="float64")
    s = _score_rows(ROWS)
    for i, r in enumerate(ROWS):
        mates = [s[j] for j, q in enumerate(ROWS) if q[0] == r[0] and q[6] == r[6]]
        mu = sum(mates) / len(mates)
        want = s[i] if len(mates) == 1 else (s[i] - mu) / (mu + 1e-6)
        assert got["advantages"][i] == pytest.approx([want] * len(r[2]), rel=1e-6, abs=1e-7)
    # c = [−1, 1, −1]: μ = −1/3 < 0 flips the sign (no guard), the 1.0 row gets −4
    assert got["advantages"][7][0] == pytest.approx((1 + 1 / 3) / (-1 / 3 + 1e-6))


def test_batch_normalize_by_hand(tmp_path):
    """grpo then advantage_batch_normalize, per step: mean over the [B, max L] grid (padding 0), biased
    variance over all response positions, (A − mean)·rsqrt(max(var, 1e-8)); returns untouched."""
    base, _ = _run(tmp_path, {}, precision="float64")
    got, _ = _run(tmp_path, {A + "advantage_batch_normalize": True}, precision="float64")
    for step in (0, 1):
        idx = [i for i, r in enumerate(ROWS) if r[6] == step]
        vals = [x for i in idx for x in base["advantages"][i]]
        cells = len(idx) * max(len(ROWS[i][2]) for i in idx)
        mean = sum(vals) / cells
        var = sum((x - mean) ** 2 for x in vals) / len(vals)
        for i in idx:
            want = [(x - mean) / math.sqrt(max(var, 1e-8)) for x in base["advantages"][i]]
            assert got["advantages"][i] == pytest.approx(want, rel=1e-6, abs=1e-7)
    assert got["returns"] == base["returns"]


def test_reinforce_pp_scans_and_whitens_every_position(tmp_path):
    """Returns over every position (observation tokens are discount steps, a reward on a loss-masked last
    token counts), whitened over all response positions of the step (unbiased, rsqrt(var + 1e-8))."""
    got, _ = _run(tmp_path, {A + "advantage_estimator": "reinforce++", A + "gamma": 0.5}, precision="float64")
    rets = []
    for r in ROWS:
        L, g = len(r[2]), []
        run = 0.0
        for t in reversed(range(L)):
            run = (r[1] if t == L - 1 else 0.0) + 0.5 * run
            g.append(run)
        rets.append(g[::-1])
    assert got["returns"] == [pytest.approx(x, rel=1e-6, abs=1e-7) for x in rets]
    for step in (0, 1):
        idx = [i for i, r in enumerate(ROWS) if r[6] == step]
        vals = np.array([x for i in idx for x in rets[i]])
        mu, var = vals.mean(), vals.var(ddof=1)
        for i in idx:
            assert got["advantages"][i] == pytest.approx(list((np.array(rets[i]) - mu) / np.sqrt(var + 1e-8)),
                                                         rel=1e-6, abs=1e-7)


# -------------------------------------------------------------------------- float32 hazard
def test_grpo_all_equal_non_dyadic_hazard(tmp_path):
    """12 × 0.7 (spec/skyrl.md §5.1): SkyRL's float32 torch.mean/torch.std leave a residue that 1e-6 does
    not absorb. The float32 run equals those very torch calls on this machine; float64 gives 0; the
    diagnostics flag the group and name SkyRL's rule."""
    rows = [("g", 0.7, [1, 1], [-0.1, -0.1], [-0.1, -0.1], [0.0, 0.0], 0, True) for _ in range(12)]
    rows += [("h", float(k), [1], [-0.1], [-0.1], [0.0], 0, True) for k in (0, 1)]
    got, res = _run(tmp_path, {}, rows=rows)
    scores = [torch.tensor(0.7, dtype=torch.float32) for _ in range(12)]
    mean = torch.mean(torch.tensor(scores))  # as compute_grpo_outcome_advantage (ppo_utils.py L1343-1393)
    std = torch.std(torch.tensor([scores]))
    want = float((scores[0] - mean) / (std + 1e-6))
    assert [g[0] for g in got["advantages"][:12]] == [want] * 12
    diag = {d["kind"]: d for d in res.diagnostics}
    flagged = diag["float32_cancellation"]
    if abs(want) > 1e-4:  # the usual outcome (≈ 0.106 on x86); flagged with SkyRL's rule
        assert flagged["count"] == 1 and "compute_grpo_outcome_advantage" in flagged["explanation"]
    got64, _ = _run(tmp_path, {}, rows=rows, precision="float64")
    assert all(x == 0.0 for g in got64["advantages"][:12] for x in g)


# ------------------------------------------------------------------- zero_variance_filter with KL
FLAT = ("d",)  # ROWS' group of three 0.75 rewards: the one flat group


@pytest.mark.parametrize("name", ["grpo_kl_k3", "maxrl_kl_abs_adaptive", "rpp_g09_kl_k2",
                                  "grpo_kl_k1_adaptive_negative", "sw_rloo_kl_bn"])
@pytest.mark.parametrize("release", [None, "0.2.0"])
def test_zero_variance_filter_takes_the_kl_of_flat_groups(tmp_path, name, release):
    """postprocess_generator_output (trainer.py L1086-1101 @a9564572) zeroes the loss masks of a flat group's rows
    before apply_reward_kl_penalty, whose KL is × loss_mask: those rows get no KL term and count as KL 0 in the
    adaptive controller's step mean. So the run equals the run without the filter on the same rows with the flat
    groups' policy log-probs set to the reference's (KL 0 for k1, abs, k2 and k3 alike): every estimator, the
    controller's β of step 1, SkyRL's grid sums. Both rules find group d flat (0.75 is dyadic: numpy's std is 0)."""
    settings = {**SETTINGS, **SW_SETTINGS}[name]
    rows = SW if name.startswith("sw_") else ROWS
    flat = FLAT
    if rows is SW:  # step-wise: group b's two last steps (rows 5 and 6) get one reward, b flat
        rows = [r[:1] + (0.5,) + r[2:] if r[0] == "b" else r for r in SW]
        flat = ("b",)
    flavor = "skyrl" if release is None else f"skyrl@{release}"
    src = _write(os.path.join(tmp_path, "in.parquet"), rows)
    got = output_lists(run_table(src, os.path.join(tmp_path, "out.parquet"), flavor,
                                 {**settings, A + "zero_variance_filter": True}, chunk_rows=2)[0])
    quiet = [r[:3] + (r[4],) + r[4:] if r[0] in flat else r for r in rows]  # old_log_probs := ref_log_probs
    src = _write(os.path.join(tmp_path, "quiet.parquet"), quiet)
    want = output_lists(run_table(src, os.path.join(tmp_path, "want.parquet"), flavor, settings, chunk_rows=2)[0])
    assert got == want
    for i, r in enumerate(rows):  # the flat rows' token rewards: the placed reward alone
        if r[0] in flat:
            assert got["token_level_rewards"][i] == [0.0] * (len(r[2]) - 1) + [pytest.approx(r[1])]
    # the others keep their KL term: the same token rewards as without the filter
    plain = output_lists(run_table(_write(os.path.join(tmp_path, "in.parquet"), rows),
                                   os.path.join(tmp_path, "plain.parquet"), flavor, settings, chunk_rows=2)[0])
    others = [i for i, r in enumerate(rows) if r[0] not in flat]
    assert [got["token_level_rewards"][i] for i in others] == [plain["token_level_rewards"][i] for i in others]
    assert any(got["token_level_rewards"][i] != plain["token_level_rewards"][i]
               for i, r in enumerate(rows) if r[0] in flat)


def test_zero_variance_filter_in_the_adaptive_controller_and_stats(tmp_path, capsys):
    """The flat rows count as KL 0 in step 0's mean (SkyRL: Σ kl·loss_mask / max(Σ loss_mask, 1) of a zeroed mask),
    so step 1's β differs from the run without the filter; ``advcli stats`` of the output replays the same
    controller over the same rows (the output keeps the rewards and groups) and reports the run's own figures."""
    import json

    from conftest import run_main

    base = {**SETTINGS["maxrl_kl_abs_adaptive"], A + "kl_ctrl.kl_target": 1.5}  # step 0's KL ≈ 1.6-1.7: no clip
    src = _write(os.path.join(tmp_path, "in.parquet"), ROWS)
    out = os.path.join(tmp_path, "out.parquet")
    _, res = run_table(src, out, "skyrl", {**base, A + "zero_variance_filter": True})
    _, plain = run_table(src, os.path.join(tmp_path, "plain.parquet"), "skyrl", base)
    key, beta = "actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff"
    step0 = [i for i, r in enumerate(ROWS) if r[6] == 0]
    flat0 = [i for i in step0 if ROWS[i][0] in FLAT]
    assert res.per_step[0][key] == pytest.approx(
        plain.per_step[0][key] - _abs_kl_mean(flat0) * len(flat0) / len(step0), rel=1e-5)
    rows0, horizon = len(step0), base[A + "kl_ctrl.horizon"]
    for run in (res, plain):  # β of step 1: the controller's update by step 0's KL (SkyRL AdaptiveKLController)
        err = float(np.clip(run.per_step[0][key] / 1.5 - 1, -0.2, 0.2))
        assert run.per_step[1][beta] == pytest.approx(0.1 * (1 + err * rows0 / horizon), rel=1e-6)
    assert res.per_step[1][beta] != pytest.approx(plain.per_step[1][beta], rel=1e-3)
    code, printed, err = run_main(["stats", out, "--json"], capsys)
    assert code == 0, err
    got = json.loads(printed)
    for s in (0, 1):
        for k in (key, beta):
            assert got["per_step"][s][k] == res.per_step[s][k], (s, k)


def _abs_kl_mean(rows) -> float:
    """The mean over ``rows`` of SkyRL's per-row abs KL, Σ |old − ref|·m / max(Σm, 1) (float64)."""
    vals = []
    for i in rows:
        m, old, ref = (np.asarray(ROWS[i][k], np.float64) for k in (2, 3, 4))
        vals.append(float((np.abs(old - ref) * m).sum() / max(m.sum(), 1)))
    return float(np.mean(vals))


def test_zero_variance_filter_rules():
    """advcli.ops.groups.flat_group_rows against SkyRL's zero_variance_filter as written (trainer_utils.py): from
    0.3.0 (``range``) a group is flat when more than one of its rows is live (Σ loss_mask > 0) and their rewards lie
    within the tolerance; before (``std``), when numpy's std of all its rewards is 0 — which three 0.1 rewards
    escape (their float64 mean is an ulp above 0.1) and an untrained row breaks."""
    from advcli.ops.groups import GroupIndex, flat_group_rows

    rows = [  # (group, reward, live)
        (0, 0.1, True), (0, 0.1, True), (0, 0.1, True),  # equal, non-dyadic
        (1, 1.0, False), (1, 0.5, True), (1, 0.5, True),  # flat among its live rows only
        (2, 0.5, True), (2, 0.5 + 5e-7, True),  # within 1e-6
        (3, 0.3, True), (3, 0.3, False),  # one live row
        (4, 2.0, True),  # a group of one
        (5, 0.25, True), (5, 0.25, True), (5, 0.25, True), (5, 0.25, True),  # equal, dyadic
        (6, 0.0, True), (6, 1.0, True),  # signal
    ]
    groups = GroupIndex.from_codes(torch.tensor([g for g, _, _ in rows]))
    reward = torch.tensor([r for _, r, _ in rows], dtype=torch.float64)
    live = torch.tensor([x for _, _, x in rows])

    def flat(rule, tol=0.0):
        out = flat_group_rows(reward, live, groups, rule, tol)
        return sorted({g for (g, _, _), f in zip(rows, out.tolist()) if f})

    assert flat("range", 1e-6) == [0, 1, 2, 5]
    assert flat("range", 0.0) == [0, 1, 5]
    assert flat("std") == [3, 5]


def test_zero_variance_filter_follows_the_release(tmp_path):
    """Three rows of reward 0.1 and KL: from 0.3.0 their group is flat (no KL term); at 0.2.0 numpy's std of
    [0.1, 0.1, 0.1] is about 1.4e-17, so SkyRL keeps the group and its rows keep their KL term. The tolerance key
    does not exist before 0.3.0. (The rewards as SkyRL holds them: float64.)"""
    rows = [("g", 0.1, [1, 1], [-0.5, -0.2], [-0.4, -0.3], [0.0, 0.0], 0, True) for _ in range(3)]
    rows += [("h", float(k), [1], [-0.1], [-0.3], [0.0], 0, True) for k in (0, 1)]
    settings = {A + "use_kl_in_reward": True, A + "use_kl_loss": False, A + "kl_loss_coef": 0.5,
                A + "zero_variance_filter": True}
    src = _write(os.path.join(tmp_path, "in.parquet"), rows, reward_type=pa.float64())
    new = output_lists(run_table(src, os.path.join(tmp_path, "new.parquet"), "skyrl", settings)[0])
    assert [new["token_level_rewards"][i] for i in range(3)] == [[0.0, pytest.approx(0.1)]] * 3
    old = output_lists(run_table(src, os.path.join(tmp_path, "old.parquet"), "skyrl@0.2.0", settings)[0])
    k3 = [math.exp(d) - d - 1 for d in (-0.4 + 0.5, -0.3 + 0.2)]  # x = ref − old
    assert old["token_level_rewards"][0] == [pytest.approx(-0.5 * k3[0], rel=1e-5),
                                             pytest.approx(0.1 - 0.5 * k3[1], rel=1e-5)]  # float32 log-probs
    assert new["token_level_rewards"][3:] == old["token_level_rewards"][3:]
    with pytest.raises(AdvcliError, match="zero_variance_filter_tol"):
        run_table(src, os.path.join(tmp_path, "old.parquet"), "skyrl@0.2.0", {**settings, A + "zero_variance_filter_tol": 0.0})


# ------------------------------------------------------------------------------- step-wise
def test_step_wise_needs_a_closed_last_trajectory(tmp_path):
    rows = [r[:7] + (False,) if i == len(SW) - 1 else r for i, r in enumerate(SW)]
    with pytest.raises(AdvcliError, match="is_last_step=false"):
        _run(tmp_path, SW_SETTINGS["sw_grpo"], rows=rows)


def test_step_wise_column_mapping(tmp_path):
    a, _ = _run(tmp_path, SW_SETTINGS["sw_grpo"], rows=SW)
    b, _ = _run(tmp_path, SW_SETTINGS["sw_grpo"], rows=SW, columns={"is_last_step": "last"}, last_step_name="last")
    assert a == b
    with pytest.raises(AdvcliError, match="is_last_step"):
        _run(tmp_path, SW_SETTINGS["sw_grpo"], rows=SW, last_step_name="last")


# -------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("settings,match", [
    ({A + "use_kl_in_reward": True}, "mutually exclusive"),
    ({"generator.step_wise_trajectories": True, A + "advantage_estimator": "gae"}, "step_wise_trajectories"),
    ({"generator.step_wise_trajectories": True, A + "advantage_estimator": "reinforce++"}, "step_wise_trajectories"),
    ({A + "advantage_estimator": "gae", A + "advantage_batch_normalize": True}, "padding cells hold"),
    ({A + "use_kl_in_reward": True, A + "use_kl_loss": False, A + "kl_ctrl.type": "adaptive",
      A + "kl_ctrl.horizon": 0}, "horizon"),
    ({A + "kl_estimator_type": "low_var_kl"}, "kl_estimator_type"),
    ({A + "loss_reduction": "seq_mean_token_sum_norm"}, "max_seq_len"),
])
def test_refusals(tmp_path, settings, match):
    with pytest.raises(AdvcliError, match=match):
        _run(tmp_path, settings)


def test_seq_mean_token_sum_norm_without_max_seq_len_runs_at_0_1_0():
    """SkyRL 0.1.0's SkyRLTrainConfig.__post_init__ fills max_seq_len in (skyrl/train/config/config.py L713-722
    @skyrl-v0.1.0) and its validate_cfg has no such check: the setting runs there; from 0.2.0 it is refused."""
    from advcli.flavors import resolve

    resolve("skyrl@0.1.0", [(A + "loss_reduction", "seq_mean_token_sum_norm")])
    with pytest.raises(AdvcliError, match="max_seq_len"):
        resolve("skyrl@0.2.0", [(A + "loss_reduction", "seq_mean_token_sum_norm")])


def test_loss_side_keys_are_accepted_and_change_nothing(tmp_path):
    base, _ = _run(tmp_path, {})
    same, _ = _run(tmp_path, {A + "loss_reduction": "prompt_mean", A + "zero_variance_filter": True,
                              "generator.n_samples_per_prompt": 4, A + "use_kl_loss": False})
    assert same == base


def test_explain_lists_the_keys():
    from typer.testing import CliRunner

    from advcli.cli import app

    out = CliRunner().invoke(app, ["explain", "--flavor", "skyrl", "--keys"]).output
    for key in ("trainer.algorithm.advantage_estimator", "trainer.algorithm.lambd", "kl_ctrl.kl_target",
                "advantage_batch_normalize", "generator.step_wise_trajectories"):
        assert key in out


def test_batch_normalize_of_equal_advantages_is_flagged(tmp_path):
    """A step of one row: its advantage equals the grid mean, the variance is 0 and SkyRL multiplies the
    float32 residue of its mean by rsqrt(1e-8) = 1e4 (trainer.py L1477-1481). The intended value (float64)
    is 0; the diagnostics flag the step."""
    rows = [("a", 0.3, [1, 1, 0], [-0.1] * 3, [-0.1] * 3, [0.0] * 3, 0, True)] + \
           [r for r in ROWS if r[6] == 1]
    settings = {A + "advantage_estimator": "maxrl", A + "advantage_batch_normalize": True}
    got, res = _run(tmp_path, settings, rows=rows)
    diag = {d["kind"]: d for d in res.diagnostics}
    assert diag["float32_amplified_normalization"]["count"] == 1
    assert diag["float32_amplified_normalization"]["examples"][0]["step"] == 0
    got64, _ = _run(tmp_path, settings, rows=rows, precision="float64")
    assert got64["advantages"][0] == [0.0, 0.0, 0.0]
    assert_rows_close(got64["advantages"][1:], got["advantages"][1:])  # step 1 is ordinary


def test_apply_overlong_filtering_is_taken_and_changes_nothing(tmp_path):
    """generator.apply_overlong_filtering (generators/utils.py apply_overlong_filtering @a9564572) zeroes the loss mask
    of the responses that did not stop, which a SkyRL dump holds and advcli reads from response_mask: the key is
    accepted (it was refused as unknown) and the same input gives the same numbers."""
    from conftest import SAMPLE

    import advcli

    outs = []
    for extra in ({}, {"generator.apply_overlong_filtering": True}):
        path = tmp_path / f"o{len(outs)}.parquet"
        advcli.run(SAMPLE, str(path), flavor="skyrl", settings={"trainer.algorithm.advantage_estimator": "grpo",
                                                                  **extra})
        outs.append(pq.read_table(path).column("advantages").to_pylist())
    assert outs[0] == outs[1]


@pytest.mark.parametrize("release", ["", "@0.1.0", "@0.3.0"])
@pytest.mark.parametrize("command", ["run", "validate"])
def test_an_empty_response_is_refused_as_skyrl_stops_on_it(tmp_path, capsys, release, command):
    """SkyRL places a response-level reward with ``per_token_reward = [0.0] * len(response);
    per_token_reward[-1] = float(reward)`` (skyrl/train/trainer.py L1103-1106 @a9564572; L748 @skyrl-v0.1.0,
    L1091 @skyrl-v0.3.0): an empty response is an IndexError, so the run stops. advcli scored it 0 in its group
    (a = [1, 0] gave row 0 +0.7071) without a word; it refuses it naming the row, by every route."""
    from conftest import run_main

    rows = list(ROWS)
    rows[8] = ("a", 0.0, [], [], [], [], 0, True)  # 0 tokens
    src = _write(os.path.join(tmp_path, "in.parquet"), rows)
    args = ["-o", str(tmp_path / "out.parquet")] if command == "run" else []
    code, _, err = run_main([command, src, "--flavor", "skyrl" + release, *args], capsys)
    assert code == 2 and "row 8 is an empty response (0 tokens; 1 such rows): SkyRL stops here" in err, err
    assert not (tmp_path / "out.parquet").exists()
    rows[8] = ("a", 0.0, [0, 0], [-0.05, -0.15], [-0.1, -0.1], [0.3, 0.3], 0, True)  # masked, not empty: it runs
    _write(os.path.join(tmp_path, "in.parquet"), rows)
    code, _, err = run_main([command, src, "--flavor", "skyrl" + release, *args], capsys)
    assert code == 0, err


def test_an_empty_response_in_a_later_file_is_named_by_its_file_and_row(tmp_path, capsys):
    """Several input files: the refusal names the file holding the empty response and its row there (it named the
    first file with the row's place in the whole input)."""
    from conftest import run_main

    rows = list(ROWS)
    rows[9] = ("d", 0.75, [], [], [], [], 0, True)
    (tmp_path / "in").mkdir()
    _write(str(tmp_path / "in" / "a.parquet"), rows[:6])
    _write(str(tmp_path / "in" / "b.parquet"), rows[6:])
    for command, args in (("validate", []), ("run", ["-o", str(tmp_path / "out") + "/"])):
        code, _, err = run_main([command, tmp_path / "in", "--flavor", "skyrl", *args], capsys)
        assert code == 2 and "b.parquet: row 3 is an empty response" in err, err
