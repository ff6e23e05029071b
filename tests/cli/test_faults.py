"""Nothing silently wrong under faults (issue 46): an input that changes during a run, a user
estimator that exits or prints, overflowing rewards, silent repairs, cyclic or malformed traces, a
full disk. Each test makes the fault happen (a hook the test controls), then checks the exit code,
the message, and that nothing wrong or partial was written. docs/errors.md lists the guarantees.
"""
from __future__ import annotations

import glob
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_main

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


def test_a_library_call_leaves_the_callers_stdout_alone(user_file, dump, tmp_path, capsys):
    """In a library call a user estimator's print goes where the caller's sys.stdout points, and sys.stdout is
    never swapped: swapping it is process-wide, so another thread's prints went to stderr meanwhile (and a
    redirect_stdout ending meanwhile stayed in place for good). The command line still sends them to stderr,
    in process too (the test above: in a real process)."""
    import io
    import sys
    import threading
    from contextlib import redirect_stdout

    from conftest import run_main

    import advcli

    seen, release, entered = [], threading.Event(), threading.Event()
    (tmp_path / "waits.py").write_text(
        "import sys\n"
        "def waits(rewards, **kw):\n"
        "    print('hello from the estimator')\n"
        "    sys.modules['__advcli_test_hook__'].entered.set()\n"
        "    sys.modules['__advcli_test_hook__'].release.wait(60)\n"
        "    return rewards - rewards.mean()\n")
    hook = type(sys)("__advcli_test_hook__")
    hook.entered, hook.release = entered, release
    sys.modules["__advcli_test_hook__"] = hook
    try:
        buf = io.StringIO()
        with redirect_stdout(buf):
            t = threading.Thread(target=lambda: advcli.run(dump, None, estimator=f"{tmp_path / 'waits.py'}:waits"))
            t.start()
            assert entered.wait(60)
            seen.append(sys.stdout is buf)  # the caller's stdout while the user function runs
            print("from the caller's main thread")
            release.set()
            t.join(120)
        assert seen == [True]
        assert "hello from the estimator" in buf.getvalue() and "from the caller's main thread" in buf.getvalue()
    finally:
        release.set()
        del sys.modules["__advcli_test_hook__"]
    capsys.readouterr()
    code, out, err = run_main(["run", dump, "-o", str(tmp_path / "o.parquet"), "--estimator",
                               f"{user_file}:chatty", "--json"], capsys)
    assert code == 0 and "hello from the estimator" in err and "hello" not in out


def test_sys_exit_while_a_user_file_is_imported_is_an_error(tmp_path, dump):
    from conftest import run_cli

    (tmp_path / "at_import.py").write_text("import sys\nsys.exit(0)\n\ndef f(rewards, **kw):\n    return rewards\n")
    r = run_cli("run", dump, "-o", tmp_path / "out.parquet", "--estimator", f"{tmp_path / 'at_import.py'}:f", "-q")
    assert r.returncode == 2 and "failed to import: it called sys.exit(0)" in r.stderr, r.stderr
    assert not (tmp_path / "out.parquet").exists()


# ------------------------------------------------------------------ 3. overflow
@pytest.fixture
def huge(tmp_path):
    """Rewards ±3e38 (finite float32): a group's sum leaves float32's range (3.4e38)."""
    import numpy as np
    import pyarrow as pa

    t = make_table(64, group_size=8, min_len=4, max_len=16, seed=1)
    r = np.full(64, 3e38, dtype=np.float32)
    r[1::2] = -3e38
    t = t.set_column(t.schema.get_field_index("reward"), "reward", pa.array(r, pa.float32()))
    p = tmp_path / "in.parquet"
    pq.write_table(t, p)
    return p


