"""open-instruct-traces: open-instruct's GRPO rollout traces ({run_name}_rollouts_{shard:06d}.jsonl), built here
from its RolloutRecord field list (open_instruct/rl_utils.py @ e6c3044a: step, sample_idx, prompt_idx,
prompt_tokens, response_tokens, reward, advantage, finish_reason, dataset, ground_truth, request_info,
logprobs; one JSON object per line, shards appended to across steps). The logged ``advantage`` is computed
below as open-instruct computes it (data_loader.py L1471-1484): the step's scores in blocks of n, numpy mean
and population std (ddof 0), ``standard``: (s − mean)/(std + 1e-8), ``centered``: s − mean."""
import json
import math
import shlex

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import edit_record, run_main

N = 3  # num_samples_per_prompt_rollout (not open-instruct's default 4: the dump's own size must be taken)


def open_instruct_advantages(scores, n, kind):
    out = []
    for g in range(0, len(scores), n):
        block = scores[g:g + n]
        mean = sum(block) / n
        std = math.sqrt(sum((x - mean) ** 2 for x in block) / n)
        out += [(x - mean) / (std + 1e-8) if kind == "standard" else x - mean for x in block]
    return out


def records(step, scores, kind, n=N):
    rng = np.random.default_rng(step)
    adv = open_instruct_advantages(scores, n, kind)
    out = []
    for i, (s, a) in enumerate(zip(scores, adv)):
        length = int(rng.integers(2, 9))
        out.append({"step": step, "sample_idx": i, "prompt_idx": i // n, "prompt_tokens": [1, 2, 3 + i // n],
                    "response_tokens": [int(t) for t in rng.integers(10, 99, length)], "reward": s, "advantage": a,
                    "finish_reason": "stop", "dataset": "gsm8k", "ground_truth": [7],
                    "request_info": {"num_calls": 0, "timeouts": 0, "tool_errors": "", "tool_outputs": "",
                                     "tool_runtimes": 0.0, "tool_calleds": False, "tool_call_stats": [],
                                     "rollout_state": {}},
                    "logprobs": [float(x) for x in rng.uniform(-2, 0, length)]})
    return out


def build(root, kind="centered", run="run"):
    """Two shards of one run: steps 1-2 in shard 0, step 3 in shard 1; scores with a non-dyadic group and a
    uniform one (filter_zero_std_samples=False)."""
    root.mkdir(parents=True)
    steps = {1: [1.0, 0.0, 0.0, 0.1, 0.7, 0.3], 2: [10.0, 10.0, 10.0, 1.0, 0.0, 1.0], 3: [0.3, 0.3, 0.9]}
    recs = {s: records(s, sc, kind) for s, sc in steps.items()}
    with open(root / f"{run}_rollouts_000000.jsonl", "w") as fh:
        for s in (1, 2):
            fh.writelines(json.dumps(r) + "\n" for r in recs[s])
    (root / f"{run}_rollouts_000001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[3]))
    (root / f"{run}_metadata.jsonl").write_text(json.dumps({"run_name": run, "git_commit": "e6c3044",
                                                         "model_name": "m", "timestamp": "t"}) + "\n")
    return [r for s in (1, 2, 3) for r in recs[s]]


def read_it_with(out):
    return shlex.split(next(ln for ln in out.splitlines() if ln.startswith("read it with")).removeprefix(
        "read it with"))


def test_inspect_command_reproduces_the_logged_advantage(tmp_path, capsys):
    recs = build(tmp_path / "rollouts")
    code, out, err = run_main(["inspect", tmp_path / "rollouts"], capsys)
    assert code == 0, err
    assert "open-instruct-traces" in out and "run_metadata.jsonl" in out and f"5 (sizes: 5×{N})" in out
    words = read_it_with(out)
    assert "--flavor" in words and "open-instruct" in words and f"num_samples_per_prompt_rollout={N}" in words
    o = tmp_path / "o.parquet"
    code, _, err = run_main([*words[1:], "-o", o], capsys)
    assert code == 0, err
    t = pq.read_table(o)
    exp = open_instruct_advantages([r["reward"] for r in recs], N, "centered")
    assert np.allclose(t.column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)
    assert t.column("step").to_pylist() == [1] * 6 + [2] * 6 + [3] * 3
    assert t.column("response_length").to_pylist() == [len(r["response_tokens"]) for r in recs]


def test_standard_normalisation(tmp_path, capsys):
    recs = build(tmp_path / "rollouts", kind="standard")
    o = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "rollouts", "-o", o, "--flavor", "open-instruct", "--set",
                             "advantage_normalization_type=standard", "-q"], capsys)
    assert code == 0, err
    exp = open_instruct_advantages([r["reward"] for r in recs], N, "standard")
    assert exp[6:9] == [0.0, 0.0, 0.0] and abs(exp[0]) > 1  # a uniform group, and a z-scored one
    assert np.allclose(pq.read_table(o).column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-5)


def test_audit_finds_the_normalisation(tmp_path, capsys):
    """`advcli audit TRACES.jsonl` takes the trainer's flavor from the dump and checks `advantage`; a dump made
    with advantage_normalization_type=standard disagrees with the default (centered) and the search names
    the setting that reproduces it."""
    build(tmp_path / "rollouts", kind="standard")
    shard = tmp_path / "rollouts" / "run_rollouts_000000.jsonl"
    code, out, err = run_main(["audit", shard, "--set", "advantage_normalization_type=standard", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert rep["agree"] and rep["flavor"] == "open-instruct" and rep["logged_column"] == "advantage"
    code, out, err = run_main(["audit", shard, "--json"], capsys)
    assert code == 1, err
    matches = json.loads(out)["matches"]
    assert matches and "advantage_normalization_type=standard" in matches[0]


def test_bad_record_names_file_and_line(tmp_path, capsys):
    build(tmp_path / "rollouts")
    p = tmp_path / "rollouts" / "run_rollouts_000001.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["prompt_idx"] = "zero"
    lines[1] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["run", tmp_path / "rollouts", "-o", tmp_path / "o.parquet", "--flavor", "open-instruct"],
                            capsys)
    assert code == 2 and "run_rollouts_000001.jsonl:2: field 'prompt_idx' is 'zero'" in err
    assert "Traceback" not in err and not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("n", [1])
def test_group_of_one_refused(tmp_path, capsys, n):
    build(tmp_path / "rollouts")
    code, _, err = run_main(["run", tmp_path / "rollouts", "-o", tmp_path / "o.parquet", "--flavor", "open-instruct",
                             "--set", f"num_samples_per_prompt_rollout={n}"], capsys)
    assert code == 2 and "filter_zero_std_samples=true" in err and "Traceback" not in err


@pytest.mark.parametrize("bad,said", [
    ([None, -0.5], "field 'logprobs' holds None at position 0"),
    (["-0.5", -0.5], "field 'logprobs' holds '-0.5' at position 0"),
    (1, "field 'logprobs' is 1; expected a list"),
])
def test_a_log_prob_that_is_no_number_is_refused(tmp_path, capsys, bad, said):
    """A null or a string among a record's logprobs, or logprobs that is a number, ran through (exit 0): the record is
    damaged, as in prime-rl's and slime's dumps, and is refused naming the file, the line and the position."""
    build(tmp_path / "rollouts")
    edit_record(tmp_path / "rollouts" / "run_rollouts_000000.jsonl", 1, lambda rec: rec.update(logprobs=bad))
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "rollouts", "-o", out, "--flavor", "open-instruct"], capsys)
    assert code == 2 and f"run_rollouts_000000.jsonl:2: {said}" in err, err
    assert "internal error" not in err and not out.exists()
