"""roll-dump: ROLL's rollout_dump_data.step_{N}.jsonl, built here from the field lists of spec/dumps.md
§5 (one JSON object of equal-length lists on one line; RLVR and agentic layouts). Expected GRPO
advantages computed independently below as ROLL's grpo does it at γ = 1 without KL: group/group reward
norm (r − μ_g)/(σ_g + 1e-6), σ unbiased, over blocks of n consecutive rows of each domain, in float16: the
dtype of the scores ROLL's own reward workers write (roll/pipeline/rlvr/rewards @ 8eb27cc2), which
reward_norm keeps (roll/utils/functionals.py L564-600), then float32 (compute_advantage L1157)."""
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_main

N = 3


def roll_grpo(scores):
    """ROLL's reward_norm with group mean and std, its torch calls in its order, on float16 scores."""
    import torch

    r = torch.tensor(scores, dtype=torch.float16).reshape(-1, N)
    y = (r - r.mean(dim=-1, keepdim=True)) / (torch.std(r, dim=-1, keepdim=True) + 1e-6)
    return y.reshape(-1).float().tolist()


def roll_grpo_exact(scores):
    """The same formula in float64, by hand (what float32 rewards come close to)."""
    out = []
    for g in range(0, len(scores), N):
        b = scores[g:g + N]
        mu = sum(b) / N
        sd = math.sqrt(sum((x - mu) ** 2 for x in b) / (N - 1))
        out += [(x - mu) / (sd + 1e-6) for x in b]
    return out


