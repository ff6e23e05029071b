"""A flavor's releases: the upstream releases and commits whose semantics advcli reproduces, oldest first.

``--flavor NAME@RELEASE`` picks one; no suffix picks the flavor's newest verified state. A release is a
set of values for the flavor's own keys (native keys, or ``advcli.*`` extension keys where a semantic
switch has no native key): its :attr:`Release.settings` are the defaults that differ from the flavor's
``KEYS`` defaults at that release. The user's ``--set`` still wins over them. :attr:`Release.changes` says
what changed since the release before it, one :class:`Change` per upstream pull request.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
