"""``--follow``: a trainer's dump directory followed while a writer (another process) appends its steps in the
trainer's own layout. Each test checks the per-step lines, the follower's state file, and that the steps
followed one by one give the numbers of one run over the finished dump, bit for bit (the state carried
from step to step: the adaptive KL coefficient, prime-rl's EMA baselines)."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import run_main
from test_format_nemo import SAMPLES, nemo_grpo
from test_format_nemo import write_step as nemo_write
from test_format_openinstruct import build as open_instruct_build
from test_format_slime import build as slime_build
from test_format_trl import write_step as trl_write
from test_format_verl import v1_records
from test_format_verl import write as verl_write

from advcli.sample import make_table

SETTLE = ["--settle", "0.2"]


def follow(argv, capsys, writer=None):
    """``advcli ARGV`` in this process while ``writer`` (a function) runs in a forked writer process, as a
    trainer writes its dumps from a process of its own: (code, stdout, stderr). The writer's failure fails
    the test."""
    p = multiprocessing.get_context("fork").Process(target=writer) if writer else None
    if p:
        p.start()
    try:
        return run_main(argv, capsys)
    finally:
        if p:
            p.join(60)
            assert p.exitcode == 0, f"the writer process ended with {p.exitcode}"


def lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith("step ")]


def torn_write(path, data: bytes, pause: float) -> None:
    """``data`` written as a trainer's buffered writer may leave it: all but the second half of the last
    line, a pause longer than the settle time, then the rest."""
    cut = data.rstrip(b"\n").rfind(b"\n") + 1 + (len(data) - data.rstrip(b"\n").rfind(b"\n")) // 2
    with open(path, "wb") as fh:
        fh.write(data[:cut])
        fh.flush()
        time.sleep(pause)
        fh.write(data[cut:])


# ------------------------------------------------------------------------------------------ NeMo RL
def nemo_bytes(tmp_path, step, planted=False) -> bytes:
    """train_data_step{step}.jsonl's bytes; ``planted``: the third row's logged advantage off by 0.5."""
    adv = nemo_grpo([s[3] for s in SAMPLES], [tuple(s[0]) for s in SAMPLES])
    if planted:
        adv[2] += 0.5
    p = tmp_path / f"scratch_{step}.jsonl"
    nemo_write(p, SAMPLES, step, advantages=adv)
    return p.read_bytes()


def test_audit_follows_nemo_with_a_torn_line_and_a_planted_step(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_data_step1.jsonl").write_bytes(nemo_bytes(tmp_path, 1))
    step2, step3 = nemo_bytes(tmp_path, 2), nemo_bytes(tmp_path, 3, planted=True)

    def writer():
        time.sleep(0.3)
        (run / "train_data_step2.jsonl").write_bytes(step2)
        time.sleep(0.3)
        torn_write(run / "train_data_step3.jsonl", step3, pause=0.8)  # quiet past --settle, last line torn

    state = tmp_path / "audit-state.json"
    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--until-idle", "1.5", "--state", str(state),
                             "--no-search"], capsys, writer)
    assert code == 1, err
    got = lines(out)
    assert [x.split(":")[0] for x in got] == ["step 1", "step 2", "step 3"]
    assert "agree" in got[0] and "agree" in got[1] and "DISAGREE" in got[2]
    # the planted row, named by the trainer's file and line (the third record)
    assert "1 row(s) disagree" in got[2] and f"{run / 'train_data_step3.jsonl'}:3" in got[2]
    assert "max |diff| 0.5" in got[2]
    assert "torn" not in err  # step 3 was never taken while its last line was half written
    st = json.loads(state.read_text())
    assert (st["last_step"], st["steps"], st["disagreed"], st["disagreed_steps"]) == (3, 3, 1, [3])
    assert [s for s, _ in st["taken"]] == [1, 2, 3]
    assert "stopped: no new step for 1.5 s" in err
    # the same dump audited once it is finished: the same rows disagree, the same largest difference
    code, whole, _ = run_main(["audit", str(run), "--json", "--no-search"], capsys)
    whole = json.loads(whole)
    assert code == 1 and whole["rows_disagreeing"] == 1
    assert f"max |diff| {whole['max_abs_diff']:.3g}" in got[2]
    assert whole["worst"][0]["where"] == f"{run / 'train_data_step3.jsonl'}:3"


def test_a_later_step_forces_a_torn_step_without_its_torn_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    data = nemo_bytes(tmp_path, 1)
    (run / "train_data_step1.jsonl").write_bytes(data[:-5])  # the trainer died mid-line
    (run / "train_data_step2.jsonl").write_bytes(nemo_bytes(tmp_path, 2))
    code, out, err = follow(["stats", str(run), "--follow", *SETTLE, "--until-idle", "0.5"], capsys)
    assert code == 0, err
    got = lines(out)
    assert got[0].startswith(f"step 1: {len(SAMPLES) - 1} rows") and got[1].startswith(f"step 2: {len(SAMPLES)} rows")
    assert "torn last line" in err


def test_the_follows_notes_name_files_as_the_user_named_the_directory(tmp_path, capsys, monkeypatch):
    """Given as a relative directory, the torn line's note, the changed-after-taken note and the error of an empty
    directory named the files by their absolute paths (the step lines already named them as given)."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_data_step1.jsonl").write_bytes(nemo_bytes(tmp_path, 1)[:-5])  # the trainer died mid-line
    (run / "train_data_step2.jsonl").write_bytes(nemo_bytes(tmp_path, 2))
    argv = ["stats", "run", "--follow", *SETTLE, "--until-idle", "0.5", "--state", "s.json"]
    code, out, err = follow(argv, capsys)
    assert code == 0, err
    assert "step 1: run/train_data_step1.jsonl: torn last line" in err and str(tmp_path) not in err
    with open(run / "train_data_step2.jsonl", "ab") as fh:
        fh.write(nemo_bytes(tmp_path, 2).splitlines(keepends=True)[0])
    code, out, err = follow(argv, capsys)
    assert code == 0 and "step 2: run/train_data_step2.jsonl changed after it was taken" in err, err
    (tmp_path / "empty").mkdir()
    code, out, err = follow(["audit", "empty", "--follow", *SETTLE, "--until-idle", "0.3"], capsys)
    assert code == 2 and "advcli: error: empty: no dump files found" in err, err


THREES = [([5, 6], [10, 11], [1, 1], 1.0), ([5, 6], [12], [1], 0.0), ([5, 6], [13, 14], [1, 0], 0.5),
          ([7, 8], [15], [1], 0.25), ([7, 8], [16, 17], [1, 1], 1.0), ([7, 8], [18], [1], 0.0),
          ([9], [19, 20], [1, 1], 0.75), ([9], [21], [1], 0.0), ([9], [22, 23], [1, 1], 1.0)]


