"""Helpers the format modules read their records with: JSON Lines, required fields, numbers, and the
dump's other fields kept as columns."""
from __future__ import annotations

import json
from collections.abc import Iterator

from ..errors import AdvcliError
from .registry import Context, a_title

# output columns of a run: a dump field of the same name is kept under logged_<name>
RESERVED = ("advantages", "returns", "token_level_rewards")



def json_where(e: ValueError) -> str:
    """json's error as ``MESSAGE at column N``: its message without the trailing "at" some carry
    ("Unterminated string starting at"), which read "starting at at column 11"."""
    msg = str(getattr(e, "msg", e))
    if getattr(e, "lineno", 1) > 1:  # past the line's text, in its newline: the line ends before the value does
        return f"{msg.removesuffix(' at')} at the end of the line"
    return f"{msg.removesuffix(' at')} at column {getattr(e, 'colno', '?')}"

def iter_json_lines(path: str, ctx: Context) -> Iterator[tuple[int, dict]]:
    """(line number, object) of a JSON Lines file, read line by line with Python's json (which accepts
    the NaN / Infinity literals these writers emit). A line that does not parse is an error naming
    the file and line (a last line without its newline is reported as truncated)."""
    try:
        fh = open(path, "rb")
    except OSError as e:
        raise AdvcliError(f"{path}: cannot open it ({e.strerror})") from None
    with fh:
        for i, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            if b"\0" in raw:  # JSON text never holds a NUL byte: zeros where a record should be
                raise ctx.error(i, f"{raw.count(bytes(1))} NUL (zero) byte(s) in the line, at byte "
                                   f"{raw.index(bytes(1)) + 1}: no JSON text holds one",
                                hint="zeros where records should be: the file was not fully written (a crash, a "
                                     "disk that lost its last writes); remove those lines, or re-dump that step")
            try:
                obj = json.loads(raw)
            except UnicodeDecodeError as e:  # (a ValueError without json's column) JSON is UTF-8
                raise ctx.error(i, f"not UTF-8: byte {raw[e.start]:#04x} at byte {e.start + 1} of the line "
                                   f"({e.reason})",
                                hint="JSON lines are UTF-8 (the trainers write them so): was the file re-encoded, "
                                     "e.g. as Latin-1? convert it back (iconv -f latin1 -t utf-8), or remove "
                                     "that line") from None
            except ValueError as e:
                cut = not raw.endswith(b"\n")
                raise ctx.error(i, ("truncated line (the file ends inside a record)" if cut else "invalid JSON")
                                + f": {json_where(e)}",
                                hint="the writer may have been stopped mid-write; remove or repair that line") \
                    from None
            except RecursionError:  # json's decoder recurses once per level
                raise ctx.error(i, "JSON nested too deeply to read (thousands of levels of lists or objects)",
                                hint="no trainer writes such a record: the line is corrupt or not a dump") from None
            if not isinstance(obj, dict):
                raise ctx.error(i, f"expected one JSON object per line, got {type(obj).__name__}")
            yield i, obj


def first_json_record(path: str) -> dict | None:
    """The first JSON object of a file, or None when the file is empty or its first line is no object."""
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                if raw.strip():
                    try:
                        obj = json.loads(raw)
                    except (ValueError, RecursionError):
                        return None
                    return obj if isinstance(obj, dict) else None
    except OSError:
        return None
    return None


def require(ctx: Context, line: int, rec: dict, keys) -> None:
    missing = [k for k in keys if k not in rec]
    if missing:
        raise ctx.error(line, f"missing field(s) {', '.join(repr(k) for k in missing)} of a {ctx.fmt.name} record"
                        f" (fields present: {', '.join(list(rec)[:12])}{' ...' if len(rec) > 12 else ''})",
                        hint=f"is this {a_title(ctx.fmt.title)} file? force another format with --from")


def number(ctx: Context, line: int, value, what: str, allow_none: bool = False) -> float | None:
    """A JSON number (NaN/Infinity literals included) as a float; booleans count 0/1."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    raise ctx.error(line, f"field {what!r} is {value!r}; expected a number")


def number_list(ctx: Context, line: int | None, value, field: str, what: str, where: str = "",
                hint: str | None = None) -> list:
    """A list of numbers (a tensor's ``tolist()``; NaN/Infinity literals included, for the run's own checks): a field
    that is no list, or an element that is no number (a null, a string like '-0.5', a boolean), is refused naming
    ``where`` (a sample, a trace's node: ``"sample 2: "``), the field and the position. ``what`` says what the list
    holds (``"one log-prob per response token"``)."""
    import numbers

    vals = value.tolist() if hasattr(value, "tolist") else value
    if not isinstance(vals, (list, tuple)):
        raise ctx.error(line, f"{where}field {field!r} is {vals!r}; expected a list ({what})", hint=hint)
    for k, x in enumerate(vals):
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            raise ctx.error(line, f"{where}field {field!r} holds {x!r} at position {k}; expected a number ({what})",
                            hint=hint)
    return list(vals)


def tally_note(ctx: Context, key: str, first: str, say, add: int = 1) -> None:
    """One note that counts what a reader met ``add`` more times: a slot of ``ctx.notes`` rewritten as the count
    grows, ``say(count, first)``, ``first`` being where it was met first (later calls' ``first`` is not kept).
    Besides convert's and inspect's notes, it is a warning of a run or validate of the dump
    (``ImportInfo.warnings``)."""
    count, at, slot = ctx.state.get(("tally", key), (0, first, None))
    if slot is None:
        slot = len(ctx.notes)
        ctx.notes.append("")
        ctx.state.setdefault("warning_slots", []).append(slot)  # what the reader met: a run's warning too
    ctx.state[("tally", key)] = (count + add, at, slot)
    ctx.notes[slot] = say(count + add, at)


def shown_setting(ctx: Context, key: str, value) -> None:
    """A native setting of the trainer's flavor that the dump's records show (AReaL's records carry
    original_reward only with gconfig.reward_normalization on): a run under that flavor takes it for the key
    when neither the user nor the run's saved configuration set it (``ImportInfo.shown_settings``)."""
    ctx.state.setdefault("shown_settings", {})[key] = value


def reward_note(ctx: Context, text: str) -> None:
    """Say once which of the dump's rewards the rows carry (``text``): in inspect's and convert's notes and
    in run's summary (``ImportInfo.reward_notes``)."""
    notes = ctx.state.setdefault("reward_notes", [])
    if text not in notes:
        notes.append(text)
        ctx.notes.append(text)


def extras(rec: dict, skip) -> dict:
    """The dump's other fields as columns: scalars as they are, lists and objects as JSON text; a field
    named like an output column is kept as logged_<name>."""
    out = {}
    for k, v in rec.items():
        if k in skip:
            continue
        if isinstance(v, (dict, list)):
            v = json.dumps(v, ensure_ascii=False, default=str)
        out[f"logged_{k}" if k in RESERVED else k] = v
    return out
