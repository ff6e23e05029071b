import os
import subprocess
import sys
import types

import pytest

# Every command a test starts runs in its own process, even where the developer keeps an `advcli server`
# running: tests/cli/test_server.py starts its own servers and says when a command must use one.
os.environ["ADVCLI_SERVER"] = "off"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# verl's wheel, installed for tests/conformance/test_conformance_verl.py, ships a top-level `tests` package of its own,
# which would win over this directory (a regular package beats a namespace one) in `from tests.x import`:
# `tests` is this directory whatever else is installed
_here = types.ModuleType("tests")
_here.__path__ = [os.path.join(ROOT, "tests")]
if getattr(sys.modules.get("tests"), "__path__", None) != _here.__path__:
    sys.modules["tests"] = _here
SAMPLE = os.path.join(ROOT, "sample_data", "rollouts.parquet")

# The tests live in folders (docs/house.md, Tests); a test file imports another's builders by its module name
# (`from test_format_verl import write`), wherever the two sit: every folder of tests/ is on the path.
for _folder in sorted(os.listdir(os.path.join(ROOT, "tests"))):
    _path = os.path.join(ROOT, "tests", _folder)
    if os.path.isdir(_path) and _folder.isidentifier() and not _folder.startswith("_") and _path not in sys.path:
        sys.path.append(_path)

OUTPUT_COLUMNS = ("advantages", "returns", "token_level_rewards")


def run_table(src, out, flavor, settings=None, **kw):
    """``advcli.run(src, out)`` as the flavor and estimator tests call it (on the CPU, overwriting ``out``):
    (the output table, the run's result). ``kw``: advcli.run's other arguments (chunk_rows, precision, ...)."""
    import pyarrow.parquet as pq

    import advcli

    result = advcli.run(str(src), str(out), flavor=flavor, settings=settings, **{"device": "cpu", "force": True, **kw})
    return pq.read_table(str(out)), result


def output_lists(table, columns=OUTPUT_COLUMNS) -> dict:
    """The output's advantage columns that it has, as Python lists (column -> one list per row)."""
    return {c: table.column(c).to_pylist() for c in columns if c in table.column_names}


def two_files(table, directory, split: int, row_group_size: int) -> list[str]:
    """One dump written as two Parquet files, ``a.parquet`` (rows before ``split``) and ``b.parquet``, in
    ``directory``: the Ray tests' input, where a step and groups straddle the files."""
    import pyarrow.parquet as pq

    a, b = os.path.join(str(directory), "a.parquet"), os.path.join(str(directory), "b.parquet")
    pq.write_table(table.slice(0, split), a, row_group_size=row_group_size)
    pq.write_table(table.slice(split), b, row_group_size=row_group_size)
    return [a, b]


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray instance for one test module (tests/_services.py's local_ray: small blocks, so that the
    figures span many blocks and batches); the module's tests skip without Ray."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'advcli[ray]')")
    from _services import local_ray

    with local_ray() as ray:
        yield ray


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 with the bucket ``bkt`` for one test module (tests/_services.py's
    local_s3_server), stopped at the module's end; its AWS_* variables are set before a Ray instance the module
    starts afterwards (list this fixture first), so Ray's workers inherit them. Skips without moto[server]."""
    pytest.importorskip("moto", reason="the S3 tests need moto[server]")
    pytest.importorskip("flask", reason="moto's server mode needs flask")
    from _services import local_s3_server

    with local_s3_server(tmp_path_factory.mktemp("moto")) as fs:
        yield fs


def run_cli(*args, cwd=None, env=None):
    """Run ``python -m advcli ARGS`` in a subprocess; returns CompletedProcess (text)."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "advcli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=e)


def report_of(result) -> dict:
    """A :class:`advcli.pipeline.RunResult`'s report as the JSON it is written as (what two engines' runs
    are compared on): figures, per-step table, histograms, group health, diagnostics, warnings, counts."""
    import json

    return json.loads(json.dumps({"metrics": result.metrics, "per_step": result.per_step,
                                  "histograms": result.histograms, "group_health": result.group_health,
                                  "diagnostics": result.diagnostics, "warnings": result.warnings,
                                  "rows": result.rows, "tokens": result.tokens,
                                  "valid_tokens": result.valid_tokens}, default=str))


def run_main(argv: list, capsys) -> tuple[int, str, str]:
    """``advcli ARGV`` through the real entry point (advcli.cli.main), in this process:
    (exit code, stdout, stderr)."""
    from advcli.cli import exit_code_of

    code = exit_code_of(argv)
    out = capsys.readouterr()
    return code, out.out, out.err



def edit_record(path, index: int, change) -> dict:
    """Damage one record of a JSON Lines dump in place: ``change(record)`` edits the record on line ``index``
    (0-based), which is written back; returns it."""
    import json

    lines = path.read_text().splitlines()
    rec = json.loads(lines[index])
    change(rec)
    lines[index] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")
    return rec


def interrupted_once_created(real, made: list):
    """A stand-in for the writer class ``real`` that, the moment its temporary file exists, records the path in
    ``made`` and delivers a SIGINT: Python runs the handler right after the constructor returns, before the
    caller holds the writer (the worst moment for the clean-up)."""
    import signal
    import time

    def make(*a, **k):
        w = real(*a, **k)
        made.append(w.tmp)
        assert os.path.exists(w.tmp)
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.01)  # the handler runs here, on this thread
        return w
    return make


def assert_release_refuses(tmp_path, capsys, src: str, spec: str, settings: list, words: str) -> None:
    """``advcli run SRC --flavor SPEC --set ...`` is refused: exit 2, ``words`` in its message, no
    traceback, no output written."""
    out = tmp_path / "out.parquet"
    argv = ["run", src, "-o", str(out), "--flavor", spec, "--device", "cpu"]
    for s in settings:
        argv += ["--set", s]
    code, _, err = run_main(argv, capsys)
    assert code == 2 and words in " ".join(err.split()), err
    assert "Traceback" not in err and not out.exists()

@pytest.fixture
def sample_path():
    return SAMPLE


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """At the end of a run: the skipped tests grouped by reason, with counts, so that a newcomer sees what
    did not run and what would run it (each reason names the package, tool or device it waits for)."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    counts: dict[str, int] = {}
    for rep in skipped:
        longrepr = rep.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        counts[reason] = counts.get(reason, 0) + 1
    terminalreporter.section(f"{len(skipped)} skipped, by reason (install or provide what it names to run them)")
    for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        terminalreporter.write_line(f"{n:5d}  {reason}")
