"""``--help`` that shows options as click users know them: ``--force`` (a flag: no placeholder),
``--chunk-rows N``, ``--set KEY=VALUE`` (a value: its metavar), ``INPUT...`` (an argument).

Why this exists: typer 0.2x vendors click (``typer._click``; click itself need not be installed) and
its rich help prints a Python type beside every parameter — ``--force <bool>``, ``--help <bool>``,
``INPUT <list[str]>`` — because ``TyperOption.display_type_rich`` falls back to ``<type>`` for flags
and ``rich_utils._print_options_panel`` prints it without asking ``is_flag``; its usage line writes a
required argument as ``{INPUT}...``. typer releases before ``display_type_rich`` (0.27: seen on a
machine that had it) print an argument's type as ``<str>`` from ``param.type.get_metavar`` and write
its usage through ``make_metavar(ctx, usage=True)``: there the argument gets a click-style
``make_metavar`` and a type whose metavar is empty. advcli requires typer 0.27 or newer (checked with
0.27.2, 0.28.0 and 0.29.2 against tests/cli/test_help.py; 0.16-0.26 with click 8.5 render and parse
otherwise).

:class:`Command` and :class:`Group` (the ``cls`` of every advcli command and of the app) give each
parameter, the generated ``--help`` included, a subclass of its own class that overrides the rendering
and, with typer 0.29, the conversion of plain values (:mod:`.values`: typer's result without pydantic);
parsing, defaults, callbacks and error messages are typer's. The page itself is :func:`render_help`.
"""
from __future__ import annotations

from typer.core import TyperCommand, TyperGroup

_STYLED: dict[type, type] = {}


def _option_display_type(self, ctx):
    """A flag shows nothing; a value shows its metavar (every advcli option declares one), else the
    upper-case type name as click would (``INT``, ``STR``)."""
    if self.is_flag or self.count:
        return None
    if self.metavar is not None:
        return self.metavar
    return self.bare_type().upper()


def _argument_display_type(self, ctx) -> None:
    """An argument's name column already says what it is (``INPUT...``): no type beside it."""


def _argument_display_name(self) -> str:
    """The name column of the Arguments panel: ``INPUT...`` for an argument that takes several values
    (typer adds the ``...`` itself only when there is no metavar)."""
    if self.metavar is None:
        return self.name
    return self.metavar + "..." if self.nargs != 1 else self.metavar


def _argument_usage_name(self) -> str:
    """click's usage: ``INPUT...`` when required, ``[INPUT]...`` when not."""
    metavar = getattr(self, "_declared_metavar", self.metavar)
    name = metavar if metavar is not None else self.name.upper()
    if not self.required:
        name = f"[{name}]"
    return name + "..." if self.nargs != 1 else name


def _argument_error_hint(self) -> str:
    """As typer words it (``Missing argument 'INPUT'``), although the help names it ``INPUT...``."""
    metavar = getattr(self, "_declared_metavar", self.metavar)
    return f"'{metavar if metavar is not None else self.name}'"


def _argument_metavar(self, ctx, *, usage: bool = False) -> str:
    """typer 0.27's hook for the usage line (``usage=True``); its Arguments panel prints ``metavar``
    itself, which :func:`click_style` sets to the panel's name (``INPUT...``)."""
    return _argument_usage_name(self) if usage else self.metavar


def _quiet_type(param_type):
    """``param_type`` whose metavar is empty (not None: typer 0.27 then prints no ``<type>``); it
    converts values exactly as ``param_type`` does."""
    cls = type(param_type)
    quiet = _QUIET.get(cls)
    if quiet is None:
        quiet = _QUIET[cls] = type(cls.__name__, (cls,), {"get_metavar": lambda self, *a, **k: "",
                                                          "__module__": __name__})
    q = object.__new__(quiet)
    q.__dict__.update(param_type.__dict__)
    return q


_QUIET: dict[type, type] = {}


