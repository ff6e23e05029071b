"""primerl-traces: prime-rl's rollouts/step_N/train/{all,effective}/traces.jsonl, built here from the
record layout of spec/primerl.md §7 (one episode per line, traces with a node graph, compact logprobs and
advantages over the sampled tokens, rewards {name: {score, weight}}, calls with usage). Expected
advantages computed independently as prime-rl's grpo does: A = r − mean of the cohort's trainable
traces, on every sampled token, 0 elsewhere."""
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import edit_record, run_main


def trace(tid, rng, n_turns, reward_parts, ok=True):
    nodes = [{"message": {"role": "user", "content": "q"}, "sampled": False, "token_ids": [1, 2, 3],
              "mask": [False] * 3}]
    calls = []
    for k in range(n_turns):
        comp = int(rng.integers(1, 4))
        nodes.append({"parent": len(nodes) - 1, "message": {"role": "assistant", "content": "a"}, "sampled": True,
                      "token_ids": [9, 9] + [10 + j for j in range(comp)], "mask": [False, False] + [True] * comp,
                      "logprobs": [float(x) for x in rng.uniform(-2, 0, comp)]})
        calls.append({"node": len(nodes) - 1, "usage": {"prompt_tokens": 3 + 5 * k, "completion_tokens": comp + 1}})
        if k < n_turns - 1:
            nodes.append({"parent": len(nodes) - 1, "message": {"role": "tool", "content": "o"}, "sampled": False,
                          "token_ids": [7, 7], "mask": [False, False]})
    return {"version": 1, "id": tid, "agent": {"name": "agent", "trainable": True}, "nodes": nodes, "calls": calls,
            "rewards": {name: {"score": s, "weight": w} for name, (s, w) in reward_parts.items()}, "ok": ok,
            "info": {}}


def build(root):
    rng = np.random.default_rng(0)
    cohorts = {}
    lines = {1: [], 2: []}
    eff = {1: [], 2: []}
    for c in range(3):
        gid = f"00000000-0000-0000-0000-00000000000{c}"
        eps = []
        for e in range(3):
            tr = trace(f"t{c}{e}", rng, int(rng.integers(1, 3)),
                       {"acc": (float(rng.integers(0, 2)), 1.0), "fmt": (float(rng.choice([0, 0.5])), 0.5)})
            eps.append({"id": f"ep{c}{e}", "env": {"id": "e", "name": "math"}, "group": {"id": gid}, "ok": True,
                        "traces": [tr]})
        rs = [sum(v["score"] * v["weight"] for v in ep["traces"][0]["rewards"].values()) for ep in eps]
        mu = sum(rs) / len(rs)
        cohorts[gid] = [r - mu for r in rs]
        # cohort 1 straddles the two step files
        for k, ep in enumerate(eps):
            lines[1 if c == 0 or (c == 1 and k < 2) else 2].append(ep)
            a = rs[k] - mu
            if a != 0.0:
                shipped = json.loads(json.dumps(ep))
                t = shipped["traces"][0]
                t["info"]["advantage"] = a
                for n in t["nodes"]:
                    if n["sampled"]:
                        n["advantages"] = [a] * sum(n["mask"])
                eff[1 if c == 0 else 2].append(shipped)
    for s in (1, 2):
        for subset, data in (("all", lines[s]), ("effective", eff[s])):
            d = root / "rollouts" / f"step_{s}" / "train" / subset
            d.mkdir(parents=True)
            (d / "traces.jsonl").write_text("".join(json.dumps(ep) + "\n" for ep in data))
    ev = root / "rollouts" / "step_1" / "eval" / "all"
    ev.mkdir(parents=True)
    (ev / "traces.jsonl").write_text(json.dumps(lines[1][0]) + "\n")
    return cohorts, lines


def test_convert_rows(tmp_path, capsys):
    cohorts, lines = build(tmp_path / "out")
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", tmp_path / "out", "-o", out], capsys)
    assert code == 0, err
    assert "eval" in err and "skipped" in err
    t = pq.read_table(out).to_pylist()
    assert len(t) == 9
    assert [r["step"] for r in t] == [1] * 5 + [1] + [2] * 3  # cohort 1's last episode keeps step 1
    r0, ep0 = t[0], lines[1][0]
    tr = ep0["traces"][0]
    assert r0["reward"] == pytest.approx(sum(v["score"] * v["weight"] for v in tr["rewards"].values()))
    assert r0["prompt_length"] == 5 and r0["response_mask"][0] == 1
    assert sum(r0["response_mask"]) == sum(sum(n["mask"]) for n in tr["nodes"])
    assert r0["num_turns"] == sum(n["sampled"] for n in tr["nodes"])
    assert r0["num_output_tokens"] == sum(c["usage"]["completion_tokens"] for c in tr["calls"])
    last = tr["calls"][-1]["usage"]
    assert r0["num_total_tokens"] == last["prompt_tokens"] + last["completion_tokens"]
    lp = [x for x, m in zip(r0["rollout_log_probs"], r0["response_mask"]) if m]
    assert np.allclose(lp, [x for n in tr["nodes"] for x in n.get("logprobs", [])])
    assert r0["trainable"] is True and r0["agent_name"] == "agent" and r0["episode_id"] == "ep00"


