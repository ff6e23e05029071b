"""``primerl-stream``: prime-rl's trace stream, ``<run>/monitors/file/traces/stream/NNNNN.jsonl[.zst]``, with
the annotation streams beside it (``traces/annotations/<producer>/NNNNN.jsonl[.zst]``).

Read from PrimeIntellect-ai/prime-rl pull requests #3444 (merged 2026-08-31: one arrival-ordered episode
stream plus append-only annotations, replacing ``rollouts/step_N/{train,eval}/{all,effective}/traces.jsonl``)
and #3465 (merged ~2026-09-02: every stream a directory of numbered chunks), at
PrimeIntellect-ai/prime-rl @ 65a18584 / 551bfc39 / 048a6e23 / 96e0cf47:

* ``src/prime_rl/monitors/file/traces/chunks.py`` (``ChunkedJsonl``, ``chunk_numbers``, ``open_chunk``,
  ``read_records``): a chunk is ``{n:05d}.jsonl`` while live (plain text, appended to), and
  ``{n:05d}.jsonl.zst`` once sealed (zstd in seekable frames; the plain file is removed only after its
  compressed twin is complete, so both can briefly exist: the plain one is read). A line never spans chunks;
  a torn last line (a writer stopped mid-append) ends the stream and is not data.
* ``src/prime_rl/monitors/file/monitor.py`` (``log_episodes``, ``log_annotations``): every episode is written
  once, on arrival, as ``Episode.to_record(float_decimals=monitors.file.float_decimals)`` (default 4: verifiers
  0.4.0 ``RECORD_FLOAT_DECIMALS = 4``, ``verifiers/v1/graph.py``; per-token float streams rounded on disk);
  train and eval episodes share the stream (``trace.info.kind``, else ``run.work.type``); each producer
  appends updates to its own annotation stream.
* ``src/prime_rl/orchestrator/annotations.py`` (``stamp_arrival``: ``trace.info.arrival.step`` /
  ``dispatch.step``; ``stamp_ship``: a shipped trace's update ``info = {effective, ship: {step}, advantage}``
  with each branch's full-length ``advantages``) and ``src/prime_rl/trainer/rl/annotations.py``
  (``AnnotationWriter``: ``trainer_logprobs``, ``entropies``, ``is_masked`` per branch, null outside the loss
  mask, floats rounded to ``float_decimals``).
* ``src/prime_rl/monitors/file/traces/update.py`` (``fold_trace_updates``, ``branch_node_paths``): updates
  fold onto the trace in write order, newest winning: ``info`` deep-merged; each branch stream, full length
  over the branch's tokens, projected onto the branch's nodes compactly over each node's mask; a node takes a
  stream only when every sampled position is covered with a non-null value (``is_masked`` keeps nulls).

Rows are the ``primerl-traces`` rows (:mod:`.primerl`: one per trace, the tokens of each branch prime-rl trains,
the reward, ``trainable``, the usage counts) of the **train** episodes, after the fold. ``step``: the step at which
the cohort's first episode arrived (``info.arrival.step``, else the dispatch step ``run.work.step``, else the step
it shipped at), as the old layout's step files did; ``ship_step`` and ``effective`` from the orchestrator's
annotation; ``logged_advantage`` = the folded ``info.advantage`` (absent = never assigned); the trainer's streams
along the row's response: ``trainer_log_probs``, ``entropies`` (0.0 where not annotated, like verifiers'
``Branch.spread``) and ``is_masked`` (1, 0, or -1 where not annotated).

:func:`stream_chunks` lists a stream directory's chunks in order and tells sealed from live (for a reader
that follows a run as it is written).
"""
from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator

from ..errors import AdvcliError
from ..records import record
from . import Context, Format, require, tally_note
from ._common import BOOL, F32_LIST, I64
from .primerl import TRACE_COLUMNS, _branches, _row, sniff, trained_nodes

PATTERN = r"(^|/)traces/stream/(?P<chunk>\d+)\.jsonl(?P<zst>\.zst)?$|(^|/)traces/stream\.jsonl$"
CHUNK = re.compile(r"^(?P<n>\d+)\.jsonl(?P<zst>\.zst)?$")
STREAM_FIELDS = ("advantages", "trainer_logprobs", "entropies", "is_masked")  # update.py STREAM_FIELDS
DECIMALS = 4  # verifiers 0.4.0 RECORD_FLOAT_DECIMALS, prime-rl monitors.file.float_decimals default


