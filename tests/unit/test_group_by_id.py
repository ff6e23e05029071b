"""Position-grouped flavors (ROLL, OpenRLHF, TRL) also work from prompt_id (advcli.group_by=id).

A dump in rollout order (each prompt's n responses contiguous) and the same rows shuffled must give the
same per-row numbers: positional grouping on the first, id grouping on the second. Without the
extension key, the shuffled dump is refused with a message naming the rows.
"""
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.errors import AdvcliError
from advcli.sample import make_table

CASES = [
    ("roll", {"adv_estimator": "grpo", "actor_infer.generating_args.num_return_sequences": 4}),
    ("openrlhf", {"algo.advantage.estimator": "group_norm", "rollout.n_samples_per_prompt": 4,
                  "algo.kl.init_coef": 0.02, "algo.kl.estimator": "k3"}),
    ("openrlhf", {"algo.advantage.estimator": "rloo", "rollout.n_samples_per_prompt": 4}),
    ("trl", {"trainer": "grpo", "num_generations": 4, "scale_rewards": "batch"}),
    ("trl", {"trainer": "rloo", "num_generations": 4}),
]


@pytest.mark.parametrize("flavor,settings", CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
def test_shuffled_by_id_equals_contiguous_by_position(tmp_path, flavor, settings):
    table = make_table(96, group_size=4, min_len=1, max_len=40, seed=3, shuffle=False)
    perm = np.random.default_rng(0).permutation(table.num_rows)
    pq.write_table(table, tmp_path / "ordered.parquet")
    pq.write_table(table.take(perm), tmp_path / "shuffled.parquet")
    advcli.run(str(tmp_path / "ordered.parquet"), str(tmp_path / "a.parquet"), flavor=flavor, settings=settings)
    with pytest.raises(AdvcliError, match=re.escape("settings={'advcli.group_by': 'id'}")):  # the call's words
        advcli.run(str(tmp_path / "shuffled.parquet"), str(tmp_path / "b.parquet"), flavor=flavor, settings=settings)
    advcli.run(str(tmp_path / "shuffled.parquet"), str(tmp_path / "b.parquet"), flavor=flavor,
               settings={**settings, "advcli.group_by": "id"})
    a = pq.read_table(tmp_path / "a.parquet").take(perm)
    b = pq.read_table(tmp_path / "b.parquet")
    for col in ("advantages", "returns"):
        x = np.concatenate([np.asarray(r, dtype=np.float64) for r in a.column(col).to_pylist()])
        y = np.concatenate([np.asarray(r, dtype=np.float64) for r in b.column(col).to_pylist()])
        # members of a group meet in another order, so float32 group sums may differ in the last bit
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6, err_msg=f"{flavor} {col}")
