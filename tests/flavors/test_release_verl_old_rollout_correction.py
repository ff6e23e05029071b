"""verl's rollout correction before 0.8.0, reproduced per release (``--flavor verl@0.6.0`` ... ``@0.7.1``).

EXPECTED below was computed by running the unmodified code of each tag of verl-project/verl (heavy imports
stubbed; ``masked_sum``/``masked_mean`` from ``verl/utils/torch_functional.py`` at the same tag) in **float64** on
ROWS padded with mask 0:

- v0.6.0: ``compute_rollout_importance_weights`` of ``verl/trainer/ppo/mismatch_helper.py`` (the response mask
  unchanged; the weights reach the batch only with ``algorithm.rollout_is``, ``ray_trainer.py`` @v0.6.0 L921-962);
- v0.6.1, v0.7.0, v0.7.1: ``compute_rollout_correction_and_add_to_batch`` of
  ``verl/trainer/ppo/rollout_corr_helper.py`` (the weights, the corrected response mask, the metrics).

advcli runs in float32 and is compared at rtol 1e-5 (weights), exactly (masks) and 1e-4 relative (metrics). 0.6.0's
``rollout_is_p25 ... p99`` quantiles are left out of EXPECTED: test_release_verl_060_quantiles.py computes them with
numpy; every other metric name is matched exactly.
"""
import pytest
from conftest import run_main, run_table
from test_flavor_verl_rollout_correction import ROWS, P

import advcli
from advcli.errors import AdvcliError

