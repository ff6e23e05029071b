"""``advcli server`` (advcli.server): a command handed to the resident process gives what the same
command gives in its own process — the output file byte for byte, the exit status, stdout and stderr —
in the caller's directory, environment and umask; Ctrl-C reaches it; a killed caller stops it; a caller
whose start-up environment or code differs runs in its own process; the server stops on request, on
its idle timeout and when its code is stale.

Every test starts its server in a private directory (``ADVCLI_SERVER_DIR``) and stops it. Commands run
as the user runs them: ``python -m advcli`` in a subprocess; ``ADVCLI_SERVER=require`` makes one fail
rather than quietly run in its own process, so a test cannot pass without the server, and
``server status --json``'s count of commands served confirms it.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, SAMPLE

from advcli.sample import make_table

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open") or not hasattr(socket, "send_fds"),
                                reason="the server needs Linux pidfds and SCM_RIGHTS")

GAE = ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae", "--set", "algorithm.use_kl_in_reward=true",
       "--set", "algorithm.kl_penalty=low_var_kl"]


def cli(*args, env, cwd=None, server="require", **kw):
    e = dict(env, ADVCLI_SERVER=server)
    return subprocess.run([sys.executable, "-m", "advcli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=e, **kw)


def status(env) -> dict:
    r = cli("server", "status", "--json", env=env, server="auto")
    return json.loads(r.stdout)


class Server:
    def __init__(self, idle="5m"):
        # short, whatever TMPDIR says: a UNIX socket path holds at most 107 bytes
        self.dir = tempfile.mkdtemp(prefix="advs-", dir="/tmp" if os.path.isdir("/tmp") else None)
        self.env = {k: v for k, v in os.environ.items() if k != "ADVCLI_SERVER"}
        self.env["ADVCLI_SERVER_DIR"] = self.dir
        r = cli("server", "start", "--idle-timeout", idle, env=self.env, server="auto")
        assert r.returncode == 0, r.stderr
        m = re.search(r"ready \(pid (\d+)\)", r.stderr)
        assert m, r.stderr
        self.pid = int(m.group(1))

    def served(self) -> int:
        return status(self.env)["served"]

    def stop(self):
        cli("server", "stop", env=self.env, server="auto")
        deadline = time.monotonic() + 20
        while _alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(self.pid):
            os.kill(self.pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (the server's parent, the `server start` process, is gone: init reaps it) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    p = tmp_path_factory.mktemp("srv") / "in.parquet"
    pq.write_table(make_table(400, group_size=8, min_len=4, max_len=64, seed=5), p)
    return str(p)


def test_the_output_is_the_bytes_a_fresh_process_writes(server, tmp_path):
    before = server.served()
    here, there = tmp_path / "here.parquet", tmp_path / "there.parquet"
    a = cli("run", SAMPLE, "-o", here, *GAE, "-q", env=server.env, server="off")
    b = cli("run", SAMPLE, "-o", there, *GAE, "-q", env=server.env)
    assert (a.returncode, a.stdout, a.stderr) == (0, "", "")
    assert (b.returncode, b.stdout, b.stderr) == (0, "", "")
    assert here.read_bytes() == there.read_bytes()
    assert server.served() == before + 1


def test_stdout_and_stderr_are_the_callers_with_its_environment(server, tmp_path):
    """The summary goes to the caller's stderr, as wide as the caller's COLUMNS says (read in the child);
    --json's report to its stdout."""
    outs = []
    for mode in ("off", "require"):
        r = cli("run", SAMPLE, "-o", tmp_path / "o.parquet", "--force", env=dict(server.env, COLUMNS="151"),
                server=mode)
        assert r.returncode == 0, r.stderr
        outs.append([ln for ln in r.stderr.splitlines() if not ln.startswith("time ")])
    assert outs[0] == outs[1]
    assert max(len(ln) for ln in outs[1]) > 100  # 80 columns would have wrapped every long line
    reports = []
    for mode in ("off", "require"):
        r = cli("run", SAMPLE, "-o", tmp_path / "o.parquet", "--force", "--json", env=server.env, server=mode)
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        reports.append({k: v for k, v in report.items() if k not in ("timings", "created", "seconds")})
    assert reports[0] == reports[1]