def _light_runtime_param(self):
    """typer 0.29's converter of this parameter's values, pydantic-free where its type is plain
    (:mod:`advcli.commands.values`)."""
    rp = self.__dict__.get("_advcli_light")
    if rp is None:
        from .values import light

        rp = self._advcli_light = light(self) or super(type(self), self).get_runtime_param()
    return rp


def _styled_class(cls: type) -> type | None:
    """The click-style subclass of typer's parameter class ``cls`` (None: nothing to change)."""
    if cls in _STYLED:
        return _STYLED[cls]
    styled = None
    if hasattr(cls, "display_type_rich"):  # typer 0.2x; older typer renders click's way
        if getattr(cls, "param_type_name", None) == "option":
            styled = type(cls.__name__, (cls,), {"display_type_rich": _option_display_type,
                                                 "__module__": __name__})
        elif getattr(cls, "param_type_name", None) == "argument":
            styled = type(cls.__name__, (cls,), {
                "display_type_rich": _argument_display_type,
                "display_name_raw": property(_argument_display_name),
                "_usage_display_name": _argument_usage_name,
                "get_error_hint": _argument_error_hint,
                "__module__": __name__})
    elif getattr(cls, "param_type_name", None) == "argument" and "make_metavar" in vars(cls):  # typer 0.27
        styled = type(cls.__name__, (cls,), {"make_metavar": _argument_metavar,
                                             "get_error_hint": _argument_error_hint,
                                             "__module__": __name__})
    if hasattr(cls, "get_runtime_param"):  # typer 0.29: values converted without pydantic where plain
        styled = type(cls.__name__, (styled or cls,), {"get_runtime_param": _light_runtime_param,
                                                       "__module__": __name__})
    _STYLED[cls] = styled
    if styled is not None:
        _STYLED[styled] = None  # already click-style
    return styled


def click_style(params) -> list:
    """``params`` (the list itself), each parameter rendering the click way from now on."""
    for p in params:
        styled = _styled_class(type(p))
        if styled is not None:
            p.__class__ = styled
            if "make_metavar" in vars(styled):  # typer 0.27: the panel prints metavar and the type's
                p._declared_metavar = p.metavar
                p.metavar = _argument_display_name(p)
                p.type = _quiet_type(p.type)
    return params


class Command(TyperCommand):
    """A typer command whose ``--help`` renders its parameters as click does (see the module)."""

    def get_params(self, ctx):
        return click_style(super().get_params(ctx))

    def format_help(self, ctx, formatter) -> None:
        render_help(self, ctx)


class Group(TyperGroup):
    """The app (``advcli --help``): its options (``--version``, ``--help``) render as click does."""

    def get_params(self, ctx):
        return click_style(super().get_params(ctx))

    def format_help(self, ctx, formatter) -> None:
        render_help(self, ctx)


# --- the help page itself -------------------------------------------------------------------------------
# typer's own rich help (typer.rich_utils) imports rich's Markdown, Syntax, Traceback and Pretty (pygments,
# markdown-it, attrs: about half of `advcli --help`'s time) and lays options out in six columns whose widths
# leave a few characters for the help at 80 columns, cutting words with "…". This page keeps typer's look
# (usage, panels for arguments, options and commands, the epilog) with three columns: the required mark,
# the names (long, negative, short, then the metavar), and the help, which wraps and folds, never cuts.
# The epilog's prose is re-flowed to the terminal's width (a line break is kept after a sentence's end);
# its indented lines (examples) are kept as written, a line too long broken at a space with a trailing
# backslash, as a shell continues a command.

_HELP_MIN = 28  # the narrowest help column beside the names; below it the help goes under the names


def _console():
    import os

    from rich.console import Console

    width = os.environ.get("TERMINAL_WIDTH")  # as typer reads it
    return Console(width=int(width) if width and width.isdigit() else None, emoji=False, highlight=False,
                   force_terminal=True if os.environ.get("FORCE_COLOR") else None)