# ROWS (prompt_id, reward, response_mask, old_log_probs, rollout_log_probs) are the newest release's test rows:
# row 1 an interior masked span, row 2 length 1 with ratio 4.26, row 4 an all-zero mask
# release -> case -> the advcli settings (the release's own keys)
SETTINGS = {
    '0.7.1': {
        'tok': {P + 'rollout_is': 'token', P + 'rollout_is_threshold': 2.0},  # noqa: E501
        'seqbn': {P + 'rollout_is': 'sequence', P + 'rollout_is_threshold': 3.0, P + 'rollout_is_batch_normalize': True, P + 'rollout_rs': 'seq_mean_k2', P + 'rollout_rs_threshold': 0.1},  # noqa: E501
    },
    '0.7.0': {
        'tok_geo_veto': {P + 'rollout_is': 'token', P + 'rollout_is_threshold': 2.0, P + 'rollout_rs': 'geometric', P + 'rollout_rs_threshold': 1.5, P + 'rollout_token_veto_threshold': 0.5},  # noqa: E501
        'seq_rs_tok': {P + 'rollout_is': 'sequence', P + 'rollout_is_threshold': 3.0, P + 'rollout_is_batch_normalize': True, P + 'rollout_rs': 'token', P + 'rollout_rs_threshold': 3.0, P + 'rollout_rs_threshold_lower': 0.5},  # noqa: E501
        'rs_seq': {P + 'rollout_rs': 'sequence', P + 'rollout_rs_threshold': 2.0},  # noqa: E501
    },
    '0.6.1': {
        'seqbn': {P + 'rollout_is': 'sequence', P + 'rollout_is_threshold': 3.0, P + 'rollout_is_batch_normalize': True},  # noqa: E501
    },
    '0.6.0': {
        'tok_trunc': {'algorithm.rollout_is_threshold': 2.0, 'algorithm.rollout_is': True},  # noqa: E501
        'geo_mask_veto': {'algorithm.rollout_is_threshold': 2.0, 'algorithm.rollout_is': True, 'algorithm.rollout_is_level': 'geometric', 'algorithm.rollout_is_mode': 'mask', 'algorithm.rollout_is_veto_threshold': 0.5},  # noqa: E501
        'seq_trunc_lower': {'algorithm.rollout_is_threshold': 3.0, 'algorithm.rollout_is_threshold_lower': 0.8, 'algorithm.rollout_is_level': 'sequence'},  # noqa: E501
    },
}
# what verl's code at that tag computed (weights None: none reach the batch); quantiles left out (below)
EXPECTED = {
    '0.7.1/tok': {
        'weights': [[1.1051709180756475, 0.7408182206817179, 1.0512710963760241], [0.36787944117144233, 0.0, 1.6487212707001282, 1.0], [2.0], [1.0512710963760241, 0.951229424500714, 0.0], [0.0, 0.0]],  # noqa: E501
        'mask': [[1, 1, 1], [1, 0, 1, 1], [1], [1, 1, 0], [0, 0]],
        'metrics': {'rollout_corr/rollout_is_mean': 1.353275107724196, 'rollout_corr/rollout_is_ratio_fraction_high': 0.1111111109876543, 'rollout_corr/rollout_is_ratio_fraction_low': 0.1111111109876543, 'rollout_corr/rollout_is_max': 4.263114515168817, 'rollout_corr/rollout_is_min': 0.36787944117144233, 'rollout_corr/rollout_is_std': 0.4261670736368923, 'rollout_corr/rollout_is_eff_sample_size': 0.8728328581459729, 'rollout_corr/rollout_is_seq_mean': 1.447130340746764, 'rollout_corr/rollout_is_seq_std': 1.6316780752754618, 'rollout_corr/rollout_is_seq_max': 4.263114472537672, 'rollout_corr/rollout_is_seq_min': 0.0, 'rollout_corr/rollout_is_seq_max_deviation': 3.263114472537672, 'rollout_corr/rollout_is_seq_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_is_seq_fraction_low': 0.20000000298023224, 'rollout_corr/training_ppl': 1.7466721137939298, 'rollout_corr/training_log_ppl': 0.47333333147222234, 'rollout_corr/kl': -0.08888888879012342, 'rollout_corr/k3_kl': 0.26438622004518364, 'rollout_corr/rollout_ppl': 2.323326335600158, 'rollout_corr/rollout_log_ppl': 0.7199999953833334, 'rollout_corr/log_ppl_diff': -0.2466666639111111, 'rollout_corr/log_ppl_abs_diff': 0.333333330288889, 'rollout_corr/log_ppl_diff_max': 0.16666666611111125, 'rollout_corr/log_ppl_diff_min': -1.4499999855000003, 'rollout_corr/ppl_ratio': 0.8934403599810429, 'rollout_corr/chi2_token': 1.990350677741851, 'rollout_corr/chi2_seq': 3.2565686062592443},  # noqa: E501
    },
    '0.7.1/seqbn': {
        'weights': [[0.6297204420644158, 0.6297204420644158, 0.6297204420644158], [0.44375649537519696, 0.0, 0.44375649537519696, 0.44375649537519696], [2.194892318809291], [0.7316307729364302, 0.7316307729364302, 0.0], [0.0, 0.0]],  # noqa: E501
        'mask': [[1, 1, 1], [0, 0, 0, 0], [0], [1, 1, 0], [0, 0]],
        'metrics': {'rollout_corr/rollout_is_max': 4.263114515168817, 'rollout_corr/rollout_is_min': 0.6065306597126334, 'rollout_corr/rollout_is_mean': 1.18498115685912, 'rollout_corr/rollout_is_ratio_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_is_ratio_fraction_low': 0.0, 'rollout_corr/rollout_is_std': 0.707478350239746, 'rollout_corr/rollout_is_eff_sample_size': 0.6855576488276865, 'rollout_corr/rollout_is_seq_mean': 1.3460706197569134, 'rollout_corr/rollout_is_seq_std': 1.6750606021543064, 'rollout_corr/rollout_is_seq_max': 4.263114472537672, 'rollout_corr/rollout_is_seq_min': 0.0, 'rollout_corr/rollout_is_seq_max_deviation': 3.263114472537672, 'rollout_corr/rollout_is_seq_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_is_seq_fraction_low': 0.20000000298023224, 'rollout_corr/rollout_is_batch_norm_factor': 1.3668096490617239, 'rollout_corr/rollout_rs_seq_mean_k2_mean': 0.19222222058873464, 'rollout_corr/rollout_rs_seq_mean_k2_max': 1.0512499894875003, 'rollout_corr/rollout_rs_seq_mean_k2_min': 0.0012499999937500008, 'rollout_corr/rollout_rs_seq_mean_k2_fraction_high': 0.5, 'rollout_corr/rollout_rs_seq_mean_k2_fraction_low': 0.0, 'rollout_corr/rollout_rs_seq_mean_k2_std': 0.0447239475391571, 'rollout_corr/rollout_rs_seq_mean_k2_seq_mean': 0.31947916384913205, 'rollout_corr/rollout_rs_seq_mean_k2_seq_std': 0.49684168374736487, 'rollout_corr/rollout_rs_seq_mean_k2_seq_max': 1.0512499894875003, 'rollout_corr/rollout_rs_seq_mean_k2_seq_min': 0.0012499999937500008, 'rollout_corr/rollout_rs_seq_mean_k2_seq_max_deviation': 1.0512499894875003, 'rollout_corr/rollout_rs_seq_mean_k2_seq_fraction_high': 0.5, 'rollout_corr/rollout_rs_seq_mean_k2_masked_fraction': 0.4444444439506172, 'rollout_corr/rollout_rs_seq_mean_k2_seq_masked_fraction': 0.5, 'rollout_corr/rollout_rs_masked_fraction': 0.4444444439506172, 'rollout_corr/rollout_rs_seq_masked_fraction': 0.4000000059604645, 'rollout_corr/training_ppl': 1.7466721137939298, 'rollout_corr/training_log_ppl': 0.47333333147222234, 'rollout_corr/kl': -0.08888888879012342, 'rollout_corr/k3_kl': 0.26438622004518364, 'rollout_corr/rollout_ppl': 2.323326335600158, 'rollout_corr/rollout_log_ppl': 0.7199999953833334, 'rollout_corr/log_ppl_diff': -0.2466666639111111, 'rollout_corr/log_ppl_abs_diff': 0.333333330288889, 'rollout_corr/log_ppl_diff_max': 0.16666666611111125, 'rollout_corr/log_ppl_diff_min': -1.4499999855000003, 'rollout_corr/ppl_ratio': 0.8934403599810429, 'rollout_corr/chi2_token': 1.990350677741851, 'rollout_corr/chi2_seq': 3.2565686062592443},  # noqa: E501
    },
    '0.7.0/tok_geo_veto': {
        'weights': [[1.1051709180756475, 0.7408182206817179, 1.0512710963760241], [0.36787944117144233, 0.0, 1.6487212707001282, 1.0], [2.0], [1.0512710963760241, 0.951229424500714, 0.0], [0.0, 0.0]],  # noqa: E501
        'mask': [[1, 1, 1], [0, 0, 0, 0], [0], [1, 1, 0], [0, 0]],
        'metrics': {'rollout_corr/rollout_is_mean': 1.353275107724196, 'rollout_corr/rollout_is_ratio_fraction_high': 0.1111111109876543, 'rollout_corr/rollout_is_ratio_fraction_low': 0.1111111109876543, 'rollout_corr/rollout_is_max': 4.263114515168817, 'rollout_corr/rollout_is_min': 0.36787944117144233, 'rollout_corr/rollout_is_std': 0.4261670736368923, 'rollout_corr/rollout_is_eff_sample_size': 0.8728328581459729, 'rollout_corr/rollout_is_seq_mean': 1.447130340746764, 'rollout_corr/rollout_is_seq_std': 1.6316780752754618, 'rollout_corr/rollout_is_seq_max': 4.263114472537672, 'rollout_corr/rollout_is_seq_min': 0.0, 'rollout_corr/rollout_is_seq_max_deviation': 3.263114472537672, 'rollout_corr/rollout_is_seq_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_is_seq_fraction_low': 0.20000000298023224, 'rollout_corr/rollout_rs_max': 4.263114453353658, 'rollout_corr/rollout_rs_min': 0.8464817253608817, 'rollout_corr/rollout_rs_mean': 1.2951386544958523, 'rollout_corr/rollout_rs_ratio_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_rs_ratio_fraction_low': 0.0, 'rollout_corr/rollout_rs_std': 0.190487782769159, 'rollout_corr/rollout_rs_eff_sample_size': 0.9641687101090909, 'rollout_corr/rollout_rs_seq_mean': 1.4121651099500554, 'rollout_corr/rollout_rs_seq_std': 1.6450274844973782, 'rollout_corr/rollout_rs_seq_max': 4.263114410722514, 'rollout_corr/rollout_rs_seq_min': 0.0, 'rollout_corr/rollout_rs_seq_max_deviation': 3.2631144107225136, 'rollout_corr/rollout_rs_seq_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_rs_seq_fraction_low': 0.20000000298023224, 'rollout_corr/rollout_rs_masked_fraction': 0.1111111109876543, 'rollout_corr/rollout_rs_seq_masked_fraction': 0.20000000298023224, 'rollout_corr/rollout_is_veto_fraction': 0.20000000298023224, 'rollout_corr/rollout_is_catastrophic_token_fraction': 0.1111111109876543, 'rollout_corr/training_ppl': 1.7466721137939298, 'rollout_corr/training_log_ppl': 0.47333333147222234, 'rollout_corr/kl': -0.08888888879012342, 'rollout_corr/k3_kl': 0.26438622004518364, 'rollout_corr/rollout_ppl': 2.323326335600158, 'rollout_corr/rollout_log_ppl': 0.7199999953833334, 'rollout_corr/log_ppl_diff': -0.2466666639111111, 'rollout_corr/log_ppl_abs_diff': 0.333333330288889, 'rollout_corr/log_ppl_diff_max': 0.16666666611111125, 'rollout_corr/log_ppl_diff_min': -1.4499999855000003, 'rollout_corr/ppl_ratio': 0.8934403599810429, 'rollout_corr/chi2_token': 1.990350677741851, 'rollout_corr/chi2_seq': 3.2565686062592443},  # noqa: E501
    },
    '0.7.0/seq_rs_tok': {
        'weights': [[0.6297204420644158, 0.6297204420644158, 0.6297204420644158], [0.44375649537519696, 0.0, 0.44375649537519696, 0.44375649537519696], [2.194892318809291], [0.7316307729364302, 0.7316307729364302, 0.0], [0.0, 0.0]],  # noqa: E501
        'mask': [[1, 1, 1], [0, 0, 1, 1], [0], [1, 1, 0], [0, 0]],
        'metrics': {'rollout_corr/rollout_is_max': 4.263114515168817, 'rollout_corr/rollout_is_min': 0.6065306597126334, 'rollout_corr/rollout_is_mean': 1.18498115685912, 'rollout_corr/rollout_is_ratio_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_is_ratio_fraction_low': 0.0, 'rollout_corr/rollout_is_std': 0.707478350239746, 'rollout_corr/rollout_is_eff_sample_size': 0.6855576488276865, 'rollout_corr/rollout_is_seq_mean': 1.3460706197569134, 'rollout_corr/rollout_is_seq_std': 1.6750606021543064, 'rollout_corr/rollout_is_seq_max': 4.263114472537672, 'rollout_corr/rollout_is_seq_min': 0.0, 'rollout_corr/rollout_is_seq_max_deviation': 3.263114472537672, 'rollout_corr/rollout_is_seq_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_is_seq_fraction_low': 0.20000000298023224, 'rollout_corr/rollout_is_batch_norm_factor': 1.3668096490617239, 'rollout_corr/rollout_rs_mean': 1.353275107724196, 'rollout_corr/rollout_rs_ratio_fraction_high': 0.1111111109876543, 'rollout_corr/rollout_rs_ratio_fraction_low': 0.1111111109876543, 'rollout_corr/rollout_rs_max': 4.263114515168817, 'rollout_corr/rollout_rs_min': 0.36787944117144233, 'rollout_corr/rollout_rs_std': 0.6904473794799802, 'rollout_corr/rollout_rs_eff_sample_size': 0.7596876876234491, 'rollout_corr/rollout_rs_seq_mean': 1.447130340746764, 'rollout_corr/rollout_rs_seq_std': 1.6316780752754618, 'rollout_corr/rollout_rs_seq_max': 4.263114472537672, 'rollout_corr/rollout_rs_seq_min': 0.0, 'rollout_corr/rollout_rs_seq_max_deviation': 3.263114472537672, 'rollout_corr/rollout_rs_seq_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_rs_seq_fraction_low': 0.20000000298023224, 'rollout_corr/rollout_rs_masked_fraction': 0.2222222219753086, 'rollout_corr/rollout_rs_seq_masked_fraction': 0.4000000059604645, 'rollout_corr/rollout_is_veto_fraction': 0.0, 'rollout_corr/rollout_is_catastrophic_token_fraction': 0.0, 'rollout_corr/training_ppl': 1.7466721137939298, 'rollout_corr/training_log_ppl': 0.47333333147222234, 'rollout_corr/kl': -0.08888888879012342, 'rollout_corr/k3_kl': 0.26438622004518364, 'rollout_corr/rollout_ppl': 2.323326335600158, 'rollout_corr/rollout_log_ppl': 0.7199999953833334, 'rollout_corr/log_ppl_diff': -0.2466666639111111, 'rollout_corr/log_ppl_abs_diff': 0.333333330288889, 'rollout_corr/log_ppl_diff_max': 0.16666666611111125, 'rollout_corr/log_ppl_diff_min': -1.4499999855000003, 'rollout_corr/ppl_ratio': 0.8934403599810429, 'rollout_corr/chi2_token': 1.990350677741851, 'rollout_corr/chi2_seq': 3.2565686062592443},  # noqa: E501
    },
    '0.7.0/rs_seq': {
        'weights': None,  # noqa: E501
        'mask': [[1, 1, 1], [1, 0, 1, 1], [0], [1, 1, 0], [0, 0]],
        'metrics': {'rollout_corr/rollout_rs_max': 4.263114515168817, 'rollout_corr/rollout_rs_min': 0.6065306597126334, 'rollout_corr/rollout_rs_mean': 1.18498115685912, 'rollout_corr/rollout_rs_ratio_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_rs_ratio_fraction_low': 0.0, 'rollout_corr/rollout_rs_std': 0.4059131867283505, 'rollout_corr/rollout_rs_eff_sample_size': 0.8409956374712196, 'rollout_corr/rollout_rs_seq_mean': 1.3460706197569134, 'rollout_corr/rollout_rs_seq_std': 1.6750606021543064, 'rollout_corr/rollout_rs_seq_max': 4.263114472537672, 'rollout_corr/rollout_rs_seq_min': 0.0, 'rollout_corr/rollout_rs_seq_max_deviation': 3.263114472537672, 'rollout_corr/rollout_rs_seq_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_rs_seq_fraction_low': 0.20000000298023224, 'rollout_corr/rollout_rs_masked_fraction': 0.1111111109876543, 'rollout_corr/rollout_rs_seq_masked_fraction': 0.20000000298023224, 'rollout_corr/rollout_is_veto_fraction': 0.0, 'rollout_corr/rollout_is_catastrophic_token_fraction': 0.0, 'rollout_corr/training_ppl': 1.7466721137939298, 'rollout_corr/training_log_ppl': 0.47333333147222234, 'rollout_corr/kl': -0.08888888879012342, 'rollout_corr/k3_kl': 0.26438622004518364, 'rollout_corr/rollout_ppl': 2.323326335600158, 'rollout_corr/rollout_log_ppl': 0.7199999953833334, 'rollout_corr/log_ppl_diff': -0.2466666639111111, 'rollout_corr/log_ppl_abs_diff': 0.333333330288889, 'rollout_corr/log_ppl_diff_max': 0.16666666611111125, 'rollout_corr/log_ppl_diff_min': -1.4499999855000003, 'rollout_corr/ppl_ratio': 0.8934403599810429, 'rollout_corr/chi2_token': 1.990350677741851, 'rollout_corr/chi2_seq': 3.2565686062592443},  # noqa: E501
    },
    '0.6.1/seqbn': {
        'weights': [[0.7871505525805197, 0.7871505525805197, 0.7871505525805197], [0.5546956192189962, 0.0, 0.5546956192189962, 0.5546956192189962], [2.7436153985116136], [0.9145384661705379, 0.9145384661705379, 0.0], [0.0, 0.0]],  # noqa: E501
        'mask': [[1, 1, 1], [1, 0, 1, 1], [1], [1, 1, 0], [0, 0]],
        'metrics': {'rollout_corr/rollout_is_max': 4.263114515168817, 'rollout_corr/rollout_is_min': 0.6065306597126334, 'rollout_corr/rollout_is_mean': 1.18498115685912, 'rollout_corr/rollout_is_ratio_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_is_ratio_fraction_low': 0.0, 'rollout_corr/rollout_is_std': 0.707478350239746, 'rollout_corr/rollout_is_eff_sample_size': 0.6855576488276865, 'rollout_corr/rollout_is_seq_mean': 1.3460706197569134, 'rollout_corr/rollout_is_seq_std': 1.6750606021543064, 'rollout_corr/rollout_is_seq_max': 4.263114472537672, 'rollout_corr/rollout_is_seq_min': 0.0, 'rollout_corr/rollout_is_seq_max_deviation': 3.263114472537672, 'rollout_corr/rollout_is_seq_fraction_high': 0.20000000298023224, 'rollout_corr/rollout_is_seq_fraction_low': 0.20000000298023224, 'rollout_corr/rollout_is_batch_norm_factor': 1.093447719249379, 'rollout_corr/rollout_is_veto_fraction': 0.0, 'rollout_corr/rollout_is_catastrophic_token_fraction': 0.0, 'rollout_corr/training_ppl': 1.7466721137939298, 'rollout_corr/training_log_ppl': 0.47333333147222234, 'rollout_corr/kl': -0.08888888879012342, 'rollout_corr/k3_kl': 0.26438622004518364, 'rollout_corr/rollout_ppl': 2.323326335600158, 'rollout_corr/rollout_log_ppl': 0.7199999953833334, 'rollout_corr/log_ppl_diff': -0.2466666639111111, 'rollout_corr/log_ppl_abs_diff': 0.333333330288889, 'rollout_corr/log_ppl_diff_max': 0.16666666611111125, 'rollout_corr/log_ppl_diff_min': -1.4499999855000003, 'rollout_corr/ppl_ratio': 0.8934403599810429, 'rollout_corr/chi2_token': 1.990350677741851, 'rollout_corr/chi2_seq': 3.2565686062592443},  # noqa: E501
    },
    '0.6.0/tok_trunc': {
        'weights': [[1.1051709180756475, 0.7408182206817179, 1.0512710963760241], [0.36787944117144233, 0.0, 1.6487212707001282, 1.0], [2.0], [1.0512710963760241, 0.951229424500714, 0.0], [0.0, 0.0]],  # noqa: E501
        'mask': [[1, 1, 1], [1, 0, 1, 1], [1], [1, 1, 0], [0, 0]],
        'metrics': {'mismatch/rollout_is_veto_fraction': 0.0, 'mismatch/rollout_is_catastrophic_token_fraction': 0.0, 'mismatch/rollout_is_mean': 1.353275107724196, 'mismatch/rollout_is_ratio_fraction_high': 0.1111111109876543, 'mismatch/rollout_is_ratio_fraction_low': 0.1111111109876543, 'mismatch/rollout_is_max': 4.263114515168817, 'mismatch/rollout_is_min': 0.36787944117144233, 'mismatch/rollout_is_std': 0.4261670736368923, 'mismatch/rollout_is_eff_sample_size': 0.8728328581459729, 'mismatch/rollout_is_seq_mean': 1.447130340746764, 'mismatch/rollout_is_seq_std': 1.6316780752754618, 'mismatch/rollout_is_seq_max': 4.263114472537672, 'mismatch/rollout_is_seq_min': 0.0, 'mismatch/rollout_is_seq_max_deviation': 3.263114472537672, 'mismatch/rollout_is_seq_fraction_high': 0.20000000298023224, 'mismatch/rollout_is_seq_fraction_low': 0.20000000298023224, 'mismatch/mismatch_training_ppl': 1.7466721137939298, 'mismatch/mismatch_training_log_ppl': 0.47333333147222234, 'mismatch/mismatch_kl': -0.08888888879012342, 'mismatch/mismatch_k3_kl': 0.26438622004518364, 'mismatch/mismatch_rollout_ppl': 2.323326335600158, 'mismatch/mismatch_rollout_log_ppl': 0.7199999953833334, 'mismatch/mismatch_log_ppl_diff': -0.2466666639111111, 'mismatch/mismatch_log_ppl_abs_diff': 0.333333330288889, 'mismatch/mismatch_log_ppl_diff_max': 0.16666666611111125, 'mismatch/mismatch_log_ppl_diff_min': -1.4499999855000003, 'mismatch/mismatch_ppl_ratio': 0.8934403599810429},  # noqa: E501
    },
    '0.6.0/geo_mask_veto': {
        'weights': [[0.9512294246592522, 0.9512294246592522, 0.9512294246592522], [0.0, 0.0, 0.0, 0.0], [0.0], [1.0, 1.0, 0.0], [0.0, 0.0]],  # noqa: E501
        'mask': [[1, 1, 1], [1, 0, 1, 1], [1], [1, 1, 0], [0, 0]],
        'metrics': {'mismatch/rollout_is_veto_fraction': 0.20000000298023224, 'mismatch/rollout_is_catastrophic_token_fraction': 0.1111111109876543, 'mismatch/rollout_is_max': 4.263114453353658, 'mismatch/rollout_is_min': 0.8464817253608817, 'mismatch/rollout_is_mean': 1.2951386544958523, 'mismatch/rollout_is_ratio_fraction_high': 0.1111111109876543, 'mismatch/rollout_is_ratio_fraction_low': 0.0, 'mismatch/rollout_is_std': 0.3432955710784214, 'mismatch/rollout_is_eff_sample_size': 0.9023696531541309, 'mismatch/rollout_is_seq_mean': 1.4121651099500554, 'mismatch/rollout_is_seq_std': 1.6450274844973782, 'mismatch/rollout_is_seq_max': 4.263114410722514, 'mismatch/rollout_is_seq_min': 0.0, 'mismatch/rollout_is_seq_max_deviation': 3.2631144107225136, 'mismatch/rollout_is_seq_fraction_high': 0.20000000298023224, 'mismatch/rollout_is_seq_fraction_low': 0.20000000298023224, 'mismatch/rollout_is_masked_fraction': 0.1111111109876543, 'mismatch/rollout_is_seq_masked_fraction': 0.20000000298023224, 'mismatch/mismatch_training_ppl': 1.7466721137939298, 'mismatch/mismatch_training_log_ppl': 0.47333333147222234, 'mismatch/mismatch_kl': -0.08888888879012342, 'mismatch/mismatch_k3_kl': 0.26438622004518364, 'mismatch/mismatch_rollout_ppl': 2.323326335600158, 'mismatch/mismatch_rollout_log_ppl': 0.7199999953833334, 'mismatch/mismatch_log_ppl_diff': -0.2466666639111111, 'mismatch/mismatch_log_ppl_abs_diff': 0.333333330288889, 'mismatch/mismatch_log_ppl_diff_max': 0.16666666611111125, 'mismatch/mismatch_log_ppl_diff_min': -1.4499999855000003, 'mismatch/mismatch_ppl_ratio': 0.8934403599810429},  # noqa: E501
    },
    '0.6.0/seq_trunc_lower': {
        'weights': None,  # noqa: E501
        'mask': [[1, 1, 1], [1, 0, 1, 1], [1], [1, 1, 0], [0, 0]],
        'metrics': {'mismatch/rollout_is_veto_fraction': 0.0, 'mismatch/rollout_is_catastrophic_token_fraction': 0.0, 'mismatch/rollout_is_max': 4.263114515168817, 'mismatch/rollout_is_min': 0.6065306597126334, 'mismatch/rollout_is_mean': 1.18498115685912, 'mismatch/rollout_is_ratio_fraction_high': 0.20000000298023224, 'mismatch/rollout_is_ratio_fraction_low': 0.20000000298023224, 'mismatch/rollout_is_std': 0.6725600059419384, 'mismatch/rollout_is_eff_sample_size': 0.7311510881113221, 'mismatch/rollout_is_seq_mean': 1.3460706197569134, 'mismatch/rollout_is_seq_std': 1.6750606021543064, 'mismatch/rollout_is_seq_max': 4.263114472537672, 'mismatch/rollout_is_seq_min': 0.0, 'mismatch/rollout_is_seq_max_deviation': 3.263114472537672, 'mismatch/rollout_is_seq_fraction_high': 0.20000000298023224, 'mismatch/rollout_is_seq_fraction_low': 0.4000000059604645, 'mismatch/mismatch_training_ppl': 1.7466721137939298, 'mismatch/mismatch_training_log_ppl': 0.47333333147222234, 'mismatch/mismatch_kl': -0.08888888879012342, 'mismatch/mismatch_k3_kl': 0.26438622004518364, 'mismatch/mismatch_rollout_ppl': 2.323326335600158, 'mismatch/mismatch_rollout_log_ppl': 0.7199999953833334, 'mismatch/mismatch_log_ppl_diff': -0.2466666639111111, 'mismatch/mismatch_log_ppl_abs_diff': 0.333333330288889, 'mismatch/mismatch_log_ppl_diff_max': 0.16666666611111125, 'mismatch/mismatch_log_ppl_diff_min': -1.4499999855000003, 'mismatch/mismatch_ppl_ratio': 0.8934403599810429},  # noqa: E501
    },
}
CASES = [(rel, name) for rel, cases in SETTINGS.items() for name in cases]