@pytest.mark.parametrize("key, value", [("algorithm.lam", "1.5"), ("algorithm.gamma", "1.2")])
def test_a_discount_above_one_that_overflows_is_refused_naming_it(key, value, tmp_path, capsys):
    """γ or λ above 1 (a typo for 0.95): GAE's sums grow as λ^T, reach inf in float32 over a 300-token row and
    the whitening turns every advantage NaN. Exit 2 naming the row and the value, nothing written; on rows
    short enough to stay finite the run goes on (verl runs it too)."""
    out = tmp_path / "out.parquet"
    src = os.path.join(os.path.dirname(__file__), "..", "..", "sample_data", "rollouts.parquet")  # up to 400 tokens
    code, _, err = run_main(["run", src, "-o", str(out), "--flavor", "verl", "--set", "algorithm.adv_estimator=gae",
                             "--set", f"{key}={value}", "-q"], capsys)
    assert code == 2, err
    name = key.split(".")[-1]
    assert f"{name}={float(value):g} above 1 makes the discounted sums grow geometrically" in err and "row " in err
    assert not out.exists() and leftovers(tmp_path) == []
    short = tmp_path / "short.parquet"
    pq.write_table(pa.table({"reward": pa.array([1.0, 0.0], pa.float32()), "response_mask": [[1, 1, 1], [1, 1]],
                             "values": pa.array([[0.0] * 3, [0.0] * 2], pa.list_(pa.float32()))}), short)
    code, _, err = run_main(["run", str(short), "-o", str(out), "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=gae", "--set", f"{key}={value}", "-q"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("flavor, sets", [
    ("verl", ["algorithm.adv_estimator=gae", "algorithm.gamma=.nan"]),
    ("verl", ["algorithm.adv_estimator=gae", "algorithm.lam=.NaN"]),
    ("verl", ["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.kl_coef=.nan"]),
    ("advcli", ["estimator.name=gae", "estimator.gamma=.nan"]),
    ("advcli", ["advantage.clip=[-1, .nan]"]),
])
def test_a_nan_setting_is_refused_naming_the_key(flavor, sets, tmp_path, capsys):
    """YAML's .nan parses as a float: it went through the float check and every advantage was written NaN with
    exit 0. Refused, naming the key; nothing written."""
    out = tmp_path / "out.parquet"
    src = os.path.join(os.path.dirname(__file__), "..", "..", "sample_data", "rollouts.parquet")
    code, _, err = run_main(["run", src, "-o", str(out), "--flavor", flavor, *[a for s in sets for a in ("--set", s)],
                             "-q"], capsys)
    key = sets[-1].split("=")[0]
    assert code == 2 and f"advcli: error: key {key}: NaN is not a setting" in err, err
    assert not out.exists()


@pytest.mark.parametrize("est", ["grpo", "rloo"])
def test_overflowing_rewards_are_refused_with_the_row_and_the_fix(est, huge, tmp_path, capsys):
    """float32: (3e38 + 3e38) is inf, the group mean inf, the advantages NaN: refused (exit 2, nothing
    written), naming the row and --precision float64; float64 holds the sums: every advantage finite,
    and GRPO's are ±(std-normalised) values with |A| < 3 for a group of 8 split 4/4 (A = ±(1 / 1.069))."""
    import numpy as np

    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", str(huge), "-o", str(out), "--flavor", "verl", "--set",
                             f"algorithm.adv_estimator={est}", "-q"], capsys)
    assert code == 2, err
    assert "row 0: advantages nan" in err and "float32 statistics overflow" in err and "--precision float64" in err
    assert not out.exists() and leftovers(tmp_path) == []
    code, _, err = run_main(["run", str(huge), "-o", str(out), "--flavor", "verl", "--set",
                             f"algorithm.adv_estimator={est}", "--precision", "float64", "-q"], capsys)
    if est == "rloo":  # r − mean of the others: ±(3e38 + 3e38·k/7), beyond float32, the output's type
        assert code == 2 and "is beyond float32, the output's type" in err, err
        assert not out.exists() and leftovers(tmp_path) == []
        return
    assert code == 0, err
    t = pq.read_table(out)
    adv = np.concatenate(t.column("advantages").to_numpy(zero_copy_only=False))
    assert np.isfinite(adv).all()
    if est == "grpo":  # (r − mean) / (unbiased std + 1e-6) per prompt, in float64, on every valid token
        r = t.column("reward").to_numpy().astype(np.float64)
        pid = t.column("prompt_id").to_numpy(zero_copy_only=False)
        for i, (row_adv, mask) in enumerate(zip(t.column("advantages").to_pylist(),
                                                t.column("response_mask").to_pylist())):
            g = r[pid == pid[i]]
            want = (r[i] - g.mean()) / (g.std(ddof=1) + 1e-6)
            assert np.allclose([a for a, m in zip(row_adv, mask) if m], want, rtol=1e-6), i