@pytest.mark.parametrize("planted", [False, True])
def test_a_group_that_lost_its_torn_row_is_not_checked(tmp_path, capsys, planted):
    """The trainer moved on leaving step 1's last line torn: step 1 is taken without that row, so the rest of its
    group (prompt [9], three rows as logged) is recomputed as a group of two, and NeMo's leave-one-out values of
    the trainer's whole group were a false DISAGREE naming an innocent row. Those rows are not checked, and said;
    a disagreement elsewhere in the step still counts."""
    run = tmp_path / "run"
    run.mkdir()
    adv = nemo_grpo([s[3] for s in THREES], [tuple(s[0]) for s in THREES])
    if planted:
        adv[4] += 0.5  # group [7, 8]: a whole group, a real disagreement
    p = tmp_path / "whole.jsonl"
    nemo_write(p, THREES, 1, advantages=adv)
    (run / "train_data_step1.jsonl").write_bytes(p.read_bytes()[:-40])
    nemo_write(run / "train_data_step2.jsonl", THREES, 2)
    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--until-idle", "0.5", "--no-search"], capsys)
    step1 = lines(out)[0]
    # (the two rows left of group [9] recomputed alone: 1.0 − 0.75 and 0.75 − 1.0 without a std, not the logged
    # three-row values: both disagree)
    assert ", 2 row(s) of group " in step1 and "not checked (the group lost its torn row)" in step1, step1
    if planted:
        assert code == 1 and step1.startswith("step 1: 8 rows, DISAGREE") and "1 row(s) disagree" in step1
        assert f"worst {run / 'train_data_step1.jsonl'}:5 " in step1
    else:
        assert code == 0 and step1.startswith("step 1: 8 rows, agree"), step1


def test_until_idle_counts_from_the_last_change_and_takes_a_step_still_being_written(tmp_path, capsys):
    """--until-idle counts from the dump's last change, not the last step taken: a step written line by line
    for longer than --until-idle (each line sooner than it) is taken, with its planted row, before stopping."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_data_step1.jsonl").write_bytes(nemo_bytes(tmp_path, 1))
    step2 = nemo_bytes(tmp_path, 2, planted=True).splitlines(keepends=True)

    def writer():
        time.sleep(0.3)
        with open(run / "train_data_step2.jsonl", "wb") as fh:
            for line in step2:  # ~1.4 s in all, a line every 0.2 s
                fh.write(line)
                fh.flush()
                time.sleep(0.2)

    code, out, err = follow(["audit", str(run), "--follow", "--settle", "0.3", "--until-idle", "0.6", "--no-search"],
                            capsys, writer)
    assert code == 1, err
    got = lines(out)
    assert [x.split(":")[0] for x in got] == ["step 1", "step 2"] and "DISAGREE" in got[1]
    assert "stopped: no new step for 0.6 s" in err


def test_until_idle_shorter_than_settle_takes_the_step_on_disk(tmp_path, capsys):
    """A step that landed within --settle of the --until-idle deadline is taken once quiet for --settle."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_data_step1.jsonl").write_bytes(nemo_bytes(tmp_path, 1))
    code, out, err = follow(["audit", str(run), "--follow", "--settle", "0.6", "--until-idle", "0.2", "--no-search"],
                            capsys)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 1"] and "1 step(s), last step 1" in err


def test_a_last_step_left_torn_ends_until_idle_with_exit_2_naming_it(tmp_path, capsys):
    """A trainer that crashed mid-line in its last step: at the end of --until-idle the step is read as the
    one-off audit reads it: the torn line named, exit 2 (never dropped with exit 0)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_data_step1.jsonl").write_bytes(nemo_bytes(tmp_path, 1))
    (run / "train_data_step2.jsonl").write_bytes(nemo_bytes(tmp_path, 2)[:-40])
    code, _, once = run_main(["audit", str(run), "--no-search"], capsys)
    assert code == 2 and "truncated line" in once
    state = tmp_path / "s.json"
    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--until-idle", "0.4", "--no-search", "--state",
                             str(state)], capsys)
    assert code == 2, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 1"]
    assert "step 2, on disk, could not be taken" in err
    assert f"error: {run / 'train_data_step2.jsonl'}:{len(SAMPLES)}: truncated line" in err
    assert json.loads(state.read_text())["last_step"] == 1  # a restart tries step 2 again


def test_restart_resumes_after_the_last_step_and_reports_a_changed_file(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for s in (1, 2):
        (run / f"train_data_step{s}.jsonl").write_bytes(nemo_bytes(tmp_path, s))
    state = tmp_path / "s.json"
    argv = ["stats", str(run), "--follow", *SETTLE, "--until-idle", "0.4", "--state", str(state)]
    code, out, err = follow(argv, capsys)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 1", "step 2"]
    assert json.loads(state.read_text())["last_step"] == 2
    # the run goes on while no follower watches; step 1 is rewritten after it was taken
    for s in (3, 4):
        (run / f"train_data_step{s}.jsonl").write_bytes(nemo_bytes(tmp_path, s))
    with open(run / "train_data_step1.jsonl", "ab") as fh:
        fh.write(nemo_bytes(tmp_path, 1).splitlines(keepends=True)[0])
    code, out, err = follow(argv, capsys)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 3", "step 4"]  # never redone, never skipped
    assert "resuming after step 2" in err
    assert f"step 1: {run / 'train_data_step1.jsonl'} changed after it was taken" in err
    st = json.loads(state.read_text())
    assert (st["last_step"], st["steps"]) == (4, 4) and st["changed"] == [str(run / "train_data_step1.jsonl")]
    # a restart with other options would mix two configurations in one follow: refused, nothing taken
    code, out, err = follow(argv + ["--from", "nemo-jsonl"], capsys)
    assert code == 2 and "started with other options" in err and not lines(out)
    assert json.loads(state.read_text()) == st


def test_fail_fast_stops_at_the_first_disagreeing_step(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for s in (1, 2, 3):
        (run / f"train_data_step{s}.jsonl").write_bytes(nemo_bytes(tmp_path, s, planted=s == 2))
    state = tmp_path / "s.json"
    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--until-idle", "0.5", "--fail-fast",
                             "--no-search", "--state", str(state)], capsys)
    assert code == 1
    assert [x.split(":")[0] for x in lines(out)] == ["step 1", "step 2"]
    assert "stopped: --fail-fast" in err
    assert json.loads(state.read_text())["last_step"] == 2  # a restart goes on with step 3


@pytest.mark.parametrize("command", ["run", "audit", "stats"])
def test_follow_options_without_follow_are_refused_naming_them(tmp_path, capsys, command):
    """--settle / --until-idle / --state (/ --fail-fast) tune the follow; a one-off pass that took them would
    ignore them without a word: exit 2, each named, nothing written."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_data_step1.jsonl").write_bytes(nemo_bytes(tmp_path, 1))
    extra = ["--fail-fast"] if command == "audit" else []
    out = ["-o", str(tmp_path / "out.parquet")] if command == "run" else []
    code, _, err = run_main([command, str(run), *out, "--until-idle", "3", "--state", str(tmp_path / "s.json"),
                             *extra], capsys)
    assert code == 2
    named = "--until-idle, --state" + (", --fail-fast" if extra else "")
    assert f"{named} only apply with --follow" in err
    code, _, err = run_main([command, str(run), *out, "--settle", "1"], capsys)
    assert code == 2 and "--settle only applies with --follow" in err
    assert not (tmp_path / "out.parquet").exists() and not (tmp_path / "s.json").exists()


