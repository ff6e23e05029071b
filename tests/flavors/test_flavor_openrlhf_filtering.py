"""--flavor openrlhf with DAPO dynamic filtering (``--algo.dynamic_filtering_enable``, ``--algo.dynamic_filtering_range``).

OpenRLHF drops, at generation, each prompt whose samples' ``sum(scores) / len(scores)`` (Python floats) is not
strictly inside (LOW, HIGH) and samples another prompt in its place (ppo_utils/samples_generator.py ``_generate_vllm``
L168-177 @3c3be623); 0.8.1-0.9.0 keep LOW + 1e-6 < mean < HIGH − 1e-6 (ppo_trainer.py @v0.8.1 L487). The step it
trains on never holds the dropped groups: offline, the output holds the kept rows and every number is the one the
kept rows alone give. The expected values are computed by hand from compute_advantages_and_returns' formulas
(group_norm: (r − μ)/(σ + 1e-9), σ unbiased; reinforce_baseline: r − μ, then the step's biased whitening).
"""
from __future__ import annotations

import math
import os

import pytest
from _flavor_rows import assert_rows_close, run_rows, write_rows
from conftest import output_lists, run_table

from advcli.errors import AdvcliError

EST, N = "algo.advantage.estimator", "rollout.n_samples_per_prompt"
ON = {"algo.dynamic_filtering_enable": True, "algo.kl.init_coef": 0.0}
# groups of 3 consecutive rows (no prompt_id: OpenRLHF groups by position): means 1, 0, 2/3, 1/3
REWARDS = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
ROWS = [dict(reward=r, mask=[1] * (i % 3 + 2)) for i, r in enumerate(REWARDS)]
S3 = math.sqrt(1 / 3)  # the unbiased std of (1, 1, 0) and of (0, 1, 0)


def test_group_norm_keeps_the_groups_strictly_inside_the_range(tmp_path):
    out, result = run_rows(tmp_path, ROWS, "openrlhf", {EST: "group_norm", N: 3, **ON})
    # the all-1 and all-0 groups (means 1 and 0, not strictly inside (0, 1)) are gone; the output holds rows 6-11
    assert len(out["advantages"]) == 6
    z = lambda r, mean: (r - mean) / (S3 + 1e-9)  # noqa: E731
    assert_rows_close(out["advantages"], [[z(1, 2 / 3)] * 2, [z(1, 2 / 3)] * 3, [z(0, 2 / 3)] * 4,
                                          [z(0, 1 / 3)] * 2, [z(1, 1 / 3)] * 3, [z(0, 1 / 3)] * 4])
    note = result.warnings[0]
    assert "strictly inside (0, 1)" in note and "2 dropped group(s) (6 of 12 rows)" in note


def test_the_step_holds_the_kept_rows_only(tmp_path):
    """reinforce_baseline whitens over the step's action tokens: over the kept rows only, as if the dropped
    groups had never been sampled — the numbers of a run on the kept rows alone, and by hand."""
    out, _ = run_rows(tmp_path, ROWS, "openrlhf", {EST: "reinforce_baseline", N: 3, **ON})
    kept = ROWS[6:]
    alone, _ = run_rows(tmp_path, kept, "openrlhf", {EST: "reinforce_baseline", N: 3, "algo.kl.init_coef": 0.0})
    assert out["advantages"] == alone["advantages"]
    # by hand: r − group mean on each row's tokens (2, 3, 4 tokens a group), biased whitening over the 18 tokens
    a = [1 / 3, 1 / 3, -2 / 3, -1 / 3, 2 / 3, -1 / 3]
    toks = [x for x, n in zip(a, [2, 3, 4, 2, 3, 4]) for _ in range(n)]
    mu = sum(toks) / len(toks)
    sd = math.sqrt(sum((t - mu) ** 2 for t in toks) / len(toks))
    assert_rows_close(out["advantages"], [[(x - mu) / sd] * n for x, n in zip(a, [2, 3, 4, 2, 3, 4])], rtol=1e-5)


def test_gae_filters_blocks_of_n_rows(tmp_path):
    """gae has no groups in its math; the filter's groups are still n consecutive rows (a prompt's samples)."""
    rows = [dict(r, values=[0.0] * len(r["mask"])) for r in ROWS]
    out, _ = run_rows(tmp_path, rows, "openrlhf", {EST: "gae", N: 3, **ON})
    alone, _ = run_rows(tmp_path, rows[6:], "openrlhf", {EST: "gae", N: 3, "algo.kl.init_coef": 0.0})
    assert len(out["advantages"]) == 6 and out["advantages"] == alone["advantages"]


def test_blocks_are_taken_within_each_step(tmp_path):
    """With a step column each step is its own batch: its rows, in input order, form the blocks of n."""
    steps = [1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0]  # step 0: rows 1,3,5 | 7,9,11; step 1: rows 0,2,4 | 6,8,10
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    rows = [dict(reward=r, mask=[1, 1], step=s) for r, s in zip(rewards, steps)]
    # step 0 blocks: (0, 1, 0) kept, (1, 1, 1) dropped; step 1 blocks: (1, 1, 0) kept, (1, 1, 1) dropped
    src = write_rows(rows, os.path.join(tmp_path, "in.parquet"))
    table, _ = run_table(src, os.path.join(tmp_path, "out.parquet"), "openrlhf", {EST: "group_norm", N: 3, **ON})
    assert table.column("step").to_pylist() == [1, 0, 1, 0, 1, 0]  # rows 0-5 of the input, in input order
    assert table.column("reward").to_pylist() == rewards[:6]


