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


class GroupSizeNeeded(AdvcliError):
    """A refusal whose fix is the flavor's group-size setting ``key`` (a trainer that asserts more than one
    response per prompt): where the run sees its input, the hint names the size the input's prompt ids show
    (:func:`advcli.runs.resolution.resolve_for_inputs`)."""

    def __init__(self, message: str, *, key: str):
        super().__init__(message, hint=f"set --set {key}=N, the number of responses per prompt")
        self.key = key


class MissingColumn(AdvcliError):
    """A refusal for a column the input lacks: ``role`` (its role), ``estimator`` (the estimator that needs it,
    where one does; set by :meth:`advcli.estimators.EstimatorSpec.check`), so that the run's resolution can say
    when that estimator is only the flavor's default
    (:func:`advcli.runs.resolution.refuse_default_estimator_column`)."""

    def __init__(self, message: str, *, hint: str | None = None, role: str):
        super().__init__(message, hint=hint)
        self.role = role
        self.estimator: str | None = None


def caused_by_interrupt(error: BaseException) -> bool:
    """Whether a KeyboardInterrupt is in ``error``'s chain: Python wraps one raised while a class body is
    finished (``RuntimeError: Error calling __set_name__ ...``, as when Ctrl-C lands while torch imports),
    and a library may re-raise it as its own error. That is Ctrl-C, not a bug."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def nearest(word: str, choices, n: int = 1) -> str | None:
    """The closest valid name to ``word`` (for 'did you mean ...?'), or None."""
    lower: dict[str, str] = {}  # case never hides a name: VERL is verl
    for c in choices:
        lower.setdefault(str(c).lower(), str(c))
    found = difflib.get_close_matches(str(word).lower(), list(lower), n=n, cutoff=0.5)
    return lower[found[0]] if found else None


def did_you_mean(word: str, choices) -> str:
    near = nearest(word, choices)
    return f" Did you mean {near!r}?" if near else ""


def is_disk_full(e: BaseException) -> bool:
    """An OSError (pyarrow's included, whose errno may be unset) saying the file system is full."""
    import errno

    return isinstance(e, OSError) and (e.errno in (errno.ENOSPC, errno.EDQUOT)
                                       or "No space left on device" in str(e) or "Disk quota exceeded" in str(e))


def disk_full(directory: str, what: str, need_bytes: int | None = None) -> AdvcliError:
    """The environment, not a bug (exit 2): ``directory`` ran out of room while advcli wrote ``what``;
    ``need_bytes``: about how much it needed there, where known."""
    import shutil

    try:
        free = f"{shutil.disk_usage(directory).free / 2**20:.0f} MiB free there now"
    except OSError:
        free = "its free space unknown"
    need = ("" if not need_bytes else f"; about {need_bytes / 2**20:.0f} MiB were needed" if need_bytes >= 2**20
            else f"; about {max(1, round(need_bytes / 2**10))} KiB were needed")
    return AdvcliError(f"{directory}: no space left on the device while writing {what} ({free}{need}); "
                       "nothing was written", hint="free some space, or write elsewhere: -o on another file "
                                                   "system, TMPDIR=DIR for advcli's temporary files")


# whether the command line runs in this process (advcli.cli.main sets it for the command's duration): stdout
# then carries the command's own output alone (--json, a report on stdout), so what a user estimator prints
# goes to stderr (advcli.estimators.user); a library call leaves its caller's sys.stdout as it is
COMMAND_OWNS_STDOUT = False


# the names a --flavor in a message can take (the flavors' names and aliases, and the placeholders the messages use);
# written out, as errors sits below the flavor registry (importing it would run upward: tests/project/test_house.py)
_FLAVOR_WORDS = {"verl", "areal", "nemo", "open-instruct", "openinstruct", "openrlhf", "prime-rl", "primerl", "roll",
                 "skyrl", "slime", "trl", "advcli", "name", "x", "f", "f2", "..."}

# the command line's options as the library calls' keywords (advcli.run, stats, audit, compare): a message
# raised under a library call says what to pass there (advcli.io.frames.FrameInputs translates it). A value
# never ends with a period: "... --set advcli.group_by=id." ends a sentence
_LIBRARY_WORDS = [
    (r"--column '?([A-Za-z_./]+)=([^\s',;)]*[^\s',;).:])'?", lambda m: f"columns={{'{m[1]}': '{m[2]}'}}"),
    (r"--set '([^'=]+)=([^']*)'", lambda m: f"settings={{'{m[1]}': {_py_value(m[2])}}}"),
    (r"--set ([^\s'=]+)=([^\s',;)]*[^\s',;).:])", lambda m: f"settings={{'{m[1]}': {_py_value(m[2])}}}"),
    (r"--flavor '([^'\s]+)'", lambda m: f"flavor='{m[1]}'"),
    # a flavor's name (with its @release) or a placeholder; an English word after the option (the --flavor
    # "wins", "is", "or") keeps the keyword alone
    (r"--flavor ([A-Za-z0-9_@-]+(?:\.[A-Za-z0-9_-]+)*)",
     lambda m: f"flavor='{m[1]}'" if m[1].split("@")[0].lower() in _FLAVOR_WORDS else f"flavor {m[1]}"),
    (r"--from ([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)", lambda m: f"source='{m[1]}'"),
    (r"--from '([^'\s]+)'", lambda m: f"source='{m[1]}'"),
    (r"--device auto\b", lambda m: "device='auto'"),
    (r"(?:--output|(?<![\w-])-o) ([^\s'`,;)]*[^\s'`,;).:])", lambda m: f"output='{m[1]}'"),
    (r"leave it out of --set; a --config file", lambda m: "leave it out of settings=; a config= file"),
    (r"--against ([A-Za-z0-9_.]*[A-Za-z0-9_])", lambda m: f"against='{m[1]}'"),
    (r"--(precision|output-mode|device|engine) '([^']*)'", lambda m: f"{m[1].replace('-', '_')}='{m[2]}'"),
    (r"--precision ([a-z0-9]+)", lambda m: f"precision='{m[1]}'"),
    (r"--write-columns\b", lambda m: "write_columns"),
    (r"--(rtol|atol) ([^\s/:,;)]+)", lambda m: f"{m[1]}={m[2]}"),
    (r"--force\b", lambda m: "force=True"),
    (r"--solve-rate ([0-9.e+-]+|LO):([0-9.e+-]*[0-9]|HI)", lambda m: f"solve_rate=({m[1]}, {m[2]})"),
    (r"--drop-uniform\b", lambda m: "drop_uniform=True"),
    (r"--estimator ([^\s'`,;)]+)", lambda m: f"estimator='{m[1]}'"),
    # a value follows (a number, a quoted text, LO:HI, N): the keyword and "="; otherwise the keyword named
    (r"--(solve-rate|min-group-size|chunk-rows) (?=[0-9'\"(\[]|LO\b|N\b)", lambda m: f"{m[1].replace('-', '_')}="),
    (r"--(solve-rate|min-group-size|chunk-rows)\b", lambda m: m[1].replace("-", "_")),
    (r"--allow-empty\b", lambda m: "allow_empty=True"),
    (r"--padded\b", lambda m: "padded=True"),
    (r"--(output-mode|device|engine) ([a-z0-9]+(?::[0-9]+)?)", lambda m: f"{m[1].replace('-', '_')}='{m[2]}'"),
    # the filter's options (advcli.filter)
    (r"--(mask-dropped|variance-include-zero)\b", lambda m: f"{m[1].replace('-', '_')}=True"),
    (r"--(variance-top-p|variance-top-k|variance-selection-eps|variance-ddof) (?=[PKED]\b|-?[0-9])",
     lambda m: f"{m[1].replace('-', '_')}="),
    (r"--(metric|by) '([^']*)'", lambda m: f"{m[1]}='{m[2]}'"),
    (r"--(metric|by) ([A-Za-z_][A-Za-z0-9_.]*)", lambda m: f"{m[1]}='{m[2]}'"),
    (r"--(variance-top-p|variance-top-k|variance-selection-eps|variance-ddof|metric|by)\b",
     lambda m: m[1].replace("-", "_")),
    (r"--set\b", lambda m: "settings"),
]


def _py_value(text: str) -> str:
    """A --set value as the Python literal a settings dict takes (numbers, true/false, [a,b] lists, names)."""
    low = text.lower()
    if low in ("true", "false"):
        return low.capitalize()
    try:
        float(text)
        return text
    except ValueError:
        pass
    if text.startswith("[") and text.endswith("]"):
        return "[" + ", ".join(_py_value(x.strip()) for x in text[1:-1].split(",") if x.strip()) + "]"
    if text in ("N", "K", "C", "X", "V", "VALUE", "NUMBER"):  # a placeholder (--set k=N): a value to give, not text
        return text
    return repr(text)


def library_words(text: str | None) -> str | None:
    """``text`` (a message or hint written for the command line) with its options as the keywords of the
    library calls: ``--column reward=NAME`` -> ``columns={'reward': 'NAME'}``, ``--set k=v`` ->
    ``settings={'k': v}``, ``--flavor X`` -> ``flavor='X'``, ``--force`` -> ``force=True``."""
    import re

    if not text or ("--" not in text and "-o " not in text):
        return text
    pieces = text.split("`")  # a command in backticks (`advcli explain --flavor verl --keys`) stays a command
    for i in range(0, len(pieces), 2):
        for pattern, to in _LIBRARY_WORDS:
            pieces[i] = re.sub(pattern, to, pieces[i])
        merged = None  # `--set a=1 --set b=2`: one settings={'a': 1, 'b': 2}
        while merged != pieces[i]:
            merged, pieces[i] = pieces[i], re.sub(r"settings=\{([^{}]*)\} settings=\{([^{}]*)\}", r"settings={\1, \2}",
                                                  pieces[i])
    return "`".join(pieces)
