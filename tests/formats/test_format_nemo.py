"""nemo-jsonl: NeMo RL's train_data_step{N}.jsonl, built here from the field list of spec/dumps.md §2
(every field a one-element list, token rows over the right-padded full sequence), with the
``advantages`` NeMo would log computed independently below (GRPO: leave-one-out baseline and
per-sample leave-one-out unbiased std, divided by σ + 1e-6 only where σ > 0; spec/nemo.md §2-3)."""
import json
import math
import re
import shlex

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import run_main

PAD = 0


def nemo_grpo(rewards, groups, loo=True, normalize=True):
    """NeMo RL calculate_baseline_and_std_per_prompt + GRPOAdvantageEstimator, float64, Python loops."""
    out = []
    for i, (r, g) in enumerate(zip(rewards, groups)):
        members = [j for j, h in enumerate(groups) if h == g]
        n = len(members)
        if n <= 1:
            out.append(0.0)
            continue
        others = [rewards[j] for j in members if j != i] if loo else [rewards[j] for j in members]
        k = len(others)
        b = sum(others) / k
        var = (sum(x * x for x in others) / k - b * b) * k / (k - 1) if k > 1 else float("nan")
        std = math.sqrt(var) if var == var and var > 0 else 0.0
        a = r - b
        if normalize and std > 0:
            a = a / (std + 1e-6)
        out.append(a)
    return out


# (prompt tokens, response tokens, response mask (tool tokens 0), reward); groups of 4, 2 and 1
SAMPLES = [
    ([5, 6, 7], [10, 11, 12], [1, 1, 1], 1.0),
    ([5, 6, 7], [13, 14], [1, 1], 0.0),
    ([5, 6, 7], [15, 16, 17, 18], [1, 0, 0, 1], 0.5),
    ([5, 6, 7], [19], [1], 0.0),
    ([8, 9], [20, 21, 22], [1, 1, 0], 1.0),
    ([8, 9], [23, 24], [1, 1], 0.25),
    ([30, 31, 32, 33], [40, 41], [1, 1], 0.75),
]


def write_step(path, samples, step_seed=0, sample_masks=None, advantages=None, sample_ids=None):
    """One train_data_step file of ``samples``; ``sample_masks``: each row's sample_loss_mask (default 1.0);
    ``advantages``: the logged per-row advantages (default :func:`nemo_grpo` over the groups); with
    ``sample_ids`` ({group_id}_g{index}, NeMo RL #3882) each row carries its rollout id and NeMo groups by the
    group_id instead of the prompt tokens."""
    rng = np.random.default_rng(step_seed)
    width = max(len(p) + len(r) for p, r, _, _ in samples) + 3  # right padding, as NeMo pads to the batch max
    rewards = [s[3] for s in samples]
    groups = [i.rsplit("_g", 1)[0] for i in sample_ids] if sample_ids else [tuple(s[0]) for s in samples]
    adv = list(advantages) if advantages is not None else nemo_grpo(rewards, groups)
    sample_masks = sample_masks or [1.0] * len(samples)
    with open(path, "w") as fh:
        for i, (p, r, m, rew) in enumerate(samples):
            L = len(p) + len(r)
            pad = width - L
            mask = [0] * len(p) + m + [0] * pad
            gen = [0.0] * len(p) + [float(x) for x in rng.uniform(-2, 0, len(r))] + [0.0] * pad
            prev = [0.0] + [float(x) for x in rng.uniform(-3, 0, L - 1)] + [0.0] * pad
            rec = {"content": [[f"prompt {p}", f"answer {r}"]], "rewards": [rew], "input_lengths": [L],
                   "token_ids": [p + r + [PAD] * pad], "token_loss_mask": [mask], "sample_loss_mask": [sample_masks[i]],
                   "advantages": [[adv[i]] * width], "generation_logprobs": [gen], "prev_logprobs": [prev],
                   "idx": i}  # logger.py L1096 adds idx unwrapped: {**sample, "idx": i}
            if sample_ids:
                rec["sample_id"] = [sample_ids[i]]
            fh.write(json.dumps(rec) + "\n")
    return adv


