"""A closed pipe on stdout (`advcli inspect X | head -1`) ends a command quietly, as `git log | head`
ends: no message, no traceback, status 141 (128 + SIGPIPE), for every way advcli prints (rich tables,
plain lines, JSON, click's help). `run` and `filter` still complete: their output is put in place and they exit 0.
A closed stderr (`advcli filter ... 2>&1 | head -1`, the summary's reader gone) stops no command: the summary goes
quiet and the exit status is the command's own."""
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE


def with_closed_stdout(*args):
    """`advcli ARGS` whose stdout's reader has already gone (deterministic, unlike `| head -1`)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "advcli", *map(str, args)], stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(w)


def with_closed_stderr(*args):
    """`advcli ARGS` whose stderr's reader has already gone (stdout kept, for --json)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "advcli", *map(str, args)], stdout=subprocess.PIPE, stderr=w,
                              text=True, timeout=300)
    finally:
        os.close(w)


@pytest.mark.parametrize("args", [["inspect", SAMPLE], ["inspect", SAMPLE, "--json"], ["--help"], ["run", "--help"],
                                  ["explain", "--flavor", "verl", "--keys"], ["stats", SAMPLE, "--json"],
                                  ["compare", SAMPLE, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                                   "--flavor", "verl", "--set", "algorithm.adv_estimator=rloo"]])
def test_closed_pipe_ends_quietly(args):
    p = with_closed_stdout(*args)
    said = p.stderr.lower()  # (compare's own progress lines go to stderr)
    assert "error" not in said and "traceback" not in said and "broken pipe" not in said, p.stderr
    assert p.returncode == 141


def test_run_with_a_closed_pipe_still_writes_its_output(tmp_path):
    out = tmp_path / "o.parquet"
    p = with_closed_stdout("run", SAMPLE, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                           "--json")
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert pq.read_table(out).num_rows == pq.read_metadata(SAMPLE).num_rows


def test_filter_with_a_closed_pipe_still_writes_its_output(tmp_path):
    """filter printed its summary before putting the output in place; a closed stdout (--json) or stderr (the
    summary) lost the output (rich's silent exit 1, 'an internal error' by the exit codes)."""
    groups = pq.read_table(SAMPLE).to_pandas().groupby("prompt_id")["reward"].nunique()
    kept_rows = 8 * int((groups > 1).sum())  # --drop-uniform keeps the groups whose rewards differ (8 rows each)
    for i, (closed, extra) in enumerate([(with_closed_stdout, ["--json"]), (with_closed_stderr, [])]):
        out = tmp_path / f"f{i}.parquet"
        p = closed("filter", SAMPLE, "-o", out, "--drop-uniform", *extra)
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert pq.read_table(out).num_rows == kept_rows


def test_a_closed_stderr_keeps_each_commands_exit_status(tmp_path):
    out = tmp_path / "o.parquet"
    p = with_closed_stderr("run", SAMPLE, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo")
    assert p.returncode == 0 and pq.read_table(out).num_rows == pq.read_metadata(SAMPLE).num_rows
    # the run's advantages audit against themselves: 0 (agree); against the rewards: 1 (disagree), not rich's 1
    assert with_closed_stderr("audit", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo").returncode == 0
    p = with_closed_stderr("audit", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                           "--against", "returns", "--json")
    assert p.returncode == 0 and '"agree": true' in p.stdout  # GRPO's returns are its advantages
    p = with_closed_stderr("audit", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=rloo")
    assert p.returncode == 1


@pytest.mark.parametrize("command", [["run"], ["filter", "--drop-uniform"]])
def test_a_reader_that_leaves_mid_report_still_gets_the_output_in_place(tmp_path, command):
    """`advcli run ... --json | head -c 10`: the reader leaves after the report's first bytes. The report's last
    buffered bytes were flushed only after the output was put in place, and that flush's broken pipe made it
    exit 141 (the output in place, the status saying otherwise). Exit 0, as when the reader left first."""
    out = tmp_path / "o.parquet"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout block-buffered, as by default
    p = subprocess.Popen([sys.executable, "-m", "advcli", command[0], SAMPLE, "-o", str(out), *command[1:], "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert p.stdout.read(10)
    p.stdout.close()
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert out.exists()


def without(stream: str, *args, to: str | None = None):
    """`advcli ARGS` started with its stdout or stderr closed (`>&-`, `2>&-`), or sent ``to`` a file such as
    /dev/full (every write fails with ENOSPC); the other stream captured."""
    redirect = f"{'1' if stream == 'stdout' else '2'}>{to}" if to else ("1>&-" if stream == "stdout" else "2>&-")
    cmd = " ".join(f"'{a}'" for a in [sys.executable, "-m", "advcli", *map(str, args)]) + " " + redirect
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("stream,to", [("stdout", None), ("stderr", None), ("stderr", "/dev/full")])
def test_a_stream_closed_or_full_from_the_start_changes_no_exit_status(tmp_path, stream, to):
    """Started with stdout or stderr closed, Python's sys.stdout / sys.stderr are None: every command ended in an
    internal error (exit 1) and run wrote nothing; a stderr on /dev/full made an error exit 1, not 2. The
    stream is /dev/null: run writes its output and exits 0, a bad input exits 2, validate --json exits by its
    verdict."""
    out = tmp_path / "o.parquet"
    r = without(stream, "run", SAMPLE, "-o", out, to=to)
    assert r.returncode == 0, r.stderr
    assert pq.read_table(out).num_rows == pq.read_metadata(SAMPLE).num_rows
    bad = tmp_path / "bad.parquet"
    pq.write_table(pq.read_table(SAMPLE).drop_columns(["reward"]), bad)
    r = without(stream, "run", bad, "-o", tmp_path / "b.parquet", to=to)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert not (tmp_path / "b.parquet").exists()
    if stream == "stdout":
        assert "column" in r.stderr or "reward" in r.stderr, r.stderr  # the message still reaches stderr
    for args, code in ((["validate", SAMPLE, "--json"], 0), (["validate", bad, "--json"], 2),
                       (["inspect", SAMPLE], 0), (["--version"], 0)):
        r = without(stream, *args, to=to)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        assert "internal error" not in r.stderr
