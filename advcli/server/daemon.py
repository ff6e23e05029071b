"""The server's side (:mod:`advcli.server`): import once, then fork one child per command.

One thread, one ``selectors`` loop over the listening socket, each running child's connection (its
caller hanging up means the caller was killed: the child's process group gets SIGTERM, as a terminal
would have sent it) and each child's pidfd (it exited: its status goes back to the caller). Started by
``advcli server start`` as ``python -c ... advcli.server.daemon`` in a new session, its output in
``<socket>.log``; stops on ``advcli server stop``, SIGTERM, its idle timeout, or a caller whose advcli
code differs from its own (after the commands in flight end).
"""
from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time

from . import INTERRUPTED_AT_START, code_stamp, import_env, mismatch
from .client import FORWARDED, recv_exact

# modules the children would import themselves anyway; the Ray engine is left to the commands that use
# it (importing ray starts nothing, but costs a second nobody else needs), as is this package
SKIP_PRELOAD = ("advcli.server", "advcli.engines.ray", "advcli.__main__")


def preload() -> int:
    """Import torch, pyarrow and every advcli module (each flavor's registries included), computing
    nothing: a child then starts where a fresh process would be after its imports. Returns the count of
    advcli modules imported."""
    import importlib
    import pkgutil

    import pyarrow  # noqa: F401
    import pyarrow.compute  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import torch  # noqa: F401

    import advcli
    from advcli import flavors

    for name in flavors.names():
        flavors.get(name)
    count = 0
    for info in pkgutil.walk_packages(advcli.__path__, "advcli."):
        if info.name.startswith(SKIP_PRELOAD):
            continue
        try:
            importlib.import_module(info.name)
            count += 1
        except ImportError:  # an optional dependency this installation lacks: the command will say so
            continue
    return count


def _status_code(status: int) -> dict:
    code = os.waitstatus_to_exitcode(status)
    return {"signal": -code} if code < 0 else {"exit": code}


