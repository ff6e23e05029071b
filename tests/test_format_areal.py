"""areal-jsonl: AReaL's rollout/{version}/{task_id}.jsonl (one file per prompt group), built here from
the field list of spec/dumps.md §8. Expected advantages computed independently: verl GRPO
((s − μ_g)/(σ_g unbiased + 1e-6)) and RLOO (s − mean of the others)."""
import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import run_main


def build(root, n=4):
    rng = np.random.default_rng(0)
    groups = []
    for version in (1, 2):
        for task in (0, 1, 7):
            d = root / "rollout" / str(version)
            d.mkdir(parents=True, exist_ok=True)
            recs = [{"task_id": task, "sample_idx": i, "seqlen": 30 + i, "prompt_len": 20, "head_version": version,
                     "tail_version": version, "reward": float(rng.choice([0.0, 1.0, 0.5])),
                     "prompt": f"<|im_start|>user\nq{task}<|im_end|>", "completion": f"c{i}<|im_end|>"}
                    for i in range(n)]
            (d / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
            groups.append(recs)
    ev = root / "eval-rollout" / "1"
    ev.mkdir(parents=True)
    (ev / "0.jsonl").write_text(json.dumps(groups[0][0]) + "\n")
    return groups


@pytest.mark.parametrize("chunk", ["4096", "5"])
def test_grpo_and_rloo(tmp_path, capsys, chunk):
    groups = build(tmp_path / "trial")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=grpo", "--chunk-rows", chunk, "-q"], capsys)
    assert code == 0, err
    got = pq.read_table(out).column("advantages").to_pylist()
    exp = []
    for g in groups:
        s = [r["reward"] for r in g]
        mu = sum(s) / len(s)
        sd = math.sqrt(sum((x - mu) ** 2 for x in s) / (len(s) - 1))
        exp += [(x - mu) / (sd + 1e-6) for x in s]
    assert np.allclose(got, exp, rtol=1e-5, atol=1e-5)
    code, _, err = run_main(["run", tmp_path / "trial", "-o", out, "--flavor", "verl", "--force",
                             "--set", "algorithm.adv_estimator=rloo", "-q"], capsys)
    assert code == 0, err
    got = pq.read_table(out).column("advantages").to_pylist()
    exp = []
    for g in groups:
        s = [r["reward"] for r in g]
        exp += [x * len(s) / (len(s) - 1) - sum(s) / (len(s) - 1) for x in s]
    assert np.allclose(got, exp, rtol=1e-5, atol=1e-5)


def test_convert_lengths_steps_and_eval_skipped(tmp_path, capsys):
    build(tmp_path / "trial")
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", tmp_path / "trial", "-o", out], capsys)
    assert code == 0, err
    assert "eval-rollout" in err and "skipped" in err
    t = pq.read_table(out)
    assert t.num_rows == 24 and t.column("response_length").to_pylist()[:4] == [10, 11, 12, 13]
    assert t.column("step").to_pylist() == [1] * 12 + [2] * 12
    assert len(set(t.column("prompt_id").to_pylist())) == 6


def test_one_eval_file_directly(tmp_path, capsys):
    build(tmp_path / "trial")
    code, _, err = run_main(["convert", tmp_path / "trial" / "eval-rollout" / "1" / "0.jsonl",
                             "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err


def test_type_change_names_line(tmp_path, capsys):
    build(tmp_path / "trial")
    p = tmp_path / "trial" / "rollout" / "2" / "7.jsonl"
    lines = p.read_text().splitlines()
    r = json.loads(lines[2])
    r["head_version"] = "two"
    lines[2] = json.dumps(r)
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["convert", tmp_path / "trial", "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and "rollout/2/7.jsonl:3: field 'head_version'" in err


def test_inspect(tmp_path, capsys):
    build(tmp_path / "trial")
    code, out, err = run_main(["inspect", tmp_path / "trial"], capsys)
    assert code == 0, err
    assert "areal-jsonl" in out and "task_id" in out and "6 (sizes: 6×4)" in out


def test_task_files_in_numeric_order(tmp_path, capsys):
    """Task ids are numbers: rollout/1/2.jsonl comes before rollout/1/10.jsonl (not text order)."""
    d = tmp_path / "trial" / "rollout" / "1"
    d.mkdir(parents=True)
    for task in (10, 2, 1):
        recs = [{"task_id": task, "sample_idx": i, "seqlen": 30, "prompt_len": 20, "head_version": 1,
                 "tail_version": 1, "reward": float(i), "prompt": f"q{task}", "completion": "c"} for i in range(2)]
        (d / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", tmp_path / "trial", "-o", out], capsys)
    assert code == 0, err
    assert pq.read_table(out).column("task_id").to_pylist() == [1, 1, 2, 2, 10, 10]