@record(frozen=True)
class Chunk:
    """One chunk of a prime-rl stream: its number, its file, and whether it is sealed (zstd, complete) or
    live (plain text, possibly still being appended to, its last line possibly torn)."""

    number: int
    path: str
    sealed: bool


def stream_dir(path: str) -> str:
    """The episode stream directory of a prime-rl run: ``path`` may be the run directory, its ``monitors``,
    ``monitors/file``, ``monitors/file/traces``, the ``stream`` directory itself, or one chunk of it."""
    p = os.path.abspath(path)
    if os.path.isfile(p):
        return os.path.dirname(p)
    for cand in (p, os.path.join(p, "stream"), os.path.join(p, "traces", "stream"),
                 os.path.join(p, "file", "traces", "stream"), os.path.join(p, "monitors", "file", "traces", "stream")):
        if os.path.basename(cand) == "stream" and os.path.isdir(cand):
            return cand
    raise AdvcliError(f"{path}: no prime-rl trace stream under it (looked for monitors/file/traces/stream/)")


def stream_chunks(directory: str) -> list[Chunk]:
    """The chunks of a stream directory (``stream/`` or ``annotations/<producer>/``), in order. A number with
    both a plain file and a ``.zst`` twin (caught mid-seal) is read from the plain file, as prime-rl's
    ``open_chunk`` does; ``.tmp`` files (a seal in progress) are not chunks."""
    found: dict[int, dict[bool, str]] = {}
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise AdvcliError(f"{directory}: cannot list it ({e.strerror})") from None
    for name in names:
        m = CHUNK.match(name)
        if m:
            found.setdefault(int(m.group("n")), {})[bool(m.group("zst"))] = os.path.join(directory, name)
    return [Chunk(n, files.get(False) or files[True], False not in files) for n, files in sorted(found.items())]


class DamagedChunk(AdvcliError):
    """A sealed chunk that does not decompress, or ends inside a zstd frame (cut short: a copy or a disk that
    stopped part-way; prime-rl seals a chunk whole, renaming it into place once complete)."""


def _zst_blocks(path: str, raw) -> Iterator[bytes]:
    """The decompressed bytes of a sealed chunk, frame after frame (independent frames, then the seek table, a
    skippable frame): a file that ends inside a frame is a :class:`DamagedChunk`, where zstandard's stream
    reader would stop silently at the last whole frame."""
    try:
        import zstandard
    except ImportError:
        raise AdvcliError(f"{path}: a sealed (zstd) prime-rl chunk; reading it needs the zstandard package",
                          hint="pip install zstandard (a dependency of advcli since it reads these chunks)") from None
    dctx = zstandard.ZstdDecompressor()
    frame = None
    try:
        while block := raw.read(1 << 20):
            while block:
                frame = frame or dctx.decompressobj()
                out = frame.decompress(block)
                block = b""
                if frame.eof:
                    block, frame = frame.unused_data, None
                if out:
                    yield out
    except zstandard.ZstdError as e:
        raise DamagedChunk(f"{path}: cannot decompress it ({e})",
                           hint="a damaged sealed chunk: `zstd -t` tests it; prime-rl's own reader stops there too") \
            from None
    if frame is not None:
        raise DamagedChunk(f"{path}: cut short inside a zstd frame (the file ends before its frame does)",
                           hint="a sealed chunk is written whole and renamed into place: this copy is truncated; "
                                "copy it again from the run")


class _SealedChunk(io.RawIOBase):
    """A sealed chunk's decompressed bytes as a readable stream (:func:`_zst_blocks`)."""

    def __init__(self, path: str, raw):
        self._raw, self._blocks, self._buf = raw, _zst_blocks(path, raw), b""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf:
            self._buf = next(self._blocks, b"")
            if not self._buf:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def close(self) -> None:
        self._blocks.close()
        self._raw.close()
        super().close()


def open_chunk(path: str):
    """A binary file object over the chunk's (decompressed) bytes: iterate it for lines."""
    raw = open(path, "rb")
    return raw if not path.endswith(".zst") else io.BufferedReader(_SealedChunk(path, raw))


