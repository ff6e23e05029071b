"""Losing a node during ``--engine ray``: recover when Ray can, else a bounded, clear failure.

What Ray does on its own when a worker node dies mid-run (Ray 2.60; tests/distributed/test_ray_faults.py kills
nodes of a local ``ray.cluster_utils.Cluster``):

- Ray Data's map actors are created with ``max_restarts=-1, max_task_retries=-1``: an actor on the
  lost node is restarted elsewhere and its unfinished batches are submitted again; read and write
  tasks are retried (``max_retries``). A batch computed twice gives the same values: the statistics
  actor (:class:`advcli.engines.ray_stats.StatsSink`, pinned to the driver's node) ignores rows
  it has fed already, and a part file written again replaces the same name.
- What it cannot do: run anything when the nodes left have no room for it. A restarted actor waits
  until a node has the CPU or GPU it asks for, and a read task until a CPU is free; if the lost node
  held the only GPU, or the restarted actors take every CPU left so that no read task can run, the
  run waits **forever** with no error (Ray Data's executor has no deadline). Ray's own failures
  during a pass (a listing or footer task whose actor died with the node) come back as deeply
  wrapped exceptions, sometimes not even deserialisable.

So :class:`NodeWatch` follows the run from the driver: it notes the nodes alive at the start, counts
progress (batches the driver receives in passes 1-2, batches the statistics actor receives in pass
3) and, **only after a node was lost**, aborts the run when nothing progresses for ``stall_timeout``
seconds (``--ray-stall-timeout``, ``ADVCLI_RAY_STALL_TIMEOUT``, default :data:`STALL_TIMEOUT`). A
healthy run is never timed out, however slow. The abort interrupts the driver's main thread (where
Ray Data's executor is waited on); :meth:`NodeWatch.error` turns that, or Ray's own error after a
node loss, into one :class:`~advcli.errors.AdvcliError` naming the node, and ``run_ray`` removes its
temporary output as for any failed run.
"""
from __future__ import annotations

import os
import signal
import threading
import time

from ..errors import AdvcliError

STALL_TIMEOUT = 300.0  # seconds without progress, after a node was lost, before the run is aborted
ENV_STALL = "ADVCLI_RAY_STALL_TIMEOUT"
POLL = 0.5  # seconds between two looks at the cluster and the progress counter


def stall_timeout(value: float | None) -> float:
    """The timeout to use: ``value``, else ``$ADVCLI_RAY_STALL_TIMEOUT``, else :data:`STALL_TIMEOUT`."""
    if value is None:
        env = os.environ.get(ENV_STALL)
        if env:
            try:
                value = float(env)
            except ValueError:
                raise AdvcliError(f"{ENV_STALL}={env!r}: expected a number of seconds") from None
        else:
            value = STALL_TIMEOUT
    if not value > 0:
        raise AdvcliError(f"--ray-stall-timeout {value}: expected a positive number of seconds")
    return float(value)


