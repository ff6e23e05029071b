"""One background thread that runs a function on every submitted item, in order.

The pipeline's statistics thread and the Parquet writer's encoding thread are both this: the
caller hands over work in order, at most ``depth`` items wait, and an exception raised on the
thread is re-raised in the caller's thread (at its next :meth:`OrderedWorker.submit` or at
:meth:`OrderedWorker.close`). torch-free: the writer uses it too.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class OrderedWorker:
    """``fn(*args)`` for every :meth:`submit`, in submission order, on one daemon thread (at most
    ``depth`` waiting). After an error the remaining items are skipped; the error is kept in
    :attr:`error` and re-raised at the next submit or at :meth:`close`."""

    def __init__(self, fn: Callable, depth: int = 2, name: str = "advcli-worker"):
        self.fn = fn
        self.error: BaseException | None = None
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.thread: threading.Thread | None = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            if self.error is None:
                try:
                    self.fn(*item)
                except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                    self.error = e

    def submit(self, *args) -> None:
        if self.error is not None:
            raise self.error
        self.q.put(args)

    def close(self, raise_error: bool = True) -> None:
        """Wait for the submitted items; re-raise the thread's error (``raise_error``) — else the
        caller reads :attr:`error` itself."""
        if self.thread is not None:
            self.q.put(None)
            self.thread.join()
            self.thread = None
        if raise_error and self.error is not None:
            raise self.error