class Server:
    def __init__(self, path: str, idle_timeout: float):
        self.path, self.idle_timeout = path, idle_timeout
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, tuple[socket.socket, int]] = {}  # pid -> (caller's connection, pidfd)
        self.stopping = False
        self.served = 0
        self.started = time.time()
        self.last_active = time.monotonic()
        self.preload_s = 0.0
        self.modules = 0
        # taken before the imports: a source edited while they run makes the server stale, not unseen
        self.stamp = {"code": code_stamp(), "env": import_env(os.environ)}
        self.private_fds: list[int] = []  # the lock and the signal wake-up pair: closed in every child
        self.socket_id = (0, 0)  # (st_dev, st_ino) of the socket file this server made

    # -- the loop -----------------------------------------------------------------------------------
    def serve(self, listener: socket.socket, wake: socket.socket) -> str:
        self.listener = listener
        self.last_active = time.monotonic()  # idle from now: the imports before do not count
        self.selector.register(listener, selectors.EVENT_READ, ("accept", None))
        self.selector.register(wake, selectors.EVENT_READ, ("signal", None))
        while True:
            if self.stopping and self.listener is not None:
                self._close_listener()
            if self.stopping and not self.children:
                return "stopped"
            timeout = None
            if not self.children and not self.stopping and self.idle_timeout > 0:
                timeout = self.idle_timeout - (time.monotonic() - self.last_active)
                if timeout <= 0:
                    self._close_listener()
                    return f"idle for {self.idle_timeout:g} s"
            for key, _ in self.selector.select(timeout):
                kind, pid = key.data
                if kind == "accept":
                    self._accept()
                elif kind == "exit":
                    self._reap(pid)
                elif kind == "caller":
                    self._caller_readable(key.fileobj, pid)
                elif kind == "signal":
                    try:
                        key.fileobj.recv(64)
                    except OSError:
                        pass
                    self.stopping = True

    def _close_listener(self) -> None:
        if self.listener is None:
            return
        self.selector.unregister(self.listener)
        try:  # remove the socket only if it is still ours (a new server may have replaced it)
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self.socket_id:
                # and, first, its lock and log: a stopped server leaves nothing behind (a server that failed
                # to start keeps its log, which `advcli server start` shows)
                for companion in (self.path + ".lock", self.path + ".log"):
                    try:
                        os.unlink(companion)
                    except OSError:
                        pass
                os.unlink(self.path)
        except OSError:
            pass
        self.listener.close()
        self.listener = None

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        self.last_active = time.monotonic()
        conn.settimeout(5.0)  # a request is sent at once; one that never comes must not stall the server
        fds: list[int] = []
        try:
            head, fds, _, _ = socket.recv_fds(conn, 4, 3)
            if len(head) < 4:
                head += recv_exact(conn, 4 - len(head))
            request = json.loads(recv_exact(conn, struct.unpack(">I", head)[0]))
        except (OSError, ValueError, ConnectionError):
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        op = request.get("op")
        if op == "run" and len(fds) == 3 and not self.stopping:
            self._run(conn, request, fds)
            return
        for fd in fds:
            os.close(fd)
        if op == "status":
            self._reply(conn, self.status())
        elif op == "stop":
            self.stopping = True
            self._reply(conn, {"stopping": os.getpid(), "running": len(self.children)})
        elif op == "run":
            self._reply(conn, {"declined": "the server is stopping" if self.stopping else
                               "the three standard streams did not arrive with the request"})
        else:
            self._reply(conn, {"declined": f"unknown request {op!r}"})
        conn.close()

    def status(self) -> dict:
        return {"pid": os.getpid(), "started": self.started, "preload_s": round(self.preload_s, 3),
                "modules": self.modules, "served": self.served, "running": len(self.children),
                "idle_timeout": self.idle_timeout, "python": sys.version.split()[0], "executable": sys.executable,
                "socket": self.path, "env": self.stamp["env"], "code": self.stamp["code"]}

    @staticmethod
    def _reply(conn: socket.socket, msg: dict) -> bool:
        try:
            conn.sendall(json.dumps(msg).encode() + b"\n")
            return True
        except OSError:
            return False

    def _run(self, conn: socket.socket, request: dict, fds: list[int]) -> None:
        why = mismatch(self.stamp, {"code": request.get("code"), "env": request.get("import_env", {})})
        if why is not None:
            reason, stale = why
            for fd in fds:
                os.close(fd)
            self._reply(conn, {"declined": reason, "stale": stale})
            conn.close()
            if stale:  # the code on disk moved on: stop, so that the next `advcli server start` loads it
                print(f"stopping: {reason}", flush=True)
                self.stopping = True
            return
        own = [self.listener.fileno(), conn.fileno(), self.selector.fileno(), *self.private_fds] + \
            [c.fileno() for c, _ in self.children.values()] + [p for _, p in self.children.values()]
        # a signal the caller forwards as soon as it knows the pid must meet the child's own handlers, not
        # the server's: blocked across the fork, unblocked by the child once its handlers are a fresh
        # process's (a pending one is delivered then)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the loop
            code = 1
            try:
                _stop_with(server_pid)
                code = run_child(request, fds, own, unblock=blocked)
            finally:
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for fd in fds:
            os.close(fd)
        try:
            os.setpgid(pid, pid)  # also done by the child: whichever runs first wins the race with a signal
        except OSError:
            pass
        self.served += 1
        pidfd = os.pidfd_open(pid)
        self.children[pid] = (conn, pidfd)
        conn.setblocking(True)
        self._reply(conn, {"pid": pid})
        self.selector.register(pidfd, selectors.EVENT_READ, ("exit", pid))
        self.selector.register(conn, selectors.EVENT_READ, ("caller", pid))

    def _caller_readable(self, conn: socket.socket, pid: int) -> None:
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if data:
            return
        self.selector.unregister(conn)  # the caller is gone (killed): stop its command as its terminal would
        try:
            os.killpg(pid, signal.SIGTERM)
        except OSError:
            pass

    def _reap(self, pid: int) -> None:
        conn, pidfd = self.children.pop(pid)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        try:
            _, status = os.waitpid(pid, 0)
            msg = _status_code(status)
        except ChildProcessError:
            msg = {"exit": 1}
        if conn.fileno() != -1:
            try:
                self.selector.unregister(conn)
            except (KeyError, ValueError):
                pass
            self._reply(conn, msg)
            conn.close()
        self.last_active = time.monotonic()


