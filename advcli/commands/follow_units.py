"""What a ``--follow`` lister hands the follower: a step of the dump as a :class:`Unit`, and the registry of
listers for dumps whose files are not steps (:data:`CHUNK_LISTERS`). The follower
(:mod:`advcli.commands.follow`) and the listers that plug into it (:mod:`advcli.commands.follow_stream`,
prime-rl's trace streams) both import this, so neither imports the other to share it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

WATCHED = 8  # the last steps whose files are checked for changes after they were taken


@dataclass
class Unit:
    """One step of the dump: its step number and files (absolute paths). ``sealed``: the lister knows the
    step is complete (a sealed chunk) or not (None: the next-step/quiet rule decides)."""
    step: int
    files: list[str]
    sealed: bool | None = None
    # writes the step's copy under a directory instead of copying ``files`` -> ({rel: [size, mtime_ns, sha]}
    # of what was taken whole, notes): a stream whose records are cut into steps (prime-rl's)
    write: Callable[[str], tuple[dict, list[str]]] | None = None
    named_as: str | None = None  # the directory the written copy stands for (None: the followed root)
    read_at: str | None = None  # the folder under the written copy the command reads (None: the copy itself)
    through: int | None = None  # the last step its rows hold, where they hold several (a Parquet file of 1 and 2)
    torn: bool = False  # taken without a torn last line (set when its copy is made)


# A format name -> lister(root) -> [Unit], steps ascending; an entry with a ``start(root, settle, after)``
# method makes one lister per follow (after: the last step a resumed follow took), which may also have
# ``taken(step)`` (called after each step is taken) and ``drain()`` (lines to report). prime-rl's trace
# streams register theirs (advcli.commands.follow_stream). Formats without a lister are listed by their
# step file names.
CHUNK_LISTERS: dict[str, Callable] = {}


def register_lister(format_name: str, lister: Callable[[str], list[Unit]]) -> None:
    CHUNK_LISTERS[format_name] = lister
