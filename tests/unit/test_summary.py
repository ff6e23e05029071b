"""What the summary and the reports say (issue 28, parts 6 and 7): one meaning per figure, each fact once
with what it means, "no learning signal" only where the advantage of a uniform group is 0, ROLL's steps
counted as steps, and the estimator a flavor runs under another name explained.

Every expected number is worked out by hand in the comments."""
from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from _flavor_rows import write_rows
from conftest import run_main

from advcli.errors import AdvcliError

G = 4
# TRL completions dump with two reward functions that TRL sums (R = accuracy + format):
# group A: acc [1, 1, 0, 0] + fmt [1, 0.5, 0.5, 0] = R [2, 1.5, 0.5, 0]  (mean 1.0; 3 of 4 rows > 0)
# group B: acc [1, 1, 1, 1] + fmt [0.5] * 4       = R [1.5] * 4          (mean 1.5; uniform; 4 of 4 > 0)
ACC = [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
FMT = [1.0, 0.5, 0.5, 0.0, 0.5, 0.5, 0.5, 0.5]
MEAN_GROUP_REWARD = (1.0 + 1.5) / 2  # 1.25: above 1, it is not a share of anything
SOLVED_SHARE = 7 / 8  # rows with R > 0
TRL = ["--flavor", "trl", "--set", f"num_generations={G}", "--set", "reward_funcs=[accuracy_reward,format_reward]"]


def _trl_dump(tmp_path):
    d = tmp_path / "completions"
    d.mkdir()
    prompts = [f"user\nquestion {i}\nassistant\n" for i in range(2) for _ in range(G)]
    # as TRL writes it (grpo_trainer.py @f2cd5771): a pandas DataFrame to_parquet; its logged advantage
    # is not read by advcli
    pd.DataFrame({"step": [1] * 8, "prompt": prompts, "completion": [f"answer {i}" for i in range(8)],
                  "accuracy_reward": ACC, "format_reward": FMT, "advantage": [0.0] * 8}).to_parquet(
        d / "completions_00001.parquet")
    return d


def test_mean_group_reward_and_solved_share_are_named_apart(tmp_path, capsys):
    d = _trl_dump(tmp_path)
    out, md, html = tmp_path / "o.parquet", tmp_path / "r.md", tmp_path / "r.html"
    code, stdout, err = run_main(["run", d, "-o", out, *TRL, "--json"], capsys)
    assert code == 0, err
    rep = json.loads(stdout)
    o = rep["group_health"]["overall"]
    assert o["group_mean_reward"] == MEAN_GROUP_REWARD
    assert o["solved_share"] == SOLVED_SHARE == rep["metrics"]["groups/solved_share"]
    # group A has an unsolved row (R = 0), group B none: half the groups all solved, none unsolved
    assert o["solved_all_share"] == 0.5 == rep["metrics"]["groups/solved_all_share"]
    assert o["solved_none_share"] == 0.0 == rep["metrics"]["groups/solved_none_share"]
    assert "solve_rate" not in json.dumps(rep)
    code, _, err = run_main(["run", d, "-o", out, *TRL, "--force", "--report", md], capsys)
    assert code == 0, err
    line = " ".join(err.split())  # the terminal summary, its wrapping undone
    assert "mean group reward 1.250" in line and "solved rows (reward > 0) 87.5%" in line
    code, _, err = run_main(["run", d, "-o", out, *TRL, "--force", "-q", "--report", html], capsys)
    assert code == 0, err
    for text in (line, md.read_text(), html.read_text()):
        assert "solve rate" not in text.lower()
        assert "mean group reward" in text and "solved rows" in text
    # advcli stats of the output: the same two figures, and each reward function's own
    code, stdout, err = run_main(["stats", out, "--json"], capsys)
    assert code == 0, err
    h = json.loads(stdout)["group_health"]
    assert h["overall"]["group_mean_reward"] == MEAN_GROUP_REWARD and h["overall"]["solved_share"] == SOLVED_SHARE
    comp = {c["component"]: c for c in h["per_component"]}
    # accuracy: group means 0.5 and 1 → 0.75; rows > 0: 2 + 4 of 8 → 0.75
    assert comp["accuracy_reward"]["group_mean_reward"] == 0.75 and comp["accuracy_reward"]["solved_share"] == 0.75
    # format: group means 0.5 and 0.5 → 0.5; rows > 0: 3 + 4 of 8 → 0.875
    assert comp["format_reward"]["group_mean_reward"] == 0.5 and comp["format_reward"]["solved_share"] == 0.875


def test_each_diagnostic_once_with_its_meaning(tmp_path, capsys):
    # verl gae reads the reward at the last mask=1 token: rows ending in mask=0 lose their reward
    rows = [dict(prompt_id="a", reward=1.0, mask=[1, 1, 0], values=[0.0] * 3),
            dict(prompt_id="a", reward=0.0, mask=[1, 1, 1], values=[0.0] * 3),
            dict(prompt_id="b", reward=1.0, mask=[1, 0], values=[0.0] * 2)]
    src = write_rows(rows, str(tmp_path / "in.parquet"))
    code, _, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=gae"], capsys)
    assert code == 0, err
    text = " ".join(err.split())
    assert text.count("dropped_rewards:") == 1  # printed once, not as a diagnostic and again as a warning
    assert "dropped_rewards: 2 rows" in text  # rows 0 and 2 end in mask=0
    assert "train on no outcome reward" in text  # what it means, on the terminal
    assert "no learning signal" not in text  # GAE: a uniform group still has advantages


def test_float32_cancellation_once(tmp_path, capsys):
    # 0.9 × 3 in float32: verl grpo's group std is not exactly 0 → advantages of rounding noise
    rows = [dict(prompt_id="a", reward=0.9, mask=[1]) for _ in range(3)] + \
           [dict(prompt_id="b", reward=r, mask=[1]) for r in (0.0, 1.0, 1.0)]
    src = write_rows(rows, str(tmp_path / "in.parquet"))
    code, stdout, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--flavor", "verl",
                                  "--set", "algorithm.adv_estimator=grpo", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(stdout)
    canc = [dd for dd in rep["diagnostics"] if dd["kind"] == "float32_cancellation"]
    if not canc or not canc[0]["count"]:
        pytest.skip("this CPU's float32 sum of 0.9 × 3 leaves no residue")
    assert not any("float32 rounding noise" in w for w in rep["warnings"])  # said in the diagnostic, once
    code, _, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--force", "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=grpo"], capsys)
    text = " ".join(err.split())
    assert text.count("float32_cancellation:") == 1 and text.count("rounding noise") == 1


@pytest.mark.parametrize("estimator, says", [("grpo", True), ("rloo", True), ("gae", False),
                                             ("reinforce_plus_plus", False)])
def test_no_learning_signal_only_where_uniform_groups_get_zero(tmp_path, capsys, estimator, says):
    # group a: rewards 1, 1 (uniform), group b: 0, 1
    rows = [dict(prompt_id="a", reward=1.0, mask=[1, 1], values=[0.5, 0.25]),
            dict(prompt_id="a", reward=1.0, mask=[1], values=[0.5]),
            dict(prompt_id="b", reward=0.0, mask=[1, 1], values=[0.5, 0.25]),
            dict(prompt_id="b", reward=1.0, mask=[1], values=[0.5])]
    src = write_rows(rows, str(tmp_path / "in.parquet"))
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", src, "-o", out, "--flavor", "verl",
                                  "--set", f"algorithm.adv_estimator={estimator}", "--json"], capsys)
    assert code == 0, err
    assert json.loads(stdout)["group_health"]["uniform_zero_advantage"] is says
    adv = pq.read_table(out).column("advantages").to_pylist()
    # the claim is true exactly when group a's advantages are all 0
    assert (all(x == 0 for r in adv[:2] for x in r)) is says
    code, _, err = run_main(["run", src, "-o", out, "--force", "--flavor", "verl",
                             "--set", f"algorithm.adv_estimator={estimator}"], capsys)
    assert code == 0, err
    assert ("no learning signal" in " ".join(err.split())) is says


