"""primerl-stream: prime-rl's current dump (prime-rl #3444 + #3465): <run>/monitors/file/traces/stream/
NNNNN.jsonl[.zst] (sealed chunks zstd in seekable frames, the live one plain, its last line possibly torn) and
annotation streams per producer (annotations/<producer>/NNNNN.jsonl[.zst]) whose updates fold onto the episodes.

The directory is built here with that layout: sealed chunks are written as the zstd seekable format is laid
out (independent frames, then the seek table in a skippable frame, as pyzstd's SeekableZstdFile writes them),
the orchestrator's ship-time updates carry info.advantage and the branch's full-length advantages rounded to
4 decimals (verifiers 0.4.0 RECORD_FLOAT_DECIMALS), the trainer's carry trainer_logprobs / entropies /
is_masked with nulls outside the loss mask. Expected advantages are computed here from prime-rl's grpo
(A = r − mean of the cohort's trainable traces, float32 in prime-rl; here in float64)."""
import json
import struct

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import run_main

zstandard = pytest.importorskip("zstandard")

G = 4  # episodes per cohort


def seekable_zst(data: bytes, frame: int = 700) -> bytes:
    """zstd seekable format: independent frames, then the seek table (skippable frame 0x184D2A5E, entries of
    compressed and decompressed sizes, footer: count, descriptor, magic 0x8F92EAB1)."""
    out, entries = b"", []
    for i in range(0, len(data), frame):
        c = zstandard.ZstdCompressor(level=3).compress(data[i:i + frame])
        out += c
        entries.append((len(c), len(data[i:i + frame])))
    table = b"".join(struct.pack("<II", a, b) for a, b in entries) + struct.pack("<IBI", len(entries), 0, 0x8F92EAB1)
    return out + struct.pack("<II", 0x184D2A5E, len(table)) + table


def trace(tid, rng, reward, ok=True, kind="train", arrival=1):
    comp = int(rng.integers(2, 5))
    nodes = [{"message": {"role": "user", "content": "q"}, "sampled": False, "token_ids": [1, 2, 3],
              "mask": [False] * 3},
             {"parent": 0, "message": {"role": "assistant", "content": "a"}, "sampled": True,
              "token_ids": [9] + [10 + j for j in range(comp)], "mask": [False] + [True] * comp,
              "logprobs": [round(float(x), 4) for x in rng.uniform(-2, 0, comp)]}]
    return {"version": 1, "id": tid, "agent": {"name": "agent", "trainable": True}, "nodes": nodes,
            "calls": [{"node": 1, "usage": {"prompt_tokens": 3, "completion_tokens": comp + 1}}],
            "rewards": {"acc": {"score": reward, "weight": 1.0}}, "ok": ok,
            "info": {"kind": kind, "arrival": {"step": arrival, "time": 1.0}, "dispatch": {"step": arrival - 1}}}


