"""Nothing silently wrong under faults (issue 46): an input that changes during a run, a user
estimator that exits or prints, overflowing rewards, silent repairs, cyclic or malformed traces, a
full disk. Each test makes the fault happen (a hook the test controls), then checks the exit code,
the message, and that nothing wrong or partial was written. docs/errors.md lists the guarantees.
"""
from __future__ import annotations

import glob
import os

import pyarrow.parquet as pq
import pytest
from conftest import run_main

from advcli.sample import make_table

GAE = ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae"]
GRPO = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]


@pytest.fixture
def dump(tmp_path):
    p = tmp_path / "in.parquet"
    pq.write_table(make_table(200, group_size=8, min_len=4, max_len=32, seed=3), p)
    return p


def leftovers(d) -> list[str]:
    found = glob.glob(os.path.join(str(d), "*")) + glob.glob(os.path.join(str(d), ".*"))
    return sorted(os.path.basename(p) for p in found if not p.endswith("in.parquet"))


# ------------------------------------------------------------------ 1. an input that changes mid-run
def _other_version(path) -> bytes:
    """The same rows with other rewards, written to bytes: what a trainer writing the next step
    over the file would leave there."""
    t = make_table(200, group_size=8, min_len=4, max_len=32, seed=4)
    tmp = str(path) + ".new"
    pq.write_table(t, tmp)
    with open(tmp, "rb") as fh:
        data = fh.read()
    os.remove(tmp)
    return data


