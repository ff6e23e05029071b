"""An estimator that does not group must not demand a group id (issue: `--flavor nemo --set
ppo.adv_estimator=gae` on a dump without prompt_id stopped with "missing column 'prompt_id'").

For every flavor and every estimator: on a dump without ``prompt_id``, an estimator whose framework
computes it without groups (GAE, REINFORCE++ without a baseline, ReMax, raw reward, distillation, and
every positional estimator of ROLL/OpenRLHF/TRL, which group consecutive rows) runs and gives exactly
what it gives when the same dump carries a ``prompt_id`` column; an estimator that groups by id is
refused with a message naming the missing column.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.errors import AdvcliError

ROWS = 8
MASKS = [[1, 1, 1], [1, 0, 1, 1], [1], [1, 1, 0], [1, 1, 1, 1, 1], [0, 1], [1, 1], [1, 0, 0, 1]]


def _floats(seed: float):
    return [[round(-0.1 * (i + 1) - seed * t, 3) for t in range(len(m))] for i, m in enumerate(MASKS)]


def _dump(path, with_ids: bool):
    cols = {
        "reward": pa.array([1.0, 0.0, 0.5, 1.0, 0.0, 0.25, 1.0, 0.0], pa.float32()),
        "reward_baseline": pa.array([0.5] * ROWS, pa.float32()),
        "acc": pa.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0], pa.float32()),
        "fmt": pa.array([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.5], pa.float32()),
        "response_mask": pa.array(MASKS, pa.list_(pa.int8())),
        "old_log_probs": pa.array(_floats(0.05), pa.list_(pa.float32())),
        "ref_log_probs": pa.array(_floats(0.07), pa.list_(pa.float32())),
        "teacher_log_probs": pa.array(_floats(0.02), pa.list_(pa.float32())),
        "values": pa.array(_floats(-0.1), pa.list_(pa.float32())),
        "sum_pi_squared": pa.array([[0.5] * len(m) for m in MASKS], pa.list_(pa.float32())),
    }
    if with_ids:
        cols = {"prompt_id": ["a", "a", "b", "b", "c", "c", "d", "d"], **cols}
    pq.write_table(pa.table(cols), path)
    return str(path)


N2 = {"roll": {"actor_infer.generating_args.num_return_sequences": 2},
      "openrlhf": {"rollout.n_samples_per_prompt": 2}, "trl": {"num_generations": 2}}

# (flavor, settings, groups by id) — from each framework's code: which estimators read a group key
CASES = [
    ("verl", {"algorithm.adv_estimator": "gae"}, False),
    ("verl", {"algorithm.adv_estimator": "reinforce_plus_plus"}, False),
    ("verl", {"algorithm.adv_estimator": "remax"}, False),
    ("verl", {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True}, False),
    ("verl", {"algorithm.adv_estimator": "grpo"}, True),
    ("verl", {"algorithm.adv_estimator": "grpo_vectorized"}, True),
    ("verl", {"algorithm.adv_estimator": "grpo_passk"}, True),
    ("verl", {"algorithm.adv_estimator": "rloo"}, True),
    ("verl", {"algorithm.adv_estimator": "rloo_vectorized"}, True),
    ("verl", {"algorithm.adv_estimator": "opo"}, True),
    ("verl", {"algorithm.adv_estimator": "gpg"}, True),
    ("verl", {"algorithm.adv_estimator": "reinforce_plus_plus_baseline"}, True),
    ("verl", {"algorithm.adv_estimator": "gdpo", "algorithm.gdpo_reward_keys": ["acc", "fmt"]}, True),
    ("verl", {"algorithm.adv_estimator": "optimal_token_baseline"}, True),
    ("nemo", {"ppo.adv_estimator.name": "gae"}, False),
    ("nemo", {"ppo.adv_estimator.name": "gae", "loss_fn.use_kl_in_reward": True}, False),
    ("nemo", {"ppo.adv_estimator.name": "raw_reward"}, False),
    ("nemo", {"grpo.adv_estimator.name": "opd"}, False),
    ("nemo", {"grpo.adv_estimator.name": "reinforce_plus_plus", "grpo.adv_estimator.minus_baseline": False}, False),
    ("nemo", {"grpo.adv_estimator.name": "reinforce_plus_plus"}, True),
    ("nemo", {"grpo.adv_estimator.name": "grpo"}, True),
    ("roll", {"adv_estimator": "gae"}, False),
    ("roll", {"adv_estimator": "reinforce"}, False),
    ("roll", {"adv_estimator": "grpo"}, False),  # positional groups
    ("openrlhf", {"algo.advantage.estimator": "gae"}, False),
    ("openrlhf", {"algo.advantage.estimator": "reinforce"}, False),
    ("openrlhf", {"algo.advantage.estimator": "rloo"}, False),
    ("openrlhf", {"algo.advantage.estimator": "group_norm"}, False),
    ("trl", {"trainer": "grpo"}, False),
    ("trl", {"trainer": "rloo"}, False),
    ("advcli", {"estimator.name": "gae"}, False),
    ("advcli", {"estimator.name": "grpo"}, True),
]


@pytest.mark.parametrize("flavor,settings,by_id", CASES,
                         ids=[f"{f}-{'-'.join(str(v) for v in s.values())}" for f, s, _ in CASES])
def test_group_id_required_only_where_used(tmp_path, flavor, settings, by_id):
    settings = {**N2.get(flavor, {}), **settings}
    bare = _dump(tmp_path / "bare.parquet", with_ids=False)
    if by_id:
        with pytest.raises(AdvcliError, match="prompt_id"):
            advcli.run(bare, str(tmp_path / "o.parquet"), flavor=flavor, settings=settings, device="cpu")
        assert not (tmp_path / "o.parquet").exists()
        return
    advcli.run(bare, str(tmp_path / "bare_out.parquet"), flavor=flavor, settings=settings, device="cpu", chunk_rows=3)
    ided = _dump(tmp_path / "ids.parquet", with_ids=True)
    advcli.run(ided, str(tmp_path / "ids_out.parquet"), flavor=flavor, settings=settings, device="cpu")
    got, want = pq.read_table(tmp_path / "bare_out.parquet"), pq.read_table(tmp_path / "ids_out.parquet")
    for col in ("advantages", "returns"):
        assert got.column(col).to_pylist() == want.column(col).to_pylist(), col
    assert any(x != 0.0 for row in got.column("advantages").to_pylist() for x in row)  # something was computed