def test_critic_values_whose_squares_overflow_float64_are_refused(tmp_path, capsys):
    """A critic value of 1e200 under --precision float64: GAE's advantages are finite before the whitening, whose
    variance (1e400) is inf, so every advantage was written NaN with exit 0 (only rewards were looked at). The
    values count as the rewards do: refused, naming the row and the values; nothing written. At float32 the
    value itself is beyond the precision, named at the read."""
    t = pq.read_table(SAMPLE)
    values = t.column("values").to_pylist()
    values[3][1] = 1e200
    bad = tmp_path / "in.parquet"  # (leftovers() passes over the input)
    pq.write_table(t.set_column(t.column_names.index("values"), "values", pa.array(values, pa.list_(pa.float64()))),
                   bad)
    out = tmp_path / "out.parquet"
    gae = ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae"]
    code, _, err = run_main(["run", str(bad), "-o", str(out), *gae, "--precision", "float64", "-q"], capsys)
    assert code == 2 and "the float64 statistics overflow (values up to 1e+200" in err, err
    assert "hint: scale the values down" in err and "RuntimeWarning" not in err
    assert not out.exists() and leftovers(tmp_path) == []
    code, _, err = run_main(["run", str(bad), "-o", str(out), *gae, "-q"], capsys)
    assert code == 2 and "column 'values', row 3, position 1: value 1e+200 is beyond float32" in err, err


# ------------------------------------------------------------------ 4. silent repairs; 5. malformed traces
def _nemo(tmp_path, mask_value=1, sample_mask=1.0):
    from test_format_nemo import SAMPLES, write_step

    d = tmp_path / "logs"
    d.mkdir()
    p = d / "train_data_step1.jsonl"
    write_step(p, SAMPLES, 1, sample_masks=[sample_mask] + [1.0] * (len(SAMPLES) - 1))
    lines = p.read_text().splitlines()
    import json

    rec = json.loads(lines[2])
    m = rec["token_loss_mask"][0]
    m[m.index(1)] = mask_value
    lines[2] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    return d


@pytest.mark.parametrize("value", [2, -1, 0.5])
def test_a_nemo_mask_value_other_than_0_or_1_is_refused(value, tmp_path, capsys):
    """NeMo multiplies by token_loss_mask: a 2 weighs the token twice. Read as 1 it was a silent repair."""
    d = _nemo(tmp_path, mask_value=value)
    out = tmp_path / "o.parquet"
    for cmd in (["convert", str(d), "-o", str(out)], ["run", str(d), "-o", str(out), "-q"]):
        code, _, err = run_main(cmd, capsys)
        assert code == 2, err
        assert f"train_data_step1.jsonl:3: field 'token_loss_mask' holds {value!r} at position" in err, err
        assert not out.exists()


def test_a_nemo_sample_mask_other_than_0_or_1_is_refused(tmp_path, capsys):
    d = _nemo(tmp_path, sample_mask=2.0)
    code, _, err = run_main(["convert", str(d), "-o", str(tmp_path / "o.parquet")], capsys)
    assert code == 2 and ":1: field 'sample_loss_mask' is 2.0; a loss mask is 0 or 1" in err, err


def _primerl(tmp_path, edit):
    """One step of prime-rl traces (tests/formats/test_format_primerl.py's layout), ``edit(episodes)`` applied."""
    import json

    from test_format_primerl import build

    _, lines = build(tmp_path / "src")
    eps = lines[1]
    edit(eps)
    d = tmp_path / "src" / "rollouts" / "step_1" / "train" / "all"
    (d / "traces.jsonl").write_text("".join(json.dumps(ep) + "\n" for ep in eps))
    return d / "traces.jsonl"


