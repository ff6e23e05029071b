"""docs/house.md is true: its map of advcli/ names every module that exists and none that does not, and
every repository path its recipes name exists. The map is the fenced block: a line indented two spaces
names top-level modules or a package (``name/``), a line indented six names modules of the package
above it; names come first, separated by commas, and the description follows after two spaces."""
from __future__ import annotations

import os
import re

from conftest import ROOT

HOUSE = os.path.join(ROOT, "docs", "house.md")


def _map_block() -> list[str]:
    text = open(HOUSE, encoding="utf-8").read()
    return re.search(r"^```\n(advcli/\n.*?)^```$", text, re.S | re.M).group(1).splitlines()[1:]


def _named() -> set[str]:
    """The module paths (relative to advcli/) the map names."""
    named, package = set(), None
    for line in _map_block():
        indent = len(line) - len(line.lstrip())
        names = re.sub(r"\([^)]*\)", "", line.strip().split("  ")[0])
        if indent == 2:
            if names.endswith("/"):
                package = names
                assert os.path.isdir(os.path.join(ROOT, "advcli", package)), f"docs/house.md: no advcli/{package}"
                continue
            package = None
            prefix = ""
        elif indent == 6:
            assert package, f"docs/house.md: {line.strip()!r} is under no package"
            prefix = package
        else:
            continue  # a description's continuation
        found = re.findall(r"[\w]+\.py", names)
        assert found, f"docs/house.md: the line {line.strip()!r} names no module"
        named.update(prefix + n for n in found)
    return named


def _modules() -> set[str]:
    base = os.path.join(ROOT, "advcli")
    return {os.path.relpath(os.path.join(d, f), base).replace(os.sep, "/")
            for d, _, files in os.walk(base) if "__pycache__" not in d for f in files if f.endswith(".py")}


def test_the_map_names_every_module_and_only_those():
    named, modules = _named(), _modules()
    assert not sorted(modules - named), f"modules docs/house.md does not name: {sorted(modules - named)}"
    assert not sorted(named - modules), f"docs/house.md names modules that do not exist: {sorted(named - modules)}"


def test_the_top_level_holds_at_most_ten_modules():
    """The top of advcli/ holds the entry points and what everything imports; the rest lives in packages named
    for what they hold (docs/house.md). A module added at the top past ten belongs in a package."""
    top = sorted(m for m in _modules() if "/" not in m)
    assert len(top) <= 10, f"{len(top)} modules at the top of advcli/ (at most ten): {top}"


def test_every_path_the_page_names_exists():
    text = open(HOUSE, encoding="utf-8").read()
    paths = set(re.findall(r"`((?:advcli|tests|docs)/[\w/.-]+\.(?:py|md))`", text))
    paths |= {"docs/" + p for p in re.findall(r"\(docs/([\w/.-]+\.md)\)", text)}
    assert len(paths) > 10
    missing = sorted(p for p in paths if "NAME" not in p and not os.path.exists(os.path.join(ROOT, p)))
    assert not missing, f"docs/house.md names paths that do not exist: {missing}"
    # a recipe's path for a new one (tests/formats/test_format_NAME.py): files of that pattern exist there
    import glob

    stale = sorted(p for p in paths if "NAME" in p and not glob.glob(os.path.join(ROOT, p.replace("NAME", "*"))))
    assert not stale, f"docs/house.md's recipes name paths where no such file is: {stale}"


# ------------------------------------------------------------------------------------ imports run one way
# a room is a top-level module of advcli/ (its __init__.py one of them) or a top-level package
HAND_OVER = ("server/", "cli.py")  # the server's children run the CLI: the one import that runs upward


def _room(module: str) -> str | None:
    """The room of a dotted module name under advcli (None: outside advcli)."""
    parts = module.split(".")
    if parts[0] != "advcli":
        return None
    if len(parts) == 1:
        return "__init__.py"
    return parts[1] + "/" if os.path.isdir(os.path.join(ROOT, "advcli", parts[1])) else parts[1] + ".py"


def _room_imports() -> dict[str, set[str]]:
    """room -> the rooms its files import (at the top of a file or inside a function)."""
    import ast

    out: dict[str, set[str]] = {}
    for rel in sorted(_modules()):
        mod = "advcli." + rel[:-3].replace("/", ".")
        package = mod if rel.endswith("__init__.py") else mod.rsplit(".", 1)[0]
        if rel.endswith("__init__.py"):
            mod = mod.removesuffix(".__init__")
            package = mod
        room = _room(mod)
        tree = ast.parse(open(os.path.join(ROOT, "advcli", rel), encoding="utf-8").read())
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # `from .. import resolution` imports the module advcli.runs.resolution, not advcli/__init__.py
                targets = [f"{base}.{a.name}" if os.path.exists(os.path.join(ROOT, *f"{base}.{a.name}".split(".")))
                           or os.path.exists(os.path.join(ROOT, *f"{base}.{a.name}".split(".")) + ".py") else base
                           for a in node.names]
            for t in targets:
                r = _room(t)
                if r is not None and r != room and (room, r) != HAND_OVER:
                    out.setdefault(room, set()).add(r)
    return out


def test_no_import_runs_upward():
    """The rooms of advcli/ (top-level modules and packages) import each other without a circle, the server's
    hand-over to the CLI aside: so every room can stand above all that it imports, and no import runs back up
    (a shared thing lives below everything that uses it)."""
    graph = _room_imports()
    assert graph.get("pipeline/") and "estimators/" in graph["pipeline/"]  # the reading works
    state: dict[str, int] = {}

    def visit(room: str, path: list[str]) -> None:
        state[room] = 1
        for nxt in sorted(graph.get(room, ())):
            if state.get(nxt) == 1:
                chain = path + [room]
                raise AssertionError("an import runs back up: " + " -> ".join(chain[chain.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [room])
        state[room] = 2

    for room in sorted(graph):
        if room not in state:
            visit(room, [])
