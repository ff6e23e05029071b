"""The Ray engine's read shards, planned by advcli: each shard is rows ``[start, stop)`` of one input
file, and knows the global index (input order over all files) of its first row.

Ray Data only carries the shard descriptions (``ray.data.from_items``); a worker reads its shard's rows
itself with pyarrow (:func:`read_shard`), so every batch it computes on knows its file, its rows in that
file and their global rows — nothing depends on how Ray hashes, cuts, orders or retries blocks.

Shards follow row groups where they can: consecutive row groups of one file are packed into a shard
until it holds ``target`` rows (:func:`plan_shards`); a row group of more than twice ``target`` rows is cut
into pieces of about ``target`` rows, each read by its own worker (every piece decodes its row group's
column chunks up to its last row: the read of that row group is repeated, the math is not).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import AdvcliError

SHARDS_PER_WORKER = 4  # shards per worker actor that the shard size aims at, so no actor idles at the end


@dataclass(frozen=True)
class Shard:
    """Rows ``[start, stop)`` of input file ``file`` (its index among the inputs); ``first``: the global
    row of ``start``."""

    file: int
    start: int
    stop: int
    first: int

    def as_item(self) -> dict:
        return asdict(self)

    @staticmethod
    def of_item(item: dict) -> Shard:
        return Shard(int(item["file"]), int(item["start"]), int(item["stop"]), int(item["first"]))


def shard_target(num_rows: int, concurrency: int, chunk_rows: int, least_shards: int | None = None) -> int:
    """Rows a shard aims at: enough shards for :data:`SHARDS_PER_WORKER` per worker (or ``least_shards``
    when given), never fewer rows than one chunk unless ``least_shards`` asks for it."""
    want = least_shards or SHARDS_PER_WORKER * max(concurrency, 1)
    target = -(-max(num_rows, 1) // max(want, 1))
    return max(1, target if least_shards else max(target, chunk_rows))


def plan_shards(row_groups: list[list[int]], target: int) -> list[Shard]:
    """The shards of files whose row groups hold ``row_groups[f]`` rows each, in input order, tiling
    every row exactly once."""
    shards: list[Shard] = []
    first = 0
    for f, sizes in enumerate(row_groups):
        row, start = 0, 0
        for n in sizes:
            if n > 2 * target:  # a large row group: close what is open, then cut it in pieces
                if row > start:
                    shards.append(Shard(f, start, row, first + start))
                pieces = -(-n // target)
                cuts = [row + (n * i) // pieces for i in range(pieces + 1)]
                shards += [Shard(f, a, b, first + a) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
                row += n
                start = row
                continue
            row += n
            if row - start >= target:
                shards.append(Shard(f, start, row, first + start))
                start = row
        if row > start:
            shards.append(Shard(f, start, row, first + start))
        first += row
    return shards


def open_file(path: str, filesystem=None) -> pq.ParquetFile:
    """``path`` opened on a worker: through the run's object-storage ``filesystem`` when there is one."""
    source = filesystem.open_input_file(path) if filesystem is not None else path
    return pq.ParquetFile(source, pre_buffer=False, buffer_size=1 << 22)


def read_shard(path: str, shard: Shard, columns: list[str] | None, chunk_rows: int,
               filesystem=None, shown: str | None = None) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(first row of the batch in its file, batch) over the shard's rows in order, batches of at most
    ``chunk_rows`` rows. ``shown``: the file's name in messages."""
    name = shown or path
    try:
        f = open_file(path, filesystem)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise AdvcliError(f"{name}: cannot open it on a Ray worker ({str(e).splitlines()[0]})",
                          hint="every worker node must reach the input at the same path") from None
    try:
        md = f.metadata
        rg_first = 0
        for rg in range(md.num_row_groups):
            n = md.row_group(rg).num_rows
            a, b = max(shard.start, rg_first), min(shard.stop, rg_first + n)
            if a < b:
                row = rg_first
                for batch in f.iter_batches(batch_size=chunk_rows, row_groups=[rg], columns=columns,
                                            use_threads=False):
                    lo, hi = max(a, row), min(b, row + batch.num_rows)
                    if lo < hi:
                        yield lo, batch.slice(lo - row, hi - lo)
                    row += batch.num_rows
                    if row >= b:
                        break
            rg_first += n
            if rg_first >= shard.stop:
                break
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise AdvcliError(f"{name}: cannot read rows {shard.start}..{shard.stop - 1} on a Ray worker "
                          f"({str(e).splitlines()[0]}); the file may be truncated or corrupt") from None
    finally:
        f.close(force=True)