def chunk_records(path: str, ctx: Context | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) of one chunk (plain or sealed). A last line without its newline that does not
    parse is a record still being written (or cut by a crash): not data, said once in ``ctx.notes``; a bad
    line elsewhere is an error naming the chunk and line; a damaged sealed chunk is a :class:`DamagedChunk`."""
    try:
        fh = open_chunk(path)
    except OSError as e:
        raise AdvcliError(f"{path}: cannot open it ({e.strerror})") from None
    with fh:
        prev: tuple[int, bytes] | None = None
        for i, raw in enumerate(fh, 1):
            if prev is not None:
                yield parse_line(path, *prev, last=False)
            prev = (i, raw) if raw.strip() else None
        if prev is not None:
            rec = parse_line(path, *prev, last=True)
            if rec is not None:
                yield rec
            elif ctx is not None:
                ctx.notes.append(f"{path}: its last line is torn (a record still being written, or cut when the "
                                 "writer stopped): not read")


def parse_line(path: str, i: int, raw: bytes, last: bool):
    try:
        obj = json.loads(raw)
    except ValueError as e:
        if last and not raw.endswith(b"\n"):
            return None
        raise AdvcliError(f"{path}:{i}: invalid JSON: {getattr(e, 'msg', str(e))}",
                          hint="a prime-rl stream chunk holds one JSON record per line") from None
    if not isinstance(obj, dict):
        raise AdvcliError(f"{path}:{i}: expected one JSON object per line, got {type(obj).__name__}")
    return i, obj


def first_record(path: str) -> dict | None:
    """The first record of a chunk; for a live chunk holding only a torn line (its first record still being
    written), an empty episode, so that the chunk is read (and yields nothing) rather than refused."""
    try:
        for _, rec in chunk_records(path):
            return rec
    except DamagedChunk:
        raise  # said as what it is, not as "not a prime-rl file"
    except AdvcliError:
        return None
    if not path.endswith(".zst") and os.path.getsize(path) > 0:
        return {"group": None, "traces": []}
    return None


def _traces_dir(path: str) -> str:
    d = os.path.dirname(os.path.abspath(path))
    return os.path.dirname(d) if os.path.basename(d) == "stream" else d


def _annotation_streams(traces: str) -> list[tuple[str, list[str]]]:
    """(producer, chunk files in order) of every annotation stream under ``traces/annotations``: a chunk
    directory per producer (#3465), or one ``<producer>.jsonl`` file (#3444 before chunking)."""
    ann = os.path.join(traces, "annotations")
    if not os.path.isdir(ann):
        return []
    out = []
    for name in sorted(os.listdir(ann)):
        p = os.path.join(ann, name)
        if os.path.isdir(p):
            out.append((name, [c.path for c in stream_chunks(p)]))
        elif name.endswith(".jsonl") and not name.endswith(".index.jsonl"):
            out.append((name[: -len(".jsonl")], [p]))
    return out


def _updates(ctx: Context, path: str) -> dict:
    """trace id -> its updates in write order (producers in name order), over every annotation stream
    beside the episode stream of ``path``."""
    traces = _traces_dir(path)
    cache = ctx.state.setdefault("updates", {})
    if traces in cache:
        return cache[traces]
    out: dict = {}
    producers = []
    for producer, chunks in _annotation_streams(traces):
        producers.append(producer)
        for chunk in chunks:
            for line, upd in chunk_records(chunk, ctx):
                tid = upd.get("trace_id")
                if tid is None:
                    raise AdvcliError(f"{chunk}:{line}: an annotation without 'trace_id'",
                                      hint="prime-rl's updates are {version, trace_id, info, branches}")
                out.setdefault(tid, []).append(upd)
    if producers:
        ctx.notes.append(f"annotation streams folded onto the episodes in write order: {', '.join(producers)}")
    else:
        ctx.notes.append(f"{traces}: no annotations/ beside the stream: no logged advantages, no ship steps")
    cache[traces] = out
    return out


def _merge(old, new):
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **{k: _merge(old.get(k), v) for k, v in new.items()}}
    return new


