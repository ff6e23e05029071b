"""A flavor's releases: the upstream releases and commits whose semantics advcli reproduces, oldest first.

``--flavor NAME@RELEASE`` picks one; no suffix picks the flavor's newest verified state. A release is a
set of values for the flavor's own keys (native keys, or ``advcli.*`` extension keys where a semantic
switch has no native key): its :attr:`Release.settings` are the defaults that differ from the flavor's
``KEYS`` defaults at that release. The user's ``--set`` still wins over them. :attr:`Release.changes` says
what changed since the release before it, one :class:`Change` per upstream pull request.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import AdvcliError


@dataclass(frozen=True)
class Change:
    """One upstream change between two releases."""

    pr: str  # the upstream pull request ("#4158"), or "" for a change named only in release notes
    keys: tuple[str, ...]  # the flavor keys (native or advcli.*) whose meaning or default it changed
    effect: str  # what it does to the numbers, in one or two sentences


@dataclass(frozen=True)
class Release:
    """One upstream release (a package version) or commit whose semantics advcli reproduces."""

    name: str  # what follows "@": "0.11.2", "7ea279a"
    date: str  # ISO date of the release or commit
    aliases: tuple[str, ...] = ()  # other names accepted after "@" ("pre-4158", a full commit hash)
    settings: dict[str, Any] = field(default_factory=dict)  # flavor key -> default at this release
    changes: tuple[Change, ...] = ()  # what changed since the previous release in the flavor's list
    note: str = ""  # one line: which semantics this is ("NeMo RL before #4158")


_HEX = re.compile(r"[0-9a-f]{4,40}")
_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _version(text: str) -> tuple[int, ...] | None:
    m = _VERSION.fullmatch(text.strip().lower())
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def _commit_names(release: Release) -> list[str]:
    return [n.lower() for n in (release.name, *release.aliases) if _HEX.fullmatch(n.lower())]


def known_text(releases: tuple[Release, ...]) -> str:
    """The releases as a refusal lists them: ``7ea279a (2026-08-22), post-4158 (2026-09-19, newest)``."""
    out = []
    for i, r in enumerate(releases):
        extra = [x for x in (r.date, "newest" if i == len(releases) - 1 and len(releases) > 1 else "") if x]
        out.append(r.name + (f" ({', '.join(extra)})" if extra else ""))
    return ", ".join(out)


def find(releases: tuple[Release, ...], text: str, who: str) -> Release:
    """The release ``text`` names (after ``@``): a release's name or alias (any case; ``v0.11.2`` is the
    version ``0.11.2``), or a prefix of at
    least 4 hex digits of a listed commit (or a longer hash that starts with one). A version older than
    the oldest release (compared as versions where the names are versions, as ISO dates where ``text`` is
    a date) is refused naming the oldest; anything else unknown is refused listing the known ones.
    ``who`` names the flavor in messages (``--flavor nemo``)."""
    t = text.strip()
    low = t.lower()
    if not releases:
        raise AdvcliError(f"{who}@{t}: this flavor has no upstream releases to choose from",
                          hint=f"drop @{t}: {who} is advcli's own configuration")
    for r in releases:
        if low == r.name.lower() or low in (a.lower() for a in r.aliases):
            return r
    if _version(t) is not None:  # v0.11.2 = 0.11.2
        same = [r for r in releases if _version(r.name) == _version(t)]
        if same:
            return same[0]
    if _HEX.fullmatch(low):
        hits = [r for r in releases
                if any(n.startswith(low) or (len(n) >= 7 and low.startswith(n)) for n in _commit_names(r))]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise AdvcliError(f"{who}@{t}: the commit prefix matches {len(hits)} releases "
                              f"({', '.join(r.name for r in hits)})", hint="give more digits of the commit")
    oldest = releases[0]
    mine, theirs = _version(t), [_version(r.name) for r in releases]
    older = (mine is not None and all(theirs) and mine < theirs[0]) or \
            (bool(_DATE.fullmatch(t)) and bool(oldest.date) and t < oldest.date)
    if older:
        raise AdvcliError(f"{who}@{t} is older than the oldest release advcli reproduces, {oldest.name}"
                          + (f" ({oldest.date})" if oldest.date else ""),
                          hint=f"use {who}@{oldest.name} (the nearest advcli knows) or a newer release; "
                               f"`advcli explain {who} --history` lists them")
    raise AdvcliError(f"{who}@{t}: not a release advcli reproduces. Known: {known_text(releases)}",
                      hint=f"`advcli explain {who} --history` lists them with what changed; no @ takes the newest")