@pytest.mark.parametrize("args", [["inspect", SAMPLE], ["inspect", SAMPLE, "--json"], ["validate", SAMPLE],
                                  ["explain", "--flavor", "nemo"], ["stats", SAMPLE, "--json"]])
def test_every_command_prints_what_a_fresh_process_prints(server, args):
    """inspect crashed through the server ('module' object is not callable): the server imports every module,
    and advcli.formats.describe, the submodule, hid the lazily exported describe() of the same name."""
    a = cli(*args, env=server.env, server="off")
    b = cli(*args, env=server.env, server="require")
    assert a.returncode == 0, a.stderr
    drop = ("created", "seconds", "timings")
    if "--json" in args:
        assert ({k: v for k, v in json.loads(b.stdout).items() if k not in drop}
                == {k: v for k, v in json.loads(a.stdout).items() if k not in drop})
    else:
        assert b.stdout == a.stdout
    assert b.returncode == 0, b.stderr


def test_errors_usage_errors_and_their_status_are_the_same(server, tmp_path):
    for args in (["run", tmp_path / "missing.parquet", "-o", tmp_path / "o.parquet"],
                 ["run", SAMPLE, "--no-such-option"],
                 ["run", SAMPLE, "-o", tmp_path / "o.parquet", "--set", "algorithm.adv_estimator=nope",
                  "--flavor", "verl"]):
        a = cli(*args, env=server.env, server="off")
        b = cli(*args, env=server.env)
        assert a.returncode != 0
        assert (b.returncode, b.stdout, b.stderr) == (a.returncode, a.stdout, a.stderr), args
    assert not (tmp_path / "o.parquet").exists()