def _stop_with(server_pid: int) -> None:
    """A command whose server dies (``kill -9``) gets SIGTERM, as if its caller had hung up: its caller
    has already been told it failed (the connection closed), so it must stop and write nothing rather
    than put an output in place later. Linux's parent-death signal; the server gone before this ran: the
    same, at once. The server is not single-threaded (pyarrow's jemalloc keeps a thread): killed, it hands
    the child from thread to thread as they end, and the child gets SIGTERM once per hand-over, so the
    command's clean-up must hold a repeat (advcli.io.commit.shielded, cli._on_sigterm)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != server_pid:  # already reparented: the server died before the signal was armed
        os.kill(os.getpid(), signal.SIGTERM)


def _stream(fd: int, mode: str, encoding: str, errors: str, line_buffering: bool):
    raw = open(fd, mode + "b", buffering=-1, closefd=False)
    return io.TextIOWrapper(raw, encoding=encoding, errors=errors, line_buffering=line_buffering)


def run_child(request: dict, fds: list[int], server_fds: list[int], unblock=()) -> int:
    """Become the caller's command: its process group, streams, directory, environment and umask, the
    signal handlers a fresh Python has (then ``unblock``: the signal mask before the fork); then
    advcli's CLI. Returns the exit status."""
    os.setpgid(0, 0)
    signal.set_wakeup_fd(-1)
    for fd in server_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(s, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    stdio = request["stdio"]
    sys.stdin = sys.__stdin__ = _stream(0, "r", *stdio["stdin"], line_buffering=False)
    sys.stdout = sys.__stdout__ = _stream(1, "w", *stdio["stdout"], line_buffering=os.isatty(1))
    sys.stderr = sys.__stderr__ = _stream(2, "w", *stdio["stderr"], line_buffering=True)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    os.umask(int(request["umask"]))
    sys.argv = list(request["argv"])
    main_module = sys.modules.get("__main__")
    if main_module is not None:  # click names the program from argv[0] and __main__.__package__
        main_module.__package__ = request.get("main_package")
    import random

    random.seed()  # as a fresh process seeds it, not the server's state shared by every child
    code = 0
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblock)  # on the caller's streams from here
        from advcli.cli import main

        main()
    except KeyboardInterrupt:  # before the CLI's own handling began: as advcli._entry says it
        sys.stderr.write(INTERRUPTED_AT_START)
        code = 130
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            sys.stderr.write(f"{e.code}\n")
    except BaseException:  # noqa: BLE001 - as Python would print it, then the status it would give
        import traceback

        traceback.print_exc()
        code = 1
    return _exit_like_python(code)


def _exit_like_python(code: int) -> int:
    """What the interpreter does after the main module: join the non-daemon threads, run the atexit
    functions, flush the streams. (The child then leaves by ``os._exit``, never into the server's loop.)"""
    import atexit
    import threading

    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        try:
            shutdown()
        except BaseException:  # noqa: BLE001
            pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120  # Python's status when flushing stdout fails at exit
    return code


def main(argv: list[str] | None = None) -> int:
    """``python -c 'from advcli.server.daemon import main; main()' SOCKET IDLE_SECONDS``."""
    argv = sys.argv[1:] if argv is None else argv
    path, idle = argv[0], float(argv[1])
    lock = open(path + ".lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            print("another server holds this socket's lock", flush=True)
            return 3
        raise
    try:  # the loop waits on its children with pidfds (Linux >= 5.3): fail here, not after the first fork
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError) as e:
        print(f"cannot serve: this system has no pidfds ({e})", flush=True)
        return 4
    t0 = time.perf_counter()
    server = Server(path, idle)
    server.modules = preload()
    server.preload_s = time.perf_counter() - t0
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda *_: None)  # the wake-up fd tells the loop; the loop stops
    tmp = f"{path}.{os.getpid()}.tmp"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(tmp)
    os.chmod(tmp, 0o600)
    listener.listen(64)
    os.replace(tmp, path)  # the socket appears ready, never half-made
    st = os.stat(path)
    server.socket_id = (st.st_dev, st.st_ino)
    server.private_fds = [lock.fileno(), wake_r.fileno(), wake_w.fileno()]
    print(f"ready: pid {os.getpid()}, {server.modules} advcli modules and torch imported in "
          f"{server.preload_s:.2f} s, socket {path}", flush=True)
    why = server.serve(listener, wake_r)
    print(f"stopped ({why}) after {server.served} commands", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
