"""User-facing errors: one clear message, exit code 2, never a traceback."""
from __future__ import annotations

import difflib


class AdvcliError(Exception):
    """An error in the user's input or configuration. ``str(e)`` is the whole message."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message + (f"\n  hint: {self.hint}" if self.hint else "")


def nearest(word: str, choices, n: int = 1) -> str | None:
    """The closest valid name to ``word`` (for 'did you mean ...?'), or None."""
    found = difflib.get_close_matches(str(word), [str(c) for c in choices], n=n, cutoff=0.5)
    return found[0] if found else None


def did_you_mean(word: str, choices) -> str:
    near = nearest(word, choices)
    return f" Did you mean {near!r}?" if near else ""
