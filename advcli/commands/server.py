"""``advcli server start|stop|status``: the resident process that takes ``import torch`` out of every
command's start-up (:mod:`advcli.server`)."""
from __future__ import annotations

import json
import os
import re
import sys
import time

import typer

from ..errors import AdvcliError
from .helpstyle import Command, Group

EPILOG = """
[bold]Examples[/]

  advcli server start                 (import torch and advcli once; later commands fork from it)
  advcli run dump.parquet -o out.parquet --force      (starts in ~0.1 s instead of ~2 s)
  advcli server status
  advcli server stop
  ADVCLI_SERVER=off advcli run ...     (this command in its own process)
  ADVCLI_SERVER=require advcli run ... (fail, status 1, where no usable server answers)

Each command runs in a child forked from the server, in your directory, with your environment,
arguments and terminal, and gives the output a fresh process gives, byte for byte. A command whose
environment differs from the server's in what torch, OpenMP or pyarrow read at start-up
(OMP_NUM_THREADS, ATEN_CPU_CAPABILITY, ...) runs in its own process; a server whose advcli sources or
installation changed stops itself. One server per user and installation, on a UNIX socket in a
directory only you can enter ($ADVCLI_SERVER_DIR, $XDG_RUNTIME_DIR/advcli or /tmp/advcli-UID).
"""