@pytest.fixture
def dump(tmp_path):
    d = tmp_path / "logs" / "exp_001"
    d.mkdir(parents=True)
    adv1 = write_step(d / "train_data_step1.jsonl", SAMPLES, 1)
    adv2 = write_step(d / "train_data_step2.jsonl", SAMPLES[::-1], 2)  # another order: groups still found
    (d / "val_data_step1.jsonl").write_text(json.dumps({"content": [[{"role": "user", "content": "x"}]],
                                                        "rewards": [1.0], "idx": 0}) + "\n")
    (d / "metrics.jsonl").write_text('{"loss": 0.1}\n')  # a file no format names: skipped, saying so
    (d / "config.yaml").write_text("grpo: {}\n")
    return d, adv1 + adv2


def test_a_converted_dump_runs_as_the_dump_does(dump, tmp_path, capsys):
    """The Parquet file `advcli convert` wrote of a NeMo dump (token level) ran under verl's GRPO when no flavor
    was named, where the dump itself runs NeMo's leave-one-out GRPO: it runs as the dump does (the trainer's
    flavor, its logged advantages audited), with the advantages NeMo logged."""
    d, adv = dump
    conv = tmp_path / "c.parquet"
    assert run_main(["convert", d, "-o", conv], capsys)[0] == 0
    code, _, err = run_main(["run", conv, "-o", tmp_path / "o.parquet"], capsys)
    assert code == 0 and "nemo grpo_loo" in err, err
    t = pq.read_table(tmp_path / "o.parquet").to_pylist()
    got = [max(r["advantages"], key=abs) for r in t]
    assert np.allclose(got, adv, rtol=1e-5, atol=1e-6)
    code, _, err = run_main(["audit", conv], capsys)
    assert code == 0 and "agree: 0 of" in err, err
    # beside plain Parquet no one trainer's semantics is taken, whichever file comes first: the default flavor
    mix = tmp_path / "mix"
    mix.mkdir()
    pq.write_table(pq.read_table(conv), mix / "a.parquet")  # (pyarrow keeps the schema's advcli.import)
    pq.write_table(pq.read_table(conv).replace_schema_metadata(None), mix / "b.parquet")
    for order in ([mix / "a.parquet", mix / "b.parquet"], [mix / "b.parquet", mix / "a.parquet"]):
        code, _, err = run_main(["run", *order, "-o", tmp_path / "m", "--force"], capsys)
        assert code == 0 and "verl grpo" in err and "nemo" not in err.split("input")[0], err
    # an output named as another format (a configuration file, a Python estimator) is refused
    for name in ("config.yaml", "est.py"):
        code, _, err = run_main(["run", conv, "-o", tmp_path / name], capsys)
        assert code == 2 and "advcli writes Parquet" in err, err


def test_convert_roles_and_slices(dump, tmp_path, capsys):
    d, _ = dump
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", str(d.parent), "--output", out], capsys)
    assert code == 0, err
    assert "val_data_step1.jsonl" in err and "skipped" in err and "metrics.jsonl (not a NeMo" in err
    t = pq.read_table(out).to_pylist()
    assert len(t) == 14
    assert [r["step"] for r in t] == [1] * 7 + [2] * 7
    r2 = t[2]
    assert r2["response_mask"] == [1, 0, 0, 1] and r2["reward"] == 0.5 and r2["prompt_length"] == 3
    assert len(r2["old_log_probs"]) == 4 and len(r2["logged_advantages"]) == 4
    ids = [r["prompt_id"] for r in t[:7]]
    assert ids[0] == ids[1] == ids[2] == ids[3] != ids[4] == ids[5] != ids[6]
    assert {r["prompt_id"] for r in t[:7]} == {r["prompt_id"] for r in t[7:]}


@pytest.mark.parametrize("chunk", ["4096", "3"])
def test_flavor_nemo_equals_logged_advantages(dump, tmp_path, capsys, chunk):
    d, expected = dump
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", str(d), "--output", out, "--flavor", "nemo", "--chunk-rows", chunk, "-q"],
                            capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    for row, exp in zip(t, expected):
        assert np.allclose(row["advantages"], row["logged_advantages"], rtol=1e-5, atol=1e-6)
        assert np.allclose(row["advantages"], [exp] * len(row["advantages"]), rtol=1e-5, atol=1e-6)
    assert any(abs(e) > 0.5 for e in expected)