def _write(path, rows=ROWS):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({
        "prompt_id": pa.array([r[0] for r in rows]), "reward": pa.array([r[1] for r in rows], pa.float32()),
        "response_mask": pa.array([r[2] for r in rows], pa.list_(pa.int8())),
        "old_log_probs": pa.array([r[3] for r in rows], pa.list_(pa.float32())),
        "rollout_log_probs": pa.array([r[4] for r in rows], pa.list_(pa.float32()))}), str(path))
    return str(path)


def _close(a, b, rtol, atol=1e-7):
    return a is not None and abs(a - b) <= atol + rtol * abs(b)


@pytest.mark.parametrize("chunk_rows", [2, 4096])
@pytest.mark.parametrize("rel,name", CASES)
def test_weights_mask_metrics_match_the_release(tmp_path, rel, name, chunk_rows):
    src = _write(tmp_path / "in.parquet")
    t, res = run_table(src, tmp_path / "o.parquet", f"verl@{rel}",
                       {"algorithm.adv_estimator": "grpo", **SETTINGS[rel][name]}, chunk_rows=chunk_rows)
    want = EXPECTED[f"{rel}/{name}"]
    if want["weights"] is None:
        assert "rollout_is_weights" not in t.column_names
    else:
        for i, (got, exp) in enumerate(zip(t.column("rollout_is_weights").to_pylist(), want["weights"])):
            assert all(_close(g, e, 1e-5) for g, e in zip(got, exp)), (rel, name, i, got, exp)
    assert [[int(x) for x in r] for r in t.column("response_mask_after_rs").to_pylist()] == want["mask"]
    prefix = "mismatch/" if rel == "0.6.0" else "rollout_corr/"
    got = {k: v for k, v in res.per_step[0].items() if k.startswith(prefix)}
    quantiles = {f"mismatch/rollout_is_p{q}" for q in (25, 50, 75, 95, 99)} if rel == "0.6.0" else set()
    assert set(got) == set(want["metrics"]) | quantiles  # verl's names at that release, no more, no fewer
    for k, exp in want["metrics"].items():
        assert _close(got[k], exp, 1e-4, 1e-6), (rel, name, k, got[k], exp)


