"""A command's outputs put in place last, all together, with SIGINT/SIGTERM held across it.

Writers finish their outputs in temporary files (``.NAME.advcli-tmp-PID`` beside the target, a
directory for the Ray engine, a local file for object storage) and hand them to :func:`put_in_place`.
Outside :func:`staged` that renames (or uploads) at once. Inside it (``advcli run``) the finished
files are only recorded: the command can still rewrite them (:func:`staged_path`: response-level
outputs), write its report and print its summary, and then :meth:`Staging.commit` renames them all as
its last step. So a non-zero exit at any moment leaves every output path as it was (docs/errors.md):

- before the commit, Ctrl-C (or an error) removes the temporary files;
- during the commit, SIGINT and SIGTERM are recorded, not raised: the earlier content of every local
  target is first kept aside (``.NAME.advcli-old-PID-I``: a hard link to a file, the renamed
  directory of the Ray engine), the new files renamed in, and the kept ones removed only when every
  rename succeeded; a failed rename puts the earlier ones back;
- after the commit the command is finished: a signal recorded during it, or arriving later, ends
  it with status 0 (the outputs are complete), never with 130 and a claim that nothing was written.
"""
from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..records import record
from .temps import owner_tag

HELD = (signal.SIGINT, signal.SIGTERM)


@record
class Pending:
    """One staged output: the path the user named, the finished temporary file, how it is put in place."""

    target: str  # the output path the user named
    staged: str  # the finished temporary file (or directory) that becomes it
    publish: Callable[[], None] | None = None  # object storage: the upload (None: a local rename)
    remove: Callable[[], None] | None = None  # how ``staged`` is removed when it is not published (None: locally)


class Staging:
    def __init__(self, force: bool = True) -> None:
        self.force = force  # False: an output path that exists at the commit was written meanwhile by another
        self.pending: list[Pending] = []
        self.committed = False
        self.signals: list[int] = []  # received while (or after) committing: too late to stop anything

    def staged_path(self, target: str) -> str:
        """The finished temporary file that will become ``target`` (``target`` itself when none is staged)."""
        for p in self.pending:
            if p.target == target:
                return p.staged
        return target

    def discard(self) -> None:
        """Remove the staged files: nothing is put in place."""
        for p in self.pending:
            if p.remove is not None:
                p.remove()
            else:
                _remove(p.staged)
        self.pending = []

    def commit(self) -> None:
        """Put every staged output in place, with SIGINT/SIGTERM recorded rather than raised from here on
        (the command's last step: see the module docstring)."""
        self._hold_signals()
        moved: list[tuple[str, str | None]] = []  # (target, where its old content waits) per local rename
        local = [p for p in self.pending if p.publish is None]
        try:
            for i, p in enumerate(local):
                old = None
                if os.path.lexists(p.target):
                    if not self.force:  # absent at the start (checked), there now
                        from ..errors import AdvcliError

                        raise AdvcliError(f"{p.target}: appeared while this command worked (another process wrote "
                                          "it); not replaced without --force, and nothing of this run was put in "
                                          "place", hint="pass --force to replace it, or write elsewhere")
                    d, name = os.path.split(os.path.abspath(p.target))
                    old = os.path.join(d, f".{name}.advcli-old-{owner_tag()}-{i}")
                    _keep_aside(p.target, old)
                moved.append((p.target, old))
                os.replace(p.staged, p.target)
        except BaseException as e:
            for target, old in reversed(moved):  # undo: the old content back at every target
                if os.path.lexists(target) and (old is None or os.path.lexists(old)):
                    _remove_path(target)
                if old is not None and os.path.lexists(old):
                    os.replace(old, target)
            self.discard()
            if isinstance(e, OSError):
                from ..errors import AdvcliError

                where = p.target  # the output whose rename failed
                raise AdvcliError(f"{where}: cannot put the finished output in place ({e.strerror or e}); "
                                  "every output path holds what it held before",
                                  hint="check the output directory's permissions and free space") from None
            raise
        self.committed = _LAST["committed"] = True
        for _, old in moved:
            if old is not None:
                _remove(old)
        for d in {os.path.dirname(os.path.abspath(t)) for t, _ in moved}:
            _fsync_dir(d)
        for p in self.pending:
            if p.publish is not None:
                p.publish()
        self.pending = []

    def _hold_signals(self) -> None:
        def record(signum, frame):
            self.signals.append(signum)

        for s in HELD:
            try:
                signal.signal(s, record)
            except (ValueError, OSError):  # not the main thread: nothing to hold
                pass