app = typer.Typer(name="server", cls=Group, no_args_is_help=True, add_completion=False,
                  rich_markup_mode="rich", context_settings={"help_option_names": ["-h", "--help"]},
                  help="Keep torch and advcli imported in a background process, so commands start at once.",
                  epilog=EPILOG)

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` in seconds; ``0`` or ``never``: no limit."""
    t = text.strip().lower()
    if t in ("0", "never", "none"):
        return 0.0
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhd]?)", t)
    if not m:
        raise AdvcliError(f"--idle-timeout {text!r}: expected a duration such as 900, 30m, 2h or never")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _socket() -> str:
    from ..server import ServerDirError, socket_path

    try:
        path = socket_path(create=True)
    except ServerDirError as e:
        raise AdvcliError(str(e), hint="set ADVCLI_SERVER_DIR to a directory of yours with mode 700") from e
    if len(os.fsencode(path)) > 107:  # sun_path: 108 bytes with the terminating NUL
        raise AdvcliError(f"{path}: too long for a UNIX socket ({len(os.fsencode(path))} bytes, at most 107)",
                          hint="set ADVCLI_SERVER_DIR to a shorter directory of yours, e.g. /tmp/advcli-$UID")
    return path


def _unusable(status: dict) -> tuple[str, bool] | None:
    """Why the commands of this shell would not use the server that answered ``status``, and whether its
    code is stale (:func:`advcli.server.mismatch`); None if they would use it."""
    from ..server import code_stamp, import_env, mismatch

    return mismatch(status, {"code": code_stamp(), "env": import_env(dict(os.environ))})


def _ago(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


@app.command("start", cls=Command)
def start_cmd(
    idle_timeout: str = typer.Option("1h", "--idle-timeout", metavar="DURATION",
                                     help="Stop after this long without a command (900, 30m, 2h; never)."),
    wait: float = typer.Option(120.0, "--wait", metavar="SECONDS",
                               help="How long to wait for the server to be ready."),
):
    """Start the server (or say that it runs) and wait until it is ready."""
    import subprocess

    from ..server.client import ask

    if not hasattr(os, "pidfd_open"):
        raise AdvcliError("advcli server needs Linux (it waits on its commands with pidfds); commands run in their "
                          "own processes here")
    idle = parse_duration(idle_timeout)
    path = _socket()
    status = ask("status", path)
    if status is not None:
        unusable = _unusable(status)
        if unusable is None:
            typer.echo(f"advcli server: already running (pid {status['pid']}, {status['served']} commands served, "
                       f"socket {path})", err=True)
            return
        why, stale = unusable
        if not stale:
            raise AdvcliError(f"an advcli server runs (pid {status['pid']}) but {why}",
                              hint="stop it (advcli server stop) and start it from this shell, or run this shell's "
                                   "commands in their own processes (they do so by themselves)")
        ask("stop", path)
        _wait_gone(path, 10.0)
    elif _lock_held(path):  # a live server that did not answer in time (busy, a slow machine): its socket stays
        typer.echo(f"advcli server: already running (it holds {path}.lock but did not answer within 5 s: busy?; "
                   f"socket {path})", err=True)
        return
    elif os.path.exists(path):
        os.unlink(path)  # a socket nobody answers on and no server holding its lock: a server that died
    log = path + ".log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    # `python -c` puts the working directory first on sys.path: /dev/null in its place shadows nothing (and
    # code_stamp skips sys.path[0] in both processes, the `advcli` script's directory in the caller)
    code = "import os, sys; sys.path[0] = os.devnull; from advcli.server.daemon import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", code, path, repr(idle)], stdin=subprocess.DEVNULL, stdout=fd,
                            stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, cwd="/")
    os.close(fd)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        status = ask("status", path, timeout=1.0)
        if status is not None:
            limit = "never stops by itself" if not idle else f"stops after {idle_timeout} without a command"
            typer.echo(f"advcli server: ready (pid {status['pid']}): torch and {status['modules']} advcli modules "
                       f"imported in {status['preload_s']:.1f} s; advcli commands from this installation now fork "
                       f"from it ({limit}; advcli server stop)", err=True)
            return
        if proc.poll() == 3 and _lock_held(path):  # another `server start` won the race: wait for its server
            continue
        if proc.poll() is not None:
            raise AdvcliError(f"the advcli server exited (status {proc.returncode}) before it was ready; its log: "
                              f"{log}\n{_tail(log)}")
        time.sleep(0.05)
    raise AdvcliError(f"the advcli server was not ready after {wait:g} s (pid {proc.pid}); its log: {log}",
                      hint="raise --wait on a slow machine, or read the log")


def _lock_held(path: str) -> bool:
    """Whether a server process holds the socket's lock (advcli.server.daemon.main takes it first)."""
    import fcntl

    try:
        fd = os.open(path + ".lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _tail(path: str, lines: int = 12) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


def _wait_gone(path: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not os.path.exists(path)


@app.command("stop", cls=Command)
def stop_cmd():
    """Stop the server: it takes no new command and exits when the running ones end."""
    from ..server.client import ask

    path = _socket()
    reply = ask("stop", path)
    if reply is None:
        typer.echo(f"advcli server: not running (no answer on {path})", err=True)
        return
    _wait_gone(path, 5.0)
    running = reply.get("running", 0)
    typer.echo(f"advcli server: stopped (pid {reply['stopping']}"
               f"{f'; it exits when its {running} running command(s) end' if running else ''})", err=True)


@app.command("status", cls=Command)
def status_cmd(json_out: bool = typer.Option(False, "--json", help="Print the status as JSON on stdout.")):
    """Say whether a server runs for this installation, what it has done, and whether this shell's
    commands use it. Exit status 0 when one runs (whether or not this shell's commands use it: see the
    message, or "used" in --json), 1 when none runs."""
    from ..server.client import ask

    path = _socket()
    status = ask("status", path)
    unusable = None if status is None else _unusable(status)
    why = None if unusable is None else unusable[0]
    if json_out:
        out = {"running": status is not None, "socket": path, "used": status is not None and why is None,
               "why_not": why}
        if status is not None:
            out.update({k: status[k] for k in ("pid", "started", "preload_s", "modules", "served", "idle_timeout",
                                               "python", "executable")})
            out["commands_running"] = status["running"]
        typer.echo(json.dumps(out))
    elif status is None:
        typer.echo(f"advcli server: not running (socket {path}); start one with: advcli server start", err=True)
    else:
        idle = status["idle_timeout"]
        typer.echo(f"advcli server: running, pid {status['pid']}, up {_ago(time.time() - status['started'])}, "
                   f"{status['served']} commands served, {status['running']} running now; torch and "
                   f"{status['modules']} advcli modules imported in {status['preload_s']:.1f} s; "
                   f"{'no idle timeout' if not idle else f'stops after {idle:g} s idle'}; socket {path}", err=True)
        typer.echo("this shell's commands fork from it" if why is None else f"this shell's commands run in their "
                   f"own processes: {why}", err=True)
    raise typer.Exit(0 if status is not None else 1)
