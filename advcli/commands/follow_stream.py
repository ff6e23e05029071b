"""``--follow`` on a prime-rl run directory: its trace stream (``monitors/file/traces/stream/NNNNN.jsonl[.zst]``)
and annotation streams (``traces/annotations/<producer>/NNNNN.jsonl[.zst]``) cut into training steps as they
are written (:mod:`advcli.formats.primerl_stream` reads them; prime-rl's writer:
PrimeIntellect-ai/prime-rl @ 551bfc39 ``src/prime_rl/monitors/file/traces/chunks.py``, @ 048a6e23
``monitors/file/monitor.py``, @ 96e0cf47 ``orchestrator/annotations.py``).

A chunk is not a step: a chunk rolls over at a size, a cohort's episodes arrive one by one (a cohort can
straddle chunks and steps), and what the orchestrator (ship step, advantages) and the trainer (log-probs,
entropies, masks) learn later arrives in the annotation streams. So :class:`StreamLister` reads every stream
incrementally (the whole lines appended since the last poll; a sealed chunk read to its end once, from where
its live twin had been read to) and files each record under its step: an episode under its cohort's step (the
step the cohort's first episode arrived at, ``info.arrival.step``, else the dispatch step, else the ship step
of an annotation: as the format's reader steps rows), an annotation under the step of the trace it updates.

Step S is complete when every stream (the episodes and each producer's annotations) holds a record of a later
step, or when no chunk has changed for ``--settle`` seconds and no live chunk ends in a half-written line (a
half-written line is never data: it is not read until its newline is there). A complete step is written out
(:meth:`StreamLister.write`) as the stream of that step alone: the same chunk names and line numbers (the other
records' lines left empty), sealed chunks as zstd, the step's annotations beside it; the format reads it as it
reads the whole run, so rows, cohorts, scoring order and the rows' names (chunk and line) are the batch run's.

What arrives for a step after it was taken (an episode of one of its cohorts, an annotation of one of its
traces) is reported once per step and stream, not read. Memory: the records of the steps not taken yet, and
the step of the cohorts and traces of the last :data:`advcli.commands.follow_units.WATCHED` steps taken.
"""
from __future__ import annotations

import os
import time

from ..errors import AdvcliError
from .follow_units import WATCHED, Unit, register_lister

EPISODES = "episodes"  # the key of the episode stream among the streams


class _Stream:
    """One chunked stream: how far each chunk has been read (whole lines only)."""

    def __init__(self, directory: str):
        self.dir = directory
        self.offset: dict[int, int] = {}  # chunk -> bytes read (whole lines)
        self.line: dict[int, int] = {}  # chunk -> lines read
        self.done: set[int] = set()  # sealed chunks read to their end
        self.sealed: dict[int, bool] = {}
        self.torn = False  # a live chunk ends in a half-written line
        self.newest = 0.0  # the newest modification time of its chunks

    def poll(self):
        """(chunk number, chunk path, line number, raw line) of every whole line appended since the last poll."""
        from ..formats.primerl_stream import open_chunk, stream_chunks

        self.torn = False
        if not os.path.isdir(self.dir):
            return
        for c in stream_chunks(self.dir):
            self.sealed[c.number] = c.sealed
            try:
                self.newest = max(self.newest, os.stat(c.path).st_mtime)
            except FileNotFoundError:  # sealed between the listing and now: read next poll
                continue
            if c.number in self.done:
                continue
            start, n = self.offset.get(c.number, 0), self.line.get(c.number, 0)
            try:
                fh = open_chunk(c.path)
            except FileNotFoundError:  # sealed since the listing: read next poll
                continue
            with fh:
                if c.sealed:
                    left = start
                    while left > 0:  # the decompressed bytes its live twin was read to
                        b = fh.read(min(left, 1 << 20))
                        if not b:
                            break
                        left -= len(b)
                else:
                    fh.seek(start)
                for raw in fh:
                    if not raw.endswith(b"\n") and not c.sealed:
                        self.torn = True  # the writer is still writing it: read once whole
                        break
                    start += len(raw)
                    n += 1
                    if raw.strip():  # a sealed chunk's last line without its newline: data if it parses
                        yield c.number, c.path, n, raw  # (the format's chunk_records), else left out
            self.offset[c.number], self.line[c.number] = start, n
            if c.sealed:
                self.done.add(c.number)