def _cycle(eps):
    nodes = eps[0]["traces"][0]["nodes"]
    nodes[0]["parent"] = len(nodes) - 1  # root -> last node -> ... -> root: every node has a parent


def _cycle_with_leaf(eps):
    nodes = eps[0]["traces"][0]["nodes"]
    nodes.append({"parent": 0, "sampled": False, "token_ids": [1], "mask": [False]})
    nodes[0]["parent"] = 1
    nodes[1]["parent"] = 0


def _out_of_range(eps):
    eps[0]["traces"][0]["nodes"][1]["parent"] = 99


@pytest.mark.parametrize("edit, says", [
    (_cycle, "parent links form a cycle"),
    (_cycle_with_leaf, "parent links from node"),
    (_out_of_range, "node 1 has parent 99, not the index of one of its"),
])
def test_a_primerl_trace_whose_parents_are_no_tree_is_refused(edit, says, tmp_path, capsys):
    """A cycle looped forever (memory growing); an index out of range was an IndexError."""
    src = _primerl(tmp_path, edit)
    out = tmp_path / "o.parquet"
    for cmd in (["convert", str(src), "-o", str(out)], ["run", str(src), "-o", str(out), "-q"]):
        code, _, err = run_main(cmd, capsys)
        assert code == 2, err
        assert "traces.jsonl:1: trace t00: " in err and says in err and "Traceback" not in err, err
        assert not out.exists()


def test_primerl_missing_logprobs_and_rewards_are_said(tmp_path, capsys):
    """Sampled tokens without a log-prob (0 then) and a trace with no reward score (reward 0, as
    Trace.reward sums none) are no longer silent: the conversion says how many and where."""
    def edit(eps):
        tr = eps[0]["traces"][0]
        n = next(n for n in tr["nodes"] if n["sampled"])
        n["logprobs"] = n["logprobs"][:-1]
        eps[1]["traces"][0]["rewards"] = {}

    src = _primerl(tmp_path, edit)
    code, _, err = run_main(["convert", str(src), "-o", str(tmp_path / "o.parquet")], capsys)
    assert code == 0, err
    assert "1 sampled token(s) have no log-prob in the dump (first: trace t00" in err, err
    assert "1 trace(s) have no reward score (first: trace t01, line 2)" in err, err
    # run and validate warn of them too (they said nothing; a KL on the rollout log-probs reads those zeros)
    for cmd in (["run", str(src), "-o", str(tmp_path / "r.parquet"), "--json"], ["validate", str(src), "--json"]):
        code, out, err = run_main(cmd, capsys)
        assert code == 0, err
        warnings = json.loads(out)["warnings"]
        assert any(w.startswith("1 sampled token(s) have no log-prob in the dump (first: trace t00") for w in warnings)
        assert any(w.startswith("1 trace(s) have no reward score (first: trace t01, line 2)") for w in warnings)


def test_deeply_nested_json_is_a_refusal_not_a_recursion_error(tmp_path, capsys):
    src = _primerl(tmp_path, lambda eps: None)
    deep = '{"group": {"id": "g"}, "traces": [], "x": ' + "[" * 100000 + "]" * 100000 + "}\n"
    src.write_text(src.read_text() + deep)
    n = len(src.read_text().splitlines())
    code, _, err = run_main(["convert", str(src), "-o", str(tmp_path / "o.parquet")], capsys)
    assert code == 2, err
    assert f"traces.jsonl:{n}: JSON nested too deeply" in err and "RecursionError" not in err, err


# ------------------------------------------------------------------ 7. a full disk
def _enospc(*a, **k):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def _arrow_enospc(*a, **k):  # pyarrow's IOError carries the text, not always the errno
    raise OSError("IOError: [Errno 28] Error writing bytes to file. Detail: No space left on device")


