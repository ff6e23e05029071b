"""``--follow`` on a prime-rl run directory while a writer process appends its trace stream and annotation
streams as prime-rl does (PrimeIntellect-ai/prime-rl @ 551bfc39 monitors/file/traces/chunks.py: the live chunk
plain, appended to; a full chunk sealed by writing its zstd twin beside it, then removing the plain file; @
96e0cf47 orchestrator/annotations.py: a shipped cohort's updates {effective, ship: {step}, advantage}; the
trainer's log-prob updates after it).

The run: steps 1-4, two cohorts of four episodes a step; each step's second cohort straddles steps and chunks
(its last episode arrives after the next step's first cohort, stamped with the next step's arrival step: the
cohort keeps its first episode's step); chunk 0 is sealed while the follower runs; one episode's line is written
in two halves with a pause longer than --settle; the follower is stopped after step 1 and restarted. Each step's
rows are known here, and the RAE advantages (A = r − b, b ← d·b + (1 − d)·r, steps ascending, cohorts in order
of first appearance) are computed here by hand; the followed steps must equal them and the batch run bit for bit.
"""
from __future__ import annotations

import base64
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_main

zstandard = pytest.importorskip("zstandard")
from test_format_primerl_stream import seekable_zst, trace  # noqa: E402

G, DECAY = 4, 0.9
STREAM = "monitors/file/traces/stream"
ORCH = "monitors/file/traces/annotations/orchestrator"
TRAINER = "monitors/file/traces/annotations/trainer"
WRITER = r"""
import base64, json, os, sys, time
root, plan = sys.argv[1], json.load(open(sys.argv[2]))
for ev in plan:
    kind = ev[0]
    if kind == "sleep":
        time.sleep(ev[1]); continue
    path = os.path.join(root, ev[1])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = base64.b64decode(ev[2]) if len(ev) > 2 else b""
    if kind == "append":
        with open(path, "ab") as fh:
            fh.write(data)
    elif kind == "torn":  # a buffered writer's line in two halves, a pause between
        cut = len(data) // 2
        with open(path, "ab") as fh:
            fh.write(data[:cut]); fh.flush(); time.sleep(ev[3]); fh.write(data[cut:])
    elif kind == "seal":  # prime-rl's seal: the zstd twin complete beside the plain file, then the plain removed
        with open(path + ".zst.tmp", "wb") as fh:
            fh.write(data)
        os.replace(path + ".zst.tmp", path + ".zst")
        time.sleep(ev[3])
        os.remove(path)
"""


class Run:
    """The run's records in the order prime-rl writes them, as writer events; the expected rows."""

    def __init__(self, planted: str | None = None):
        self.rng = np.random.default_rng(11)
        self.events: list = []
        self.chunk = 0
        self.chunk_text = b""
        self.rows: dict[str, tuple[int, str, float]] = {}  # trace id -> (cohort step, cohort, reward)
        self.order: list[str] = []  # trace ids in stream order
        self.cohorts: dict[str, list[str]] = {}
        self.planted = planted

    def episode(self, cohort: str, step: int, e: int, arrival: int, torn: bool = False) -> None:
        tid = f"{cohort}-{e}"
        r = float(self.rng.choice([0.0, 0.25, 1.0]))
        tr = trace(tid, self.rng, r, arrival=arrival)
        ep = {"id": f"ep-{tid}", "env": {"id": "e", "name": "math"}, "group": {"id": cohort},
              "run": {"type": "train", "id": "r", "work": {"type": "train", "step": arrival - 1}}, "ok": True,
              "traces": [tr]}
        line = (json.dumps(ep) + "\n").encode()
        self.chunk_text += line
        rel = f"{STREAM}/{self.chunk:05d}.jsonl"
        self.events.append(["torn", rel, base64.b64encode(line).decode(), 0.8] if torn
                           else ["append", rel, base64.b64encode(line).decode()])
        self.rows[tid] = (step, cohort, r)
        self.order.append(tid)
        self.cohorts.setdefault(cohort, []).append(tid)

    def ship(self, cohort: str, at: int) -> None:
        tids = self.cohorts[cohort]
        mu = sum(self.rows[t][2] for t in tids) / len(tids)
        orch, trainer = b"", b""
        for t in tids:
            a = round(self.rows[t][2] - mu, 4) + (0.5 if t == self.planted else 0.0)
            orch += (json.dumps({"version": 1, "trace_id": t, "info": {"effective": True, "ship": {"step": at},
                                                                      "advantage": a}}) + "\n").encode()
            trainer += (json.dumps({"version": 1, "trace_id": t, "info": {}}) + "\n").encode()
        self.events.append(["append", f"{ORCH}/00000.jsonl", base64.b64encode(orch).decode()])
        self.events.append(["append", f"{TRAINER}/00000.jsonl", base64.b64encode(trainer).decode()])

    def seal(self) -> None:
        self.events.append(["seal", f"{STREAM}/{self.chunk:05d}.jsonl",
                            base64.b64encode(seekable_zst(self.chunk_text)).decode(), 0.3])
        self.chunk, self.chunk_text = self.chunk + 1, b""

    def pause(self, s: float) -> None:
        self.events.append(["sleep", s])


