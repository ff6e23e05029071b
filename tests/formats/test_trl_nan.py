"""TRL reads a reward function's None as NaN (grpo_trainer.py L1663 @f2cd5771) and aggregates with
nansum/nanmean/nanstd; a row every function left unscored gets advantage 0 (nan_to_num, L2730).

Expected values worked by hand below (float64 arithmetic, eps 1e-4 on the std).
"""
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.errors import AdvcliError


def _write(path, cols):
    n = len(next(iter(cols.values())))
    t = pa.table({**{k: pa.array(v, pa.float32()) for k, v in cols.items()},
                  "response_mask": pa.array([[1, 1, 0]] * n, pa.list_(pa.int8()))})
    pq.write_table(t, path)


def _adv(path):
    return [row[0] for row in pq.read_table(path).column("advantages").to_pylist()]


def test_trl_grpo_nan_components_by_hand(tmp_path):
    nan = float("nan")
    _write(tmp_path / "in.parquet", {"acc": [1.0, nan, 0.0, nan, 0.5, 0.5, 0.5, 1.0],
                                     "fmt": [1.0, 1.0, None, None, 1.0, 0.0, 1.0, 1.0]})
    advcli.run(str(tmp_path / "in.parquet"), str(tmp_path / "out.parquet"), flavor="trl",
               settings={"num_generations": 4, "reward_funcs": ["acc", "fmt"], "reward_weights": [1.0, 0.5]})
    # group 1: R = nansum(w·r) = [1.5, 0.5, 0.0, NaN (unscorable)]; nanmean 2/3;
    # nanstd = sqrt(((5/6)² + (1/6)² + (2/3)²)/2) = sqrt(7/12)
    s1 = math.sqrt(7 / 12) + 1e-4
    # group 2: R = [1.0, 0.5, 1.0, 1.5]; mean 1; std = sqrt(0.5/3)
    s2 = math.sqrt(0.5 / 3) + 1e-4
    want = [(5 / 6) / s1, (-1 / 6) / s1, (-2 / 3) / s1, 0.0, 0.0, -0.5 / s2, 0.0, 0.5 / s2]
    np.testing.assert_allclose(_adv(tmp_path / "out.parquet"), want, rtol=1e-5, atol=1e-6)


def test_trl_single_reward_null_is_unscorable(tmp_path):
    _write(tmp_path / "in.parquet", {"reward": [1.0, None, 0.0, 0.0]})
    advcli.run(str(tmp_path / "in.parquet"), str(tmp_path / "out.parquet"), flavor="trl",
               settings={"num_generations": 4})
    # nanmean 1/3, nanstd sqrt(((2/3)² + 2·(1/3)²)/2) = sqrt(1/3)
    s = math.sqrt(1 / 3) + 1e-4
    np.testing.assert_allclose(_adv(tmp_path / "out.parquet"), [(2 / 3) / s, 0.0, (-1 / 3) / s, (-1 / 3) / s],
                               rtol=1e-5, atol=1e-6)


def test_other_flavors_still_refuse_nan(tmp_path):
    _write(tmp_path / "in.parquet", {"reward": [1.0, float("nan"), 0.0, 0.0]})
    with pytest.raises(AdvcliError, match="row 1"):
        advcli.run(str(tmp_path / "in.parquet"), str(tmp_path / "out.parquet"), flavor="openrlhf",
                   settings={"algo.advantage.estimator": "group_norm", "rollout.n_samples_per_prompt": 4,
                             "algo.kl.init_coef": 0})
