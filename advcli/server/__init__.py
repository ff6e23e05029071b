"""A resident advcli process, so that a run's start-up is a ``fork`` instead of ``import torch``.

``import torch`` takes seconds, as long as the whole of a small run (docs/performance.md), and
it cannot overlap the run (it holds the GIL, and every module that resolves the configuration needs
torch; docs/performance.md). ``advcli server start`` starts one background process per installation
and user that imports torch, pyarrow and advcli's modules once and then waits on a UNIX socket. While it
runs, the ``advcli`` command (``advcli._entry``) hands every command but ``server`` to it: the command
line, the working directory, the environment, the umask and the three standard streams (as file
descriptors) go over the socket, the server forks, and the child runs the command exactly as a fresh
process would (same code, same arguments, same files), writing straight to the caller's terminal or
pipes. The caller forwards Ctrl-C and SIGTERM to the child and exits with the child's status.

The same bits come out: a child is the same Python, torch and advcli as a fresh process, started from
a state in which nothing has been computed (the server only imports; it never runs an operator, so
torch's and OpenMP's thread pools start in the child as they would in a new process). When that cannot
be promised the command runs in its own process instead, silently: the server was started by another
Python or from other advcli sources than the caller's (a source file edited since, an installation
changed: :func:`code_stamp`), or the caller's environment differs from the server's in a variable read
when torch, OpenMP, pyarrow or Python start (``OMP_NUM_THREADS``, ``ATEN_CPU_CAPABILITY``, ...:
:data:`IMPORT_ENV_PREFIXES`). A server whose code is stale stops itself.

``ADVCLI_SERVER=off`` runs every command in its own process; ``ADVCLI_SERVER=require`` fails (exit 1)
where no usable server answers, for scripts that must not pay the start-up. The socket lives in a
directory only its user can enter (``$ADVCLI_SERVER_DIR``, else ``$XDG_RUNTIME_DIR/advcli``, else
``/tmp/advcli-<uid>``); a directory that another user owns or others can enter is refused.

This module is imported by every ``advcli`` command, so it imports only the standard library's
smallest modules; :mod:`.client` (the hand-over) and :mod:`.daemon` (the server) are imported when used.
"""
from __future__ import annotations

import os
import stat
import sys

# what a command interrupted before the CLI's own handling began says, in its own process (advcli._entry)
# or in a server's child
INTERRUPTED_AT_START = "advcli: error: interrupted while starting: nothing was read or written\n"

# Environment variables read when torch, OpenMP/MKL, pyarrow, the allocators or Python start (or when
# typer's rich help module is imported): a server imported them with its own values, so a caller whose
# values differ runs in its own process.
IMPORT_ENV_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "ATEN_", "TORCH", "PYTORCH_", "CUDA_",
                       "NVIDIA_", "ARROW_", "PYARROW_", "PYTHON", "LD_", "MALLOC_", "JEMALLOC_")
IMPORT_ENV_NAMES = ("FORCE_COLOR", "NO_COLOR", "PY_COLORS", "TERMINAL_WIDTH", "GITHUB_ACTIONS",
                    "_TYPER_STANDARD_TRACEBACK", "TYPER_USE_RICH")

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ServerDirError(Exception):
    """The socket directory is unsafe (another owner, or open to others) or cannot be made."""


def server_dir(env: dict | None = None, create: bool = False) -> str:
    """The directory that holds the socket; checked to be this user's and closed to others."""
    env = os.environ if env is None else env
    d = env.get("ADVCLI_SERVER_DIR")
    if not d:
        runtime = env.get("XDG_RUNTIME_DIR")
        d = os.path.join(runtime, "advcli") if runtime and os.path.isdir(runtime) else f"/tmp/advcli-{os.getuid()}"
    if create:
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
        except OSError as e:
            raise ServerDirError(f"{d}: cannot create the server directory ({e.strerror})") from e
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return d
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ServerDirError(f"{d}: not a directory of this user's closed to others (mode "
                             f"{stat.filemode(st.st_mode)}, owner uid {st.st_uid}); advcli will not use a socket there")
    return d


def sha256(data: bytes = b""):
    """``hashlib.sha256``, the same digest, from CPython's own implementation where it has one: importing
    hashlib loads OpenSSL (about 0.02 s of CPU), which every command would pay at its start for the socket's
    name (:func:`socket_path`, asked before anything else: ``advcli._entry``)."""
    try:
        from _sha2 import sha256 as impl  # Python >= 3.12
    except ImportError:
        try:
            from _sha256 import sha256 as impl  # Python 3.10, 3.11
        except ImportError:  # a build without them
            from hashlib import sha256 as impl
    return impl(data)


def socket_path(env: dict | None = None, create: bool = False) -> str:
    """This installation's socket: one server per user, Python prefix and advcli package."""
    key = sha256(f"{sys.prefix}\0{sys.executable}\0{PACKAGE_DIR}".encode()).hexdigest()[:12]
    return os.path.join(server_dir(env, create), f"server-{key}.sock")


def import_env(env: dict) -> dict[str, str]:
    """The variables of ``env`` that take effect when the server imports (see the module docstring), and
    this interpreter's command-line flags (``-X dev``, ``-W error``, ``-I``, ... — set for the process,
    not inherited by a fork's command) under the pseudo-variable ``(python flags)``."""
    found = {k: v for k, v in env.items() if k.startswith(IMPORT_ENV_PREFIXES) or k in IMPORT_ENV_NAMES}
    found["(python flags)"] = repr((tuple(sys.flags), sys.warnoptions, sorted(sys._xoptions.items())))
    return found


INSTALL_MARKS = (".dist-info", ".egg-info", ".egg-link", ".pth")


def code_stamp(package_dir: str = PACKAGE_DIR, path: list[str] | None = None) -> str:
    """A digest of the code a process would run: this Python, advcli's source files (path, size,
    modification time) and, in each directory on ``sys.path``, the installation records
    (``*.dist-info``, ``*.egg-info``, ``*.egg-link``, ``*.pth``: name and modification time), which
    change when a package is installed, upgraded, reinstalled or removed — not the directory's own
    modification time, which any output written into a source tree on ``sys.path`` would move.
    ``sys.path[0]`` (the script's directory, or the working directory for ``python -m``) is left out:
    it differs between the ``advcli`` script and the server."""
    h = sha256(f"{sys.executable}\0{sys.version}\0{package_dir}".encode())
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(root, f)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    for entry in (sys.path if path is None else path)[1:]:
        h.update(f"{entry}\n".encode())
        try:
            with os.scandir(entry) as it:
                marks = sorted((e.name, e.stat().st_mtime_ns) for e in it if e.name.endswith(INSTALL_MARKS))
        except OSError:  # not a directory (a zip) or gone
            continue
        for name, mtime in marks:
            h.update(f"{name}\0{mtime}\n".encode())
    return h.hexdigest()


def mismatch(server: dict, caller: dict) -> tuple[str, bool] | None:
    """Why a server (its ``code`` stamp and ``env``) cannot run a caller's command, and whether the
    server's code is stale; None when it can."""
    if server["code"] != caller["code"]:
        return "the server runs other advcli code or another Python installation than this command", True
    s, c = server["env"], caller["env"]
    diff = sorted(k for k in set(s) | set(c) if s.get(k) != c.get(k))
    if diff:
        return (f"this command's environment differs from the server's in {', '.join(diff[:5])}"
                f"{' ...' if len(diff) > 5 else ''} (read when torch and pyarrow start)"), False
    return None