def rlvr(step, seed):
    rng = np.random.default_rng(seed)
    ids = [str(i // N + 1) for i in range(4 * N)]  # ids restart per source: "1", "2" in both domains
    domain = ["math"] * (2 * N) + ["code"] * (2 * N)
    tag = ["gsm"] * (2 * N) + ["mbpp"] * (2 * N)
    ids = ids[:2 * N] + ids[:2 * N]
    scores = [float(x) for x in rng.choice([0.0, 0.5, 1.0], 4 * N)]
    return {"id": ids, "prompt": [f"p{t}{i}" for t, i in zip(tag, ids)], "tag": tag, "domain": domain,
            "responses": [f"r{i}" for i in range(4 * N)], "scores": scores,
            "sampling_params": ["{}"] * (4 * N), "global_step": [step] * (4 * N),
            "ground_truth": [{"answer": "1"}] * (4 * N)}


@pytest.mark.parametrize("chunk", ["4096", "4"])
def test_rlvr_grpo(tmp_path, capsys, chunk):
    d = tmp_path / "rollout_dump"
    d.mkdir()
    objs = [rlvr(0, 1), rlvr(1, 2)]
    for s, o in enumerate(objs):
        (d / f"rollout_dump_data.step_{s}.jsonl").write_text(json.dumps(o) + "\n")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "roll", "--set", "adv_estimator=grpo",
                             "--set", f"actor_infer.generating_args.num_return_sequences={N}", "--chunk-rows", chunk,
                             "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(out)
    assert t.schema.field("advantages").type == pa.float32()
    exp = roll_grpo(objs[0]["scores"]) + roll_grpo(objs[1]["scores"])
    assert np.allclose(t.column("advantages").to_pylist(), exp, rtol=1e-6, atol=1e-6)
    exact = roll_grpo_exact(objs[0]["scores"]) + roll_grpo_exact(objs[1]["scores"])
    assert np.max(np.abs(np.array(exp) - exact)) > 1e-4  # float16 shows: the test tells the dtypes apart
    assert t.column("prompt_id").to_pylist()[:N + 1] == ["gsm/1"] * N + ["gsm/2"]
    assert t.column("domain").to_pylist()[-1] == "code"


def test_gae_refused(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    (d / "rollout_dump_data.step_1.jsonl").write_text(json.dumps(rlvr(1, 1)))
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "roll"], capsys)
    assert code == 2 and "estimator gae works on token data" in err and "values" in err


def test_agentic(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    trajs = []
    for g in range(2):
        for k in range(N):
            trajs.append(json.dumps({"trajectory_id": f"sokoban_0_9_{g}_{k}_3_42_1700000000",
                                     "env_info": {"env_id": k, "group_id": g, "tag": "sokoban", "seed": 42,
                                                  "episode_id": 3},
                                     "reward_info": {"episode_reward": float(k == g), "step_rewards": [0.0]}}))
    obj = {"trajectory_data": trajs, "messages": ["[]"] * len(trajs), "tools": ["[]"] * len(trajs),
           "exp_name": ["e"] * len(trajs), "global_step": [4] * len(trajs)}
    (d / "rollout_dump_data.step_4.jsonl").write_text(json.dumps(obj))
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", d, "-o", out], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert [r["prompt_id"] for r in t[:N]] == ["sokoban_0_3_42"] * N and t[N]["prompt_id"] == "sokoban_1_3_42"
    assert [r["reward"] for r in t[:N]] == [1.0, 0.0, 0.0] and t[0]["step"] == 4
    # --flavor roll is ROLL's RLVR chain; the agentic pipeline's reward_normalization is another one
    assert "agentic dump: --flavor roll runs ROLL's RLVR chain" in err and "reward_normalization" in err
    # and the run says it in its summary, where the numbers are read
    code, _, err = run_main(["run", d, "-o", tmp_path / "r.parquet", "--flavor", "roll",
                             "--set", "adv_estimator=grpo"], capsys)
    assert code == 0, err
    err = " ".join(err.split())
    assert "agentic dump: --flavor roll runs ROLL's RLVR chain" in err and "reward_normalization" in err
    # agentic scores are float32 (score_tensor dtype=torch.float, agent_native_env_manager.py L276 @8eb27cc2), not
    # the RLVR reward workers' float16: the group z-score of [1, 0, 0] in float32 (1.1547 where float16 gives 1.1543)
    assert "advcli.reward_dtype=run from the dump's records" in err, err
    adv = pq.read_table(tmp_path / "r.parquet").column("advantages").to_pylist()
    r = np.array([1.0, 0.0, 0.0], np.float32)
    want = (r - r.mean()) / (r.std(ddof=1) + np.float32(1e-6))
    assert adv[:N] == pytest.approx(want.tolist(), abs=1e-7)


def test_unequal_columns_and_truncation(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    o = rlvr(1, 1)
    o["scores"] = o["scores"][:-1]
    p = d / "rollout_dump_data.step_1.jsonl"
    p.write_text(json.dumps(o))
    code, _, err = run_main(["convert", d, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and "step_1.jsonl:1: column 'scores' has 11 entries" in err
    p.write_text(json.dumps(rlvr(1, 1))[:-30])
    code, _, err = run_main(["convert", d, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and "step_1.jsonl:1: truncated" in err
    assert not (tmp_path / "c.parquet").exists()


def test_inspect(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    (d / "rollout_dump_data.step_2.jsonl").write_text(json.dumps(rlvr(2, 3)))
    code, out, err = run_main(["inspect", d], capsys)
    assert code == 0, err
    assert "roll-dump" in out and "tag or domain" in out and f"num_return_sequences={N}" in out


def test_same_dataset_row_twice_in_a_step(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    o = rlvr(1, 4)
    o["id"] = ["1"] * N + ["2"] * N + ["1"] * N + ["2"] * N  # both domains' ids restart at 1...
    o["domain"] = ["math"] * (4 * N)
    o["tag"] = ["gsm"] * (4 * N)  # ...here one source: rows 1 and 2 drawn twice
    (d / "rollout_dump_data.step_1.jsonl").write_text(json.dumps(o))
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "roll", "--set", "adv_estimator=grpo",
                             "--set", f"actor_infer.generating_args.num_return_sequences={N}", "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(out)
    assert t.column("prompt_id").to_pylist()[2 * N] == "gsm/1#2"
    assert np.allclose(t.column("advantages").to_pylist(), roll_grpo(o["scores"]), rtol=1e-6, atol=1e-6)


def test_a_byte_order_mark_is_read_as_the_json_reader_reads_it(tmp_path, capsys):
    """A dump saved through a tool that adds a UTF-8 byte order mark reads as without it (as verl's and NeMo's
    JSONL do: json.loads of bytes skips it): the same rows."""
    d = tmp_path / "rollout_dump"
    d.mkdir()
    obj = rlvr(1, 4)
    (d / "rollout_dump_data.step_1.jsonl").write_bytes(b"\xef\xbb\xbf" + (json.dumps(obj) + "\n").encode())
    code, _, err = run_main(["convert", d, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err
    t = pq.read_table(tmp_path / "c.parquet")
    assert t.column("reward").to_pylist() == pytest.approx(obj["scores"])