def test_saved_config_reward_steps_are_taken_as_done(dump, tmp_path, capsys):
    """The run's saved config.yaml turns on reward_scaling, reward_shaping and overlong_filtering: the dump's
    rewards and sample masks are after them (grpo.py L3020-3031, L3139-3145 @7ea279ab), so advcli applies none
    of them again and gives the logged advantages (scaling them again would map [0, 1] to [−1, 1])."""
    d, expected = dump
    (d / "config.yaml").write_text(
        "grpo:\n  num_prompts_per_step: 8\n  overlong_filtering: true\n"
        "  reward_scaling: {enabled: true, source_min: 0.0, source_max: 1.0, target_min: -1.0, target_max: 1.0}\n"
        "  reward_shaping: {enabled: true, overlong_buffer_length: 4, overlong_buffer_penalty: 1.0, "
        "max_response_length: 8}\n")
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", str(d), "--output", out, "--flavor", "nemo", "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    for row, exp in zip(t, expected):
        assert np.allclose(row["advantages"], [exp] * len(row["advantages"]), rtol=1e-5, atol=1e-6)


def test_inspect_says_format_and_grouping(dump, capsys):
    d, _ = dump
    code, out, err = run_main(["inspect", str(d)], capsys)
    assert code == 0, err
    assert "nemo-jsonl" in out and "prompt tokens" in out and "val_data_step1.jsonl" in out


def test_from_forces_format_on_renamed_file(dump, tmp_path, capsys):
    d, _ = dump
    renamed = tmp_path / "steps.jsonl"
    renamed.write_text((d / "train_data_step1.jsonl").read_text())
    code, _, err = run_main(["convert", renamed, "-o", tmp_path / "x.parquet"], capsys)
    assert code == 2 and "not a dump format" in err
    code, _, err = run_main(["convert", renamed, "-o", tmp_path / "x.parquet", "--from", "nemo-jsonl"], capsys)
    assert code == 0, err


def test_messages_name_nemos_own_field(dump, tmp_path, capsys):
    """A record's prev_logprobs was named 'old_log_probs', advcli's column, which the dump does not have: the
    messages name NeMo's field (with the column it is read as), for a value of the wrong type and for a record
    that lacks it."""
    d, _ = dump
    p = d / "train_data_step2.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[2])
    rec["prev_logprobs"] = [[str(x) for x in rec["prev_logprobs"][0]]]
    lines[2] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["run", str(d), "-o", tmp_path / "o.parquet", "--flavor", "nemo"], capsys)
    assert code == 2 and "train_data_step2.jsonl:3: field 'prev_logprobs' (read as 'old_log_probs') is [" in err, err
    p.write_text("".join(json.dumps({k: v for k, v in json.loads(x).items() if k != "prev_logprobs"}) + "\n"
                         for x in lines))
    code, _, err = run_main(["run", str(d), "-o", tmp_path / "o.parquet", "--flavor", "nemo"], capsys)
    assert code == 2 and "field 'prev_logprobs' (column 'old_log_probs'), row " in err, err
    assert "null value (the record lacks the field, or holds null)" in err


@pytest.mark.parametrize("command", ["run", "convert"])
def test_from_a_jsonl_format_on_a_parquet_file_says_so(command, tmp_path, capsys):
    """--from nemo-jsonl on a whole Parquet file said "not a readable Parquet file ... its footer is missing: the file
    was cut short", which was false; it now says the file is Parquet, not that format, and what reads it."""
    from conftest import SAMPLE

    code, _, err = run_main([command, SAMPLE, "-o", tmp_path / "x.parquet", "--from", "nemo-jsonl"], capsys)
    assert code == 2 and "rollouts.parquet: a Parquet file, not a NeMo RL train_data_step{N}.jsonl file" in err, err
    assert "cut short" not in err and not (tmp_path / "x.parquet").exists()