def test_sigterm_ends_the_follow_with_its_summary(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_data_step1.jsonl").write_bytes(nemo_bytes(tmp_path, 1))
    state = tmp_path / "s.json"
    follower = os.getpid()

    def writer():  # the signal a job scheduler sends the follower, from another process
        deadline = time.time() + 15
        while time.time() < deadline and not state.exists():
            time.sleep(0.05)
        os.kill(follower, signal.SIGTERM)

    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--no-search", "--state", str(state)],
                            capsys, writer)
    assert code == 0, err
    assert len(lines(out)) == 1 and "stopped: interrupted" in err
    assert json.loads(state.read_text())["last_step"] == 1


@pytest.mark.parametrize("where", ["print", "save"])
def test_a_signal_while_a_step_is_committed_leaves_the_state_whole(tmp_path, capsys, monkeypatch, where):
    """SIGTERM right after a step's line is printed, or while the state is being written: the state already
    holds that step (it is saved before the line), the summary agrees with it, and no temporary file is left
    beside it."""
    import typer

    if where == "save" and not os.path.isdir("/proc/self/fd"):
        pytest.skip("names the state's temporary file by its descriptor (/proc)")
    run = tmp_path / "run"
    run.mkdir()
    for s in (1, 2):
        (run / f"train_data_step{s}.jsonl").write_bytes(nemo_bytes(tmp_path, s))
    state = tmp_path / "st" / "s.json"
    real_echo, real_fsync, sent = typer.echo, os.fsync, []

    def kill_once():
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)

    def echo(message=None, *a, **k):
        real_echo(message, *a, **k)
        if where == "print" and str(message).startswith("step 1:"):
            kill_once()

    def fsync(fd):
        if where == "save" and ".tmp" in os.readlink(f"/proc/self/fd/{fd}"):  # the state's temporary file
            kill_once()
        real_fsync(fd)

    monkeypatch.setattr(typer, "echo", echo)
    monkeypatch.setattr(os, "fsync", fsync)
    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--no-search", "--state", str(state)], capsys)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 1"]
    assert "1 step(s), last step 1" in err and "stopped: interrupted" in err
    st = json.loads(state.read_text())
    assert (st["last_step"], st["steps"]) == (1, 1)
    assert os.listdir(state.parent) == ["s.json"]  # no stray s.json.tmpPID