def build(root, torn=True):
    """A run directory: 5 train cohorts of G (cohort 4's rewards all equal: no advantage shipped) and one eval
    episode, over chunks 0 and 1 (sealed) and 2 (live, ending in a torn line). Returns the expected rows
    (trace id -> (cohort, step, reward, advantage, ship step or None))."""
    rng = np.random.default_rng(3)
    traces_dir = root / "monitors" / "file" / "traces"
    episodes, orch, trainer, expected = [], [], [], {}
    for c in range(5):
        gid = f"cohort-{c}"
        rewards = [0.5] * G if c == 4 else [float(x) for x in rng.choice([0.0, 0.25, 1.0], G)]
        if c == 2:
            rewards[0] = 1 / 3  # an advantage whose 4-decimal rounding is visible
        arrival = 1 + c // 2
        oks = [True] * G
        if c == 1:
            oks[2] = False  # errored: not trainable, out of the cohort's mean
        trainable = [r for r, ok in zip(rewards, oks) if ok]
        mu = sum(trainable) / len(trainable)
        for e in range(G):
            tid = f"t{c}{e}"
            tr = trace(tid, rng, rewards[e], ok=oks[e], arrival=arrival)
            episodes.append({"id": f"ep{c}{e}", "env": {"id": "e", "name": "math"}, "group": {"id": gid},
                             "run": {"type": "train", "id": "r", "work": {"type": "train", "step": arrival - 1}},
                             "ok": oks[e], "traces": [tr]})
            a = rewards[e] - mu if oks[e] else None
            ship = arrival + 1 if c != 4 and a is not None else None
            expected[tid] = (gid, arrival, rewards[e], a if a is not None else 0.0, ship, tr)
            if a is None or c == 4:
                continue
            toks = tr["nodes"][0]["token_ids"] + tr["nodes"][1]["token_ids"]
            mask = tr["nodes"][0]["mask"] + tr["nodes"][1]["mask"]
            orch.append({"version": 1, "trace_id": tid,
                         "info": {"effective": True, "ship": {"step": ship, "time": 2.0}, "advantage": round(a, 4)},
                         "branches": [{"index": 0, "advantages": [round(a, 4) if m else 0.0 for m in mask]}]})
            lp = [None] + [round(-0.1 * (i + 1), 4) if m else None for i, m in enumerate(mask[1:])]
            trainer.append({"version": 1, "trace_id": tid, "info": {},
                            "branches": [{"index": 0, "trainer_logprobs": lp,
                                          "entropies": [None if v is None else 0.5 for v in lp],
                                          "is_masked": [None] + [False if m else None for m in mask[1:]]}]})
            assert len(lp) == len(toks)
    ev = trace("tev", rng, 1.0, kind="eval")
    episodes.insert(8, {"id": "epev", "env": {"id": "e"}, "group": {"id": "eval-0"}, "ok": True, "traces": [ev]})
    lines = [json.dumps(ep) + "\n" for ep in episodes]
    stream = traces_dir / "stream"
    stream.mkdir(parents=True)
    (stream / "00000.jsonl.zst").write_bytes(seekable_zst("".join(lines[:8]).encode()))
    (stream / "00001.jsonl.zst").write_bytes(seekable_zst("".join(lines[8:15]).encode()))
    live = "".join(lines[15:]) + ('{"id": "half", "group": {"id": "cohort-9"}, "tra' if torn else "")
    (stream / "00002.jsonl").write_text(live)
    (traces_dir / "stream.index.jsonl").write_text("".join(json.dumps({"line": i + 1, "chunk": 0}) + "\n"
                                                         for i in range(len(episodes))))
    ann = traces_dir / "annotations"
    (ann / "orchestrator").mkdir(parents=True)
    o = [json.dumps(u) + "\n" for u in orch]
    (ann / "orchestrator" / "00000.jsonl.zst").write_bytes(seekable_zst("".join(o[:6]).encode()))
    (ann / "orchestrator" / "00001.jsonl").write_text("".join(o[6:]))
    (ann / "orchestrator.index.jsonl").write_text("{}\n")
    (ann / "trainer").mkdir()
    (ann / "trainer" / "00000.jsonl").write_text("".join(json.dumps(u) + "\n" for u in trainer))
    (root / "monitors" / "file" / "metrics.jsonl").write_text('{"step": 1}\n')
    return expected


def test_stream_chunks_sealed_and_live(tmp_path):
    from advcli.formats.primerl_stream import stream_chunks, stream_dir

    build(tmp_path / "run")
    d = stream_dir(str(tmp_path / "run"))
    (tmp_path / "run/monitors/file/traces/stream/00001.jsonl.zst.tmp").write_bytes(b"x")  # a seal in progress
    got = [(c.number, c.path.rsplit("/", 1)[1], c.sealed) for c in stream_chunks(d)]
    assert got == [(0, "00000.jsonl.zst", True), (1, "00001.jsonl.zst", True), (2, "00002.jsonl", False)]


def _rows(out):
    return {r["trace_id"]: r for r in pq.read_table(out).to_pylist()}


def test_convert_run_directory(tmp_path, capsys):
    exp = build(tmp_path / "run")
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", tmp_path / "run", "-o", out], capsys)
    assert code == 0, err
    assert "last line is torn" in err and "eval episode" in err
    assert "per-token advantages" not in err  # the streams shipped are the scalar on every trained token
    rows = _rows(out)
    assert set(rows) == set(exp)  # the eval episode and the torn line are not rows
    for tid, (gid, step, r, a, ship, tr) in exp.items():
        row = rows[tid]
        assert row["prompt_id"] == gid and row["step"] == step and row["reward"] == pytest.approx(r)
        assert row["ship_step"] == ship
        comp = sum(tr["nodes"][1]["mask"])
        assert row["response_mask"] == [1] * comp  # the response starts at the first sampled token
        assert row["rollout_log_probs"] == pytest.approx(tr["nodes"][1]["logprobs"], abs=1e-6)
        if ship is not None and tr["ok"]:
            assert row["logged_advantage"] == pytest.approx(round(a, 4), abs=1e-6)
            assert row["trainer_log_probs"] == pytest.approx([round(-0.1 * (3 + k + 1), 4) for k in range(comp)])
            assert row["is_masked"] == [0] * comp and row["entropies"] == pytest.approx([0.5] * comp)
        else:
            assert row["logged_advantage"] is None and row["is_masked"] == [-1] * comp