def build(planted: str | None = None, unshipped: str | None = None) -> tuple[Run, int]:
    """The whole run's events; returns the index of the event after which the first follower is stopped.
    ``unshipped``: a cohort the orchestrator never ships (no logged advantages)."""
    w = Run(planted)
    stop = 0
    for s in (1, 2, 3, 4):
        for e in range(G):
            w.episode(f"A{s}", s, e, s)
        if s > 1:
            w.episode(f"B{s - 1}", s - 1, G - 1, s)  # the straddling cohort's last episode, a step later
            w.ship(f"A{s - 1}", s)
            if f"B{s - 1}" != unshipped:
                w.ship(f"B{s - 1}", s)
        if s == 3:
            stop = len(w.events)  # step 1 is complete (every stream holds step 2's records); step 2 is not
        for e in range(G - 1):
            w.episode(f"B{s}", s, e, s, torn=s == 3 and e == 1)
        if s == 3:
            w.seal()
        w.pause(0.1)
    w.episode("B4", 4, G - 1, 4)
    w.ship("A4", 5)
    w.ship("B4", 5)
    return w, stop


def start_writer(tmp_path, root, events) -> subprocess.Popen:
    plan = tmp_path / f"plan{len(events)}.json"
    plan.write_text(json.dumps(events))
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    return subprocess.Popen([sys.executable, str(script), str(root), str(plan)])


def write_now(tmp_path, root, events) -> None:
    """The part of the run written before the follower starts."""
    assert start_writer(tmp_path, root, [e[:3] + ([0] if e[0] in ("torn", "seal") else []) for e in events
                                         if e[0] != "sleep"]).wait(timeout=30) == 0


def where(w: Run, tid: str, root) -> str:
    """The chunk and line of trace ``tid``'s episode, as the reader names a row (chunk 0 sealed)."""
    chunk0 = next(i for i, e in enumerate(w.events) if e[0] == "seal")
    before = [e for e in w.events[:chunk0] if e[0] in ("append", "torn") and e[1].startswith(STREAM)]
    i = w.order.index(tid)
    if i < len(before):
        return f"{root / STREAM}/00000.jsonl.zst, record {i + 1}"
    return f"{root / STREAM}/00001.jsonl, record {i - len(before) + 1}"


def rae_expected(w: Run) -> dict[str, float]:
    """RAE by hand: steps ascending, cohorts in order of first appearance, episodes in stream order."""
    b, out = 0.0, {}
    for s in (1, 2, 3, 4):
        cohorts = []
        for t in w.order:
            if w.rows[t][0] == s and w.rows[t][1] not in cohorts:
                cohorts.append(w.rows[t][1])
        for c in cohorts:
            for t in w.cohorts[c]:
                r = w.rows[t][2]
                out[t] = r - b
                b = DECAY * b + (1 - DECAY) * r
    return out


def lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith("step ") and "episode(s) from" not in x]


RAE = ["--flavor", "prime-rl", "--set", "orchestrator.algo.type=rae", "--set", f"orchestrator.algo.decay={DECAY}"]


def test_run_follows_a_prime_rl_stream_across_a_seal_a_torn_line_and_a_restart(tmp_path, capsys):
    w, stop = build()
    root = tmp_path / "run"
    write_now(tmp_path, root, w.events[:stop])
    out_dir = tmp_path / "adv"
    # the first follower: a long --settle, so only what the later-step rule completes is taken (step 1), then
    # SIGTERM (--until-idle would take the steps on disk once the stream is quiet for --settle)
    state, follower = out_dir / "follow-state.json", os.getpid()

    def killer():
        deadline = time.time() + 20
        while time.time() < deadline and not state.exists():
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(follower, signal.SIGTERM)

    p = multiprocessing.get_context("fork").Process(target=killer)
    p.start()
    try:
        code, out, err = run_main(["run", str(root), "--follow", "-o", str(out_dir), "--settle", "30", *RAE], capsys)
    finally:
        p.join(30)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 1"]
    st = json.loads((out_dir / "follow-state.json").read_text())
    assert (st["last_step"], st["steps"]) == (1, 1)
    ema_after_1 = st["ema"]
    # the writer goes on (the torn line, the seal of chunk 0, step 3's straddling episode, step 4); the
    # follower restarted once it is writing (a stream quiet for --settle would give the steps it holds)
    stream0 = root / STREAM / "00000.jsonl"
    size = stream0.stat().st_size
    proc = start_writer(tmp_path, root, w.events[stop:])
    deadline = time.time() + 20
    while time.time() < deadline and stream0.exists() and stream0.stat().st_size == size:
        time.sleep(0.01)
    try:
        code, out, err = run_main(["run", str(root), "--follow", "-o", str(out_dir), "--settle", "1",
                                   "--until-idle", "3", *RAE], capsys)
    finally:
        proc.wait(timeout=30)
    assert code == 0, err
    assert "resuming after step 1" in err
    assert [x.split(":")[0] for x in lines(out)] == ["step 2", "step 3", "step 4"]
    assert "arrived after the step was taken" not in err  # no step was taken before its records were all in
    st = json.loads((out_dir / "follow-state.json").read_text())
    assert (st["last_step"], st["steps"]) == (4, 4) and st["ema"] != ema_after_1
    # each step's rows are its cohorts' episodes, the straddling one included, and RAE's by hand
    want = rae_expected(w)
    got = {}
    for s in (1, 2, 3, 4):
        t = pq.read_table(out_dir / f"step_{s}.parquet")
        ids = t.column("trace_id").to_pylist()
        assert sorted(ids) == sorted(x for x in w.rows if w.rows[x][0] == s)
        adv = [a[0] for a in t.column("advantages").to_pylist()]
        got.update(zip(ids, adv))
    assert got == pytest.approx(want, abs=1e-6)
    # the batch run over the finished run: the same numbers, bit for bit
    whole = tmp_path / "whole.parquet"
    code, _, err = run_main(["run", str(root), "-o", str(whole), "-q", *RAE], capsys)
    assert code == 0, err
    t = pq.read_table(whole)
    batch = dict(zip(t.column("trace_id").to_pylist(), t.column("advantages").to_pylist()))
    followed = pa.concat_tables([pq.read_table(out_dir / f"step_{s}.parquet") for s in (1, 2, 3, 4)])
    for tid, adv in zip(followed.column("trace_id").to_pylist(), followed.column("advantages").to_pylist()):
        assert adv == batch[tid], tid