def test_json_lines_one_object_per_step(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for s in (5, 6):
        (run / f"train_data_step{s}.jsonl").write_bytes(nemo_bytes(tmp_path, s))
    code, out, err = follow(["stats", str(run), "--follow", *SETTLE, "--until-idle", "0.4", "--json"], capsys)
    assert code == 0, err
    objs = [json.loads(x) for x in out.splitlines()]
    assert [o["step"] for o in objs] == [5, 6]
    code, whole, _ = run_main(["stats", str(run), "--json"], capsys)
    per_step = {e["step"]: e for e in json.loads(whole)["per_step"]}
    for o in objs:  # each step's figures are the finished dump's figures of that step
        for k in ("critic/score/mean", "response_length/mean"):
            assert o["report"]["metrics"][k] == per_step[o["step"]][k]


# --------------------------------------------------------------- run --follow, each format's layout
def _verl(d, s):
    verl_write(d / f"{s}.jsonl", v1_records(s, s))


def _trl(d, s):
    trl_write(d / f"completions_{s:05d}.parquet", s, s)


def _slime(d, s):
    slime_build(d, s, s)


def _areal(d, s):  # one task file per prompt group, several groups a step
    rng = np.random.default_rng(s)
    for task in (0, 1, 7):
        v = d / "rollout" / str(s)
        v.mkdir(parents=True, exist_ok=True)
        recs = [{"task_id": task, "sample_idx": i, "seqlen": 30 + i, "prompt_len": 20, "head_version": s,
                 "tail_version": s, "reward": float(rng.choice([0.0, 1.0, 0.5])),
                 "prompt": f"<|im_start|>user\nq{task}<|im_end|>", "completion": f"c{i}<|im_end|>"} for i in range(4)]
        (v / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


# no --flavor: each dump runs its trainer's flavor; AReaL's defaults put the KL in the reward, which a dump without
# log-probs cannot give (and no config.yaml of the trial is beside it): its coefficient 0, as the refusal says
FORMATS = {"verl": (_verl, "", []), "trl": (_trl, "", []), "slime": (_slime, "rollout_data", []),
           "areal": (_areal, "", ["--set", "actor.kl_ctl=0"])}


@pytest.mark.parametrize("name", list(FORMATS))
def test_run_follow_writes_each_step_as_the_finished_dump_gives_it(tmp_path, capsys, name):
    if name == "slime":
        pytest.importorskip("torch")
    make, sub, keys = FORMATS[name]
    run = tmp_path / "run"
    d = run / sub if sub else run
    d.mkdir(parents=True)
    make(d, 1)

    def writer():
        time.sleep(0.3)
        make(d, 2)

    out_dir = tmp_path / "adv"
    code, out, err = follow(["run", str(run), "--follow", "-o", str(out_dir), *SETTLE, "--until-idle", "1.0", *keys],
                            capsys, writer)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 1", "step 2"]
    assert sorted(os.listdir(out_dir)) == ["follow-state.json", "step_1.parquet", "step_2.parquet"]
    whole = tmp_path / "whole.parquet"
    code, _, err = run_main(["run", str(run), "-o", str(whole), "-q", *keys], capsys)
    assert code == 0, err
    want = pq.read_table(whole)
    got = pa.concat_tables([pq.read_table(out_dir / f"step_{s}.parquet") for s in (1, 2)])
    assert got.num_rows == want.num_rows
    for col in ("advantages", "returns"):
        assert got.column(col).to_pylist() == want.column(col).to_pylist(), col
    # each step's provenance names the dump as the user gave it (it named the follower's deleted copy)
    for s in (1, 2):
        inputs = json.dumps(json.loads(pq.read_schema(out_dir / f"step_{s}.parquet").metadata[b"advcli"])["inputs"])
        assert "advcli-follow" not in inputs and str(run) in inputs, inputs


# ------------------------------------------------------- state carried across steps: bit for bit
def _split_steps(t: pa.Table, d) -> list[int]:
    d.mkdir(parents=True, exist_ok=True)
    steps = sorted(set(t.column("step").to_pylist()))
    for s in steps:
        pq.write_table(t.filter(pc.equal(t.column("step"), s)), d / f"step_{s}.parquet")
    return steps


def _follow_and_batch(tmp_path, capsys, t, settings):
    run = tmp_path / "run"
    steps = _split_steps(t, run)
    out_dir = tmp_path / "adv"
    code, out, err = follow(["run", str(run), "--follow", "-o", str(out_dir), *SETTLE, "--until-idle", "0.4",
                             *settings], capsys)
    assert code == 0, err
    assert len(lines(out)) == len(steps)
    whole = tmp_path / "whole"  # one run over the finished dump (one output per input file)
    code, _, err = run_main(["run", str(run), "-o", f"{whole}/", "-q", *settings], capsys)
    assert code == 0, err
    got = pa.concat_tables([pq.read_table(out_dir / f"step_{s}.parquet") for s in steps])
    want = pa.concat_tables([pq.read_table(whole / f"step_{s}.parquet") for s in steps])
    for col in ("advantages", "returns", "token_level_rewards"):
        if col in want.column_names:
            assert got.column(col).to_pylist() == want.column(col).to_pylist(), col
    return json.loads((out_dir / "follow-state.json").read_text())


def _sets(flavor: str, pairs: list[str]) -> list[str]:
    out = ["--flavor", flavor]
    for p in pairs:
        out += ["--set", p]
    return out


SK = "trainer.algorithm."
ADAPTIVE = {  # every flavor whose KL controller moves from step to step
    "verl-gae": _sets("verl", ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true",
                               "algorithm.kl_penalty=low_var_kl", "algorithm.kl_ctrl.type=adaptive",
                               "algorithm.kl_ctrl.kl_coef=0.05", "algorithm.kl_ctrl.target_kl=0.01",
                               "algorithm.kl_ctrl.horizon=500"]),
    "verl-rloo": _sets("verl", ["algorithm.adv_estimator=rloo", "algorithm.use_kl_in_reward=true",
                                "algorithm.kl_penalty=k2", "algorithm.kl_ctrl.type=adaptive",
                                "algorithm.kl_ctrl.kl_coef=0.05", "algorithm.kl_ctrl.target_kl=0.01",
                                "algorithm.kl_ctrl.horizon=500"]),
    "skyrl": _sets("skyrl", [f"{SK}advantage_estimator=gae", f"{SK}use_kl_in_reward=true", f"{SK}use_kl_loss=false",
                             f"{SK}kl_ctrl.type=adaptive", f"{SK}kl_loss_coef=0.05", f"{SK}kl_ctrl.kl_target=0.01",
                             f"{SK}kl_ctrl.horizon=500"]),
    # OpenRLHF: n of the update = rollout.batch_size × n_samples_per_prompt, not the step's rows
    "openrlhf": _sets("openrlhf", ["algo.advantage.estimator=reinforce", "algo.kl.init_coef=0.05",
                                   "algo.kl.target=0.01", "algo.kl.horizon=500", "rollout.batch_size=300"]),
    # ROLL: one controller updated after each (step, domain) batch
    "roll": _sets("roll", ["adv_estimator=gae", "whiten_advantages=true", "add_token_level_kl=true",
                           "init_kl_coef=0.05", "target_kl=0.001", "kl_horizon=500",
                           "actor_infer.generating_args.num_return_sequences=6"]),
}


@pytest.mark.parametrize("name", list(ADAPTIVE))
def test_adaptive_kl_coefficient_carried(tmp_path, capsys, name):
    """The adaptive controller (β moves after each step, or each of ROLL's domains): each followed step starts
    from the β the previous one left, so the token rewards and advantages are the whole run's bit for bit."""
    t = make_table(600, 6, 2, 16, 11, shuffle=name != "roll", steps=3)
    if name == "roll":  # a domain per prompt block, drawn at random
        dom = np.random.default_rng(5).choice(["math", "code"], t.num_rows // 6)
        t = t.append_column("domain", pa.array(np.repeat(dom, 6).tolist()))
    st = _follow_and_batch(tmp_path, capsys, t, ADAPTIVE[name])
    assert st["kl_coef"] != 0.05  # the controller moved: the carry was exercised


def test_prime_rl_ema_baseline_carried(tmp_path, capsys):
    """prime-rl's RAE baseline per agent, carried from step to step (and agents met only in later steps)."""
    t = make_table(240, 4, 2, 8, 3, shuffle=False, steps=4)
    rng = np.random.default_rng(0)
    agents = rng.choice(["solver", "critic", "judge"], t.num_rows)
    steps = np.asarray(t.column("step").to_pylist())
    agents[(agents == "judge") & (steps < 2)] = "solver"  # an agent that first appears in a later step
    t = t.append_column("agent_name", pa.array(agents.tolist()))
    t = t.append_column("trainable", pa.array((rng.random(t.num_rows) > 0.1).tolist()))
    settings = ["--flavor", "prime-rl", "--set", "orchestrator.algo.type=rae", "--set",
                "orchestrator.algo.decay=0.9"]
    st = _follow_and_batch(tmp_path, capsys, t, settings)
    assert set(st["ema"]) == {"solver", "critic", "judge"}


def test_a_prime_rl_step_that_ships_no_trace_is_taken_with_its_rows_not_checked(tmp_path, capsys):
    """prime-rl writes effective/traces.jsonl empty for a step whose cohorts all scored alike; the step's copy had
    no logged_advantage column at all (a column null in every row was left out of the import), and the follow
    stopped at once: 'no logged advantages to audit'. Step 1 here holds cohort 0 and two rows of cohort 1 (5 rows),
    none shipped: taken, its rows counted as without a logged value."""
    import test_format_primerl as primerl

    primerl.build(tmp_path / "out")
    (tmp_path / "out" / "rollouts" / "step_1" / "train" / "effective" / "traces.jsonl").write_text("")
    code, out, err = run_main(["audit", str(tmp_path / "out"), "--follow", *SETTLE, "--until-idle", "0.5",
                               "--no-search", "--device", "cpu"], capsys)
    assert "error" not in err, err
    assert lines(out + err)[0] == "step 1: 5 rows, agree, max |diff| 0, 5 row(s) without a logged value (not checked)"


def test_tensorboard_holds_each_step_at_the_training_step(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from test_tracker import _tensorboard

    run = tmp_path / "run"
    run.mkdir()
    for s in (3, 4):
        (run / f"train_data_step{s}.jsonl").write_bytes(nemo_bytes(tmp_path, s, planted=s == 4))
    tb = tmp_path / "tb"
    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--until-idle", "0.4", "--no-search", "--log",
                             f"tensorboard:{tb}", "--log-step-offset", "100"], capsys)
    assert code == 1, err
    got = _tensorboard(tb)
    assert got["agree"] == {103: 1, 104: 0}
    assert got["max_abs_diff"][104] == pytest.approx(0.5, abs=1e-6)
    assert got["rows"] == {103: len(SAMPLES), 104: len(SAMPLES)}


class _FakeRun:
    def __init__(self, **kw):
        self.kw, self.logged, self.summary, self.finished = kw, [], {}, False
        self.dir, self.url = "/nowhere/files", None

    def log(self, values, step=None, commit=True):
        self.logged.append((step, dict(values)))

    def finish(self):
        self.finished = True


@pytest.fixture
def fake_wandb(monkeypatch):
    """A stand-in for the wandb package (not installed here): what the follower hands it, step by step."""
    import importlib.machinery
    import sys
    import types

    mod = types.ModuleType("wandb")
    mod.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    mod.runs = []
    mod.Settings = lambda **kw: kw

    def init(**kw):
        mod.runs.append(_FakeRun(**kw))
        return mod.runs[-1]

    mod.init = init
    monkeypatch.setitem(sys.modules, "wandb", mod)
    monkeypatch.setenv("WANDB_MODE", "offline")
    return mod


def test_wandb_gets_each_step_at_the_training_step(tmp_path, capsys, fake_wandb):
    run = tmp_path / "run"
    run.mkdir()
    for s in (3, 4):
        (run / f"train_data_step{s}.jsonl").write_bytes(nemo_bytes(tmp_path, s, planted=s == 4))
    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--until-idle", "0.4", "--no-search", "--log",
                             "wandb", "--log-step-offset", "100"], capsys)
    assert code == 1, err
    (w,) = fake_wandb.runs  # one run for the whole follow
    assert [s for s, _ in w.logged] == [103, 104]
    first, second = w.logged[0][1], w.logged[1][1]
    assert (first["agree"], second["agree"]) == (1, 0) and first["rows"] == len(SAMPLES)
    assert second["max_abs_diff"] == pytest.approx(0.5, abs=1e-6) and second["rows_disagreeing"] == 1
    assert w.summary == {"steps": 2, "disagreed": 1, "last_step": 4} and w.finished
    assert "wandb: offline run in /nowhere" in err