def test_token_advantages_that_differ_from_the_scalar_are_said(tmp_path, capsys):
    """The trainer trains on the orchestrator's per-token streams; the audit checks the scalar. A stream that is
    not the scalar on its trained tokens (a tampered or non-scalar credit) is named, not passed over."""
    build(tmp_path / "run")
    live = tmp_path / "run/monitors/file/traces/annotations/orchestrator/00001.jsonl"
    recs = [json.loads(x) for x in live.read_text().splitlines()]
    recs[0]["branches"][0]["advantages"] = [3 * v for v in recs[0]["branches"][0]["advantages"]]
    assert recs[0]["info"]["advantage"] != 0
    live.write_text("".join(json.dumps(r) + "\n" for r in recs))
    code, _, err = run_main(["convert", tmp_path / "run", "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err
    assert (f"1 trace(s) have per-token advantages (the orchestrator's annotation, what the trainer received) that "
            f"differ from their scalar info.advantage (first: trace {recs[0]['trace_id']})") in " ".join(err.split())


@pytest.mark.parametrize("damage", ["cut", "junk"])
def test_a_damaged_sealed_chunk_is_said_as_such(damage, tmp_path, capsys):
    """A sealed chunk cut short (its last frame incomplete: zstandard's stream reader would stop at the last
    whole frame without a word) or not zstd at all is refused as damaged, naming the chunk, exit 2."""
    build(tmp_path / "run")
    chunk = tmp_path / "run/monitors/file/traces/stream/00001.jsonl.zst"
    data = chunk.read_bytes()
    chunk.write_bytes(data[: len(data) // 2] if damage == "cut" else b"not zstd at all\n" * 4)
    for cmd in (["run", tmp_path / "run", "-o", tmp_path / "o.parquet", "--flavor", "prime-rl"],
                ["convert", tmp_path / "run", "-o", tmp_path / "c.parquet"]):
        code, _, err = run_main(cmd, capsys)
        assert code == 2, err
        assert "00001.jsonl.zst: " + ("cut short inside a zstd frame" if damage == "cut" else "cannot decompress") \
            in " ".join(err.split())
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "c.parquet").exists()


def test_one_chunk_and_run_recompute(tmp_path, capsys):
    exp = build(tmp_path / "run")
    chunk = tmp_path / "run/monitors/file/traces/stream/00000.jsonl.zst"
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["convert", chunk, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0 and "reading 1 of the stream's 3 chunks: cohorts can straddle chunks" in err
    code, _, err = run_main(["run", chunk, "-o", out, "--flavor", "prime-rl"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert {r["trace_id"] for r in t} == {f"t{c}{e}" for c in range(2) for e in range(G)}
    for r in t:
        a = exp[r["trace_id"]][3]
        assert r["advantages"] == pytest.approx([a] * len(r["response_mask"]), abs=1e-6)
    out2 = tmp_path / "all.parquet"
    code, _, err = run_main(["run", tmp_path / "run", "-o", out2, "--flavor", "prime-rl"], capsys)
    assert code == 0, err
    for r in pq.read_table(out2).to_pylist():
        assert r["advantages"] == pytest.approx([exp[r["trace_id"]][3]] * len(r["response_mask"]), abs=1e-6)


def test_audit_tolerance_follows_rounding(tmp_path, capsys):
    build(tmp_path / "run")
    code, out, err = run_main(["audit", tmp_path / "run", "--flavor", "prime-rl", "--json", "--no-search"], capsys)
    assert code == 0, err + out
    rep = json.loads(out)
    assert rep["agree"] and rep["rows_without_logged_value"] == G + 1  # cohort 4 (no advantage) + the errored one
    assert rep["tolerance"]["atol"] == pytest.approx(0.5e-4 + 1e-5)
    assert "4 decimals" in rep["tolerance"]["note"]
    # 1/3 − mean rounds to 4 decimals: off by more than the default atol, within the rounding
    assert 1e-5 < rep["max_abs_diff"] <= 0.5e-4 + 1e-6
    code, out, err = run_main(["audit", tmp_path / "run", "--flavor", "prime-rl", "--no-search"], capsys)
    assert code == 0 and "every logged advantage has at most 4 decimals" in " ".join((out + err).split())
    # a tolerance the user sets is theirs
    code, out, _ = run_main(["audit", tmp_path / "run", "--flavor", "prime-rl", "--json", "--no-search",
                             "--atol", "1e-7", "--rtol", "0"], capsys)
    assert code == 1 and json.loads(out)["tolerance"]["atol"] == 1e-7


def test_inspect_and_stats(tmp_path, capsys):
    exp = build(tmp_path / "run")
    code, out, err = run_main(["inspect", tmp_path / "run"], capsys)
    assert code == 0, err
    assert "primerl-stream" in out and str(len(exp)) in out
    o = tmp_path / "o.parquet"
    assert run_main(["run", tmp_path / "run", "-o", o, "--flavor", "prime-rl"], capsys)[0] == 0
    code, out, err = run_main(["stats", tmp_path / "run", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    rewards = [v[2] for v in exp.values()]
    by_group: dict = {}
    for gid, _, r, *_ in exp.values():
        by_group.setdefault(gid, []).append(r)
    assert rep["rows"] == len(exp) and rep["metrics"]["groups/count"] == len(by_group) == 5
    assert rep["metrics"]["critic/score/mean"] == pytest.approx(np.mean(rewards), abs=1e-6)
    uniform = sum(len(set(v)) == 1 for v in by_group.values())
    assert rep["metrics"]["groups/all_equal_share"] == pytest.approx(uniform / 5)
    assert [s["step"] for s in rep["per_step"]] == [1, 2, 3]  # arrival steps, read from the records


def test_live_chunk_without_torn_line_and_mid_seal_twin(tmp_path, capsys):
    build(tmp_path / "run", torn=False)
    s = tmp_path / "run/monitors/file/traces/stream"
    # chunk 1 caught mid-seal: its plain file and its complete twin both present; read once
    plain = zstandard.ZstdDecompressor().stream_reader((s / "00001.jsonl.zst").read_bytes(),
                                                       read_across_frames=True).read()
    (s / "00001.jsonl").write_bytes(plain)
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", tmp_path / "run", "-o", out], capsys)
    assert code == 0, err
    assert "last line is torn" not in err
    assert len(_rows(out)) == pq.read_metadata(out).num_rows == 5 * G


@pytest.mark.parametrize("live", [b"", b'{"id": "e", "group": {"id": "c"}, "tr'])
def test_live_chunk_just_rolled(tmp_path, capsys, live):
    """The writer has just rolled: the new live chunk is empty, or holds only the start of its first record."""
    exp = build(tmp_path / "run", torn=False)
    s = tmp_path / "run/monitors/file/traces/stream"
    (s / "00003.jsonl").write_bytes(live)
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", tmp_path / "run", "-o", out], capsys)
    assert code == 0, err
    assert len(_rows(out)) == len(exp)
    assert ("last line is torn" in err) == bool(live)


@pytest.mark.parametrize("bad,said", [(None, "field 'logprobs' holds None at position 0"),
                                      (1, "field 'logprobs' is 1; expected a list")])
def test_a_bad_logprobs_field_is_refused_naming_the_chunk_line_trace_and_node(tmp_path, capsys, bad, said):
    """A null log-prob, or logprobs a number: it raised TypeError (exit 1); refused, naming chunk, line, trace."""
    build(tmp_path, torn=False)
    live = tmp_path / "monitors" / "file" / "traces" / "stream" / "00002.jsonl"
    lines = live.read_text().splitlines()
    ep = json.loads(lines[0])
    node = ep["traces"][0]["nodes"][1]
    if bad is None:
        node["logprobs"][0] = None
    else:
        node["logprobs"] = bad
    lines[0] = json.dumps(ep)
    live.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path, "-o", out, "--flavor", "prime-rl"], capsys)
    assert code == 2 and f"00002.jsonl:1: trace {ep['traces'][0]['id']}: node 1: {said}" in err, err
    assert not out.exists()