def test_the_estimator_sees_the_veto(tmp_path):
    """0.7.0: the veto (ratio 0.37 < 0.5 in row 1) and the geometric rejection (row 2's 4.26 > 1.5) reject rows 1
    and 2 whole: the estimator sees their mask as 0, so their advantages are 0 at every token."""
    src = _write(tmp_path / "in.parquet")
    t, _ = run_table(src, tmp_path / "o.parquet", "verl@0.7.0",
                     {"algorithm.adv_estimator": "grpo", **SETTINGS["0.7.0"]["tok_geo_veto"]})
    adv = t.column("advantages").to_pylist()
    assert adv[1] == [0.0] * 4 and adv[2] == [0.0]


def test_0_6_0_weights_only_with_rollout_is_and_nothing_without_a_threshold(tmp_path):
    src = _write(tmp_path / "in.parquet")
    t, res = run_table(src, tmp_path / "o.parquet", "verl@0.6.0", {"algorithm.adv_estimator": "grpo"})
    assert "rollout_is_weights" not in t.column_names
    assert not any(k.startswith(("mismatch/", "rollout_corr/")) for k in res.metrics)  # the threshold is the switch
    t, res = run_table(src, tmp_path / "o.parquet", "verl@0.6.0",
                       {"algorithm.adv_estimator": "grpo", "algorithm.rollout_is_threshold": 2.0})
    assert "rollout_is_weights" not in t.column_names and "mismatch/mismatch_kl" in res.metrics