def test_followed_step_names_the_first_stage_that_differs(tmp_path, capsys):
    """A verl GAE run with KL in the reward, dumped as Parquet a step a file with its token rewards, returns and
    advantages; step 2 was written with another KL coefficient: its line names the KL penalty."""
    t = make_table(120, 6, 2, 8, 1, steps=2)
    base = _sets("verl", ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=k1"])
    src, run = tmp_path / "src", tmp_path / "run"
    run.mkdir()
    for s in _split_steps(t, src):
        coef = 0.02 if s == 1 else 0.05
        code, _, err = run_main(["run", str(src / f"step_{s}.parquet"), "-o", str(run / f"step_{s}.parquet"), "-q",
                                 *base, "--set", f"algorithm.kl_ctrl.kl_coef={coef}"], capsys)
        assert code == 0, err
    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--until-idle", "0.4", "--no-search", *base,
                             "--set", "algorithm.kl_ctrl.kl_coef=0.05"], capsys)
    assert code == 1, err
    got = lines(out)
    assert "agree" in got[0] and "first stage" not in got[0]
    assert "DISAGREE" in got[1] and got[1].endswith("first stage that differs: KL penalty")


def test_a_chunk_lister_plugs_in_and_its_live_chunk_waits_for_its_seal(tmp_path, capsys, monkeypatch):
    """The hook prime-rl's trace-stream chunks plug into: a lister registered for a format gives the units
    and says which are sealed; an unsealed (live) chunk is not taken, however quiet, and no later one either:
    at the end of --until-idle the follow names it and exits 2 (never dropped silently)."""
    from advcli.commands import follow as follow_mod

    run = tmp_path / "run"
    t = make_table(60, 6, 2, 8, 1, steps=3)
    _split_steps(t, run)

    def lister(root):
        return [follow_mod.Unit(s, [os.path.join(root, f"step_{s}.parquet")], sealed=s != 1) for s in (0, 1, 2)]

    monkeypatch.setitem(follow_mod.CHUNK_LISTERS, "parquet", lister)
    code, out, err = follow(["stats", str(run), "--follow", *SETTLE, "--until-idle", "0.4"], capsys)
    assert code == 2, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 0"]
    assert "step 1, on disk, could not be taken" in err and "error: step 1: still open" in err


def test_memory_does_not_keep_the_taken_steps(tmp_path, capsys):
    """Each taken step's converted Parquet is released once it is done: the follower holds no step's rows."""
    from advcli.formats.input_edge import IMPORTED

    run = tmp_path / "run"
    run.mkdir()
    for s in (1, 2, 3):
        (run / f"train_data_step{s}.jsonl").write_bytes(nemo_bytes(tmp_path, s))
    before = set(IMPORTED)
    code, out, err = follow(["stats", str(run), "--follow", *SETTLE, "--until-idle", "0.4"], capsys)
    assert code == 0 and len(lines(out)) == 3, err
    assert set(IMPORTED) == before


def test_a_task_file_arriving_after_its_step_was_taken_is_reported(tmp_path, capsys):
    """AReaL writes a version's task files as its rollouts finish: one that lands after the next version
    appeared (and its step was taken) is named, not silently read or dropped."""
    run = tmp_path / "run"
    _areal(run, 1)
    _areal(run, 2)
    state = tmp_path / "s.json"
    late = run / "rollout" / "1" / "9.jsonl"

    def writer():
        deadline = time.time() + 15
        while time.time() < deadline and not state.exists():
            time.sleep(0.05)
        late.write_text((run / "rollout" / "1" / "0.jsonl").read_text())

    code, out, err = follow(["stats", str(run), "--follow", *SETTLE, "--until-idle", "1.0", "--state", str(state)],
                            capsys, writer)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 1", "step 2"]
    assert f"step 1: {late} appeared after the step was taken; not read" in err
    assert str(late) in json.loads(state.read_text())["changed"]


def test_open_instruct_shards_are_refused_up_front(tmp_path, capsys):
    """open-instruct numbers its files by shard (appended to across steps), not by step: --follow refuses the
    format (exit 2, why and what to do) at once, whether found in the directory or named with --from, rather
    than take shards as steps; the finished directory is audited by each record's step."""
    run = tmp_path / "run"
    open_instruct_build(run)
    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--until-idle", "5", "--no-search"], capsys)
    assert code == 2 and not lines(out)
    assert "numbered by shard, not by step" in err and f"advcli audit {run}" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    start = time.monotonic()
    code, out, err = follow(["stats", str(empty), "--follow", "--from", "open-instruct-traces", "--until-idle", "5"],
                            capsys)
    assert code == 2 and "numbered by shard" in err and time.monotonic() - start < 3  # before any wait
    code, _, err = run_main(["audit", str(run), "--no-search"], capsys)
    assert code in (0, 1), err  # the finished directory is audited


@pytest.mark.parametrize("name", ["verl", "areal"])
def test_audit_follow_of_a_format_without_logged_advantages_says_so_at_once(tmp_path, capsys, name):
    """verl's rollout_data_dir and AReaL's dumps log no advantages: audit --follow refuses them as the one-off
    audit does, word for word (exit 2), as soon as the format is found, not through an estimator's error at the
    first step and not after waiting for it."""
    make = FORMATS[name][0]
    run = tmp_path / "run"
    run.mkdir()
    make(run, 1)
    code, _, once = run_main(["audit", str(run), "--no-search"], capsys)
    assert code == 2 and "holds no logged advantages" in once
    start = time.monotonic()
    code, out, err = follow(["audit", str(run), "--follow", "--settle", "5", "--until-idle", "10", "--no-search"],
                            capsys)
    assert code == 2 and not lines(out)
    assert time.monotonic() - start < 4  # not after --settle
    assert once.split("error: ")[1] in err and "advcli run" in err