def _roll_dump(tmp_path):
    """ROLL's own rollout dump: 2 steps, each with 2 domains (math then code) of 2 groups of 3 rows."""
    from test_format_roll import rlvr

    d = tmp_path / "rollout_dump"
    d.mkdir()
    objs = [rlvr(0, 1), rlvr(1, 2)]
    for s, o in enumerate(objs):
        (d / f"rollout_dump_data.step_{s}.jsonl").write_text(json.dumps(o) + "\n")
    return d, objs


@pytest.mark.parametrize("estimator", ["grpo", "reinforce"])
def test_roll_steps_domains_and_why_reinforce(tmp_path, capsys, estimator):
    d, objs = _roll_dump(tmp_path)
    out, md = tmp_path / "o.parquet", tmp_path / "r.md"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "roll", "--set", f"adv_estimator={estimator}",
                             "--set", "actor_infer.generating_args.num_return_sequences=3", "--report", md], capsys)
    assert code == 0, err
    text = " ".join(err.split())
    assert "ran roll reinforce_plus_plus" in text
    # 2 steps × 2 domains: 4 per-step entries, said as 2 steps and the domains apart
    assert "steps 2 steps, 2 domains (math, code)" in text and "steps 4" not in text
    # one line says why the estimator named runs as reinforce_plus_plus
    why = text.split(" why ", 1)[1].split(" settings ", 1)[0]
    assert f"adv_estimator={estimator} is ROLL's" in why and "reinforce_plus_plus" in why
    assert ("group reward norm" in why) is (estimator == "grpo")
    # the Markdown per-step table names each entry's domain; group health counts steps, not entries
    report = md.read_text()
    assert "| step | domain | rows |" in report
    assert "| 0 | math | 6 |" in report and "| 1 | code | 6 |" in report
    if estimator == "grpo":  # reinforce forms no groups: no group health
        health = report.split("### Per step and data source", 1)[1].split("###", 1)[0]
        assert health.count("| step 0 |") == 1 and health.count("| step 1 |") == 1
        assert "| step 0 | 4 | 12 |" in health  # 4 groups of 3 rows in step 0 (2 per domain)