def test_relative_paths_are_the_callers_directory_and_umask(server, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(SAMPLE, work / "in.parquet")
    code = ("import os, sys; os.umask(0o077); sys.argv = ['advcli', 'run', 'in.parquet', '-o', 'out.parquet', '-q'];"
            " from advcli._entry import main; main()")
    r = subprocess.run([sys.executable, "-c", code], cwd=work, env=dict(server.env, ADVCLI_SERVER="require"),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert pq.read_table(work / "out.parquet").num_rows == pq.read_metadata(SAMPLE).num_rows
    assert os.stat(work / "out.parquet").st_mode & 0o777 == 0o600  # the caller's umask, not the server's


def test_a_different_start_up_environment_runs_in_its_own_process(server, tmp_path):
    env = dict(server.env, OMP_NUM_THREADS="1" if server.env.get("OMP_NUM_THREADS") != "1" else "2")
    before = server.served()
    r = cli("run", SAMPLE, "-o", tmp_path / "o.parquet", "-q", env=env, server="auto")
    assert r.returncode == 0 and (tmp_path / "o.parquet").exists()
    assert server.served() == before
    r = cli("run", SAMPLE, "-o", tmp_path / "o2.parquet", "-q", env=env)
    assert r.returncode == 1 and "OMP_NUM_THREADS" in r.stderr
    assert not (tmp_path / "o2.parquet").exists()
    # the server runs (status 0), and this shell's commands do not use it: the message says why
    s = cli("server", "status", env=env, server="auto")
    assert s.returncode == 0 and "running" in s.stderr and "OMP_NUM_THREADS" in s.stderr
    s = cli("server", "status", "--json", env=env, server="auto")
    assert s.returncode == 0 and json.loads(s.stdout)["used"] is False


def test_python_flags_of_the_caller_count_too(server, tmp_path):
    """`python -X dev -m advcli` (dev mode: other warnings, faulthandler) is not what the server runs."""
    before = server.served()
    r = subprocess.run([sys.executable, "-X", "dev", "-m", "advcli", "run", SAMPLE, "-o", tmp_path / "o.parquet", "-q"],
                       capture_output=True, text=True, env=dict(server.env, ADVCLI_SERVER="require"))
    assert r.returncode == 1 and "python flags" in r.stderr
    assert server.served() == before


def test_commands_at_the_same_time_each_get_their_own_child(server, tmp_path):
    ref = tmp_path / "ref.parquet"
    assert cli("run", SAMPLE, "-o", ref, *GAE, "-q", env=server.env, server="off").returncode == 0
    procs = [subprocess.Popen([sys.executable, "-m", "advcli", "run", SAMPLE, "-o", str(tmp_path / f"o{i}.parquet"),
                               *GAE, "-q"], env=dict(server.env, ADVCLI_SERVER="require"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    for i in range(3):
        assert (tmp_path / f"o{i}.parquet").read_bytes() == ref.read_bytes()


def _temps(out) -> list[str]:
    d, name = os.path.split(str(out))
    return [p for p in glob.glob(os.path.join(d, f".{name}.advcli-tmp-*")) if not p.endswith("-probe")]


def _start_slow(server, dump, out):
    return subprocess.Popen([sys.executable, "-m", "advcli", "run", dump, "-o", str(out), *GAE, "--chunk-rows", "20",
                             "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(server.env, ADVCLI_SERVER="require", ADVCLI_TEST_SLOW_WRITE="0.25"))


def _wait_writing(proc, out):
    deadline = time.monotonic() + 60
    while not _temps(out):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the run never started writing"
        time.sleep(0.02)


def test_ctrl_c_reaches_the_command_and_nothing_is_left(server, dump, tmp_path):
    out = tmp_path / "o.parquet"
    proc = _start_slow(server, dump, out)
    _wait_writing(proc, out)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not out.exists() and not _temps(out)


@pytest.mark.parametrize("when", ["child started", 0.5, 1.0])
def test_ctrl_c_at_any_moment_of_the_start(server, dump, tmp_path, when):
    """Whether it reaches the child the moment it exists (before its CLI took over its signals) or the
    command later: one message, status 130, no traceback, no output. (Not before the caller's own Python
    has started: a fresh process dies of SIGINT then too.)"""
    out = tmp_path / "o.parquet"
    proc = _start_slow(server, dump, out)
    if when == "child started":
        deadline = time.monotonic() + 60
        while not status(server.env)["commands_running"]:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
    else:
        time.sleep(when)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err and err.count("advcli: error:") == 1, err
    assert not out.exists() and not _temps(out)


def test_sigterm_ends_it_with_143(server, dump, tmp_path):
    out = tmp_path / "o.parquet"
    proc = _start_slow(server, dump, out)
    _wait_writing(proc, out)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert not out.exists() and not _temps(out)


def test_a_killed_caller_stops_its_command(server, dump, tmp_path):
    out = tmp_path / "o.parquet"
    proc = _start_slow(server, dump, out)
    _wait_writing(proc, out)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while status(server.env)["commands_running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status(server.env)["commands_running"] == 0
    assert not out.exists() and not _temps(out)  # SIGTERM: the command cleaned up as on a terminal's hang-up


def test_stop_removes_the_socket_and_commands_run_here_again(tmp_path):
    s = Server()
    try:
        sock = status(s.env)["socket"]
        assert os.path.exists(sock)
        again = cli("server", "start", env=s.env, server="auto")
        assert again.returncode == 0 and "already running" in again.stderr and f"pid {s.pid}" in again.stderr
        r = cli("server", "stop", env=s.env, server="auto")
        assert r.returncode == 0 and "stopped" in r.stderr
        assert not os.path.exists(sock)
        assert os.listdir(s.dir) == []  # nor its lock and its log
        r = cli("run", SAMPLE, "-o", tmp_path / "o.parquet", "-q", env=s.env)
        assert r.returncode == 1 and "advcli server start" in r.stderr
        r = cli("run", SAMPLE, "-o", tmp_path / "o.parquet", "-q", env=s.env, server="auto")
        assert r.returncode == 0
        r = cli("server", "status", env=s.env, server="auto")
        assert r.returncode == 1 and "not running" in r.stderr
    finally:
        s.stop()


def test_the_idle_timeout_stops_it():
    s = Server(idle="2")
    try:
        deadline = time.monotonic() + 30
        while _alive(s.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(s.pid)
        assert not glob.glob(os.path.join(s.dir, "*.sock"))
    finally:
        s.stop()


def test_a_server_with_stale_code_declines_and_stops():
    """A caller whose advcli sources differ (its code stamp) is declined, and the server stops itself."""
    from advcli.server import import_env
    from advcli.server.client import Lines, send_request

    s = Server()
    try:
        st = status(s.env)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(st["socket"])
        send_request(sock, {"op": "run", "argv": ["advcli", "--version"], "cwd": "/", "env": s.env, "umask": 0o22,
                            "stdio": {k: ["utf-8", "strict"] for k in ("stdin", "stdout", "stderr")},
                            "code": "0" * 64, "import_env": import_env(s.env)}, [0, 1, 2])
        reply = Lines(sock).next()
        sock.close()
        assert reply["stale"] is True and "other advcli code" in reply["declined"]
        deadline = time.monotonic() + 20
        while _alive(s.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(s.pid) and not os.path.exists(st["socket"])
    finally:
        s.stop()


# -- the pieces, without a server ----------------------------------------------------------------------

def test_code_stamp_follows_the_sources(tmp_path):
    from advcli.server import code_stamp

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    first = code_stamp(str(pkg), path=["script-dir"])
    assert code_stamp(str(pkg), path=["another-script-dir"]) == first  # sys.path[0] is left out
    (pkg / "a.py").write_text("x = 22\n")
    assert code_stamp(str(pkg), path=["script-dir"]) != first
    second = code_stamp(str(pkg), path=["script-dir"])
    (pkg / "b.py").write_text("")
    assert code_stamp(str(pkg), path=["script-dir"]) != second
    site = tmp_path / "site"
    site.mkdir()
    third = code_stamp(str(pkg), path=["script-dir", str(site)])
    (site / "out.parquet").write_bytes(b"")  # an output written into a directory on sys.path: not code
    (site / "data").mkdir()
    assert code_stamp(str(pkg), path=["script-dir", str(site)]) == third
    (site / "torch-9.9.dist-info").mkdir()  # a package installed there
    fourth = code_stamp(str(pkg), path=["script-dir", str(site)])
    assert fourth != third
    os.utime(site / "torch-9.9.dist-info", ns=(0, 12345))  # reinstalled: same name, new record
    assert code_stamp(str(pkg), path=["script-dir", str(site)]) != fourth


def test_mismatch_names_what_differs():
    from advcli.server import import_env, mismatch

    env = {"OMP_NUM_THREADS": "4", "HOME": "/h", "ATEN_CPU_CAPABILITY": "avx2", "PATH": "/bin"}
    found = import_env(env)
    assert found.pop("(python flags)") and found == {"OMP_NUM_THREADS": "4", "ATEN_CPU_CAPABILITY": "avx2"}
    server = {"code": "c", "env": import_env(env)}
    assert mismatch(server, {"code": "c", "env": import_env(dict(env, HOME="/x", PATH="/usr/bin"))}) is None
    why, stale = mismatch(server, {"code": "c", "env": import_env(dict(env, OMP_NUM_THREADS="1"))})
    assert "OMP_NUM_THREADS" in why and not stale
    why, stale = mismatch(server, {"code": "d", "env": server["env"]})
    assert stale


def test_a_socket_directory_open_to_others_is_refused(tmp_path):
    from advcli.server import ServerDirError, socket_path

    d = tmp_path / "open"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    with pytest.raises(ServerDirError, match="closed to others"):
        socket_path({"ADVCLI_SERVER_DIR": str(d)})
    os.chmod(d, 0o700)
    assert socket_path({"ADVCLI_SERVER_DIR": str(d)}).startswith(str(d))
    r = subprocess.run([sys.executable, "-m", "advcli", "--version"], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, ADVCLI_SERVER_DIR=str(tmp_path / "open2"), ADVCLI_SERVER="auto"))
    assert r.returncode == 0  # no server there: the command runs in its own process, silently


def test_a_socket_path_too_long_is_named(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True, mode=0o700)
    r = subprocess.run([sys.executable, "-m", "advcli", "server", "start"], capture_output=True, text=True,
                       env=dict(os.environ, ADVCLI_SERVER_DIR=str(deep)))
    assert r.returncode == 2 and "too long for a UNIX socket" in r.stderr and "ADVCLI_SERVER_DIR" in r.stderr


def test_parse_duration():
    from advcli.commands.server import parse_duration

    assert parse_duration("90") == 90 and parse_duration("30m") == 1800 and parse_duration("2h") == 7200
    assert parse_duration("never") == 0
    from advcli.errors import AdvcliError

    with pytest.raises(AdvcliError, match="duration"):
        parse_duration("soon")