def _swap(path, how: str) -> None:
    if how == "replaced":  # mv new in.parquet: another inode at the path
        tmp = str(path) + ".swap"
        with open(tmp, "wb") as fh:
            fh.write(_other_version(path))
        os.replace(tmp, path)
    elif how == "overwritten":  # the same inode, other bytes
        data = _other_version(path)
        with open(path, "r+b") as fh:
            fh.write(data)
            fh.truncate()
    else:  # truncated in place
        size = os.path.getsize(path)
        with open(path, "r+b") as fh:
            fh.truncate(size // 2)


def _count_passes(dump, tmp_path, monkeypatch, capsys, args) -> int:
    from advcli.io.reader import InputSet

    orig = InputSet.iter_batches
    n = {"calls": 0}

    def counting(self, *a, **k):
        n["calls"] += 1
        return orig(self, *a, **k)

    monkeypatch.setattr(InputSet, "iter_batches", counting)
    code, _, err = run_main(["run", str(dump), "-o", str(tmp_path / "probe.parquet"), *args, "-q"], capsys)
    assert code == 0, err
    os.remove(tmp_path / "probe.parquet")
    monkeypatch.setattr(InputSet, "iter_batches", orig)
    return n["calls"]


@pytest.mark.parametrize("how", ["replaced", "overwritten", "truncated"])
@pytest.mark.parametrize("args", [GAE, GRPO, [*GAE, "--output-mode", "sidecar"]], ids=["gae", "grpo", "sidecar"])
def test_an_input_changed_between_passes_is_refused_and_nothing_is_written(how, args, dump, tmp_path, monkeypatch,
                                                                           capsys):
    """Every pass reads the version the run opened: the input swapped before the 2nd, 3rd, ... pass
    (the hook runs when the pass asks for its batches) is refused with exit 2, the output absent."""
    from advcli.io.reader import InputSet

    passes = _count_passes(dump, tmp_path, monkeypatch, capsys, args)
    assert passes >= 2
    original = dump.read_bytes()
    orig = InputSet.iter_batches
    for k in range(1, passes):
        dump.write_bytes(original)
        calls = {"n": 0}

        def swapping(self, *a, _calls=calls, _k=k, **kw):
            if _calls["n"] == _k:
                _swap(dump, how)
            _calls["n"] += 1
            return orig(self, *a, **kw)

        monkeypatch.setattr(InputSet, "iter_batches", swapping)
        out = tmp_path / "out.parquet"
        code, stdout, err = run_main(["run", str(dump), "-o", str(out), *args, "-q"], capsys)
        assert code == 2, (how, k, err)
        assert "the input changed during the run" in err and "Traceback" not in err, err
        assert {"replaced": "replaced by another file", "overwritten": "size went from",
                "truncated": "size went from"}[how] in err or how == "overwritten", err
        assert not out.exists() and leftovers(tmp_path) == [], leftovers(tmp_path)
    monkeypatch.setattr(InputSet, "iter_batches", orig)


def test_an_input_rewritten_while_a_pass_reads_it_is_refused(dump, tmp_path, monkeypatch, capsys):
    """Rewritten in place in the middle of a pass (after its first batch): the pass's end sees it."""
    from advcli.io.reader import InputSet

    orig = InputSet._iter_batches
    state = {"done": False}

    def rewriting(self, *a, **kw):
        for i, item in enumerate(orig(self, *a, **kw)):
            yield item
            if i == 0 and not state["done"]:
                state["done"] = True
                st = os.stat(dump)
                _swap(dump, "overwritten")
                os.utime(dump, ns=(st.st_atime_ns, st.st_mtime_ns + 1))

    monkeypatch.setattr(InputSet, "_iter_batches", rewriting)
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", str(dump), "-o", str(out), *GAE, "--chunk-rows", "50", "-q"], capsys)
    assert code == 2, err
    assert "the input changed during the run" in err
    assert not out.exists() and leftovers(tmp_path) == []


def test_an_unchanged_input_runs_as_before(dump, tmp_path, capsys):
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", str(dump), "-o", str(out), *GAE, "--chunk-rows", "50", "-q"], capsys)
    assert code == 0, err
    assert pq.read_table(out).num_rows == 200


# ------------------------------------------------------------------ 2. a user estimator that exits or prints
USER_FNS = '''\
import os
import sys


def exits0(rewards, **kw):
    sys.exit(0)


def exits3(rewards, **kw):
    sys.exit(3)


def hard_exit(rewards, **kw):
    os._exit(0)


def chatty(rewards, **kw):
    print("hello from the estimator")
    return rewards - rewards.mean()
'''


@pytest.fixture
def user_file(tmp_path):
    p = tmp_path / "my_fns.py"
    p.write_text(USER_FNS)
    return p


@pytest.mark.parametrize("fn, call, line", [("exits0", "sys.exit(0)", 6), ("exits3", "sys.exit(3)", 10),
                                            ("hard_exit", "os._exit(0)", 14)])
def test_a_user_estimator_that_exits_is_an_error_and_writes_nothing(fn, call, line, user_file, dump, tmp_path):
    """A real process: sys.exit(0) / os._exit(0) in the function must not end advcli with exit 0 (or
    the user's code), nothing written; the message names the call and the line."""
    from conftest import run_cli

    out = tmp_path / "out.parquet"
    r = run_cli("run", dump, "-o", out, "--estimator", f"{user_file}:{fn}", "-q")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f"it called {call}" in r.stderr and f"my_fns.py:{line}:" in r.stderr, r.stderr
    assert "nothing was written" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and leftovers(tmp_path) == ["my_fns.py"]


def test_print_in_a_user_estimator_keeps_json_on_stdout_clean(user_file, dump, tmp_path):
    import json

    from conftest import run_cli

    out = tmp_path / "out.parquet"
    r = run_cli("run", dump, "-o", out, "--estimator", f"{user_file}:chatty", "--json")
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)  # stdout is the report alone
    assert "hello from the estimator" in r.stderr
    assert pq.read_table(out).num_rows == 200


def test_sys_exit_while_a_user_file_is_imported_is_an_error(tmp_path, dump):
    from conftest import run_cli

    (tmp_path / "at_import.py").write_text("import sys\nsys.exit(0)\n\ndef f(rewards, **kw):\n    return rewards\n")
    r = run_cli("run", dump, "-o", tmp_path / "out.parquet", "--estimator", f"{tmp_path / 'at_import.py'}:f", "-q")
    assert r.returncode == 2 and "failed to import: it called sys.exit(0)" in r.stderr, r.stderr
    assert not (tmp_path / "out.parquet").exists()