def test_releases_0_8_1_to_0_9_0_keep_a_margin_of_1e_6(tmp_path):
    """Range (0, 0.5), a group of mean 0.4999995 (float32 0.999999 and 0): inside (0, 0.5), not inside
    (1e-6, 0.5 − 1e-6)."""
    rows = [dict(reward=r, mask=[1]) for r in (0.999999, 0.0, 1.0, 0.0, 0.25, 0.5)]  # means 0.4999995, 0.5, 0.375
    settings = {"advantage_estimator": "group_norm", "n_samples_per_prompt": 2, "dynamic_filtering": True,
                "dynamic_filtering_reward_range": [0, 0.5], "init_kl_coef": 0.0}
    new, _ = run_rows(tmp_path, rows, "openrlhf@0.9.5", settings)
    old, _ = run_rows(tmp_path, rows, "openrlhf@0.8.3", settings)
    assert len(new["advantages"]) == 4 and len(old["advantages"]) == 2  # mean 0.5: out of both (strict)
    sd = 0.25 / math.sqrt(2)  # the unbiased std of (0.25, 0.5)
    assert_rows_close(old["advantages"], [[-0.125 / (sd + 1e-9)], [0.125 / (sd + 1e-9)]])
    assert_rows_close(new["advantages"][2:], old["advantages"])


@pytest.mark.parametrize("settings, words", [
    ({"algo.dynamic_filtering_range": [1, 0]}, "OpenRLHF asserts LOW < HIGH"),
    ({N: 1, EST: "gae"}, "n_samples_per_prompt > 1 with dynamic filtering"),
])
def test_what_openrlhf_asserts_is_refused(tmp_path, settings, words):
    with pytest.raises(AdvcliError, match=words):
        run_rows(tmp_path, ROWS, "openrlhf", {EST: "group_norm", N: 3, **ON, **settings})


def test_a_release_without_the_flag_refuses_it(tmp_path):
    with pytest.raises(AdvcliError, match="OpenRLHF 0.8.0.post1 has no dynamic filtering"):
        run_rows(tmp_path, ROWS, "openrlhf@0.8.0", {"advantage_estimator": "group_norm", "n_samples_per_prompt": 3,
                                                    "dynamic_filtering": True, "init_kl_coef": 0.0})


def test_the_command_line_and_the_library_agree(tmp_path, capsys):
    from conftest import run_main

    src = write_rows(ROWS, os.path.join(tmp_path, "in.parquet"))
    cli_out = os.path.join(tmp_path, "cli.parquet")
    code, _, err = run_main(["run", src, "-o", cli_out, "--flavor", "openrlhf", "--set", f"{EST}=group_norm",
                             "--set", f"{N}=3", "--set", "algo.dynamic_filtering_enable=true", "--set",
                             "algo.kl.init_coef=0"], capsys)
    assert code == 0, err
    assert "dynamic filtering" in err and "2 dropped group(s)" in err
    lib, _ = run_table(src, os.path.join(tmp_path, "lib.parquet"), "openrlhf", {EST: "group_norm", N: 3, **ON})
    import pyarrow.parquet as pq

    assert output_lists(pq.read_table(cli_out)) == output_lists(lib)
    code, out, _ = run_main(["explain", "--flavor", "openrlhf", "--set", "dynamic_filtering=true", "--set",
                             "n_samples_per_prompt=4"], capsys)
    assert code == 0 and "0. groups kept      those whose mean reward is strictly inside (0, 1)" in out


def test_an_error_names_the_users_file(tmp_path):
    """The kept rows go through a temporary file; a message about them names the input."""
    src = write_rows(ROWS, os.path.join(tmp_path, "in.parquet"))
    with pytest.raises(AdvcliError) as e:
        run_table(src, os.path.join(tmp_path, "out.parquet"), "openrlhf",
                  {EST: "group_norm", N: 3, "algo.dynamic_filtering_enable": True})  # β 0.01: KL needs log-probs
    assert f"{src} (the rows the group filter kept): missing column 'old_log_probs'" in str(e.value)
    assert ".filter.parquet" not in str(e.value)


def test_compare_says_it_cannot_pair_filtered_rows(tmp_path, capsys):
    """compare pairs every row under each configuration: a configuration that drops groups first is refused with
    the way round (run with the filter, compare the kept rows), not run on every row as if unfiltered."""
    from conftest import run_main

    src = write_rows(ROWS, os.path.join(tmp_path, "in.parquet"))
    common = ["--set", f"{N}=3", "--set", "algo.kl.init_coef=0"]
    code, _, err = run_main(["compare", src, "--flavor", "openrlhf", *common, "--set",
                             "algo.dynamic_filtering_enable=true", "--estimators", "group_norm,dr_grpo"], capsys)
    assert code == 2 and "drops groups before the run" in err and "kept.parquet" in err
