"""A flavor's releases: the upstream releases and commits whose semantics advcli reproduces, oldest first.

``--flavor NAME@RELEASE`` picks one; no suffix picks the flavor's newest verified state. A release is a
set of values for the flavor's own keys (native keys, or ``advcli.*`` extension keys where a semantic
switch has no native key): its :attr:`Release.settings` are the defaults that differ from the flavor's
``KEYS`` defaults at that release. The user's ``--set`` still wins over them. :attr:`Release.changes` says
what changed since the release before it, one :class:`Change` per upstream pull request.

The packaged trainers' releases on the package index are recorded in ``index/DIST.json`` (refreshed by
``tools/refresh_releases.py``): every recorded release is a release's name or alias in the flavor's table (the
release whose advantage code it has, confirmed by ``tools/conformance_matrix.py``), or older than the oldest
entry and refused with :data:`NOT_REPRODUCED`'s reason (``tests/flavors/test_release_index.py`` checks both).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import field
from typing import Any

from ..errors import AdvcliError
from ..records import record


@record(frozen=True)
class Change:
    """One upstream change between two releases."""

    pr: str  # the upstream pull request ("#4158"), or "" for a change named only in release notes
    keys: tuple[str, ...]  # the flavor keys (native or advcli.*) whose meaning or default it changed
    effect: str  # what it does to the numbers, in one or two sentences


@record(frozen=True)
class Release:
    """One upstream release (a package version) or commit whose semantics advcli reproduces."""

    name: str  # what follows "@": "0.11.2", "7ea279a"
    date: str  # ISO date of the release or commit
    aliases: tuple[str, ...] = ()  # other names accepted after "@" ("pre-4158", a full commit hash)
    settings: dict[str, Any] = field(default_factory=dict)  # flavor key -> default at this release
    changes: tuple[Change, ...] = ()  # what changed since the previous release in the flavor's list
    note: str = ""  # one line: which semantics this is ("NeMo RL before #4158")
    # flavor key -> (the values this release's code runs, where that is read[, when]): any other value is refused,
    # as the trainer itself would not run it (an estimator the release lacks, a key it does not have yet); ``when``
    # (the release's native values -> bool): only where the trainer reads the key (verl's kl_penalty: with the KL
    # in the reward)
    accepts: dict[str, tuple] = field(default_factory=dict)
    # a tagged release users install from the repository that the package index does not list (AReaL v2.0.0)
    tag_only: bool = False
    # flavor key -> why: keys the release's config loads but its code never reads (NeMo RL's configs take any key):
    # the trainer runs without them, so a given value is set back to the default and the run says so
    ignores: dict[str, str] = field(default_factory=dict)


# the packaged trainers' flavors -> why their published releases older than the table's oldest are not reproduced
NOT_REPRODUCED: dict[str, str] = {
    "trl": "TRL before 0.9.2 has neither RLOOTrainer (#1540) nor GRPOTrainer, only trainers (PPO, DPO, ...) whose "
           "advantages advcli does not compute",
    "verl": "",  # every published release has an entry (0.1 onwards)
    "openrlhf": "",  # every published release has an entry (0.3.6.post1 onwards)
    "skyrl": "0.0.1 is the project's name reservation: its wheel holds skyrl/__init__.py only, no trainer",
    "areal": "",
}
INDEX_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "index")
_PUBLISHED: dict[str, dict] = {}


def published(package: str) -> dict | None:
    """The recorded list of ``package``'s releases on the package index (``index/PACKAGE.json``: ``source``,
    ``refreshed``, ``releases`` = [{"version", "date"}], newest first), or None when none is recorded."""
    if package not in _PUBLISHED:
        path = os.path.join(INDEX_DIR, f"{package}.json")
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            _PUBLISHED[package] = json.load(f)
    return _PUBLISHED[package]


def check_accepts(release: Release, values: dict[str, Any], who: str, asked: str | None = None) -> None:
    """Refuse a setting the release's code does not run (:attr:`Release.accepts`): ``who`` names the flavor in
    the message (``--flavor verl``), ``asked`` the release as the user gave it (``0.3.0.post1``, an alias)."""
    def text(x: Any) -> str:
        return "null" if x is None else str(x).lower() if isinstance(x, bool) else str(x)

    named = release.name if not asked or asked == release.name else f"{asked} (release {release.name}'s code)"
    for key, (allowed, why, *when) in release.accepts.items():
        if key in values and values[key] not in allowed and (not when or when[0](values)):
            raise AdvcliError(f"{who}@{named}: {key}={text(values[key])}: {why}",
                              hint=f"at {release.name} it takes {', '.join(text(a) for a in allowed)}; a newer "
                                   f"release may have it (`advcli explain {who} --history` lists what changed)")


def entry_of(releases: tuple[Release, ...], version: str) -> Release | None:
    """The table entry whose name or alias is exactly ``version`` (a recorded release's mapping), or None."""
    low = version.lower()
    return next((r for r in releases if low == r.name.lower() or low in (a.lower() for a in r.aliases)), None)


def index_mapping(releases: tuple[Release, ...], package: str) -> list[tuple[str, str, Release | None]]:
    """(version, date, the table entry it maps to or None) for every recorded release of ``package``, newest
    first; [] when none is recorded."""
    doc = published(package)
    if doc is None:
        return []
    return [(r["version"], r.get("date", ""), entry_of(releases, r["version"])) for r in doc["releases"]]


def index_text(releases: tuple[Release, ...], package: str) -> list[str]:
    """``explain --history``'s lines on the package index: each table entry with the published releases that
    map to it, and the older ones refused (:data:`NOT_REPRODUCED`)."""
    doc = published(package)
    if doc is None:
        return []
    rows = index_mapping(releases, package)
    lines = [f"Published releases of {package} on the package index ({len(rows)}, recorded "
             f"{doc.get('refreshed', '')} from the {doc.get('source', 'index')}) -> the semantics each runs:"]
    for r in reversed(releases):
        mine = [v for v, _, e in rows if e is r]
        if mine:
            lines.append(f"  {', '.join(reversed(mine))} -> {r.name}")
    rest = [v for v, _, e in rows if e is None]
    if rest:
        shown = ", ".join(rest[:6]) + (f" and {len(rest) - 6} older" if len(rest) > 6 else "")
        lines.append(f"  {shown}: not reproduced (" + (NOT_REPRODUCED.get(package) or "no table entry") + ")")
    return lines


_HEX = re.compile(r"[0-9a-f]{4,40}")
_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)(?:\.post(\d+))?")  # 0.10.1.post2 (a post-release) sorts after 0.10.1
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _numbers(text: str) -> tuple[tuple[int, ...], int] | None:
    """(release numbers as written, post number or -1) of a version name; None for a name that is no version
    (a commit, ``pre-4158``)."""
    m = _VERSION.fullmatch(text.strip().lower())
    if not m:
        return None
    return tuple(int(p) for p in m.group(1).split(".")), int(m.group(2)) if m.group(2) else -1


