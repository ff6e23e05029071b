"""Interruption: SIGINT, SIGTERM or SIGKILL at any moment leaves nothing at the output path and an
earlier output intact; SIGINT/SIGTERM exit with one short message (130 / 143); the temporary file a
killed run leaves behind is recognised and removed by the next run for that output.

Real processes are interrupted mid-write with the test-only hook ``ADVCLI_TEST_SLOW_WRITE``
(seconds to sleep before each written batch, advcli/io/writer.py), so a small dump stays in its
write pass long enough. In-process tests raise KeyboardInterrupt at every chunk boundary of every
pass and in every step after the write pass (the report, the summary), and fail or signal inside the
final renames (advcli/io/commit.py), to cover "any moment" deterministically.
"""
from __future__ import annotations

import glob
import hashlib
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, SAMPLE, interrupted_once_created, run_main

from advcli.sample import make_table

GRPO = ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae"]
EARLIER = b"PAR1 an earlier output that must survive PAR1"


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    p = tmp_path_factory.mktemp("intr") / "in.parquet"
    pq.write_table(make_table(400, group_size=8, min_len=4, max_len=64, seed=5), p)
    return str(p)


def sha(p) -> str:
    with open(p, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def temps(out) -> list[str]:
    d, name = os.path.split(str(out))
    return [p for p in glob.glob(os.path.join(d, f".{name}.advcli-tmp-*")) if not p.endswith("-probe")]


def start(dump, out, delay="0.25", extra=()):
    env = dict(os.environ, ADVCLI_TEST_SLOW_WRITE=delay)
    return subprocess.Popen([sys.executable, "-m", "advcli", "run", dump, "-o", str(out), *GRPO, "--chunk-rows", "20",
                             "-q", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_temp(proc, out, timeout=120.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if temps(out):
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before writing: rc={proc.returncode} {proc.stderr.read()}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail("no temporary output appeared")


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_mid_write_keeps_earlier_output(sig, code, dump, tmp_path):
    out = tmp_path / "out.parquet"
    out.write_bytes(EARLIER)
    proc = start(dump, out, extra=("--force",))
    wait_for_temp(proc, out)
    time.sleep(0.4)  # a few batches into the temporary file
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert err.count("advcli: error:") == 1 and "interrupted" in err
    assert out.read_bytes() == EARLIER
    assert temps(out) == []


def test_sigkill_mid_write_then_next_run_cleans_up(dump, tmp_path):
    out = tmp_path / "out.parquet"
    proc = start(dump, out)
    wait_for_temp(proc, out)
    time.sleep(0.3)
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()  # nothing half-written at the output path
    left = temps(out)
    assert len(left) == 1 and left[0].endswith(f"-{proc.pid}")  # the killed run's temporary file
    # the next run recognises it (its process is gone), removes it and writes the output
    from conftest import run_cli

    p = run_cli("run", dump, "-o", out, *GRPO, "-q")
    assert p.returncode == 0, p.stderr
    assert temps(out) == []
    assert pq.read_table(out).num_rows == 400


def test_a_live_runs_temp_is_not_removed(tmp_path):
    """Only temporary files of dead processes are stale: a running advcli's is left alone."""
    from advcli.io.temps import TMP_TAG
    from advcli.io.writer import clean_stale_temps

    out = tmp_path / "o.parquet"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = tmp_path / f".o.parquet{TMP_TAG}{live.pid}"
        mine.write_bytes(b"x")
        dead = tmp_path / f".o.parquet{TMP_TAG}999999999"
        dead.write_bytes(b"x")
        other = tmp_path / f".other.parquet{TMP_TAG}999999999"  # another output's: not ours to touch
        other.write_bytes(b"x")
        removed = clean_stale_temps(str(out))
        assert removed == [str(dead)]
        assert mine.exists() and other.exists() and not dead.exists()
    finally:
        live.kill()
        live.wait()


# --------------------------------------------------------------------- in-process, every moment
def _run_main(argv, capsys):
    code, _, err = run_main(argv, capsys)
    return code, err


def _count_batches(dump, monkeypatch, tmp_path, capsys):
    from advcli.io.reader import InputSet

    orig = InputSet.iter_batches
    calls = {"n": 0}

    def counting(self, *a, **k):
        for item in orig(self, *a, **k):
            calls["n"] += 1
            yield item

    monkeypatch.setattr(InputSet, "iter_batches", counting)
    code, err = _run_main(["run", dump, "-o", str(tmp_path / "count.parquet"), *GRPO, "--chunk-rows", "100", "-q"],
                          capsys)
    assert code == 0, err
    monkeypatch.setattr(InputSet, "iter_batches", orig)
    return calls["n"]


def test_keyboard_interrupt_at_every_chunk_of_every_pass(dump, tmp_path, monkeypatch, capsys):
    from advcli.io.reader import InputSet

    total = _count_batches(dump, monkeypatch, tmp_path, capsys)
    assert total >= 8  # 4 chunks in each of >= 2 passes
    orig = InputSet.iter_batches
    for k in range(total + 1):
        out = tmp_path / f"out{k}.parquet"
        out.write_bytes(EARLIER)
        seen = {"n": 0}

        def interrupting(self, *a, _seen=seen, _k=k, **kw):
            for item in orig(self, *a, **kw):
                if _seen["n"] == _k:
                    raise KeyboardInterrupt
                _seen["n"] += 1
                yield item

        monkeypatch.setattr(InputSet, "iter_batches", interrupting)
        code, err = _run_main(["run", dump, "-o", str(out), *GRPO, "--chunk-rows", "100", "--force", "-q"], capsys)
        if k < total:
            assert code == 130, (k, err)
            assert "interrupted" in err and "Traceback" not in err
            assert out.read_bytes() == EARLIER, k
        else:  # past the last chunk: the run completes
            assert code == 0, err
            assert pq.read_table(out).num_rows == 400
        assert temps(out) == [], k
    monkeypatch.setattr(InputSet, "iter_batches", orig)


def olds(out) -> list[str]:
    d, name = os.path.split(str(out))
    return glob.glob(os.path.join(d, f".{name}.advcli-old-*"))


class _ReplaceHook:
    """advcli.io.commit's ``os`` with ``link`` and ``replace`` hooked: ``hook(n, op, src, dst)`` before
    the n-th of them."""

    def __init__(self, hook):
        self.hook, self.n = hook, 0

    def __getattr__(self, name):
        return getattr(os, name)

    def link(self, a, b, **kw):
        self.n += 1
        self.hook(self.n, "link", a, b)
        os.link(a, b, **kw)

    def replace(self, a, b):
        self.n += 1
        self.hook(self.n, "replace", a, b)
        os.replace(a, b)


@pytest.mark.parametrize("links,fail_at", [(True, 1), (False, 1), (False, 2)])
def test_a_failed_rename_puts_the_earlier_file_back(links, fail_at, dump, tmp_path, monkeypatch, capsys):
    """The commit keeps the earlier file aside (a hard link; a rename where links fail), then renames the
    new one in: a failure of any rename leaves the earlier file at the output path, and no temporary
    file anywhere. ``fail_at``: which rename fails (without links, 1 is the move aside)."""
    from advcli.io import commit

    out = tmp_path / "out.parquet"
    out.write_bytes(EARLIER)
    renames = {"n": 0}

    def hook(n, op, a, b):
        if op == "link" and not links:
            raise OSError(1, "Operation not permitted")  # (a file system without hard links)
        if op == "replace":
            renames["n"] += 1
            if renames["n"] == fail_at:
                raise OSError(28, "No space left on device")

    monkeypatch.setattr(commit, "os", _ReplaceHook(hook))
    code, err = _run_main(["run", dump, "-o", str(out), *GRPO, "--force", "-q"], capsys)
    assert code == 2 and "cannot put the finished output in place" in err and "Traceback" not in err, err
    assert out.read_bytes() == EARLIER
    assert temps(out) == [] and olds(out) == []


def test_a_signal_during_the_commit_is_held_and_the_run_completes(dump, tmp_path, monkeypatch, capsys):
    """SIGINT and SIGTERM delivered in the middle of the commit (between moving the earlier file aside and
    renaming the new one in) are held: the run finishes, status 0, the new output complete in place."""
    import signal as _signal

    from advcli.io import commit

    out = tmp_path / "out.parquet"
    out.write_bytes(EARLIER)

    def interrupt(n, op, a, b):
        if n == 1:  # the earlier file kept aside, the new one not yet in place
            os.kill(os.getpid(), _signal.SIGINT)
            os.kill(os.getpid(), _signal.SIGTERM)

    monkeypatch.setattr(commit, "os", _ReplaceHook(interrupt))
    before = _signal.getsignal(_signal.SIGINT)
    code, err = _run_main(["run", dump, "-o", str(out), *GRPO, "--force", "-q"], capsys)
    assert code == 0, err
    assert pq.read_table(out).num_rows == 400 and "advantages" in pq.read_table(out).column_names
    assert temps(out) == [] and olds(out) == []
    assert _signal.getsignal(_signal.SIGINT) == before  # the handlers are restored


@pytest.mark.parametrize("where", ["finish_outputs", "write_report", "print_summary"])
def test_ctrl_c_after_the_write_pass_leaves_the_output_path_as_it_was(where, dump, tmp_path, monkeypatch, capsys):
    """After the write pass the output is complete in its temporary file, but the run is not done: the
    response-level rewrite, the report (seconds for a large --report), the summary. Ctrl-C there exits
    130 and the output path still holds the earlier file (the commit comes last)."""
    import advcli.report.output
    import advcli.runs.runner

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    module = advcli.runs.runner if where == "finish_outputs" else advcli.report.output
    monkeypatch.setattr(module, where, interrupt)
    out = tmp_path / "out.parquet"
    out.write_bytes(EARLIER)
    report = tmp_path / "r.json"
    code, err = _run_main(["run", dump, "-o", str(out), *GRPO, "--force", "--report", str(report)], capsys)
    assert code == 130, err
    assert err.count("advcli: error:") == 1 and "nothing was written" in err
    assert out.read_bytes() == EARLIER
    assert temps(out) == [] and olds(out) == []


# `python -m advcli`, saying on stdout when the interpreter is up and about to enter advcli's entry point
STARTED_THEN_ENTRY = ("import sys\nsys.stdout.write('started\\n'); sys.stdout.flush()\nsys.argv[0] = 'advcli'\n"
                      "from advcli._entry import main\nmain()\n")


def test_sigint_at_any_moment_of_a_run_with_a_report(dump, tmp_path):
    """Real SIGINTs at spread moments of runs that write an HTML report: a run that exits 130 left the
    earlier file in place; one that exits 0 left the complete new output; never anything else."""
    seen = set()
    for i, delay in enumerate((0.5, 1.5, 2.5, 3.5, 5.0, 8.0)):
        out = tmp_path / f"out{i}.parquet"
        out.write_bytes(EARLIER)
        # the delay counts from when the interpreter is up and runs advcli's entry point (on a loaded machine
        # Python's own start can take longer than 0.5 s, and a SIGINT before it installs its handler kills the
        # process by the signal: that is the interpreter's start, not advcli's run, which this test is about;
        # test_ctrl_c_while_the_cli_imports_is_a_message_not_a_traceback covers the entry point's imports)
        proc = subprocess.Popen([sys.executable, "-c", STARTED_THEN_ENTRY, "run", dump, "-o", str(out), *GRPO,
                                 "--force", "--report", str(tmp_path / f"r{i}.html"), "-q"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "started\n"
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert "Traceback" not in err, err
        if proc.returncode == 130:
            assert out.read_bytes() == EARLIER, (delay, err)
        else:
            assert proc.returncode == 0, (delay, err)
            assert pq.read_table(out).num_rows == 400
        assert temps(out) == [] and olds(out) == []
        seen.add(proc.returncode)
    assert 130 in seen  # (at least one signal came while the run was working)


@pytest.mark.parametrize("raised", ["KeyboardInterrupt", "RuntimeError('Error calling __set_name__') from "
                                                         "KeyboardInterrupt()"])
def test_ctrl_c_while_the_cli_imports_is_a_message_not_a_traceback(raised):
    """A KeyboardInterrupt raised while the entry point imports the CLI (the first ~0.2 s) ends with
    one line and status 130, like an interrupt during a run; also when Python wrapped it (a Ctrl-C while a
    class is built, in typer's or pydantic's imports, reaches the caller as a RuntimeError it caused)."""
    code = (
        "import sys, importlib.abc\n"
        "class Boom(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'advcli.cli':\n"
        f"            raise {raised}\n"
        "sys.meta_path.insert(0, Boom())\n"
        "from advcli._entry import main\n"
        "main()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 130
    assert "Traceback" not in r.stderr
    assert r.stderr.strip() == "advcli: error: interrupted while starting: nothing was read or written"


def test_ctrl_c_while_filter_writes_its_report_leaves_the_output_path_as_it_was(dump, tmp_path, monkeypatch,
                                                                                 capsys):
    """`advcli filter` puts its output in place last too: a Ctrl-C while its report is written exits 130
    with the earlier file untouched."""
    import advcli.report

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(advcli.report, "write_report", interrupt)
    out = tmp_path / "kept.parquet"
    out.write_bytes(EARLIER)
    code, err = _run_main(["filter", dump, "-o", str(out), "--drop-uniform", "--force", "--report",
                           str(tmp_path / "f.html")], capsys)
    assert code == 130, err
    assert out.read_bytes() == EARLIER
    assert temps(out) == [] and olds(out) == []


def test_ctrl_c_that_python_wraps_while_a_class_is_built_is_an_interrupt_not_a_bug(dump, tmp_path, monkeypatch,
                                                                                  capsys):
    """A KeyboardInterrupt that lands while a class body is finished (a descriptor's ``__set_name__``, as
    when Ctrl-C comes while torch imports) reaches the entry point as ``RuntimeError: Error calling
    __set_name__``, caused by the interrupt: status 130 and one line, not "internal error", and the
    earlier output left as it was."""
    import advcli.report.output

    class Slow:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    def build_a_class(*a, **k):
        class Spec:  # noqa: F841 - its creation is the point
            field = Slow()

    monkeypatch.setattr(advcli.report.output, "write_report", build_a_class)
    out = tmp_path / "kept.parquet"
    out.write_bytes(EARLIER)
    code, err = _run_main(["run", dump, "-o", str(out), *GRPO, "--force", "--report", str(tmp_path / "r.html")],
                          capsys)
    assert code == 130, err
    assert "internal error" not in err and "Traceback" not in err
    assert out.read_bytes() == EARLIER
    assert temps(out) == [] and olds(out) == []


# ------------------------------------------------------------------ a stop signalled more than once
def test_a_repeated_sigterm_stops_the_run_once_and_cleans_up(dump, tmp_path):
    """A stop often comes more than once (a scheduler repeating its SIGTERM; the parent-death signal a command
    forked by a killed server gets once per server thread). The repeats, wherever they land in the clean-up
    of the first, must not cut it short: status 143, one message, no traceback, the earlier output intact,
    no temporary file."""
    out = tmp_path / "out.parquet"
    out.write_bytes(EARLIER)
    proc = start(dump, out, extra=("--force",))
    wait_for_temp(proc, out)
    time.sleep(0.3)
    for _ in range(8):  # spread over the clean-up (the decoding thread's stop takes up to a chunk's decode)
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and err.count("advcli: error:") == 1 and "interrupted" in err, err
    assert out.read_bytes() == EARLIER
    assert temps(out) == []


def test_a_second_interrupt_inside_the_write_pass_clean_up_still_removes_the_output(dump, tmp_path, monkeypatch,
                                                                                    capsys):
    """Deterministically: Ctrl-C in the write pass, then a second one as its clean-up begins (before the
    temporary output is removed). The second is held until the clean-up is done: status 130, the earlier
    output intact, no temporary file. (It used to escape the clean-up and leave the file.)"""
    from advcli.pipeline import write as write_mod

    real_check, real_close = write_mod.refuse_overflow, write_mod._close_spill
    calls = {"chunks": 0, "second": 0}

    def interrupt_at_the_third_chunk(*a, **k):  # called once the chunk's output is open
        calls["chunks"] += 1
        if calls["chunks"] == 3:
            raise KeyboardInterrupt
        return real_check(*a, **k)

    def second_ctrl_c(res):  # the clean-up's first step
        if calls["chunks"] >= 3 and not calls["second"]:
            calls["second"] += 1
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.01)  # the handler runs here, on this thread
        return real_close(res)

    monkeypatch.setattr(write_mod, "refuse_overflow", interrupt_at_the_third_chunk)
    monkeypatch.setattr(write_mod, "_close_spill", second_ctrl_c)
    out = tmp_path / "out.parquet"
    out.write_bytes(EARLIER)
    code, err = _run_main(["run", dump, "-o", str(out), *GRPO, "--chunk-rows", "20", "--force", "-q"], capsys)
    assert calls["second"] == 1  # the second Ctrl-C did come, inside the clean-up
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert out.read_bytes() == EARLIER
    assert temps(out) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers as they were


def test_a_signal_held_during_a_clean_up_is_raised_after_it():
    """advcli.io.commit.shielded: a Ctrl-C inside is recorded, the block runs to its end, then it is raised
    (``redeliver``) or dropped (the clean-up was already for an interrupt)."""
    from advcli.io.commit import shielded

    done = []
    with pytest.raises(KeyboardInterrupt):
        with shielded():
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.01)
            done.append("rest of the clean-up")
    assert done == ["rest of the clean-up"]
    with shielded(redeliver=False):
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.01)
        done.append("again")
    assert done == ["rest of the clean-up", "again"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_interrupt_as_the_output_file_is_created_leaves_no_temporary_file(dump, tmp_path, monkeypatch, capsys):
    """Ctrl-C landing the moment the temporary output is created, before the write pass holds its writer
    (Python runs a handler right after the call that created the file returns): held until the writer is
    held, then raised; the clean-up removes the file. (It was left behind, no writer holding it.)"""
    from advcli.pipeline import write as write_mod

    made = []
    monkeypatch.setattr(write_mod, "SplicedParquetWriter",
                        interrupted_once_created(write_mod.SplicedParquetWriter, made))
    monkeypatch.setattr(write_mod, "AtomicParquetWriter", interrupted_once_created(write_mod.AtomicParquetWriter, made))
    out = tmp_path / "out.parquet"
    out.write_bytes(EARLIER)
    code, err = _run_main(["run", dump, "-o", str(out), *GRPO, "--chunk-rows", "20", "--force", "-q"], capsys)
    assert len(made) == 1  # the interrupt came right after the file was made
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert out.read_bytes() == EARLIER
    assert temps(out) == [] and not os.path.exists(made[0])


# A stand-in for torch's import: a SIGINT lands in the middle, and the module swallows the KeyboardInterrupt,
# as torch's C extension does with an error in the numpy import it makes as it initialises (it warns and goes
# on without numpy). It records on builtins whether it saw the interrupt and whether it ran to its end.
FAKE_TORCH = """
import builtins, os, signal, time
try:
    os.kill(os.getpid(), signal.SIGINT)  # the signal's handler runs as this returns
    time.sleep(0.2)
    builtins.SWALLOWED = False
except KeyboardInterrupt:
    builtins.SWALLOWED = True
builtins.COMPLETE = True
"""


@pytest.mark.parametrize("module, first_use", [("torch", "torch.anything_at_all  # the lazy proxy imports it"),
                                               ("pandas", "import pandas; pandas.anything_at_all")])
@pytest.mark.parametrize("held", [True, False])
def test_a_ctrl_c_while_torch_imports_is_held_until_it_is_loaded(tmp_path, held, module, first_use):
    """The command line imports torch and pandas with SIGINT held (advcli.lazy_torch.import_held with
    advcli.io.commit.shielded): the signal is not raised inside their import, where their C extensions swallow
    it (pandas: or are left half-imported), but once the module is loaded, so the command stops there. Without
    the hold (the control) the import swallows it and the command would go on."""
    (tmp_path / module).mkdir()
    (tmp_path / module / "__init__.py").write_text(FAKE_TORCH)
    code = ("import builtins, sys\n"
            "from advcli.io.commit import shielded\n"
            "from advcli.lazy_torch import import_held, torch\n"
            f"hold = import_held(shielded) if {held} else __import__('contextlib').nullcontext()\n"
            "try:\n"
            "    with hold:\n"
            f"        {first_use}\n"
            "    print('went on')\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted')\n"
            "except AttributeError:\n"
            "    print('went on')\n"
            "print(builtins.SWALLOWED, builtins.COMPLETE, sys.meta_path[0].__class__.__name__)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    outcome, state = r.stdout.split("\n")[:2]
    swallowed, complete, first_finder = state.split()
    assert complete == "True"  # torch's import ran to its end either way
    assert first_finder != "_FirstHeavyImport"  # the finder is gone once the hold ends
    if held:
        assert (outcome, swallowed) == ("interrupted", "False")
    else:
        assert (outcome, swallowed) == ("went on", "True")


@pytest.mark.parametrize("argv", [["stats", SAMPLE], ["filter", SAMPLE, "-o", "{tmp}/f.parquet", "--drop-uniform"]])
def test_pandas_is_first_imported_by_advcli_not_inside_pyarrow(tmp_path, argv):
    """pyarrow's compiled Array.to_numpy imports pandas the first time it converts; a Ctrl-C held through that
    import (import_held) and raised again at its end was lost there: `advcli stats` ran to its end, exit 0, its
    report written. stats and filter import pandas themselves first, from Python, where the Ctrl-C stops them."""
    code = ("import builtins, sys, traceback\n"
            "first = []\n"
            "real = builtins.__import__\n"
            "def spy(name, globals=None, *a, **k):\n"
            "    if name == 'pandas' and 'pandas' not in sys.modules and not first:\n"
            "        first.append(traceback.extract_stack()[-2].line)  # the line the import ran from\n"
            "    return real(name, globals, *a, **k)\n"
            "builtins.__import__ = spy\n"
            f"sys.argv = ['advcli', *{[a.replace('{tmp}', str(tmp_path)) for a in argv]!r}, '-q']\n"
            "from advcli._entry import main\n"
            "try:\n"
            "    main()\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('FIRST', first)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    said = [ln for ln in r.stdout.splitlines() if ln.startswith("FIRST")]
    assert said and said[0].startswith("FIRST ['import pandas"), (r.stdout, r.stderr)  # not '... .to_numpy(...)'
