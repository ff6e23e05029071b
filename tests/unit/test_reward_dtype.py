"""reward.dtype (issue 41.8): where the trainer computes in the rewards' dtype, advcli does too. Expected
numbers by hand in numpy float16 (np.mean / np.std accumulate in float32 and round to float16, as torch's
reductions do; every elementwise step rounds to float16, as verl's per-row loops do on half scores)."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from advcli.cli import app

REWARDS = np.array([0.3, 1.7, 2.9, 0.1, 5.3, 5.1, 4.9, 0.7, 0.2], dtype=np.float16)
IDS = ["a"] * 4 + ["b"] * 3 + ["c"] * 2


def _run(tmp_path, reward_type, settings) -> list[float]:
    src, out = os.path.join(tmp_path, "in.parquet"), os.path.join(tmp_path, "out.parquet")
    pq.write_table(pa.table({"prompt_id": IDS, "reward": pa.array(REWARDS.astype(np.float32)).cast(reward_type),
                             "response_mask": pa.array([[1, 1]] * len(IDS), pa.list_(pa.int8())),
                             "old_log_probs": pa.array([[-1.0, -2.0]] * len(IDS), pa.list_(pa.float32())),
                             "ref_log_probs": pa.array([[-1.0, -2.0]] * len(IDS), pa.list_(pa.float32()))}), src)
    argv = ["run", src, "-o", out, "--flavor", "verl", "--force", "--device", "cpu"]
    for k, v in settings.items():
        argv += ["--set", f"{k}={v}"]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    return [row[0] for row in pq.read_table(out).column("advantages").to_pylist()]


def grpo_f16() -> np.ndarray:
    out = np.zeros(len(IDS), dtype=np.float16)
    for g in sorted(set(IDS)):
        idx = [i for i, x in enumerate(IDS) if x == g]
        s = REWARDS[idx]
        mean = np.float16(s.astype(np.float32).mean())
        std = np.float16(s.astype(np.float32).std(ddof=1))
        out[idx] = (s - mean) / (std + np.float16(1e-6))
    return out


def grpo_f32() -> np.ndarray:
    s32 = REWARDS.astype(np.float32)
    out = np.zeros(len(IDS), dtype=np.float64)
    for g in sorted(set(IDS)):
        idx = [i for i, x in enumerate(IDS) if x == g]
        s = s32[idx]
        out[idx] = (s - s.mean()) / (s.std(ddof=1) + np.float32(1e-6))
    return out


@pytest.mark.parametrize("reward_type,setting,expected", [
    (pa.float16(), {}, "f16"),  # input: a float16 column keeps its dtype
    (pa.float32(), {"advcli.reward_dtype": "float16"}, "f16"),  # said: the trainer's scores were float16
    (pa.float32(), {}, "f32"),  # a float32 column at the run's precision
    (pa.float16(), {"advcli.reward_dtype": "run"}, "f32"),
    # KL in the reward (0 here: equal log-probs): scores − β·kld is float32, as verl's apply_kl_penalty makes it
    (pa.float16(), {"advcli.reward_dtype": "float16", "algorithm.use_kl_in_reward": "true"}, "f32"),
])
def test_grpo_in_the_rewards_dtype(tmp_path, reward_type, setting, expected):
    got = _run(tmp_path, reward_type, {"algorithm.adv_estimator": "grpo", **setting})
    want = grpo_f16().astype(np.float64) if expected == "f16" else grpo_f32()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.max(np.abs(grpo_f16().astype(np.float64) - grpo_f32())) > 1e-3  # the two differ: the test tells