def _fold(trace: dict, updates: list[dict], paths: list[list[int]]) -> None:
    """prime-rl's ``fold_trace_updates`` rule (update.py, module docstring), on a trace record in place."""
    nodes = trace.get("nodes") or []
    for upd in updates:
        if upd.get("info"):
            trace["info"] = _merge(trace.get("info") or {}, upd["info"])
        for br in upd.get("branches") or []:
            b = br.get("index")
            if not isinstance(b, int) or not 0 <= b < len(paths):
                continue
            for field in STREAM_FIELDS:
                stream = br.get(field)
                if not stream:
                    continue
                cursor = 0
                for nid in paths[b]:
                    node = nodes[nid]
                    n = len(node.get("token_ids") or [])
                    span = stream[cursor: cursor + n]
                    cursor += n
                    if len(span) < n:
                        break
                    values = [v for v, s in zip(span, node.get("mask") or []) if s]
                    if not values or (field == "is_masked" and all(v is None for v in values)):
                        continue
                    if field != "is_masked" and any(v is None for v in values):
                        continue
                    node[field] = values


def _spread(nodes: list, row_nodes: list[tuple[int, bool]], field: str, missing) -> list:
    """A compact node field widened to the row's tokens (:func:`.primerl.trained_nodes`): its values on the
    sampled positions, ``missing`` elsewhere, on nodes without it (verifiers ``Branch.spread``, which writes 0.0)
    and on a shared node where it is context (trained in an earlier branch)."""
    out: list = []
    for nid, keep in row_nodes:
        node = nodes[nid]
        vals = (node.get(field) or []) if keep else []
        k = 0
        for s in node.get("mask") or []:
            if s and k < len(vals):
                v = vals[k]
                out.append(missing if v is None else (int(bool(v)) if field == "is_masked" else float(v)))
            else:
                out.append(missing)
            k += bool(s)
    return out


def _check_token_advantages(ctx: Context, tr: dict, nodes: list, row_nodes: list[tuple[int, bool]],
                            scalar: float) -> None:
    """The per-token advantages the trainer received (the orchestrator's branch streams, folded onto the nodes:
    ``stamp_ship`` writes each branch's ``advantages``, which ``trace_to_samples`` ships) against the trace's
    scalar ``info.advantage``, which the audit checks: every prime-rl algorithm at 559b4477 spreads the scalar
    over the trained tokens, so a token that differs means a stream the audit does not see; said in a note
    (how many traces, the first one) rather than passed over."""
    tol = 1e-6 + 1e-6 * abs(scalar)
    for nid, keep in row_nodes:
        vals = nodes[nid].get("advantages") if keep else None
        if vals and any(not isinstance(v, (int, float)) or abs(float(v) - scalar) > tol for v in vals):
            tally_note(ctx, "token_advantages", f"trace {tr.get('id')}", lambda n, at: (
                f"{n} trace(s) have per-token advantages (the orchestrator's annotation, what the trainer received) "
                f"that differ from their scalar info.advantage (first: {at}): advcli recomputes and audits the "
                "scalar"))
            return


def episode_kind(ep: dict) -> str:
    """``episode_kind`` (prime-rl ``monitors/file/traces/index.py``): the traces' ``info.kind``, else the run's."""
    for tr in ep.get("traces") or []:
        k = (tr.get("info") or {}).get("kind")
        if k in ("train", "eval"):
            return k
    run = ep.get("run") or {}
    return (run.get("work") or {}).get("type") or run.get("type") or "train"


def arrival_step(ep: dict) -> int | None:
    for tr in ep.get("traces") or []:
        info = tr.get("info") or {}
        for key in ("arrival", "dispatch"):
            s = (info.get(key) or {}).get("step")
            if isinstance(s, int) and not isinstance(s, bool):
                return s
    s = ((ep.get("run") or {}).get("work") or {}).get("step")
    return s if isinstance(s, int) and not isinstance(s, bool) else None


def _rounded(ctx: Context, value: float) -> None:
    """Track whether every logged advantage has at most :data:`DECIMALS` decimals (the dump's rounding)."""
    n, off = ctx.state.get("logged_counts", (0, 0))
    off += abs(value - round(value, DECIMALS)) > 1e-9
    ctx.state["logged_counts"] = (n + 1, off)
    ctx.state["logged_decimals"] = DECIMALS if not off else None