def _markup(text: str, style: str = ""):
    from rich.text import Text

    return Text.from_markup(text, style=style, emoji=False)


def _one_paragraph(text: str) -> str:
    """click's rule for help text: single line breaks are spaces, a blank line starts a paragraph."""
    import inspect

    paragraphs = inspect.cleandoc(text).partition("\f")[0].split("\n\n")
    return "\n".join(" ".join(ln.strip() for ln in p.strip().splitlines()) for p in paragraphs if p.strip())


def _param_rows(ctx, params):
    """(required mark, names, help) for each parameter shown."""
    from rich.text import Text

    rows = []
    for p in params:
        if getattr(p, "hidden", False):
            continue
        names = Text(no_wrap=False)
        if p.param_type_name == "argument":
            names.append(_argument_display_name(p), style="bold cyan")
        else:
            longs = [o for o in p.opts if o.startswith("--")] + [o for o in p.secondary_opts if o.startswith("--")]
            shorts = [o for o in [*p.opts, *p.secondary_opts] if not o.startswith("--")]
            for i, o in enumerate(longs):
                names.append(("" if not i else " ") + o, style="bold cyan" if o in p.opts else "bold magenta")
            for o in shorts:
                names.append(" " + o, style="bold green")
            shown = p.display_type_rich(ctx) if hasattr(p, "display_type_rich") else None
            if shown:
                names.append(" " + shown, style="bold yellow")
        help_ = _markup(_one_paragraph(p.help or ""))
        extra = []
        default = _default_text(p, ctx)
        if default:
            extra.append(f"\\[default: {_escape(default)}]")
        if p.required:
            extra.append("\\[required]")
        if extra:
            if help_.plain:
                help_.append(" ")
            help_.append_text(_markup(" ".join(extra), style="dim"))
        rows.append((Text("*", style="red") if p.required else Text(""), names, help_))
    return rows


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _default_text(p, ctx) -> str:
    """The default as typer's help shows it (``[default: 4096]``), "" for none."""
    if not hasattr(p, "_extract_default_help_str"):
        return ""
    value = p._extract_default_help_str(ctx=ctx)
    as_text = isinstance(p.show_default, str)
    if not as_text and (value is None or not (p.show_default or ctx.show_default)):
        return ""
    return p._get_default_string(ctx=ctx, show_default_is_str=as_text, default_value=value)


def _table(rows, width: int, name_style: str = ""):
    """A grid of ``rows`` (each: cells) in ``width`` columns: the help column wraps; the names column is as
    wide as its longest entry unless that leaves the help fewer than _HELP_MIN columns: then each help goes
    on the lines below its names."""
    from rich.table import Table

    marks = any(r[0].plain for r in rows) if rows and len(rows[0]) == 3 else False
    cells = [r[1:] if len(r) == 3 and not marks else r for r in rows]
    name_width = max((c[-2].cell_len for c in cells), default=0)
    fixed = name_width + (2 if marks else 0) + 1
    grid = Table.grid(padding=(0, 1), expand=False)
    if width - 4 - fixed >= _HELP_MIN:
        if marks:
            grid.add_column(no_wrap=True, width=1)
        grid.add_column(no_wrap=True, width=name_width + 1, style=name_style)
        grid.add_column(overflow="fold", ratio=1)
        for c in cells:
            grid.add_row(*c)
        return grid
    from rich.padding import Padding

    grid.add_column(overflow="fold")
    for c in cells:
        grid.add_row(c[-2] if not marks else c[0] + " " + c[-2])
        if c[-1].plain:
            grid.add_row(Padding(c[-1], (0, 0, 0, 4)))
    return grid


def _panel(title: str, body):
    from rich.panel import Panel
    from rich.text import Text

    return Panel(body, title=Text(title), title_align="left", border_style="dim", expand=True)