class StreamLister:
    """The steps of a prime-rl run directory's streams as they are written (this module's docstring).
    Registered for the ``primerl-stream`` format: :meth:`start` makes one per follow."""

    @classmethod
    def start(cls, root: str, settle: float, after: int | None = None) -> StreamLister:
        return cls(root, settle, after)

    def __init__(self, root: str, settle: float, after: int | None = None):
        from ..formats.primerl_stream import stream_dir

        self.root, self.settle = os.path.abspath(root), settle
        self.stream_dir = stream_dir(self.root)
        self.traces = os.path.dirname(self.stream_dir)
        # the directory a step's copy stands for: the root given, or (the root is the traces or stream
        # directory) the one above traces/, so that the copy's chunks lie under traces/stream/ as the format
        # names them
        rel = os.path.relpath(self.traces, self.root)
        self.base = self.root if rel != os.curdir and not rel.startswith(os.pardir) else os.path.dirname(self.traces)
        self.streams: dict[str, _Stream] = {EPISODES: _Stream(self.stream_dir)}
        self.floor = after  # the last step taken
        self.silent = after is not None  # a resumed follow: what its first reading finds was taken before
        self.cohort_step: dict = {}  # cohort id -> step
        self.trace_step: dict = {}  # trace id -> step
        self.waiting: dict = {}  # cohort id -> [(chunk, path, line, raw)] and annotations, until a ship step
        self.waiting_traces: dict = {}  # trace id -> cohort id, for those
        self.pending: dict[int, dict[str, list]] = {}  # step -> stream key -> [(chunk, line, raw)]
        self.latest: dict[str, int] = {}  # stream key -> the latest step it holds a record of
        self.late: dict[tuple[int, str], int] = {}
        self.notes: list[str] = []

    # ------------------------------------------------------------------------------------ reading
    def _producers(self) -> None:
        ann = os.path.join(self.traces, "annotations")
        if os.path.isdir(ann):
            for name in sorted(os.listdir(ann)):
                if name not in self.streams and os.path.isdir(os.path.join(ann, name)):
                    self.streams[name] = _Stream(os.path.join(ann, name))

    def _file(self, step: int, key: str, item: tuple) -> None:
        if self.floor is not None and step <= self.floor:
            if not self.silent:
                self.late[(step, key)] = self.late.get((step, key), 0) + 1
            return
        self.pending.setdefault(step, {}).setdefault(key, []).append(item)
        self.latest[key] = max(self.latest.get(key, step), step)

    def _episode(self, number: int, path: str, line: int, raw: bytes) -> None:
        from ..formats.primerl_stream import arrival_step, episode_kind, parse_line

        parsed = parse_line(path, line, raw, last=True)
        if parsed is None:
            return  # a sealed chunk's torn last line: not data
        ep = parsed[1]
        if episode_kind(ep) == "eval":
            return  # not a row (the format reads the train episodes)
        gid = (ep.get("group") or {}).get("id")
        tids = [tr.get("id") for tr in ep.get("traces") or [] if isinstance(tr, dict)]
        step = self.cohort_step.get(gid)
        if step is None and gid in self.waiting:
            self.waiting[gid]["episodes"].append((number, line, raw))
            self.waiting_traces.update({t: gid for t in tids})
            return
        if step is None:
            step = arrival_step(ep)
            if step is None:  # the step comes with the cohort's ship annotation
                self.waiting[gid] = {"episodes": [(number, line, raw)], "updates": []}
                self.waiting_traces.update({t: gid for t in tids})
                return
            self.cohort_step[gid] = step
        self.trace_step.update({t: step for t in tids})
        self._file(step, EPISODES, (number, line, raw))

    def _update(self, key: str, number: int, path: str, line: int, raw: bytes) -> None:
        from ..formats.primerl_stream import parse_line

        parsed = parse_line(path, line, raw, last=True)
        if parsed is None:
            return  # a sealed chunk's torn last line: not data
        upd = parsed[1]
        tid = upd.get("trace_id")
        if tid is None:
            raise AdvcliError(f"{path}:{line}: an annotation without 'trace_id'",
                              hint="prime-rl's updates are {version, trace_id, info, branches}")
        gid = self.waiting_traces.get(tid)
        if gid is not None:
            w = self.waiting[gid]
            w["updates"].append((key, (number, line, raw)))
            ship = ((upd.get("info") or {}).get("ship") or {}).get("step")
            if isinstance(ship, int) and not isinstance(ship, bool):
                self._resolve(gid, ship)
            return
        step = self.trace_step.get(tid)
        if step is not None:  # else an eval trace, or one of a step long taken
            self._file(step, key, (number, line, raw))

    def _resolve(self, gid, step: int) -> None:
        """A cohort without an arrival step, stepped by its ship annotation (the format's fallback)."""
        w = self.waiting.pop(gid)
        for t in [t for t, g in self.waiting_traces.items() if g == gid]:
            del self.waiting_traces[t]
            self.trace_step[t] = step
        self.cohort_step[gid] = step
        for item in w["episodes"]:
            self._file(step, EPISODES, item)
        for key, item in w["updates"]:
            self._file(step, key, item)

    def __call__(self, root: str) -> list[Unit]:
        self._producers()
        for number, path, line, raw in self.streams[EPISODES].poll():  # episodes first: an annotation's
            self._episode(number, path, line, raw)  # trace was written before it
        for key, s in self.streams.items():
            if key != EPISODES:
                for number, path, line, raw in s.poll():
                    self._update(key, number, path, line, raw)
        self.silent = False
        quiet = (time.time() - max(s.newest for s in self.streams.values()) >= self.settle
                 and not any(s.torn for s in self.streams.values()))
        keys = [k for k, s in self.streams.items() if k == EPISODES or s.offset]
        out = []
        for step in sorted(self.pending):
            later = all(self.latest.get(k, step) > step for k in keys)
            out.append(Unit(step, [], sealed=later or quiet, write=self._writer(step),
                            named_as=None if self.base == self.root else self.base))
        return out

    # ------------------------------------------------------------------------------------ taking
    def _writer(self, step: int):
        return lambda into: self.write(step, into)

    def _dir_in(self, key: str, into: str) -> str:
        """Where stream ``key`` goes in a step's copy ``into`` (the run directory's layout under it)."""
        return os.path.join(into, os.path.relpath(self.streams[key].dir, self.base))

    def write(self, step: int, into: str) -> tuple[dict, list[str]]:
        """The step's records under ``into`` (this module's docstring) -> ({}, notes): nothing of the run's own
        files is taken whole, so nothing is checked for changes later (late records are reported instead)."""
        notes = []
        for key, items in self.pending.get(step, {}).items():
            by_chunk: dict[int, list] = {}
            for number, line, raw in items:
                by_chunk.setdefault(number, []).append((line, raw))
            d = self._dir_in(key, into)
            os.makedirs(d, exist_ok=True)
            for number, rows in sorted(by_chunk.items()):
                body = [b"\n"] * max(line for line, _ in rows)
                for line, raw in rows:
                    body[line - 1] = raw
                data = b"".join(body)
                sealed = self.streams[key].sealed.get(number, False)
                if sealed:
                    import zstandard

                    data = zstandard.ZstdCompressor(level=1).compress(data)
                with open(os.path.join(d, f"{number:05d}.jsonl" + (".zst" if sealed else "")), "wb") as fh:
                    fh.write(data)
            if key == EPISODES:
                notes.append(f"{len(items)} episode(s) from chunk(s) {', '.join(map(str, sorted(by_chunk)))} of "
                             "the stream")
        return {}, notes

    def taken(self, step: int) -> None:
        """Step ``step`` was taken: its records are dropped, later arrivals for it reported; the steps of the
        cohorts and traces of steps older than the last WATCHED are forgotten (memory stays bounded)."""
        self.floor = step if self.floor is None else max(self.floor, step)
        for s in [s for s in self.pending if s <= self.floor]:
            del self.pending[s]
        old = self.floor - WATCHED
        self.cohort_step = {g: s for g, s in self.cohort_step.items() if s > old}
        self.trace_step = {t: s for t, s in self.trace_step.items() if s > old}

    def drain(self) -> list[str]:
        """The late arrivals since the last call, one line per step and stream."""
        out = []
        for (step, key), n in sorted(self.late.items()):
            what = (f"{n} episode(s) of its cohorts" if key == EPISODES
                    else f"{n} update(s) of its traces in the {key} annotations")
            out.append(f"step {step}: {what} arrived after the step was taken; not read (not in the step's "
                       "numbers above)")
        self.late.clear()
        return out


register_lister("primerl-stream", StreamLister)
