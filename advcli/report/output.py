"""Where a finished report goes: a file in the format its extension names (written atomically, a temporary
file beside the target renamed into place, like the Parquet outputs), JSON on stdout, or the terminal summary."""
from __future__ import annotations

import os
from collections.abc import Iterable

from ..errors import AdvcliError, did_you_mean
from .html import to_html
from .markdown import to_markdown
from .primitives import to_json
from .terminal import print_summary

FORMATS = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}


def report_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise AdvcliError(f"--report {path}: unknown report format {ext or '(no extension)'!r}."
                          f"{did_you_mean(ext, ['.json', '.md', '.html'])}",
                          hint="name the file .json (every figure), .md (Markdown) or .html (a page with plots)")
    return FORMATS[ext]


def check_report_path(path: str, taken: Iterable[str] = (), force: bool = False) -> str:
    """Refuse a report path before any work: bad extension, missing directory, an input, output or
    configuration path of the command (``taken``), or an existing file that is not an advcli report (an
    earlier report is replaced, as a rerun writes it again; another file only with ``force``, where the
    command has --force)."""
    from ..io.remote import is_uri
    from ..io.temps import check_local_destination

    fmt = report_format(path)
    if is_uri(path):
        raise AdvcliError(f"--report {path}: a report is written to a local file",
                          hint="give a local path and copy the report to object storage afterwards")
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise AdvcliError(f"--report {path}: directory {d} does not exist", hint=f"create it: mkdir -p {d}")
    if os.path.isdir(path):
        raise AdvcliError(f"--report {path}: is a directory; give a file path for the report")
    real = os.path.realpath(path)
    for p in taken:
        if p and os.path.realpath(p) == real:
            raise AdvcliError(f"--report {path}: is also an input, output or configuration file of this command; "
                              "choose another name")
    from ..io.writer import refuse_special_file

    refuse_special_file(path)  # a FIFO or device: the rename would replace it, --force or not
    if os.path.lexists(path) and not force and not _is_report(path):
        raise AdvcliError(f"--report {path}: already exists and is not an advcli report (advcli replaces only its "
                          "own earlier reports)", hint="choose another name, or remove that file first")
    check_local_destination(f"--report {path}", d)
    return fmt


def _is_report(path: str) -> bool:
    """Whether the file at ``path`` is a report advcli wrote (JSON with its ``advcli_version``, Markdown under an
    ``# advcli`` title, HTML titled advcli ...), from its first 4 KiB."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b'"advcli_version"' in head or head.startswith(b"# advcli") or b"<title>advcli" in head


def render(report: dict, fmt: str) -> str:
    if fmt == "json":
        return to_json(report, indent=2) + "\n"
    if fmt == "md":
        return to_markdown(report)
    if fmt == "html":
        return to_html(report)
    raise AdvcliError(f"unknown report format {fmt!r}")


def write_report(path: str, report: dict, renderer=None) -> str:
    """Write ``report`` to ``path`` in the format its extension names; atomically. Returns the format.
    ``renderer(report, fmt) -> str``: another command's own rendering (default :func:`render`)."""
    fmt = report_format(path)
    text = (renderer or render)(report, fmt)
    d, name = os.path.split(os.path.abspath(path))
    from ..io.temps import TMP_TAG, owner_tag, temp_stem

    tmp = os.path.join(d, f".{temp_stem(name)}{TMP_TAG}{owner_tag()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise AdvcliError(f"--report {path}: cannot write ({e.strerror or e})") from None
    return fmt


def emit(report: dict, path: str | None, json_out: bool, show: bool) -> None:
    """What `run` and `stats` do with a finished report: write PATH, print JSON on stdout, or the summary."""
    if path:
        write_report(path, report)
    if json_out:
        print(to_json(report))
    elif show:
        import sys

        print_summary(report)
        if path:
            print(f"report: {path}", file=sys.stderr)