@pytest.mark.parametrize("raiser", [_enospc, _arrow_enospc], ids=["errno", "arrow"])
@pytest.mark.parametrize("mode", ["full", "sidecar"])
def test_a_full_disk_while_writing_the_output_is_exit_2_naming_the_directory(raiser, mode, dump, tmp_path,
                                                                             monkeypatch, capsys):
    """Was "internal error ... this is a bug" (exit 1) in some runs: the output's file system is full
    (a write of the output raises ENOSPC): exit 2, the directory, its free space, nothing left behind."""
    from advcli.io import splice, writer

    monkeypatch.setattr(writer.AtomicParquetWriter, "_write_group", raiser)
    monkeypatch.setattr(splice.SplicedParquetWriter, "_encode", raiser)
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", str(dump), "-o", str(out), *GAE, "--output-mode", mode, "-q"], capsys)
    assert code == 2, err
    assert f"{tmp_path}: no space left on the device while writing the output" in err, err
    assert "MiB free there now" in err and "this is a bug" not in err
    if mode == "full":
        assert "were needed" in err
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("command", ["run", "filter"])
def test_an_output_another_process_wrote_meanwhile_is_not_replaced_without_force(command, dump, tmp_path,
                                                                                 monkeypatch, capsys):
    """Two commands racing to one absent output without --force both passed the start's check, and the
    second silently replaced the first's finished file: the commit now refuses a target that appeared
    meanwhile (exit 2), the other process's file untouched, nothing of this run left behind."""
    from advcli.io import commit

    real = commit.Staging.commit

    def racing(self):
        for p in self.pending:
            with open(p.target, "w") as fh:
                fh.write("the other process's output")
        real(self)

    monkeypatch.setattr(commit.Staging, "commit", racing)
    out = tmp_path / "out.parquet"
    args = [*GAE] if command == "run" else ["--min-group-size", "2"]
    code, _, err = run_main([command, str(dump), "-o", str(out), *args, "-q"], capsys)
    assert code == 2 and "appeared while this command worked" in err and "--force" in err, err
    assert out.read_text() == "the other process's output" and leftovers(tmp_path) == ["out.parquet"]
    code, _, err = run_main([command, str(dump), "-o", str(out), *args, "-q", "--force"], capsys)
    assert code == 0, err  # with --force the last one wins, as before


def test_a_full_disk_under_filter_and_convert_names_the_directory(dump, tmp_path, monkeypatch, capsys):
    """filter and convert said only 'no space left on the device ([Errno 28] ...)': now, as run, the directory,
    its free space and what was being written; nothing left behind."""
    import pyarrow.parquet as pq

    from advcli.io import writer

    with monkeypatch.context() as m:
        m.setattr(writer.AtomicParquetWriter, "_write_group", _enospc)
        out = tmp_path / "kept.parquet"
        code, _, err = run_main(["filter", str(dump), "-o", str(out), "--min-group-size", "2", "-q"], capsys)
        assert code == 2 and f"{tmp_path}: no space left on the device while writing the kept rows" in err, err
        assert "MiB free there now" in err and not out.exists() and leftovers(tmp_path) == []
    src = _primerl(tmp_path, lambda eps: None)
    monkeypatch.setattr(pq.ParquetWriter, "write_batch", _enospc)
    out = tmp_path / "converted.parquet"
    code, _, err = run_main(["convert", str(src), "-o", str(out)], capsys)
    assert code == 2 and f"{tmp_path}: no space left on the device while writing the converted dump" in err, err
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if "advcli-tmp" in p]


def test_a_full_tmpdir_while_spilling_is_exit_2_naming_it(dump, tmp_path, monkeypatch, capsys):
    """The statistics pass's chunks beyond memory go to TMPDIR (advcli.pipeline.spill); that file
    system filling up meanwhile was always exit 1."""
    import advcli.pipeline.moments as moments_mod
    import advcli.pipeline.spill as spill_mod

    class FullFile:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            _enospc()

        def __getattr__(self, name):
            return getattr(self.fh, name)

    real_init = spill_mod.TokenSpill.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        self.fh = FullFile(self.fh)

    monkeypatch.setattr(spill_mod.TokenSpill, "__init__", init)
    monkeypatch.setattr(moments_mod, "TOKEN_CACHE_BYTES", 0)
    monkeypatch.setattr(spill_mod, "SPILL_MARGIN", 0)
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", str(dump), "-o", str(out), "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=gae", "--set", "algorithm.kl_penalty=k3", "--set",
                             "algorithm.use_kl_in_reward=true", "--chunk-rows", "50", "-q"], capsys)
    assert code == 2, err
    import tempfile

    assert f"{tempfile.gettempdir()}: no space left on the device while writing the statistics pass's" in err, err
    assert "were needed" in err and "TMPDIR=DIR" in err
    assert not out.exists() and leftovers(tmp_path) == []