def _alive(ray) -> dict[str, str]:
    return {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")}


class NodeWatch:
    """Follows a run from the driver (a daemon thread): nodes lost, progress, and the abort.

    ``progress_fn(stage, done, total)`` (the run's progress callback) is told the rows the
    statistics actor has received in pass 3, so a progress bar moves on Ray too."""

    def __init__(self, ray, timeout: float, progress_fn=None, poll: float = POLL):
        self.ray, self.timeout, self.poll = ray, timeout, poll
        self.progress_fn = progress_fn
        self.nodes = _alive(ray)  # id -> address, at the start of the run
        self.lost: dict[str, tuple[str, float]] = {}  # id -> (address, when it was seen gone)
        self.fired: str | None = None  # why the run was aborted
        self.pass_name = "start"
        self._last = time.monotonic()
        self._sink = None  # (actor, total rows): pass 3's counter
        self._stop = threading.Event()
        self._main = threading.main_thread().ident
        self._can_interrupt = threading.current_thread() is threading.main_thread()
        self._thread = threading.Thread(target=self._loop, name="advcli-ray-watch", daemon=True)

    # the run tells the watch where it is
    def stage(self, name: str) -> None:
        self.pass_name = name
        self.tick()

    def tick(self) -> None:
        """Progress seen by the driver (a batch received)."""
        self._last = time.monotonic()

    def rows_received(self, key: str | None, done: int, total: int) -> None:
        """A batch of a per-row pass received by the driver: progress, and (``key``: the pass's stage name in
        the run's progress callback) the rows so far reported there."""
        self.tick()
        if key is not None and self.progress_fn is not None:
            self.progress_fn(key, done, total)

    def follow_sink(self, sink, total: int) -> None:
        """Pass 3: progress is the batches the statistics actor has received (``sink.seen()``)."""
        self._sink = (sink, total)

    # thread
    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)
        return False

    def _loop(self) -> None:
        seen = -1
        while not self._stop.wait(self.poll):
            try:
                now = time.monotonic()
                alive = _alive(self.ray)
                for nid, addr in self.nodes.items():
                    if nid not in alive and nid not in self.lost:
                        self.lost[nid] = (addr, now)
                if self._sink is not None:
                    sink, total = self._sink
                    got, rows = self.ray.get(sink.seen.remote(), timeout=max(self.poll * 4, 5.0))
                    if got != seen:
                        seen = got
                        self.tick()
                        if self.progress_fn is not None:
                            self.progress_fn("advantages", min(rows, total), total)
                if self.lost and self.fired is None:
                    since = max(self._last, max(t for _, t in self.lost.values()))
                    if now - since > self.timeout:
                        self.fired = (f"no progress for {self.timeout:g} s after the loss (in {self.pass_name}); "
                                      "the nodes left cannot run the remaining work")
                        self._interrupt()
                        return
            except Exception:  # noqa: BLE001 - the watch never breaks the run; a failed look is retried
                continue

    def _interrupt(self) -> None:
        """Raise KeyboardInterrupt in the driver's main thread, which waits on Ray Data's executor
        (a real signal: it also wakes a thread blocked on a lock or a queue)."""
        if self._can_interrupt:
            signal.pthread_kill(self._main, signal.SIGINT)

    # what the user is told
    def lost_names(self) -> str:
        return ", ".join(f"{addr} (node {nid[:12]})" for nid, (addr, _) in self.lost.items())

    def error(self, exc: BaseException | None) -> AdvcliError | None:
        """The user's error for a run that failed (or was aborted) after losing a node; ``None``
        when no node was lost and the watch did not fire (the failure is someone else's to report)."""
        if self.fired is None and exc is not None:
            try:  # a node lost just before the failure surfaced, not yet seen by the thread
                alive = _alive(self.ray)
                for nid, addr in self.nodes.items():
                    if nid not in alive and nid not in self.lost:
                        self.lost[nid] = (addr, time.monotonic())
            except Exception:  # noqa: BLE001 - the GCS may be gone too; report what is known
                pass
        if not self.lost:
            return None
        if self.fired is None and not _is_system_error(exc):
            return None  # an advcli or input error that happened while a node was down: report it as is
        s = "s" if len(self.lost) > 1 else ""
        why = self.fired or f"Ray could not finish without it: {_first_line(exc)}"
        return AdvcliError(f"--engine ray: worker node{s} {self.lost_names()} left the cluster during the run; "
                           f"{why}; nothing was written",
                           hint="run again once the cluster has its nodes back (a partial run leaves nothing to "
                                "resume); --ray-stall-timeout SECONDS sets how long a run waits for progress "
                                "after losing a node")


_SYSTEM = ("ActorDiedError", "ActorUnavailableError", "NodeDiedError", "WorkerCrashedError", "ObjectLostError",
           "OwnerDiedError", "ObjectReconstructionFailedError", "UnserializableException", "RaySystemError",
           "GetTimeoutError", "RpcError")


def _is_system_error(exc: BaseException | None) -> bool:
    """Whether Ray's failure (wrapped any number of times) is one of its own (a lost actor, node,
    object or worker) rather than an error raised by advcli's code."""
    if exc is None:
        return True
    seen, stack = set(), [exc]
    while stack:
        x = stack.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if type(x).__name__ in _SYSTEM or any(name in str(x)[:2000] for name in _SYSTEM[:6]):
            return True
        stack += [getattr(x, "cause", None), x.__cause__, x.__context__]
    return False


def _first_line(exc: BaseException | None) -> str:
    if exc is None:
        return "the run stopped"
    text = str(exc).strip().splitlines()
    for line in text:
        if "died" in line or "dead" in line or "lost" in line:
            return f"{type(exc).__name__}: {line.strip()[:200]}"
    return type(exc).__name__