def read(path: str, ctx: Context):
    m = re.search(r"(\d+)\.jsonl\.zst$", path)
    if m and os.path.exists(path[: -len(".zst")]) and path[: -len(".zst")] in ctx.files:
        return  # caught mid-seal: the plain twin (read instead) holds the same lines
    updates = _updates(ctx, path)
    if "partial" not in ctx.state and re.search(r"/stream/\d+\.jsonl", path.replace(os.sep, "/")):
        mine = {os.path.abspath(f) for f in ctx.files}
        chunks = stream_chunks(os.path.dirname(os.path.abspath(path)))
        left = [c for c in chunks if os.path.abspath(c.path) not in mine]
        ctx.state["partial"] = bool(left)
        if left:
            ctx.notes.append(f"reading {len(chunks) - len(left)} of the stream's {len(chunks)} chunks: cohorts can "
                             "straddle chunks, and a cohort cut at the edge is scored on the rows read; give the "
                             "run directory for whole cohorts")
    first_step = ctx.state.setdefault("group_step", {})
    evals = 0
    for line, ep in chunk_records(path, ctx):
        require(ctx, line, ep, ("group", "traces"))
        if episode_kind(ep) == "eval":
            evals += 1
            continue
        gid = (ep.get("group") or {}).get("id")
        if gid is None:
            raise ctx.error(line, "episode without group.id (the cohort key)")
        traces = ep["traces"] or []
        ship = None
        branches = []  # each trace's root-to-leaf node paths (update.py branch_node_paths; verifiers Trace.branches)
        for tr in traces:
            branches.append(_branches(tr.get("nodes") or [], ctx, line, tr.get("id")))
            _fold(tr, updates.get(tr.get("id"), []), branches[-1])
            s = ((tr.get("info") or {}).get("ship") or {}).get("step")
            ship = s if isinstance(s, int) and ship is None else ship
        step = first_step.get(gid)
        if step is None:
            step = arrival_step(ep)
            step = ship if step is None else step
            first_step[gid] = step
        for tr, paths in zip(traces, branches):
            info = tr.get("info") or {}
            adv = info.get("advantage")
            if isinstance(adv, (int, float)) and not isinstance(adv, bool):
                _rounded(ctx, float(adv))
            logged = {tr.get("id"): float(adv)} if isinstance(adv, (int, float)) else {}
            nodes = tr.get("nodes") or []
            row_nodes = trained_nodes(nodes, paths)  # the row's tokens, as primerl-traces takes them
            row = _row(ctx, line, ep, tr, step, logged, paths, row_nodes)
            start = row["prompt_length"]
            row["trainer_log_probs"] = _spread(nodes, row_nodes, "trainer_logprobs", 0.0)[start:]
            row["entropies"] = _spread(nodes, row_nodes, "entropies", 0.0)[start:]
            row["is_masked"] = _spread(nodes, row_nodes, "is_masked", -1)[start:]
            if logged:
                _check_token_advantages(ctx, tr, nodes, row_nodes, logged[tr.get("id")])
            tship = (info.get("ship") or {}).get("step")
            row["ship_step"] = tship if isinstance(tship, int) else None
            row["effective"] = bool(info.get("effective", False))
            if row.get("stop_condition") is None:  # absent on the record: no column of nulls, no "first appears" note
                row.pop("stop_condition", None)
            yield line, row
    if evals:
        ctx.notes.append(f"{path}: {evals} eval episode(s) in the stream: not read (advcli reads the train ones)")


FORMAT = Format(
    name="primerl-stream", title="prime-rl trace stream monitors/file/traces/stream/NNNNN.jsonl[.zst]",
    pattern=PATTERN, level="token",
    group_rule="episode.group.id (the cohort uuid), at the step its first episode arrived (info.arrival.step)",
    columns={**TRACE_COLUMNS, "trainer_log_probs": F32_LIST, "entropies": F32_LIST, "ship_step": I64,
             "effective": BOOL},
    read=read, sniff=sniff, required=("group", "traces"), first_record=first_record,
    companions=((r"(^|/)traces/annotations/.*\.index\.jsonl$",
                 "prime-rl annotation index: the annotations themselves are read"),
                (r"(^|/)traces/annotations/", "prime-rl annotation stream: folded onto the episodes, not a dump "
                                             "of its own"),
                r"(^|/)traces/[^/]*\.index\.jsonl$", r"(^|/)traces/live/", r"(^|/)monitors/file/metrics\.jsonl$",
                r"(^|/)eval_plan\.json$"),
    key=lambda p: p, logged="logged_advantage", flavor="prime-rl",
    example="advcli run outputs/run --output out.parquet --flavor prime-rl",
)