def test_a_record_without_a_field_names_it(dump, tmp_path, capsys):
    """A train_data_step file whose records lack token_ids: the hint names the missing field (the file's name is
    NeMo's), not 'a file of another format among the dumps'."""
    d, _ = dump
    p = d / "train_data_step1.jsonl"
    recs = [json.loads(line) for line in p.read_text().splitlines()]
    p.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "token_ids"}) + "\n" for r in recs))
    code, _, err = run_main(["run", str(d), "--output", tmp_path / "o.parquet", "--flavor", "nemo"], capsys)
    err = " ".join(err.split())
    assert code == 2 and "train_data_step1.jsonl:1: not a NeMo RL" in err, err
    assert "it lacks token_ids" in err and "another format" not in err


def test_truncated_line_names_file_and_line(dump, tmp_path, capsys):
    d, _ = dump
    p = d / "train_data_step2.jsonl"
    text = p.read_text()
    p.write_text(text[: len(text) - 40])  # the writer stopped inside the last record
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", str(d), "--output", out, "--flavor", "nemo"], capsys)
    assert code == 2
    assert "train_data_step2.jsonl:7: truncated line" in err
    assert not out.exists()
    # json's own words, once: "Unterminated string starting at column N" (it read "starting at at column")
    p.write_text(text[: text.rindex('"') - 3])
    code, _, err = run_main(["run", str(d), "--output", out, "--flavor", "nemo"], capsys)
    assert code == 2 and " at at " not in err and re.search(r"(Expecting|Unterminated)[^:]* at column \d+", err), err