# ------------------------------------------------------------------ 7. what killed runs leave in TMPDIR
def test_a_later_run_removes_what_killed_runs_left_in_tmpdir(tmp_path):
    """A run killed with SIGKILL leaves its converted trainer dumps (advcli-import-PID-*) and the local
    copy of an output bound for object storage (.advcli-upload-*.advcli-tmp-PID) in TMPDIR; the next
    run that makes such files removes those whose process is gone, and leaves a live process's."""
    import subprocess
    import sys

    from conftest import run_cli
    from test_format_primerl import build

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    stale_dir = tmpdir / f"advcli-import-{dead.pid}-abc123"
    (stale_dir / "0").mkdir(parents=True)
    (stale_dir / "0" / "traces.jsonl").write_bytes(b"x" * 1000)
    stale_upload = tmpdir / f".advcli-upload-0123456789ab-out.parquet.advcli-tmp-{dead.pid}"
    stale_upload.write_bytes(b"y" * 1000)
    live = tmpdir / f"advcli-import-{os.getpid()}-live"
    live.mkdir()
    other = tmpdir / "someone-elses-file"
    other.write_text("keep")
    build(tmp_path / "src")
    r = run_cli("run", tmp_path / "src", "-o", tmp_path / "c.parquet", "-q", env={"TMPDIR": str(tmpdir)})
    assert r.returncode == 0, r.stderr
    assert not stale_dir.exists() and not stale_upload.exists()
    assert live.exists() and other.exists()
    assert not [p for p in os.listdir(tmpdir) if p.startswith("advcli-import-") and p != live.name]  # its own: gone