# ------------------------------------------------ what a new user met: gaps, late, cut-short, relabelled steps
def _steps_dir(tmp_path, steps=3, settings_rows=120):
    """A Parquet dump, one step_N.parquet a step, and its table."""
    t = make_table(settings_rows, 6, 2, 8, 1, steps=steps)
    run = tmp_path / "run"
    return run, _split_steps(t, run), t


def test_an_error_names_the_file_as_the_user_gave_it(tmp_path, capsys, monkeypatch):
    """A step that fails to read: the message names the user's path (as the one-off command does), never the
    follower's temporary copy."""
    run, steps, _ = _steps_dir(tmp_path, steps=2)
    bad = pq.read_table(run / "step_1.parquet")
    reward = bad.column("reward").to_pylist()
    reward[3] = None
    bad = bad.set_column(bad.column_names.index("reward"), "reward", pa.array(reward, bad.schema.field("reward").type))
    pq.write_table(bad, run / "step_1.parquet")
    monkeypatch.chdir(tmp_path)
    code, _, once = run_main(["run", "run", "-o", "whole/"], capsys)  # the one-off command's own message
    assert code == 2 and "run/step_1.parquet: column 'reward', row 3" in once
    code, out, err = follow(["run", "run", "--follow", "-o", "adv", *SETTLE, "--until-idle", "0.5"], capsys)
    assert code == 2
    assert [x.split(":")[0] for x in lines(out)] == ["step 0"]
    assert "advcli-follow-" not in err and tempfile_dir() not in err
    assert "error: run/step_1.parquet: column 'reward', row 3" in err
    assert once.split("error: ")[1] in err  # message and hint word for word


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir() + "/advcli"


def test_a_missing_step_is_said_and_the_kl_carry_flagged(tmp_path, capsys):
    """step_0, step_2 (no step_1): step 2 is taken with a note naming step 1, in the text and --json; with an
    adaptive KL controller the note says the carried coefficient may be off."""
    run, steps, _ = _steps_dir(tmp_path, steps=3)
    os.remove(run / "step_1.parquet")
    code, out, err = follow(["run", str(run), "--follow", "-o", str(tmp_path / "adv"), *SETTLE, "--until-idle",
                             "0.4", *ADAPTIVE["verl-gae"]], capsys)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 0", "step 2"]
    note = [x for x in err.splitlines() if " missing:" in x]
    assert len(note) == 1 and note[0].startswith("step 2: step 1 missing"), err
    assert "adaptive KL" in note[0]
    code, out, err = follow(["stats", str(run), "--follow", *SETTLE, "--until-idle", "0.4", "--json"], capsys)
    assert code == 0, err
    objs = [json.loads(x) for x in out.splitlines()]
    assert [o["step"] for o in objs] == [0, 2]
    assert objs[0]["notes"] == [] and any(n.startswith("step 1 missing") for n in objs[1]["notes"])
    assert not any("adaptive KL" in n for n in objs[1]["notes"])  # no KL controller in stats
    # steps in sequence: no note
    whole, _, _ = _steps_dir(tmp_path / "seq", steps=3)
    code, out, err = follow(["stats", str(whole), "--follow", *SETTLE, "--until-idle", "0.4"], capsys)
    assert code == 0 and len(lines(out)) == 3 and " missing:" not in err


def test_a_gap_in_trl_completions_is_measured_by_its_logging_stride():
    """TRL writes completions_{step} every logging_steps: 10, 20, 30 is no gap; 10, 20, 50 misses 30 and 40."""
    from advcli.commands.follow import FollowState, gap_note

    st = FollowState("stats", "/run", last_step=10, taken=[[10, {}]])
    assert gap_note(st, 20, "trl-completions") == []  # the stride is not known from one step
    st.last_step, st.taken = 20, [[10, {}], [20, {}]]
    assert gap_note(st, 30, "trl-completions") == []
    assert gap_note(st, 50, "trl-completions")[0].startswith("steps 30, 40 missing")
    assert gap_note(st, 24, "parquet")[0].startswith("steps 21, 22, 23 missing")
    assert gap_note(st, 40, "parquet")[0].startswith("steps 21–39 (19 steps) missing")


def test_a_step_landing_after_a_later_step_was_taken_is_reported(tmp_path, capsys):
    """step_2 written after step_3 was taken: named (file and step), not followed, and how to audit it."""
    run, steps, _ = _steps_dir(tmp_path, steps=4)
    late = run / "step_2.parquet"
    data = late.read_bytes()
    os.remove(late)
    state = tmp_path / "s.json"

    def writer():
        deadline = time.time() + 15
        while time.time() < deadline and not (state.exists() and json.loads(state.read_text())["last_step"] == 3):
            time.sleep(0.05)
        late.write_bytes(data)

    code, out, err = follow(["stats", str(run), "--follow", *SETTLE, "--until-idle", "1.0", "--state", str(state),
                             "--column", "prompt_id=prompt_id"], capsys, writer)
    assert [x.split(":")[0] for x in lines(out)] == ["step 0", "step 1", "step 3"]
    msg = [x for x in " ".join(err.split("\n")).split("step 2: ")[1:]]
    assert len(msg) == 1, err
    assert msg[0].startswith(f"{late} landed after step 3 was taken; not followed")
    # the followed command, on the file alone, with the options the follow was given
    assert f"advcli stats {late} --column prompt_id=prompt_id" in " ".join(msg[0].split()), msg
    assert str(late) in json.loads(state.read_text())["changed"]  # a restart does not report it again
    code, out, err = follow(["stats", str(run), "--follow", *SETTLE, "--until-idle", "0.4", "--state", str(state),
                             "--column", "prompt_id=prompt_id"], capsys)
    assert code == 0 and str(late) not in err and not lines(out)


