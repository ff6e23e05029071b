"""A positional flavor's group size left at its default on advcli's own Parquet whose prompt_id groups all have
another size: the refusal names the group-size key with the size the ids show (and, where a prompt's rows are not
consecutive, the id grouping too), so that the first hint followed runs. Groups of several sizes (a prompt drawn
twice, rows dropped) are left to the run's own id check."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_main

SAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "sample_data", "rollouts.parquet")  # 48 groups of 8


def _dump(path, sizes, scattered=False, seed=0):
    rng = np.random.default_rng(seed)
    pids = [f"p{g}" for g, n in enumerate(sizes) for _ in range(n)]
    if scattered:
        pids = list(rng.permutation(pids))
    rows = len(pids)
    pq.write_table(pa.table({"prompt_id": pids, "reward": pa.array(rng.choice([0.0, 1.0], rows), pa.float32()),
                             "response_mask": pa.array([[1, 1]] * rows, pa.list_(pa.int8()))}), path)
    return str(path)


@pytest.mark.parametrize("flavor, key, default", [("open-instruct", "num_samples_per_prompt_rollout", 4),
                                                  ("trl", "num_generations", 8)])
def test_the_key_is_named_with_the_size_the_ids_show(tmp_path, capsys, flavor, key, default):
    m = 6  # neither default
    src = _dump(tmp_path / "in.parquet", [m] * 8)
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", src, "-o", out, "--flavor", flavor], capsys)
    err = " ".join(err.split())
    assert code == 2 and f"{key} is not set and defaults to {default}, but every prompt_id group of the input " \
                         f"has {m} rows" in err
    assert f"add --set {key}={m}, the responses sampled per prompt;" in err and "group_by=id" not in err
    assert not out.exists()
    code, _, err = run_main(["run", src, "-o", out, "--flavor", flavor, "--set", f"{key}={m}", "-q"], capsys)
    assert code == 0, err  # the hint followed runs


def test_scattered_groups_get_both_fixes_at_once(tmp_path, capsys):
    """The shipped sample: 48 prompts of 8 rows, not consecutive. Each hint names the size and the id grouping;
    following it runs (before, the size's hint led to a second refusal about the order)."""
    for flavor, key in (("open-instruct", "num_samples_per_prompt_rollout"),
                        ("roll", "actor_infer.generating_args.num_return_sequences")):
        code, _, err = run_main(["validate", SAMPLE, "--flavor", flavor, "--set", "adv_estimator=grpo"]
                                if flavor == "roll" else ["validate", SAMPLE, "--flavor", flavor], capsys)
        err = " ".join(err.split())
        assert code == 2 and f"--set {key}=8" in err and "--set advcli.group_by=id" in err, err
        assert "not consecutive" in err
        extra = ["--set", "adv_estimator=grpo"] if flavor == "roll" else []
        code, _, err = run_main(["validate", SAMPLE, "--flavor", flavor, *extra, "--set", f"{key}=8", "--set",
                                 "advcli.group_by=id"], capsys)
        assert code == 0, err


def test_mixed_sizes_and_the_id_check_off_are_left_to_the_run(tmp_path, capsys):
    src = _dump(tmp_path / "in.parquet", [4, 4, 8, 4])  # a prompt drawn twice: 8 rows under one id
    code, _, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--flavor", "open-instruct"], capsys)
    # the run's own check, naming rows: whole blocks, the other prompts one block each, so a warning
    assert code == 0 and "spans several positional groups of 4" in " ".join(err.split()), err
    six = _dump(tmp_path / "six.parquet", [6] * 4)
    code, _, err = run_main(["run", six, "-o", tmp_path / "o.parquet", "--flavor", "trl", "--set",
                             "advcli.id_check=warn", "--force"], capsys)
    assert "defaults to 8, but every prompt_id group" not in err  # the blocks were asked for: no refusal here