def test_audit_follows_a_prime_rl_stream_and_names_the_planted_step(tmp_path, capsys):
    w, _ = build(planted="A3-2", unshipped="B2")
    root = tmp_path / "run"
    root.mkdir()
    state = tmp_path / "state.json"
    proc = start_writer(tmp_path, root, w.events)
    try:
        code, out, err = run_main(["audit", str(root), "--follow", "--settle", "1", "--until-idle", "3",
                                   "--state", str(state), "--no-search"], capsys)
    finally:
        proc.wait(timeout=30)
    assert code == 1, err
    got = lines(out)
    assert [x.split(":")[0] for x in got] == ["step 1", "step 2", "step 3", "step 4"]
    assert [("DISAGREE" in x) for x in got] == [False, False, True, False]
    # the cohort never shipped: its rows are named as not checked, on its step's line only
    assert [("without a logged value" in x) for x in got] == [False, True, False, False]
    assert f"{G} row(s) without a logged value (not checked)" in got[1]
    assert got[2].startswith(f"step 3: {2 * G} rows") and "1 row(s) disagree" in got[2]
    assert "max |diff| 0.5" in got[2]
    assert where(w, "A3-2", root) in got[2]  # the row named by the trainer's chunk and line
    st = json.loads(state.read_text())
    assert (st["last_step"], st["steps"], st["disagreed"], st["disagreed_steps"]) == (4, 4, 1, [3])
    code, whole, _ = run_main(["audit", str(root), "--json", "--no-search"], capsys)
    whole = json.loads(whole)
    assert code == 1 and whole["rows_disagreeing"] == 1 and whole["rows_without_logged_value"] == G
    assert whole["worst"][0]["where"] in got[2]


def test_a_quiet_stream_gives_its_last_step_and_a_late_episode_is_reported(tmp_path, capsys):
    """The last step has no later step: it is taken once every stream has been quiet for --settle. An episode
    of one of its cohorts written after that is reported, not read. (The stream directory itself followed: its
    annotations are found beside it.)"""
    w, _ = build()
    root = tmp_path / "run"
    late = w.events[-5]  # B4's last episode (then A4's and B4's ship updates)
    assert late[1].startswith(STREAM)
    write_now(tmp_path, root, w.events[:-5] + w.events[-4:])

    state = tmp_path / "state.json"

    def later():  # once step 4 was taken
        deadline = time.time() + 60
        while time.time() < deadline and not (state.exists() and json.loads(state.read_text())["last_step"] == 4):
            time.sleep(0.05)
        with open(root / late[1], "ab") as fh:
            fh.write(base64.b64decode(late[2]))

    import threading

    th = threading.Thread(target=later)
    th.start()
    try:
        code, out, err = run_main(["stats", str(root / STREAM), "--follow", "--settle", "0.3", "--until-idle", "2",
                                   "--state", str(state)], capsys)
    finally:
        th.join()
    assert code == 0, err
    got = lines(out)
    assert [x.split(":")[0] for x in got] == ["step 1", "step 2", "step 3", "step 4"]
    want = [f"step {s}: {2 * G} rows" for s in (1, 2, 3)] + [f"step 4: {2 * G - 1} rows"]
    assert [x.split(",")[0] for x in got] == want
    assert "step 4: 1 episode(s) of its cohorts arrived after the step was taken; not read" in err