def test_a_cut_short_parquet_file_ends_an_until_idle_follow_with_exit_2(tmp_path, capsys, monkeypatch):
    """A Parquet step file without its footer that stopped changing: named at the end of --until-idle, exit 2, as
    the one-off command says; a file still being written is waited for."""
    run, steps, _ = _steps_dir(tmp_path, steps=3)
    cut = run / "step_2.parquet"
    whole = cut.read_bytes()
    cut.write_bytes(whole[: len(whole) // 2])
    monkeypatch.chdir(tmp_path)
    code, _, once = run_main(["stats", "run/step_2.parquet"], capsys)
    assert code == 2 and "footer is missing" in once
    code, out, err = follow(["stats", "run", "--follow", *SETTLE, "--until-idle", "0.5"], capsys)
    assert code == 2, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 0", "step 1"]
    assert "error: run/step_2.parquet: not a readable Parquet file" in err and "footer is missing" in err
    # a file whose writer finishes it while the follower waits: taken, not reported
    cut.write_bytes(whole[: len(whole) // 2])

    def writer():
        time.sleep(0.6)
        cut.write_bytes(whole)

    code, out, err = follow(["stats", "run", "--follow", *SETTLE, "--until-idle", "1.5"], capsys, writer)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 0", "step 1", "step 2"]


def test_a_file_named_for_another_step_is_followed_by_its_step_column(tmp_path, capsys):
    """step_1.parquet holds step 2's rows and step_2.parquet step 1's: follow takes them by the step column, as a
    one-off run reads them, so the adaptive KL controller sees the steps in the same order: the same numbers."""
    t = make_table(600, 6, 2, 16, 11, steps=3)
    run = tmp_path / "run"
    run.mkdir()
    for s, holds in ((0, 0), (1, 2), (2, 1)):
        pq.write_table(t.filter(pc.equal(t.column("step"), holds)), run / f"step_{s}.parquet")
    out_dir, whole = tmp_path / "adv", tmp_path / "whole"
    code, out, err = follow(["run", str(run), "--follow", "-o", str(out_dir), *SETTLE, "--until-idle", "0.4",
                             *ADAPTIVE["verl-gae"]], capsys)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 0", "step 1", "step 2"]
    assert f"{run / 'step_2.parquet'}: its name says step 2, its step column holds step 1; followed as step 1" in err
    code, _, err = run_main(["run", str(run), "-o", f"{whole}/", "-q", *ADAPTIVE["verl-gae"]], capsys)
    assert code == 0, err
    for step, name in ((0, 0), (1, 2), (2, 1)):  # the follow's step_N is the one-off's output of the file holding N
        got, want = pq.read_table(out_dir / f"step_{step}.parquet"), pq.read_table(whole / f"step_{name}.parquet")
        assert set(got.column("step").to_pylist()) == {step}
        for col in ("advantages", "token_level_rewards"):
            assert got.column(col).to_pylist() == want.column(col).to_pylist(), (step, col)


def test_two_files_of_one_step(tmp_path, capsys):
    """step_1.parquet and step_1_retry.parquet: stats/audit take them as one step, as the one-off command reads
    the directory (and say so); run --follow, which writes one step_N.parquet a step, refuses naming both."""
    run, steps, t = _steps_dir(tmp_path, steps=3)
    (run / "step_1_retry.parquet").write_bytes((run / "step_1.parquet").read_bytes())
    code, out, err = follow(["stats", str(run), "--follow", *SETTLE, "--until-idle", "0.4", "--json"], capsys)
    assert code == 0, err
    objs = [json.loads(x) for x in out.splitlines()]
    assert [o["step"] for o in objs] == [0, 1, 2]
    n1 = sum(1 for s in t.column("step").to_pylist() if s == 1)
    assert objs[1]["report"]["rows"] == 2 * n1
    assert any("2 files" in n and "step_1_retry.parquet" in n for n in objs[1]["notes"])
    code, whole, _ = run_main(["stats", str(run), "--json"], capsys)
    per_step = {e["step"]: e for e in json.loads(whole)["per_step"]}
    assert objs[1]["report"]["metrics"]["critic/score/mean"] == per_step[1]["critic/score/mean"]
    code, out, err = follow(["run", str(run), "--follow", "-o", str(tmp_path / "adv"), *SETTLE, "--until-idle",
                             "0.4"], capsys)
    assert code == 2
    assert [x.split(":")[0] for x in lines(out)] == ["step 0"]
    assert (f"step 1: 2 files hold this step ({run / 'step_1.parquet'}, {run / 'step_1_retry.parquet'})" in err), err
    assert ".part-step" not in err and "hint:" in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_follow_exits_with_its_verdict_after_saving_its_state(tmp_path, capsys, sig):
    """Ctrl-C or SIGTERM is how a follow without --until-idle ends (docs/audit.md, docs/errors.md): after its
    summary and state, it exits with the verdict of the steps taken (1: one disagreed), not 130/143."""
    run = tmp_path / "run"
    run.mkdir()
    for s in (1, 2):
        (run / f"train_data_step{s}.jsonl").write_bytes(nemo_bytes(tmp_path, s, planted=s == 2))
    state = tmp_path / "s.json"
    follower = os.getpid()

    def writer():
        deadline = time.time() + 15
        while time.time() < deadline and not (state.exists() and json.loads(state.read_text())["last_step"] == 2):
            time.sleep(0.05)
        os.kill(follower, sig)

    code, out, err = follow(["audit", str(run), "--follow", *SETTLE, "--no-search", "--state", str(state)],
                            capsys, writer)
    assert code == 1, err
    assert len(lines(out)) == 2 and "stopped: interrupted" in err
    assert json.loads(state.read_text())["last_step"] == 2


def test_a_step_written_after_a_later_one_is_taken_whole(tmp_path, capsys):
    """Steps 1 and 3 on disk, step 2 written after them (files landing out of order: a dump written on a
    background thread): half its lines, a pause shorter than --settle, then the rest. Step 2 is taken whole, once
    its own file is quiet; a later step there before it was written says nothing of it (step 2 was taken with
    half its rows at the first look)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_data_step1.jsonl").write_bytes(nemo_bytes(tmp_path, 1))
    (run / "train_data_step3.jsonl").write_bytes(nemo_bytes(tmp_path, 3))
    data = nemo_bytes(tmp_path, 2)
    cut = data.index(b"\n", len(data) // 2) + 1  # whole lines only: the follower's torn-line rule does not apply

    def writer():
        time.sleep(0.3)
        with open(run / "train_data_step2.jsonl", "wb") as fh:
            fh.write(data[:cut])
            fh.flush()
            time.sleep(0.8)
            fh.write(data[cut:])

    code, out, err = follow(["stats", str(run), "--follow", "--settle", "1.5", "--until-idle", "3"], capsys, writer)
    assert code == 0, err
    got = lines(out)
    assert [g.split(":")[0] for g in got] == ["step 1", "step 2", "step 3"], (out, err)
    assert got[1].startswith(f"step 2: {len(SAMPLES)} rows"), got[1]


def test_a_torch_save_file_written_slowly_is_waited_for(tmp_path, capsys):
    """slime's rollout dump written straight to its final name with a pause mid-file (a slow file system): the
    follow waits for its zip directory; it ended with 'not a complete torch.save archive' (exit 2)."""
    d = tmp_path / "src"
    d.mkdir()
    slime_build(d, 1, 1)
    slime_build(d, 2, 2)
    run = tmp_path / "run" / "rollout_data"
    run.mkdir(parents=True)
    (run / "1.pt").write_bytes((d / "1.pt").read_bytes())
    data = (d / "2.pt").read_bytes()

    def writer():
        time.sleep(0.3)
        with open(run / "2.pt", "wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
            time.sleep(1.0)
            fh.write(data[len(data) // 2:])

    code, out, err = follow(["stats", str(tmp_path / "run"), "--follow", *SETTLE, "--until-idle", "2.5"], capsys,
                            writer)
    assert code == 0, err
    assert [g.split(":")[0] for g in lines(out)] == ["step 1", "step 2"], (out, err)


def test_a_folder_whose_first_file_never_reads_ends_with_the_summary(tmp_path, capsys):
    """A follow whose dump's first file stays cut short ends after --until-idle with its summary line, then the
    reader's error (exit 2): it printed the error alone."""
    run = tmp_path / "run" / "rollout_data"
    run.mkdir(parents=True)
    d = tmp_path / "src"
    d.mkdir()
    slime_build(d, 1, 1)
    data = (d / "1.pt").read_bytes()
    (run / "1.pt").write_bytes(data[: len(data) // 2])
    code, _, err = run_main(["stats", str(tmp_path / "run"), "--follow", *SETTLE, "--until-idle", "1"], capsys)
    assert code == 2, err
    summary = next(x for x in err.splitlines() if x.startswith("followed"))
    assert "0 step(s), none taken" in summary and "no step could be read (below)" in summary, err
    assert "1.pt" in err.split(summary, 1)[1]


def test_a_bad_record_in_a_followed_step_is_named_by_its_file_and_line(tmp_path, capsys):
    """run --follow on verl's steps, a NaN score in step 2's third record: the error names d/2.jsonl:3, as the
    one-off run does (it named the follower's temporary copy, gone by then), after the summary of step 1."""
    d = tmp_path / "d"
    d.mkdir()
    verl_write(d / "1.jsonl", v1_records(1, 1))
    recs = v1_records(2, 2)
    recs[2]["score"] = float("nan")
    verl_write(d / "2.jsonl", recs)
    code, _, err = run_main(["run", str(d), "--follow", "-o", str(tmp_path / "o"), *SETTLE, "--until-idle", "1",
                             "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"], capsys)
    assert code == 2 and f"{d / '2.jsonl'}:3: column 'reward'" in err, err
    assert "advcli-" not in err and "followed" in err.split("advcli: error")[0], err


def test_follow_on_object_storage_says_it_watches_a_local_directory(capsys):
    """--follow of an s3:// prefix said 'no such directory'; it says what it watches."""
    code, _, err = run_main(["stats", "s3://bkt/run/", "--follow", "--until-idle", "1"], capsys)
    assert code == 2 and "--follow watches a local directory" in err and "no such directory" not in err, err


@pytest.mark.parametrize("last", [False, True])
def test_an_empty_step_file_is_left_out_as_the_one_off_command_leaves_it(tmp_path, capsys, last):
    """verl's 2.jsonl created and left empty (0 bytes) between steps 1 and 3, or as the last file: the one-off run
    leaves it out with a warning; the follow stopped on it ('every dump file is empty', exit 2) and never took step
    3. It is passed over, said, and the steps taken equal the one-off run's rows."""
    run = tmp_path / "run"
    run.mkdir()
    _verl(run, 1)

    def writer():
        time.sleep(0.3)
        (run / "2.jsonl").write_bytes(b"")
        if not last:
            time.sleep(0.5)
            _verl(run, 3)

    out_dir = tmp_path / "adv"
    code, out, err = follow(["run", str(run), "--follow", "-o", str(out_dir), *SETTLE, "--until-idle", "1.5"],
                            capsys, writer)
    assert code == 0, err
    taken = ["step 1"] if last else ["step 1", "step 3"]
    assert [x.split(":")[0] for x in lines(out)] == taken, (out, err)
    assert "step 2: left out:" in err and "2.jsonl (empty)" in err and "landed after" not in err
    assert json.loads((out_dir / "follow-state.json").read_text())["last_step"] == (2 if last else 3)
    whole = tmp_path / "whole.parquet"
    code, _, err = run_main(["run", str(run), "-o", str(whole)], capsys)
    assert code == 0 and "(empty)" in err, err
    got = pa.concat_tables([pq.read_table(out_dir / f"step_{s.split()[1]}.parquet") for s in taken])
    assert got.column("advantages").to_pylist() == pq.read_table(whole).column("advantages").to_pylist()


@pytest.mark.parametrize("kind", ["directory", "empty object", "not json"])
def test_a_state_path_that_is_no_state_file_is_named(tmp_path, capsys, kind):
    """--state naming a directory said 'remove it' (a directory of outputs); a JSON file of {} was 'the state of
    another follow (None of None)'. Each is named for what it is, with another --state to give."""
    run = tmp_path / "run"
    run.mkdir()
    _verl(run, 1)
    state = tmp_path / "state"
    if kind == "directory":
        state.mkdir()
    else:
        state.write_text("{}" if kind == "empty object" else "not json")
    code, _, err = run_main(["stats", str(run), "--follow", "--state", str(state), *SETTLE, "--until-idle", "0.5"],
                            capsys)
    assert code == 2 and "Traceback" not in err
    said = " ".join(err.split())
    assert "None of None" not in said and "give another --state" in said or "is a directory" in said, said
    if kind == "directory":
        assert "--state names the follower's state file" in said and "follow-state.json" in said
    assert state.exists()


def test_run_follow_refuses_an_output_directory_inside_the_followed_one(tmp_path, capsys):
    """As the one-off command refuses it: the outputs would land among the dump's files and be followed."""
    run = tmp_path / "run"
    run.mkdir()
    _verl(run, 1)
    code, _, err = run_main(["run", str(run), "--follow", "-o", str(run / "adv"), *SETTLE, "--until-idle", "0.5"],
                            capsys)
    assert code == 2 and "inside the followed directory" in err and not (run / "adv").exists()


def test_a_followed_directory_removed_ends_the_follow_with_exit_2(tmp_path, capsys):
    """The followed directory removed mid-follow: it ended 'no new step for N s' (exit 0), the removal unsaid."""
    import shutil

    run = tmp_path / "run"
    run.mkdir()
    _verl(run, 1)

    def writer():
        time.sleep(1.0)
        shutil.rmtree(run)

    out_dir = tmp_path / "adv"
    code, out, err = follow(["run", str(run), "--follow", "-o", str(out_dir), *SETTLE, "--until-idle", "5"], capsys,
                            writer)
    assert [x.split(":")[0] for x in lines(out)] == ["step 1"]
    assert code == 2 and "removed (or renamed) while followed" in err and "went away" in err


def test_an_empty_last_completions_file_is_left_out_at_the_end(tmp_path, capsys):
    """TRL's completions_00020.parquet left empty (0 bytes) as the last step: the one-off run leaves it out; the
    follow waited on its footer and ended with 'not a readable Parquet file' (exit 2)."""
    run = tmp_path / "completions"
    run.mkdir()
    _trl(run, 10)
    (run / "completions_00020.parquet").write_bytes(b"")
    out_dir = tmp_path / "adv"
    code, out, err = follow(["run", str(run), "--follow", "-o", str(out_dir), *SETTLE, "--until-idle", "1.0"], capsys)
    assert code == 0, err
    assert [x.split(":")[0] for x in lines(out)] == ["step 10"] and "step 20: left out:" in err
    code, _, err = run_main(["run", str(run), "-o", str(tmp_path / "whole.parquet"), "-q"], capsys)
    assert code == 0, err
    assert pq.read_table(out_dir / "step_10.parquet").column("advantages").equals(
        pq.read_table(tmp_path / "whole.parquet").column("advantages"))