def _version(text: str) -> tuple[tuple[int, ...], int] | None:
    """:func:`_numbers` compared as PEP 440 compares versions: trailing zeros dropped (``0.2.0`` is ``0.2``),
    ``v0.11.2`` is ``0.11.2``, ``0.10.1.post2`` sorts after ``0.10.1``."""
    parts = _numbers(text)
    if parts is None:
        return None
    numbers = list(parts[0])
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers), parts[1]


def _series(releases: tuple[Release, ...], text: str, package: str | None) -> list[tuple[str, Release | None]]:
    """(version, its table entry) of every release in the series ``text`` names when it gives fewer numbers
    than a release (``0.19`` for 0.19.0 and 0.19.1): the published ones (:func:`published`) and the table's own
    names and aliases, oldest first; [] when ``text`` is no such prefix."""
    mine = _numbers(text)
    if mine is None or mine[1] >= 0:  # no version, or a post-release: no series
        return []
    prefix = mine[0]
    names = [r["version"] for r in (published(package) or {}).get("releases", ())] if package else []
    names += [n for r in releases for n in (r.name, *r.aliases)]
    out: dict[str, Release | None] = {}
    for n in names:
        numbers = (_numbers(n) or ((), -1))[0]
        if len(numbers) > len(prefix) and numbers[:len(prefix)] == prefix:
            out.setdefault(n, entry_of(releases, n))
    return sorted(out.items(), key=lambda kv: _version(kv[0]) or ((), -1))


def _commit_names(release: Release) -> list[str]:
    return [n.lower() for n in (release.name, *release.aliases) if _HEX.fullmatch(n.lower())]


def _longest_names(release: Release) -> list[str]:
    """The release's commit names that no other of its names extends: the longest known of each commit."""
    names = _commit_names(release)
    return [n for n in names if not any(m != n and m.startswith(n) for m in names)]


def known_text(releases: tuple[Release, ...]) -> str:
    """The releases as a refusal lists them: ``7ea279a (2026-08-22), post-4158 (2026-09-19, newest)``."""
    out = []
    for i, r in enumerate(releases):
        extra = [x for x in (r.date, "newest" if i == len(releases) - 1 and len(releases) > 1 else "") if x]
        out.append(r.name + (f" ({', '.join(extra)})" if extra else ""))
    return ", ".join(out)