@contextmanager
def shielded(redeliver: bool = True) -> Iterator[None]:
    """Within: SIGINT and SIGTERM are recorded, not raised, so that a clean-up runs to its end (the
    temporary outputs removed, the threads stopped). A stop is often signalled more than once: a
    second Ctrl-C, a scheduler that repeats its SIGTERM, or Linux's parent-death signal, which a
    command forked by a killed ``advcli server`` receives again as each of the server's threads
    ends; raised in the middle of the clean-up of the first, the second skipped what was left of it.
    On the way out the handlers are restored and, with ``redeliver`` (the clean-up was not already
    for an interrupt), a recorded signal is raised again: it then interrupts as it would have.
    Outside the main thread (the library called from a worker thread) handlers cannot be set: as is."""
    got: list[int] = []
    saved: dict = {}
    for s in HELD:
        if signal.getsignal(s) is None:  # a handler set outside Python: it could not be put back
            continue
        try:
            saved[s] = signal.signal(s, lambda signum, frame: got.append(signum))
        except (ValueError, OSError, TypeError):  # not the main thread
            pass
    try:
        yield
    finally:
        for s, h in saved.items():
            try:
                signal.signal(s, h)
            except (ValueError, OSError, TypeError):
                pass
        if redeliver and got:
            signal.raise_signal(got[0])


_ACTIVE: Staging | None = None


@contextmanager
def staged(force: bool = True) -> Iterator[Staging]:
    """Within: outputs handed to :func:`put_in_place` wait for :meth:`Staging.commit`; leaving without
    a commit (an error, Ctrl-C) removes them. The signal handlers are restored on the way out. ``force``:
    the command's --force; without it, an output path another process wrote meanwhile is refused at the
    commit, never replaced."""
    global _ACTIVE
    saved = {s: signal.getsignal(s) for s in HELD}
    st = Staging(force)
    _ACTIVE = st
    _LAST["committed"] = False
    try:
        yield st
    finally:
        _ACTIVE = None
        if not st.committed:  # the staged files removed, whatever signal comes meanwhile (``shielded``)
            import sys

            with shielded(redeliver=not isinstance(sys.exc_info()[1], KeyboardInterrupt)):
                st.discard()
        for s, h in saved.items():
            try:
                signal.signal(s, h)
            except (ValueError, OSError, TypeError):
                pass


@contextmanager
def immediate() -> Iterator[None]:
    """Within: :func:`put_in_place` acts now, even inside :func:`staged`: for a command's intermediate
    files (the kept rows ``advcli run --drop-uniform`` computes on), which are its inputs, not its outputs."""
    global _ACTIVE
    saved, _ACTIVE = _ACTIVE, None
    try:
        yield
    finally:
        _ACTIVE = saved


def put_in_place(target: str, staged_file: str, publish: Callable[[], None] | None = None,
                 now: Callable[[], None] | None = None, remove: Callable[[], None] | None = None) -> bool:
    """Make the finished ``staged_file`` the output ``target``: within :func:`staged`, at its commit;
    otherwise now: ``publish()`` (object storage), else ``now()`` (a local replacement of the caller's
    own, e.g. a directory), else a rename. True when it was done now. ``remove``: how the staged output
    is removed when the command stops before its commit (the Ray engine's temporary prefix on object
    storage; None: a local file or directory). A publish done now runs to its end whatever signal comes
    meanwhile (:func:`shielded`; the signal is raised once it is done): an object-storage prefix is
    copied part by part, and stopped between two it would hold some new parts and some old."""
    if _ACTIVE is not None:
        _ACTIVE.pending.append(Pending(target, staged_file, publish, remove))
        return False
    if publish is not None:
        with shielded():
            publish()
    elif now is not None:
        now()
    else:
        os.replace(staged_file, target)
    return True


def staged_path(target: str) -> str:
    """The file that holds ``target``'s content now: its staged temporary file within :func:`staged`."""
    return _ACTIVE.staged_path(target) if _ACTIVE is not None else target


def committed() -> bool:
    """Whether this process has put a staged command's outputs in place (for the entry point's messages)."""
    return _LAST["committed"]


_LAST = {"committed": False}


def _keep_aside(target: str, old: str) -> None:
    """The earlier content of ``target`` kept at ``old`` until the commit succeeds: a hard link for a file
    (the target is never missing, even if the process is killed here; the rename then replaces it
    atomically), a rename for a directory or where links are not supported."""
    if not os.path.isdir(target) or os.path.islink(target):
        try:
            os.link(target, old, follow_symlinks=False)
            return
        except OSError:
            pass
    os.replace(target, old)


def _remove_path(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def _remove(path: str) -> None:
    try:
        _remove_path(path)
    except OSError:
        pass


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