def test_missing_field_and_not_one_element(dump, tmp_path, capsys):
    d, _ = dump
    p = d / "train_data_step1.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[3])
    del rec["input_lengths"]
    lines[3] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["convert", str(d), "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and "train_data_step1.jsonl:4: missing field(s) 'input_lengths'" in err
    rec["input_lengths"] = 7
    lines[3] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["convert", str(d), "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and ":4: field 'input_lengths' is not a one-element list" in err
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("field", ["prev_logprobs", "generation_logprobs", "advantages", "token_loss_mask"])
def test_a_token_field_of_another_length_than_token_ids_is_refused(field, dump, tmp_path, capsys):
    """NeMo writes a record's token fields from one padded batch: a list that lost a value inside the response
    still covers input_lengths, but every later position read the next token's value (exit 0, shifted). Refused,
    naming the line, the field and both lengths."""
    d, _ = dump
    p = d / "train_data_step2.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[0])
    values = rec[field][0]
    assert len(values) > rec["input_lengths"][0]  # padded: dropping one still covers input_lengths
    rec[field] = [values[:2] + values[3:]]
    lines[0] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    for command in (["convert", str(d)], ["run", str(d), "--flavor", "nemo"]):
        code, _, err = run_main([*command, "-o", tmp_path / "o.parquet"], capsys)
        assert code == 2, err
        assert (f"train_data_step2.jsonl:1: field {field!r} holds {len(values) - 1} values and 'token_ids' "
                f"{len(values)}") in err
        assert not (tmp_path / "o.parquet").exists()


def test_duplicate_step_files(dump, tmp_path, capsys):
    d, _ = dump
    other = d.parent / "exp_002"
    other.mkdir()
    (other / "train_data_step1.jsonl").write_text((d / "train_data_step1.jsonl").read_text())
    code, _, err = run_main(["convert", str(d.parent), "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and "duplicate step file" in err and "train_data_step1.jsonl" in err


def test_nan_literal_reward(tmp_path, capsys):
    d = tmp_path / "n"
    d.mkdir()
    write_step(d / "train_data_step3.jsonl", SAMPLES[:2])
    p = d / "train_data_step3.jsonl"
    lines = p.read_text().splitlines()
    lines[1] = lines[1].replace('"rewards": [0.0]', '"rewards": [NaN]')
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["convert", str(d), "-o", tmp_path / "o.parquet"], capsys)
    assert code == 0, err
    assert math.isnan(pq.read_table(tmp_path / "o.parquet").column("reward")[1].as_py())


def test_row_without_generated_token_joins_its_prompt(tmp_path, capsys):
    d = tmp_path / "e"
    d.mkdir()
    samples = [([5, 6], [10, 11], [1, 1], 1.0), ([5, 6], [12, 13], [0, 0], 0.0), ([5, 6], [14], [1], 0.5)]
    exp = write_step(d / "train_data_step1.jsonl", samples)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "nemo"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert len({r["prompt_id"] for r in t}) == 1 and t[1]["response_mask"] == [0, 0]
    for r, e in zip(t, exp):
        assert np.allclose(r["advantages"], [e] * len(r["advantages"]), rtol=1e-5, atol=1e-6)


def test_sample_loss_mask_zero_leaves_reinforce_plus_plus_statistics(tmp_path, capsys):
    """NeMo hands its estimators mask = token_mask · sample_mask (grpo.py L3289-3292 @ 7ea279ab), so a row
    whose sample_loss_mask is 0 is out of reinforce_plus_plus's token statistics
    (advantage_estimator.py L262-265): μ = Σ a·M / Σ M, σ² = Σ (a − μ)²·M / Σ M, A = (a − μ)/√max(σ², 1e-8)."""
    d = tmp_path / "s"
    d.mkdir()
    samples = [([5, 6], [10, 11, 12], [1, 1, 1], 1.0), ([5, 6], [13, 14], [1, 1], 0.0),
               ([5, 6], [15, 16, 17, 18], [1, 0, 1, 1], 0.5), ([7], [19, 20], [1, 1], 1.0), ([7], [21], [1], 0.0)]
    write_step(d / "train_data_step1.jsonl", samples)
    dropped = 2  # a long row with a reward away from its group mean: it moves μ and σ if counted
    p = d / "train_data_step1.jsonl"
    lines = p.read_text().splitlines()
    lines[dropped] = lines[dropped].replace('"sample_loss_mask": [1.0]', '"sample_loss_mask": [0.0]')
    p.write_text("\n".join(lines) + "\n")
    # a_i = r_i − mean of its prompt's rewards (minus_baseline, all rows vote: valid_mask is ones)
    means = {(5, 6): (1.0 + 0.0 + 0.5) / 3, (7,): (1.0 + 0.0) / 2}
    a = [rew - means[tuple(pr)] for pr, _, _, rew in samples]
    masks = [[0] * len(m) if i == dropped else m for i, (_, _, m, _) in enumerate(samples)]
    n = sum(sum(m) for m in masks)
    mu = sum(a[i] * sum(m) for i, m in enumerate(masks)) / n
    var = sum((a[i] - mu) ** 2 * sum(m) for i, m in enumerate(masks)) / n
    want = [(x - mu) / math.sqrt(max(var, 1e-8)) for x in a]
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "nemo", "--set",
                             "grpo.adv_estimator.name=reinforce_plus_plus", "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert t[dropped]["response_mask"] == [0, 0, 0, 0] and t[dropped]["prompt_length"] == 2
    for row, w in zip(t, want):  # every position holds the row's value (masked ones are not zeroed)
        assert np.allclose(row["advantages"], [w] * len(row["advantages"]), rtol=1e-5, atol=1e-6)


def test_no_temporary_path_reaches_the_user(dump, tmp_path, capsys):
    """A dump is read through a temporary Parquet file that is gone when the command ends: every place a
    command names its input (compare's headers, stats --json, the output's provenance, a run's filter
    summary, the audit report) names the directory the user gave instead."""
    d, _ = dump
    src = str(d.parent)
    out = tmp_path / "o.parquet"
    code, so, se = run_main(["run", src, "-o", out, "--flavor", "nemo", "--drop-uniform", "--json"], capsys)
    assert code == 0, se
    assert "advcli-import-" not in so + se and ".advcli-filter-" not in so
    rep = json.loads(so)
    assert rep["inputs"] == [src] and rep["filter"]["inputs"] == [src] and rep["filter"]["output"] == str(out)
    prov = json.loads(pq.read_schema(out).metadata[b"advcli"])
    assert prov["inputs"] == [src]
    code, so, se = run_main(["stats", src, "--json"], capsys)
    assert code == 0 and "advcli-import-" not in so + se and json.loads(so)["inputs"] == [src], se
    code, so, se = run_main(["stats", out, "--json"], capsys)
    assert code == 0 and json.loads(so)["produced_by"]["inputs"] == [src], se
    code, so, se = run_main(["compare", src, "--flavor", "nemo", "--flavor", "nemo", "--set",
                             "grpo.adv_estimator.normalize_rewards=false"], capsys)
    assert code == 0 and "advcli-import-" not in so + se and f"({src})" in so + se, so + se
    code, so, se = run_main(["audit", src, "--json"], capsys)
    assert code == 0 and "advcli-import-" not in so + se and json.loads(so)["inputs"] == [src], se


def test_rollout_identity_groups(tmp_path, capsys):
    """NeMo RL #3882: two prompt instances with identical prompt tokens (the same text over two images or
    environment states) are two groups when the rows carry {group_id}_g{index} rollout ids. Rewards as in the
    pull request's example: one group all 0, the other all 1 plus one mixed group; by rollout identity the
    uniform groups get 0, by token equality they would merge and get ±1."""
    same = [5, 6, 7]
    samples = [(same, [10 + k], [1], 0.0) for k in range(4)] + [(same, [20 + k], [1], 1.0) for k in range(4)] + \
        [(same, [30 + k], [1], r) for k, r in enumerate([1.0, 0.0, 0.5])]
    ids = [f"img-a_g{k}" for k in range(4)] + [f"img-b_g{k}" for k in range(4)] + [f"img-c_g{k}" for k in range(3)]
    d = tmp_path / "logs"
    d.mkdir()
    expected = write_step(d / "train_data_step1.jsonl", samples, 1, sample_ids=ids)
    assert expected[:8] == [0.0] * 8 and any(a != 0 for a in expected[8:])
    merged = nemo_grpo([s[3] for s in samples], [0] * len(samples))
    assert not np.allclose(merged, expected)  # token grouping would give other numbers
    code, out, err = run_main(["inspect", d], capsys)
    assert code == 0, err
    assert "rollout identity" in out and "3 (sizes: 1×3, 2×4)" in out
    words = shlex.split(next(ln for ln in out.splitlines() if ln.startswith("read it with")).removeprefix(
        "read it with"))
    code, _, err = run_main([*words[1:], "-o", tmp_path / "o.parquet"], capsys)
    assert code == 0, err
    t = pq.read_table(tmp_path / "o.parquet").to_pylist()
    for row, exp in zip(t, expected):
        assert np.allclose(row["advantages"], [exp] * len(row["advantages"]), rtol=1e-5, atol=1e-6)
    assert [r["rollout_group_id"] for r in t] == [i.rsplit("_g", 1)[0] for i in ids]
    code, out, err = run_main(["audit", d, "--flavor", "nemo", "--no-search", "--json"], capsys)
    assert code == 0 and json.loads(out)["agree"], err


def test_rollout_id_not_in_nemo_shape(tmp_path, capsys):
    d = tmp_path / "logs"
    d.mkdir()
    write_step(d / "train_data_step1.jsonl", SAMPLES[:2], 1, sample_ids=["a_g0", "a-1"])
    code, _, err = run_main(["convert", d, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and "train_data_step1.jsonl:2: field 'sample_id' is 'a-1'" in err and "Traceback" not in err
    assert not (tmp_path / "c.parquet").exists()


def test_stats_of_the_dump_describes_the_logged_advantages(dump, capsys):
    """stats of a NeMo dump describes the advantages NeMo logged (logged_advantages) over the mask=1 tokens, and says
    they are the trainer's own; it said "no advantages". Each row's logged value is one per row here."""
    d, expected = dump
    code, out, err = run_main(["stats", str(d), "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    masks = []
    for step in (1, 2):
        for line in (d / f"train_data_step{step}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            masks.append(sum(rec["token_loss_mask"][0]))
    vals = np.repeat(np.asarray(expected, np.float64), masks)
    m = rep["metrics"]
    assert m["critic/advantages/count"] == vals.size
    assert m["critic/advantages/mean"] == pytest.approx(vals.mean(), abs=1e-6)
    assert m["critic/advantages/max"] == pytest.approx(vals.max(), abs=1e-6)
    assert "the advantages are the trainer's own, as it logged them (column 'logged_advantages')" in rep["note"]