def _epilog_lines(epilog: str, width: int):
    """The epilog as renderables: prose paragraphs re-flowed, indented lines kept (broken with `` \\`` when
    longer than ``width``)."""
    import re

    from rich.text import Text

    out, prose = [], []

    def flush():
        if prose:
            out.append(_markup(" ".join(prose)))
            prose.clear()

    for line in epilog.strip("\n").splitlines():
        if not line.strip():
            flush()
            out.append(Text(""))
        elif line[0] == " ":
            flush()
            out.extend(_broken(line, width))
        else:
            if prose and re.search(r"[.:;]$", prose[-1]) and line[0].isupper():
                flush()  # a sentence ended at the line's end and the next begins one: kept on its own line
            prose.append(line.strip())
    flush()
    return out


def _broken(line: str, width: int):
    """An indented (example) line as it fits in ``width``: a command broken at spaces (before an option where
    one is on the line), each part but the last ending in `` \\``, the continuations indented four more
    columns; a comment (``# ...`` or a trailing ``  (...)``) goes on lines of its own, without backslashes."""
    import re

    from rich.text import Text

    plain = _markup(line).plain
    if len(plain) <= width:
        return [_markup(line)]
    indent = len(plain) - len(plain.lstrip(" "))
    body = plain.strip()
    comment = ""
    m = re.match(r"(.*?\S)\s+(\([^()]* [^()]*\))$", body)
    if body.startswith("#"):
        body, comment = "", body
    elif m:
        body, comment = m.group(1), m.group(2)
    parts: list[str] = []
    lead, cur = " " * indent, []
    for w in body.split(" ") if body else []:
        if cur and len(lead) + len(" ".join([*cur, w])) + 2 > width:
            # break before the last option of the line (``--set KEY=VALUE`` stays together) if there is one
            at = max((i for i, x in enumerate(cur) if x.startswith("-") and i > 0), default=len(cur))
            parts.append(lead + " ".join(cur[:at]) + " \\")
            cur, lead = cur[at:], " " * (indent + 4)
        cur.append(w)
    if cur:
        parts.append(lead + " ".join(cur))
    if comment:
        lead = " " * (indent + (4 if body else 0))
        cur = []
        for w in comment.split(" "):
            if cur and len(lead) + len(" ".join([*cur, w])) > width:
                parts.append(lead + " ".join(cur))
                lead = " " * (indent + 6) if body else " " * indent + "# "
                cur = []
            cur.append(w)
        parts.append(lead + " ".join(cur))
    return [Text(p, overflow="fold") for p in parts]


def render_help(cmd, ctx) -> None:
    """Print ``cmd``'s help page (see above) on stdout."""
    from rich.console import Group as Lines
    from rich.padding import Padding
    from rich.text import Text

    console = _console()
    width = console.width
    console.print(Padding(Text(cmd.get_usage(ctx), style="bold"), 1))
    if cmd.help:
        first, _, rest = cmd.help.partition("\n\n")
        body = [_markup(_one_paragraph(first))]
        if rest.strip():
            body += [Text(""), _markup(_one_paragraph(rest), style="dim")]
        console.print(Padding(Lines(*body), (0, 1, 1, 1)))
    params = cmd.get_params(ctx)
    arguments = [p for p in params if p.param_type_name == "argument"]
    options = [p for p in params if p.param_type_name != "argument"]
    for title, group in (("Arguments", arguments), ("Options", options)):
        rows = _param_rows(ctx, group)
        if rows:
            console.print(_panel(title, _table(rows, width)))
    if hasattr(cmd, "list_commands"):
        rows = []
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            text = sub.short_help or _one_paragraph(sub.help or "").split("\n")[0]
            rows.append((Text(name), _markup(text)))
        if rows:
            console.print(_panel("Commands", _table(rows, width, name_style="bold cyan")))
    if cmd.epilog:
        console.print(Padding(Lines(*_epilog_lines(cmd.epilog, width - 2)), 1))