def test_verl_run_has_no_why_line(tmp_path, capsys):
    rows = [dict(prompt_id="a", reward=1.0, mask=[1]), dict(prompt_id="a", reward=0.0, mask=[1])]
    src = write_rows(rows, str(tmp_path / "in.parquet"))
    code, stdout, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--flavor", "verl",
                                  "--set", "algorithm.adv_estimator=grpo", "--json"], capsys)
    assert code == 0, err
    assert "estimator_note" not in json.loads(stdout)


@pytest.mark.parametrize("flavor, key, value, runs", [
    ("slime", "advantage_estimator", "grpo", "token_rewards"),
    ("slime", "advantage_estimator", "ppo", "gae"),
    ("nemo", "grpo.adv_estimator.name", "grpo", "grpo_loo"),
    ("nemo", "grpo.adv_estimator.name", "reinforce_plus_plus", "token_rewards"),
    ("openrlhf", "algo.advantage.estimator", "reinforce", "reinforce_plus_plus"),
    ("trl", "trainer", "rloo", "rloo_nan"),
    ("prime-rl", "orchestrator.algo.type", "max_rl", "max_rl_cohort"),
    ("roll", "adv_estimator", "grpo", "reinforce_plus_plus"),
])
def test_every_renamed_estimator_has_its_why(flavor, key, value, runs):
    """Wherever the estimator that runs is not named as the user's choice, one line says why, naming both."""
    from advcli import flavors

    cfg, given = flavors.resolve(flavor, [(key, value)])
    assert cfg["estimator"]["name"] == runs != value
    why = flavors.estimator_note(flavor, given)
    assert why.startswith(f"{key}={value} ") and f"advcli's {runs}" in why
    # --estimator VALUE runs the same estimator, and its why is the same line (not the default estimator's)
    cfg2, given2 = flavors.resolve(flavor, [("advcli.estimator", value)])
    assert cfg2["estimator"]["name"] == runs and flavors.estimator_note(flavor, given2) == why