# ------------------------------------------------------------------ 5. a stuck user estimator and a signal
@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_stuck_user_estimator_stops_on_the_first_signal(sig, code, dump, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "stuck.py").write_text("import time\n\ndef f(rewards, **kw):\n    open(__file__ + '.in', 'w').close()\n"
                                       "    while True:\n        time.sleep(0.05)\n")
    out = tmp_path / "out.parquet"
    p = subprocess.Popen([sys.executable, "-m", "advcli", "run", str(dump), "-o", str(out), "--estimator",
                          f"{tmp_path / 'stuck.py'}:f", "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    t0 = time.monotonic()
    while not (tmp_path / "stuck.py.in").exists():
        assert p.poll() is None and time.monotonic() - t0 < 120, p.stderr.read() if p.poll() is not None else ""
        time.sleep(0.1)
    p.send_signal(getattr(signal, sig))  # one signal
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        pytest.fail(f"the first {sig} did not stop the run")
    assert p.returncode == code, p.stderr.read()
    assert "interrupted: nothing was written" in p.stderr.read()
    assert not out.exists() and not [f for f in os.listdir(tmp_path) if "advcli-tmp" in f]


# ------------------------------------------------------------------ 6. the server killed under a command
def test_a_command_whose_server_is_killed_stops_and_writes_nothing(dump, tmp_path):
    """kill -9 of the server: its caller exits 1 at once; the command it had forked used to finish and
    put its output in place seconds later. It now gets SIGTERM with its server (a parent-death signal)
    and cleans up as on a hang-up: no output, no temporary file, no process left."""
    import signal
    import time

    from test_server import Server, _alive, _start_slow, _temps, _wait_writing

    if not hasattr(os, "pidfd_open"):
        pytest.skip("the server needs Linux pidfds")
    server = Server()
    try:
        out = tmp_path / "o.parquet"
        proc = _start_slow(server, str(dump), out)
        _wait_writing(proc, out)
        children = []  # each thread's children: the server may fork the command from any of its threads
        for task in os.listdir(f"/proc/{server.pid}/task"):
            with open(f"/proc/{server.pid}/task/{task}/children") as fh:
                children += [int(p) for p in fh.read().split()]
        assert children
        os.kill(server.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        assert proc.returncode != 0
        deadline = time.monotonic() + 60
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(c) for c in children), "the orphaned command still runs"
        assert not out.exists() and not _temps(out)
    finally:
        server.stop()


# ------------------------------------------------------------------ 8. many small row groups
def test_an_input_of_one_row_row_groups_gives_the_one_row_group_output(tmp_path, capsys):
    """10,000 one-row row groups took 17x the time and 2.2x the memory of one row group (the splice
    parsed and rewrote a footer entry per row group in Python, benchmarks/row_groups.py measures it):
    such an input is now written in the writer's own row groups, the same table as from one row group."""
    t = make_table(300, group_size=8, min_len=4, max_len=16, seed=2)
    one, many = tmp_path / "one.parquet", tmp_path / "many.parquet"
    pq.write_table(t, one)
    pq.write_table(t, many, row_group_size=1)
    for src in (one, many):
        code, _, err = run_main(["run", str(src), "-o", str(tmp_path / f"o_{src.name}"), *GRPO, "-q"], capsys)
        assert code == 0, err
    a, b = pq.read_table(tmp_path / "o_one.parquet"), pq.read_table(tmp_path / "o_many.parquet")
    assert a.equals(b)
    assert pq.ParquetFile(tmp_path / "o_many.parquet").metadata.num_row_groups < 10


# ------------------------------------------------------------------ object storage (1, 7)
def _put(fs, local, key) -> str:
    with open(local, "rb") as src, fs.open_output_stream(key) as out:
        out.write(src.read())
    return f"s3://{key}"


def test_an_object_replaced_between_passes_is_refused(s3, dump, tmp_path, monkeypatch, capsys):
    """On object storage the identity is the object's size and modification time: an object put
    again between passes is refused, nothing written."""
    from advcli.io.reader import InputSet

    src = _put(s3, dump, "bkt/f1/in.parquet")
    other = tmp_path / "other.parquet"
    pq.write_table(make_table(200, group_size=8, min_len=4, max_len=32, seed=9), other)
    orig = InputSet.iter_batches
    calls = {"n": 0}

    def swapping(self, *a, **kw):
        if calls["n"] == 1:
            import time

            time.sleep(1.1)  # a store's modification times may count whole seconds
            _put(s3, other, "bkt/f1/in.parquet")
        calls["n"] += 1
        return orig(self, *a, **kw)

    monkeypatch.setattr(InputSet, "iter_batches", swapping)
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", src, "-o", str(out), *GAE, "-q"], capsys)
    assert code == 2 and "the input changed during the run" in err, err
    assert not out.exists()


def test_s3_output_problems_are_found_before_the_computation(s3, dump, tmp_path, monkeypatch, capsys):
    """A missing bucket under a nested key, and a store refusing writes, were found only after the
    computation (at the upload): now before any pass reads the input."""
    from advcli.io import remote
    from advcli.io.reader import InputSet

    passes = {"n": 0}
    orig = InputSet.iter_batches

    def counting(self, *a, **kw):
        passes["n"] += 1
        return orig(self, *a, **kw)

    monkeypatch.setattr(InputSet, "iter_batches", counting)
    code, _, err = run_main(["run", str(dump), "-o", "s3://nobucket/a/b/o.parquet", *GRPO, "-q"], capsys)
    assert code == 2 and "the bucket s3://nobucket does not exist" in err, err
    real = remote.filesystem_of

    class ReadOnly:
        def __init__(self, fs):
            self.fs = fs

        def open_output_stream(self, *a, **k):
            raise OSError("When initiating multiple part upload for key 'x' in bucket 'bkt': AWS Error "
                          "ACCESS_DENIED during CreateMultipartUpload operation: Access Denied")

        def __getattr__(self, name):
            return getattr(self.fs, name)

    monkeypatch.setattr(remote, "filesystem_of", lambda uri: (ReadOnly(real(uri)[0]), real(uri)[1]))
    code, _, err = run_main(["run", str(dump), "-o", "s3://bkt/f2/deep/o.parquet", *GRPO, "-q"], capsys)
    assert code == 2 and "s3://bkt/f2/deep/o.parquet: cannot write there" in err and "Access Denied" in err, err
    assert passes["n"] == 0  # refused before the first pass


def test_server_start_while_the_server_is_slow_keeps_its_socket(tmp_path):
    """A server that does not answer within the start command's 5 s (stopped here with SIGSTOP: busy,
    a loaded machine) but still holds its lock is running: its socket was deleted, leaving it
    unreachable until its idle timeout."""
    import signal

    from test_server import Server, cli, status

    if not hasattr(os, "pidfd_open"):
        pytest.skip("the server needs Linux pidfds")
    server = Server()
    try:
        sock = status(server.env)["socket"]
        os.kill(server.pid, signal.SIGSTOP)
        try:
            r = cli("server", "start", env=server.env, server="auto")
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert r.returncode == 0 and "already running" in r.stderr, r.stderr
        assert os.path.exists(sock)
        assert status(server.env)["pid"] == server.pid  # reachable
    finally:
        server.stop()


def test_two_server_starts_at_once_both_succeed_with_one_server(tmp_path):
    import subprocess
    import sys
    import tempfile

    from test_server import cli, status

    if not hasattr(os, "pidfd_open"):
        pytest.skip("the server needs Linux pidfds")
    d = tempfile.mkdtemp(prefix="advs-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k != "ADVCLI_SERVER"}
    env.update(ADVCLI_SERVER_DIR=d, ADVCLI_SERVER="auto")
    try:
        procs = [subprocess.Popen([sys.executable, "-m", "advcli", "server", "start"], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
        results = [(p.wait(180), p.stderr.read()) for p in procs]
        assert [c for c, _ in results] == [0, 0], results
        pid = status(env)["pid"]
        assert all(f"pid {pid}" in err or "already running" in err for _, err in results), results
    finally:
        cli("server", "stop", env=env, server="auto")
        import shutil

        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("command", [["run"], ["validate"], ["inspect"], ["stats"], ["filter", "--drop-uniform"]])
def test_two_columns_of_one_name_are_refused_naming_them(command, tmp_path, capsys):
    """Arrow finds no column by a name given twice: this was an internal KeyError (exit 1). Exit 2, naming the file,
    the name and both positions; nothing written."""
    import pyarrow as pa

    from advcli.sample import make_table

    t = make_table(8, group_size=4, min_len=2, max_len=6, seed=1)
    t = pa.Table.from_arrays([*t.columns, t.column("reward")], names=[*t.column_names, "reward"])
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(t, src)
    outs = ["-o", str(out)] if command[0] in ("run", "filter") else []
    code, _, err = run_main([command[0], str(src), *outs, *command[1:]], capsys)
    at = t.column_names.index("reward")
    assert code == 2, err
    assert f"in.parquet: the column name 'reward' is given twice (columns {at} and {t.num_columns - 1}" in err
    assert not out.exists()


@pytest.mark.parametrize("command", [["run"], ["filter", "--drop-uniform"]])
def test_an_empty_output_path_is_refused_before_the_run(command, tmp_path, capsys, monkeypatch):
    """`-o ''` (an unset shell variable) ran the whole computation and then failed to put the output 'in place'
    with a hint about permissions and free space: refused first, nothing computed."""
    from advcli import pipeline

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pipeline, "run_pipeline", lambda *a, **k: pytest.fail("the run started"))
    src = os.path.join(os.path.dirname(__file__), "..", "..", "sample_data", "rollouts.parquet")
    code, _, err = run_main([command[0], src, "-o", "", *command[1:]], capsys)
    assert code == 2 and "advcli: error: the output path is empty" in err and "hint: give the output file's path" in err
    assert os.listdir(tmp_path) == []