def test_the_api_key_gives_the_release_numbers():
    """--flavor verl@0.7.0 and --flavor verl with advcli.rollout_corr_api=0.7.0 are the same question."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src = _write(f"{d}/in.parquet")
        sets = {"algorithm.adv_estimator": "grpo", **SETTINGS["0.7.0"]["tok_geo_veto"]}
        a, ra = run_table(src, f"{d}/a.parquet", "verl@0.7.0", sets)
        b, rb = run_table(src, f"{d}/b.parquet", "verl", {**sets, "advcli.rollout_corr_api": "0.7.0"})
        assert a.column("rollout_is_weights").to_pylist() == b.column("rollout_is_weights").to_pylist()
        assert a.column("advantages").to_pylist() == b.column("advantages").to_pylist()
        assert {k: v for k, v in ra.metrics.items() if k.startswith("rollout_corr/")} == \
            {k: v for k, v in rb.metrics.items() if k.startswith("rollout_corr/")}


@pytest.mark.parametrize("flavor,settings,says", [
    ("verl@0.7.1", {P + "rollout_is": "token", P + "rollout_is_threshold": "0.5_2.0"}, "arrived in 0.8.0"),
    ("verl@0.7.0", {P + "rollout_rs": "token_k1", P + "rollout_rs_threshold": "0.5_2.0"}, "arrived in 0.7.1"),
    ("verl@0.7.0", {P + "rollout_rs": "token"}, "rollout_rs_threshold: is required"),
    ("verl@0.7.1", {P + "rollout_rs_threshold_lower": 0.5}, "rollout_correction.yaml @v0.7.1"),
    ("verl@0.8.0", {P + "rollout_token_veto_threshold": 0.5}, "0.6.1-0.7.0 only"),
    ("verl", {"algorithm.rollout_is_threshold": 2.0}, "verl 0.6.0 only"),
    ("verl@0.6.0", {P + "rollout_is": "token"}, "ppo_trainer.yaml @v0.6.0"),
    ("verl@0.6.0", {"algorithm.rollout_is_threshold": 2.0, "algorithm.rollout_is_level": "seq"}, "Valid: token"),
    ("verl@0.6.1", {P + "loss_type": "reinforce"}, "from verl 0.7.0"),
    ("verl@0.5.0", {P + "rollout_is": "token"}, "before 0.6.0 has no rollout correction"),
])
def test_a_key_the_release_lacks_is_refused(tmp_path, flavor, settings, says):
    src = _write(tmp_path / "in.parquet")
    with pytest.raises(AdvcliError) as e:
        advcli.run(src, str(tmp_path / "o.parquet"), flavor=flavor, settings={"algorithm.adv_estimator": "grpo",
                                                                             **settings}, device="cpu")
    assert says in str(e.value), str(e.value)
    assert not (tmp_path / "o.parquet").exists()


def test_cli_runs_a_0_6_1_setup(tmp_path, capsys):
    src = _write(tmp_path / "in.parquet")
    code, _, err = run_main(["run", src, "-o", str(tmp_path / "o.parquet"), "--flavor", "verl@0.6.1", "--estimator",
                             "grpo", "--set", P + "rollout_is=sequence", "--set", P + "rollout_is_threshold=3",
                             "--set", P + "rollout_is_batch_normalize=true"], capsys)
    assert code == 0, err
    import pyarrow.parquet as pq

    w = pq.read_table(str(tmp_path / "o.parquet")).column("rollout_is_weights").to_pylist()
    assert all(_close(g, e, 1e-5) for g, e in zip(w[2], EXPECTED["0.6.1/seqbn"]["weights"][2]))


def test_0_8_0_counts_rows_on_the_applied_weights(tmp_path):
    """compute_is_metrics @v0.8.0 takes rollout_is_seq_fraction_high/low from the truncated weights' row means
    (never above the threshold), 0.9.0 from the raw ratios' (rollout_corr_helper.py @v0.9.0 L774-781). Sequence IS at
    threshold 2: row 2's ratio 4.26 is a high row at 0.9.x only; row 4 (no valid token, mean 0) is low in both."""
    src = _write(tmp_path / "in.parquet")
    sets = {"algorithm.adv_estimator": "grpo", P + "rollout_is": "sequence", P + "rollout_is_threshold": 2.0}
    _, old = run_table(src, tmp_path / "a.parquet", "verl@0.8.0", sets)
    _, new = run_table(src, tmp_path / "b.parquet", "verl@0.9.1", sets)
    assert old.metrics["rollout_corr/rollout_is_seq_fraction_high"] == 0.0
    assert new.metrics["rollout_corr/rollout_is_seq_fraction_high"] == pytest.approx(0.2)
    assert old.metrics["rollout_corr/rollout_is_seq_fraction_low"] == pytest.approx(0.2)
    k1 = {"algorithm.adv_estimator": "grpo", P + "rollout_rs": "token_k1", P + "rollout_rs_threshold": "2.0_0.5"}
    t, _ = run_table(src, tmp_path / "c.parquet", "verl@0.8.0", k1)  # lower > upper: 0.8.0 runs, every token out
    assert all(x == 0 for r in t.column("response_mask_after_rs").to_pylist() for x in r)
    with pytest.raises(AdvcliError, match="lower <= upper"):
        run_table(src, tmp_path / "d.parquet", "verl@0.9.1", k1)