def test_the_why_of_an_estimator_that_is_not_the_flavors_says_whose_it_is():
    """--estimator rloo on NeMo runs advcli's registered rloo in NeMo's pipeline: the line says so (with the
    function it matches), and nothing about NeMo's grpo."""
    from advcli import flavors

    cfg, given = flavors.resolve("nemo", [("advcli.estimator", "rloo")])
    note = flavors.estimator_note("nemo", given)
    assert cfg["estimator"]["name"] == "rloo"
    assert note.startswith("rloo is not one of NeMo RL's estimators: advcli's rloo (verl core_algos")
    assert "NeMo RL's pipeline" in note and "grpo" not in note


@pytest.mark.parametrize("flavor, key, value", [("verl", "algorithm.adv_estimator", "grpo"),
                                                ("skyrl", "trainer.algorithm.advantage_estimator", "rloo"),
                                                ("openrlhf", "algo.advantage.estimator", "gae")])
def test_no_why_where_the_name_is_the_users(flavor, key, value):
    from advcli import flavors

    cfg, given = flavors.resolve(flavor, [(key, value)])
    assert cfg["estimator"]["name"] == value and flavors.estimator_note(flavor, given) is None


def _own_estimators():
    from advcli import flavors

    for fl in flavors.listed():
        key = fl.estimator_key
        if not key or fl.name == "advcli":
            continue
        choices = fl.keys[key].choices if key in fl.keys else None
        for name in (choices if choices is not None else fl.estimator_names):
            yield fl.name, key, name


def test_every_flavor_with_an_estimator_choice_names_its_key():
    """A flavor whose native keys choose the estimator says which key (Flavor.estimator_key), so that
    --estimator NAME runs the flavor's own NAME; without it prime-rl's --estimator max_rl was refused and
    SkyRL's --estimator rloo ran advcli's registered rloo instead of SkyRL's. AReaL (one chain) and
    open-instruct (one GRPO) have no such key."""
    from advcli import flavors

    want = {"verl": "algorithm.adv_estimator", "nemo": "grpo.adv_estimator.name", "roll": "adv_estimator",
            "openrlhf": "algo.advantage.estimator", "trl": "trainer", "slime": "advantage_estimator",
            "skyrl": "trainer.algorithm.advantage_estimator", "prime-rl": "orchestrator.algo.type",
            "areal": None, "open-instruct": None, "advcli": "estimator.name"}
    assert {fl.name: fl.estimator_key for fl in flavors.listed()} == want


@pytest.mark.parametrize("flavor, key, name", list(_own_estimators()))
def test_estimator_route_and_set_route_resolve_alike(flavor, key, name):
    """--estimator NAME and --set KEY=NAME are one question: the same configuration, the same why."""
    from advcli import flavors

    extra = [("orchestrator.algo.episode_agents", ["solver"])] if name == "hierarchical_grpo" else []
    try:
        by_key, given_key = flavors.resolve(flavor, [(key, name)] + extra)
    except AdvcliError as e:  # a choice the flavor refuses offline: refused the same way by both routes
        with pytest.raises(AdvcliError) as again:
            flavors.resolve(flavor, [("advcli.estimator", name)] + extra)
        assert again.value.message == e.message
        return
    by_est, given_est = flavors.resolve(flavor, [("advcli.estimator", name)] + extra)
    assert by_est == by_key
    assert flavors.estimator_note(flavor, given_est) == flavors.estimator_note(flavor, given_key)