def find(releases: tuple[Release, ...], text: str, who: str, package: str | None = None) -> Release:
    """The release ``text`` names (after ``@``): a release's name or alias (any case; ``v0.11.2`` is the
    version ``0.11.2``), or a prefix of at
    least 4 hex digits of a listed commit (or a longer hash that starts with one). A version older than
    the oldest release (compared as versions where the names are versions, as ISO dates where ``text`` is
    a date) is refused naming the oldest; anything else unknown is refused listing the known ones.
    ``who`` names the flavor in messages (``--flavor nemo``); ``package``: the trainer's distribution, whose
    recorded releases on the package index (:func:`published`) a refusal names."""
    t = text.strip()
    low = t.lower()
    if not releases:
        raise AdvcliError(f"{who}@{t}: this flavor has no upstream releases to choose from",
                          hint=f"drop @{t}: {who} is advcli's own configuration")
    for r in releases:
        if low == r.name.lower() or low in (a.lower() for a in r.aliases):
            return r
    if low == "newest":  # every flavor's newest verified release (NeMo's default is an older one: the contract's pin)
        return releases[-1]
    series = _series(releases, t, package)  # 0.19 = the 0.19.x releases, when they share one semantics
    if series and any(e is not None for _, e in series):
        entries = []
        for _, e in series:
            if e is not None and all(e is not x for x in entries):  # (a Release holds dicts: not hashable)
                entries.append(e)
        missing = [v for v, e in series if e is None]
        if len(entries) == 1 and not missing:
            return entries[0]
        parts = [f"{', '.join(v for v, x in series if x is e)} run {e.name}'s" for e in entries]
        if missing:
            parts.append(f"{', '.join(missing)} advcli does not reproduce")
        raise AdvcliError(f"{who}@{t}: the {t}.x releases do not share one semantics: " + "; ".join(parts),
                          hint=f"name the release you ran, e.g. {who}@{next(v for v, e in reversed(series) if e)}; "
                               f"`advcli explain {who} --history` lists what changed")
    if _version(t) is not None:  # v0.11.2 = 0.11.2, 0.2.0 = 0.2 (PEP 440)
        same = [r for r in releases if any(_version(n) == _version(t) for n in (r.name, *r.aliases))]
        if same:
            return same[0]
    if _HEX.fullmatch(low):
        # a prefix of a known hash, or a longer hash that extends the longest one known of its commit (a9564573 is
        # not a9564572); an entry may name several commits (ROLL's 0.2.0: the tags v0.2.0, v0.2.1 and v0.3.0)
        hits = [r for r in releases if _commit_names(r) and (
            any(n.startswith(low) for n in _commit_names(r))
            or any(len(n) >= 7 and low.startswith(n) for n in _longest_names(r)))]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise AdvcliError(f"{who}@{t}: the commit prefix matches {len(hits)} releases "
                              f"({', '.join(r.name for r in hits)})", hint="give more digits of the commit")
    oldest = releases[0]
    # the oldest entry named as a version (a table may hold commits beside its releases: skyrl's a9564572)
    mine, theirs = _version(t), [v for v in (_version(r.name) for r in releases) if v is not None]
    older = (mine is not None and bool(theirs) and _version(oldest.name) is not None and mine < theirs[0]) or \
            (bool(_DATE.fullmatch(t)) and bool(oldest.date) and t < oldest.date)
    listed = next((r for r in (published(package) or {}).get("releases", ()) if r["version"] == t), None) \
        if package else None
    if listed is not None:
        why = (f"releases older than {oldest.name} are not covered"
               + (f" ({NOT_REPRODUCED[package]})" if NOT_REPRODUCED.get(package) else "")) if older else \
            "its advantage code has not been checked against the release table yet"
        raise AdvcliError(f"{who}@{t}: {package} {t} ({listed.get('date', '')}) is published, but advcli does not "
                          f"reproduce it: {why}",
                          hint=(f"advcli reproduces {oldest.name} and newer; " if older and NOT_REPRODUCED.get(package)
                                else f"use {who}@{oldest.name if older else releases[-1].name} (the nearest advcli "
                                     "knows) only if you have checked that its advantage code is the same; ")
                               + f"`advcli explain {who} --history` lists the releases and what changed")
    if older:
        raise AdvcliError(f"{who}@{t} is older than the oldest release advcli reproduces, {oldest.name}"
                          + (f" ({oldest.date})" if oldest.date else ""),
                          hint=f"use {who}@{oldest.name} (the nearest advcli knows) or a newer release; "
                               f"`advcli explain {who} --history` lists them")
    raise AdvcliError(f"{who}@{t}: not a release advcli reproduces. Known: {known_text(releases)}",
                      hint=f"`advcli explain {who} --history` lists them with what changed; no @ takes the newest")
