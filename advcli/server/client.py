"""The caller's side: hand one command to a running server (:mod:`advcli.server`), or say it cannot.

Wire format, both ways over the UNIX socket: a request is a 4-byte big-endian length and a JSON object
(the standard streams ride on the length's ``sendmsg`` as ``SCM_RIGHTS``); the server answers with
JSON lines: ``{"pid": N}`` when the child has started, then ``{"exit": CODE}`` or ``{"signal": N}`` when
it has ended, or one ``{"declined": WHY, ...}`` instead.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

from . import code_stamp, import_env, socket_path

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def send_request(sock: socket.socket, request: dict, fds: list[int] = ()) -> None:
    body = json.dumps(request).encode()
    head = struct.pack(">I", len(body))
    if fds:
        socket.send_fds(sock, [head], list(fds))
    else:
        sock.sendall(head)
    sock.sendall(body)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("the connection closed mid-message")
        buf += part
    return buf


class Lines:
    """The server's JSON lines, one at a time (None at the end of the connection)."""

    def __init__(self, sock: socket.socket):
        self.file = sock.makefile("rb")

    def next(self) -> dict | None:
        line = self.file.readline()
        return json.loads(line) if line else None


def ask(op: str, path: str | None = None, timeout: float = 5.0) -> dict | None:
    """A one-line exchange (``status``, ``stop``) with the server at ``path``; None when none answers."""
    path = path or socket_path()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        send_request(s, {"op": op})
        return Lines(s).next()
    except (OSError, ValueError):
        return None
    finally:
        s.close()


def _stdio_info() -> dict | None:
    info = {}
    for name, fd in (("stdin", 0), ("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        try:
            os.fstat(fd)
        except OSError:  # a closed standard stream: run here, where Python copes with it as usual
            return None
        info[name] = [getattr(stream, "encoding", None) or "utf-8", getattr(stream, "errors", None) or "strict"]
    return info


def _fail(msg: str) -> int:
    sys.stderr.write(f"advcli: error: {msg}\n")
    return 1


def hand_over(argv: list[str], required: bool = False) -> int | None:
    """Run ``argv`` (``sys.argv``) in the server and return its exit status; None to run it here (no
    server, or one that cannot give a fresh process's result). ``required`` (``ADVCLI_SERVER=require``)
    turns the None into an error (status 1)."""

    def here(why: str) -> int | None:  # run it in this process; or, where a server is required, fail
        return _fail(why) if required else None

    from . import ServerDirError

    try:
        path = socket_path()
    except ServerDirError as e:
        return here(str(e))
    if not os.path.exists(path):
        return here(f"no advcli server is running ({path} does not exist); start one with: advcli server start")
    stdio = _stdio_info()
    if stdio is None:
        return here("a standard stream is closed; the server needs all three")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as e:
        sock.close()
        return here(f"the advcli server at {path} does not answer ({e.strerror}); start one with: advcli server start")
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed: let the command say so where it runs
        sock.close()
        return here("the working directory no longer exists")
    umask = os.umask(0o022)
    os.umask(umask)
    env = dict(os.environ)
    main_module = sys.modules.get("__main__")
    request = {"op": "run", "argv": list(argv), "cwd": cwd, "env": env, "umask": umask, "stdio": stdio,
               "code": code_stamp(), "import_env": import_env(env),
               # `python -m advcli` or the `advcli` script: how usage lines name the program (click reads it)
               "main_package": getattr(main_module, "__package__", None)}
    lines = Lines(sock)
    try:
        send_request(sock, request, [0, 1, 2])
        first = lines.next()
    except (OSError, ValueError) as e:
        sock.close()
        return here(f"the advcli server broke off before the command started ({e})")
    if first is None or "pid" not in first:
        sock.close()
        why = (first or {}).get("declined", "the server closed the connection")
        if (first or {}).get("stale") and not required:  # say once why commands are slow again
            sys.stderr.write(f"advcli: note: {why}, so it has stopped; this command runs in its own process "
                             "(advcli server start starts one with this code)\n")
        return here(f"the advcli server cannot run this command: {why}")
    return _wait(lines, sock, int(first["pid"]))


def _wait(lines: Lines, sock: socket.socket, pid: int) -> int:
    """Forward the signals a terminal or a scheduler sends (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT) to the
    child's process group, and return its status as a shell reports it (128 + N after signal N)."""
    def forward(signum, frame):
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signum)
                return
            except ProcessLookupError:
                continue
            except OSError:
                return

    for s in FORWARDED:
        try:
            signal.signal(s, forward)
        except (OSError, ValueError):
            pass
    try:
        end = lines.next()
    except (OSError, ValueError):
        end = None
    finally:
        sock.close()
    if end is None:
        return _fail(f"lost the advcli server while the command ran (process {pid}); its outputs, if any, "
                     "were written only if it finished")
    if "signal" in end:
        n = int(end["signal"])
        try:
            name = signal.Signals(n).name
        except ValueError:
            name = f"signal {n}"
        sys.stderr.write(f"advcli: error: the command was killed by {name}"
                         f"{' (out of memory?)' if n == signal.SIGKILL else ''}\n")
        return 128 + n
    return int(end["exit"])
