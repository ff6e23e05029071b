"""A closed pipe on stdout (`advcli inspect X | head -1`) ends a command quietly, as `git log | head`
ends: no message, no traceback, status 141 (128 + SIGPIPE), for every way advcli prints (rich tables,
plain lines, JSON, click's help). `run` still completes: its output is put in place and it exits 0."""
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