@pytest.mark.parametrize("chunk", ["4096", "2"])
def test_recomputed_equals_effective(tmp_path, capsys, chunk):
    cohorts, _ = build(tmp_path / "out")
    out = tmp_path / "o.parquet"
    # prime-rl grpo = Dr.GRPO (r − μ, no std) for cohorts of more than one trace
    code, _, err = run_main(["run", tmp_path / "out", "-o", out, "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo", "--set", "algorithm.norm_adv_by_std_in_grpo=false",
                             "--chunk-rows", chunk, "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    order = {}
    for r in t:
        exp = cohorts[r["prompt_id"]][order.setdefault(r["prompt_id"], []).__len__()]
        order[r["prompt_id"]].append(1)
        assert np.allclose(r["advantages"], [exp * m for m in r["response_mask"]], atol=1e-6)
        if r["logged_advantage"] is not None:
            assert r["logged_advantage"] == pytest.approx(exp, abs=1e-6)
        else:
            assert exp == 0.0
    assert sum(r["logged_advantage"] is not None for r in t) >= 5


def test_errored_trace_not_trainable_and_bad_graph(tmp_path, capsys):
    build(tmp_path / "out")
    p = tmp_path / "out" / "rollouts" / "step_2" / "train" / "all" / "traces.jsonl"
    lines = p.read_text().splitlines()
    ep = json.loads(lines[0])
    ep["traces"][0]["ok"] = False
    lines[0] = json.dumps(ep)
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["convert", tmp_path / "out", "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err
    assert pq.read_table(tmp_path / "c.parquet").column("trainable").to_pylist().count(False) == 1
    ep["traces"][0]["nodes"][1]["mask"] = [True]
    lines[0] = json.dumps(ep)
    p.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(["convert", tmp_path / "out", "-o", tmp_path / "d.parquet"], capsys)
    assert code == 2 and "step_2/train/all/traces.jsonl:1: trace t" in err and "mask values" in err


def test_two_branches(tmp_path, capsys):
    # root (prompt) -> a1 (sampled) ; root -> a2 (sampled, a regenerated answer): two branches
    nodes = [{"message": {"role": "user", "content": "q"}, "sampled": False, "token_ids": [1, 2], "mask": [False] * 2},
             {"parent": 0, "message": {"role": "assistant", "content": "a"}, "sampled": True, "token_ids": [5, 6],
              "mask": [True, True], "logprobs": [-0.1, -0.2]},
             {"parent": 0, "message": {"role": "assistant", "content": "b"}, "sampled": True, "token_ids": [7, 8, 9],
              "mask": [False, True, True], "logprobs": [-0.3, -0.4]}]
    calls = [{"node": 1, "usage": {"prompt_tokens": 2, "completion_tokens": 2}},
             {"node": 2, "usage": {"prompt_tokens": 2, "cached_input_tokens": 1, "completion_tokens": 3}}]
    ep = {"id": "e", "group": {"id": "g"}, "ok": True,
          "traces": [{"id": "t", "agent": {"name": "solver"}, "nodes": nodes, "calls": calls,
                      "rewards": {"acc": {"score": 1.0}, "len": {"score": 0.5, "weight": -0.2}, "none": None}}]}
    d = tmp_path / "rollouts" / "step_3" / "train" / "all"
    d.mkdir(parents=True)
    (d / "traces.jsonl").write_text(json.dumps(ep) + "\n")
    code, _, err = run_main(["convert", tmp_path / "rollouts", "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err
    assert "several branches" in err
    r = pq.read_table(tmp_path / "c.parquet").to_pylist()[0]
    # prime-rl trains two samples, [1 2 | 5 6] and [1 2 | 7 8 9] (mask F F T T and F F F T T): the row holds
    # both, from the first trained token on, so its mask=1 tokens are the four the trainer trains
    assert r["response_mask"] == [1, 1, 0, 0, 0, 1, 1]
    assert r["rollout_log_probs"] == pytest.approx([-0.1, -0.2, 0, 0, 0, -0.3, -0.4])
    assert r["num_output_tokens"] == 5 and r["num_total_tokens"] == 4 + 6 and r["num_turns"] == 2
    assert r["reward"] == pytest.approx(0.9) and r["agent_name"] == "solver" and r["step"] == 3


def test_a_turn_shared_by_two_branches_is_trained_once(tmp_path, capsys):
    """A mid-trajectory fork: prompt (0) -> answer (1, sampled) -> tool output (2) -> two continuations (3, 4,
    sampled). prime-rl trains branch [0 1 2 3] with mask F F | T T | F | T and branch [0 1 2 4] with node 1 as
    context (trained once, in the first branch: iter_trainable_branches), F F | F F | F | T T. A third branch
    that trains nothing (a fork whose leaf is not sampled) is skipped."""
    nodes = [{"message": {"role": "user", "content": "q"}, "sampled": False, "token_ids": [1, 2], "mask": [False] * 2},
             {"parent": 0, "message": {"role": "assistant", "content": "a"}, "sampled": True, "token_ids": [3, 4],
              "mask": [True, True], "logprobs": [-0.1, -0.2]},
             {"parent": 1, "message": {"role": "tool", "content": "o"}, "sampled": False, "token_ids": [5],
              "mask": [False]},
             {"parent": 2, "message": {"role": "assistant", "content": "b"}, "sampled": True, "token_ids": [6],
              "mask": [True], "logprobs": [-0.3]},
             {"parent": 2, "message": {"role": "assistant", "content": "c"}, "sampled": True, "token_ids": [7, 8],
              "mask": [True, True], "logprobs": [-0.4, -0.5]},
             {"parent": 1, "message": {"role": "user", "content": "x"}, "sampled": False, "token_ids": [9],
              "mask": [False]}]
    ep = {"id": "e", "group": {"id": "g"}, "ok": True,
          "traces": [{"id": "t", "agent": {"name": "solver"}, "nodes": nodes, "rewards": {"acc": {"score": 1.0}}}]}
    d = tmp_path / "rollouts" / "step_1" / "train" / "all"
    d.mkdir(parents=True)
    (d / "traces.jsonl").write_text(json.dumps(ep) + "\n")
    code, _, err = run_main(["convert", tmp_path / "rollouts", "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err
    r = pq.read_table(tmp_path / "c.parquet").to_pylist()[0]
    # from the first trained token: [3 4 5 6] then [1 2 3 4 5 7 8]; the leaf 5 (branch [0 1 5]) trains nothing
    assert r["prompt_length"] == 2
    assert r["response_mask"] == [1, 1, 0, 1] + [0, 0, 0, 0, 0, 1, 1]
    assert r["rollout_log_probs"] == pytest.approx([-0.1, -0.2, 0, -0.3] + [0, 0, 0, 0, 0, -0.4, -0.5])
    assert r["num_turns"] == 3


def test_inspect(tmp_path, capsys):
    build(tmp_path / "out")
    code, out, err = run_main(["inspect", tmp_path / "out"], capsys)
    assert code == 0, err
    assert "primerl-traces" in out and "token-level" in out and "logged_advantage" in out


def test_warnings_name_the_dump(tmp_path, capsys):
    """The traces carry the inference engine's log-probs and no trainer recompute: verl's rollout
    correction has nothing to compare, and the warning saying so names the directory the user gave, not
    the temporary Parquet file the dump went through."""
    build(tmp_path / "out")
    src = str(tmp_path / "out")
    args = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]
    code, so, se = run_main(["run", src, "-o", tmp_path / "o.parquet", *args, "--json"], capsys)
    assert code == 0, se
    warnings = json.loads(so)["warnings"]
    assert any(w.startswith(f"{src}: a rollout_log_probs column but no old_log_probs") for w in warnings), warnings
    assert "advcli-import-" not in so + se
    code, so, se = run_main(["validate", src, *args], capsys)
    assert code == 0 and f"warning: {src}: a rollout_log_probs column" in se and "advcli-import-" not in so + se


def read_it_with(out: str) -> list[str]:
    import shlex

    line = next(ln for ln in out.splitlines() if ln.startswith("read it with"))
    return shlex.split(line.removeprefix("read it with"))


def test_reward_shaping_is_the_training_reward(tmp_path, capsys):
    """prime-rl #3376 / verifiers #2436: each trace records its shapers' additive terms in
    ``reward_shaping`` and grpo scores ``reward + Σ reward_shaping``. Built here with the success-gated length
    penalty (a term only on solved traces); expected: A = shaped − mean of the cohort's shaped rewards, which
    is also what the effective/ files log, so `advcli audit` agrees."""
    rng = np.random.default_rng(3)
    root = tmp_path / "out"
    eps, shipped, expected = [], [], {}
    for c in range(2):
        gid = f"cohort-{c}"
        shaped = []
        group = []
        for e in range(4):
            acc = float(rng.integers(0, 2)) if e else float(c == 0)
            tr = trace(f"t{c}{e}", rng, int(rng.integers(1, 3)), {"acc": (acc, 1.0)})
            if acc > 0:  # success-gated: failures carry no term
                tr["reward_shaping"] = {"length_penalty": -0.05 * (e + 1)}
            shaped.append(acc + sum((tr.get("reward_shaping") or {}).values()))
            group.append({"id": f"ep{c}{e}", "group": {"id": gid}, "ok": True, "traces": [tr]})
        mu = sum(shaped) / len(shaped)
        expected[gid] = [s - mu for s in shaped]
        for ep, a in zip(group, expected[gid]):
            eps.append(ep)
            if a != 0.0:
                cp = json.loads(json.dumps(ep))
                cp["traces"][0]["info"]["advantage"] = a
                shipped.append(cp)
    for subset, data in (("all", eps), ("effective", shipped)):
        d = root / "rollouts" / "step_1" / "train" / subset
        d.mkdir(parents=True)
        (d / "traces.jsonl").write_text("".join(json.dumps(ep) + "\n" for ep in data))
    code, out, err = run_main(["inspect", root], capsys)
    assert code == 0, err
    assert "reward_shaping" in out
    words = read_it_with(out)
    assert words[:2] == ["advcli", "run"] and "prime-rl" in words
    out_path = tmp_path / "o.parquet"
    code, _, err = run_main([*words[1:], "-o", out_path], capsys)
    assert code == 0, err
    assert "shaped training reward" in err
    t = pq.read_table(out_path).to_pylist()
    for r in t:
        k = int(r["trace_id"][-1])
        assert np.allclose(r["advantages"], [expected[r["prompt_id"]][k] * m for m in r["response_mask"]], atol=1e-6)
    by_id = {r["trace_id"]: r for r in t}
    assert by_id["t00"]["env_reward"] == 1.0 and by_id["t00"]["reward_shaping/length_penalty"] == pytest.approx(-0.05)
    assert by_id["t00"]["reward"] == pytest.approx(0.95)
    code, out, err = run_main(["audit", root, "--flavor", "prime-rl", "--no-search", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["agree"]


@pytest.mark.parametrize("field,value,said", [
    ("logprobs", "null_element", "field 'logprobs' holds None at position 0"),
    ("logprobs", "str_element", "field 'logprobs' holds '-0.5' at position 0"),
    ("logprobs", 1, "field 'logprobs' is 1; expected a list"),
    ("token_ids", 7, "field 'token_ids' is 7; expected a list"),
    ("mask", True, "field 'mask' is True; expected a list"),
])
def test_a_bad_token_field_is_refused_naming_trace_node_and_field(tmp_path, capsys, field, value, said):
    """A null or a string among a node's log-probs, or a token field that is a number, not a list: it raised
    TypeError (exit 1, 'internal error') or was read as a number; refused, naming the line, trace and node."""
    build(tmp_path / "out")
    def damage(ep):
        node = ep["traces"][0]["nodes"][1]
        if value == "null_element":
            node["logprobs"][0] = None
        elif value == "str_element":
            node["logprobs"][0] = "-0.5"
        else:
            node[field] = value

    ep = edit_record(tmp_path / "out" / "rollouts" / "step_2" / "train" / "all" / "traces.jsonl", 0, damage)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "out", "-o", out, "--flavor", "prime-rl"], capsys)
    tid = ep["traces"][0]["id"]
    assert code == 2 and f"step_2/train/all/traces.jsonl:1: trace {tid}: node 1: {said}" in err, err
    assert "internal error" not in err and not out.exists()


def test_a_nan_log_prob_is_refused_where_it_is_read_as_in_parquet(tmp_path, capsys):
    """A NaN among a node's log-probs is a number: the reader passes it on, and the run's own check decides, as on
    advcli's Parquet (docs/errors.md): an estimator that never reads log-probs (prime-rl's) runs, a KL on the
    rollout log-probs refuses it, naming the dump's line, the column and the position."""
    build(tmp_path / "out")
    def nan_log_prob(ep):
        ep["traces"][0]["nodes"][1]["logprobs"][0] = float("nan")

    edit_record(tmp_path / "out" / "rollouts" / "step_2" / "train" / "all" / "traces.jsonl", 0, nan_log_prob)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "out", "-o", out, "--flavor", "prime-rl", "-q"], capsys)
    assert code == 0, err
    out.unlink()
    code, _, err = run_main(["run", tmp_path / "out", "-o", out, "--flavor", "advcli", "--set", "estimator.name=grpo",
                             "--set", "kl.in_reward=true", "--set", "kl.policy=rollout_log_probs", "--set",
                             "kl.missing=zeros"], capsys)
    assert code == 2 and "step_2/train/all/traces.jsonl:1: column 'rollout_log_probs'" in err, err
    assert "value nan is not finite" in err and not out.exists()
