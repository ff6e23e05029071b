"""skyrl-evals: SkyRL's dumped_evals/global_step_{N}_evals/{data_source}.jsonl, built here from the field
list of spec/dumps.md §7.1, with aggregated_results.jsonl beside them. Expected GRPO advantages computed
independently (verl semantics: (s − μ_g)/(σ_g unbiased + 1e-6))."""
import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import run_main


def grpo(scores, groups):
    out = []
    for s, g in zip(scores, groups):
        m = [scores[j] for j, h in enumerate(groups) if h == g]
        mu = sum(m) / len(m)
        sd = math.sqrt(sum((x - mu) ** 2 for x in m) / (len(m) - 1))
        out.append((s - mu) / (sd + 1e-6))
    return out


def rec(prompt, score, source):
    return {"input_prompt": f"<|im_start|>user\n{prompt}<|im_end|>\n", "output_response": "x<|im_end|>",
            "score": score, "stop_reason": "stop", "env_class": "gsm8k",
            "env_extras": {"reward_spec": {"ground_truth": "5"}, "extra_info": {"index": 1}}, "data_source": source}


@pytest.fixture
def dump(tmp_path):
    root = tmp_path / "exports" / "dumped_evals"
    rows = {}
    for step in (10, 20):
        d = root / f"global_step_{step}_evals"
        d.mkdir(parents=True)
        rng = np.random.default_rng(step)
        for src in ("openai_gsm8k", "math"):
            recs = [rec(f"q{i % 3}", float(rng.integers(0, 2)) if i else 0.5, src.replace("_", "/")) for i in range(9)]
            (d / f"{src}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
            rows[(step, src)] = recs
        (d / "aggregated_results.jsonl").write_text(json.dumps({"eval/all/avg_score": 0.5}) + "\n")
    return root, rows


@pytest.mark.parametrize("chunk", ["4096", "7"])
def test_grpo(dump, tmp_path, capsys, chunk):
    root, rows = dump
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", root.parent, "-o", out, "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=grpo", "--chunk-rows", chunk, "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    exp = []
    for step in (10, 20):
        for src in ("math", "openai_gsm8k"):  # files in name order within a step
            recs = rows[(step, src)]
            exp += grpo([r["score"] for r in recs], [r["input_prompt"] for r in recs])
    assert np.allclose([r["advantages"] for r in t], exp, rtol=1e-5, atol=1e-5)
    assert [r["step"] for r in t] == [10] * 18 + [20] * 18
    # the summary says whose rows these are: SkyRL dumps its evaluations, not its training batches
    code, _, err = run_main(["run", root.parent, "-o", tmp_path / "s.parquet", "--flavor", "skyrl"], capsys)
    assert code == 0 and "the rows are SkyRL's evaluation samples" in " ".join(err.split()), err


def test_companions_skipped_and_list_scores(dump, tmp_path, capsys):
    root, _ = dump
    p = root / "global_step_10_evals" / "math.jsonl"
    lines = p.read_text().splitlines()
    r = json.loads(lines[0])
    r["score"] = [0.0, 0.25, 0.5]
    lines[0] = json.dumps(r)
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["convert", root, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err
    assert err.count("aggregated_results.jsonl") == 2 and "summed" in err
    t = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert t[0]["reward"] == 0.75 and json.loads(t[0]["env_extras"])["extra_info"]["index"] == 1


def test_missing_field(dump, tmp_path, capsys):
    root, _ = dump
    p = root / "global_step_20_evals" / "math.jsonl"
    lines = p.read_text().splitlines()
    r = json.loads(lines[4])
    del r["score"]
    lines[4] = json.dumps(r)
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["run", root, "-o", tmp_path / "o.parquet", "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=grpo"], capsys)
    assert code == 2 and "global_step_20_evals/math.jsonl:5: missing field(s) 'score'" in err
    assert not (tmp_path / "o.parquet").exists()


def test_inspect(dump, capsys):
    root, _ = dump
    code, out, err = run_main(["inspect", root, "--from", "skyrl-evals"], capsys)
    assert code == 0, err
    assert "skyrl-evals" in out and "input_prompt" in out and "aggregated_results.jsonl" in out
    # the command it suggests is SkyRL's own (it was verl's GRPO), and it runs as `run` without --flavor does
    code, out, err = run_main(["inspect", root, "--json"], capsys)
    assert code == 0 and json.loads(out)["dump"]["example"].endswith("--output out.parquet --flavor skyrl"), out


@pytest.mark.parametrize("command", ["run", "validate"])
def test_advantage_batch_normalize_is_refused_without_token_data(dump, tmp_path, capsys, command):
    """SkyRL's advantage_batch_normalize takes its mean over the padded rows × longest-row grid and its variance
    over the response tokens: each response counts by its length, which an eval dump does not hold. It ran as if
    every response were one token (an unweighted z-score of the advantages, exit 0, no warning)."""
    root, _ = dump
    out = ["-o", tmp_path / "o.parquet"] if command == "run" else []
    code, _, err = run_main([command, root.parent, *out, "--flavor", "skyrl",
                             "--set", "trainer.algorithm.advantage_batch_normalize=true"], capsys)
    assert code == 2, err
    assert "advantage batch normalisation counts every response token" in " ".join(err.split()), err
    assert not (tmp_path / "o.parquet").exists()
    code, _, err = run_main([command, root.parent, *out, "--flavor", "skyrl"], capsys)
    assert code == 0, err  # the same dump without it runs
