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


def test_every_path_the_page_names_exists():
    text = open(HOUSE, encoding="utf-8").read()
    paths = set(re.findall(r"`((?:advcli|tests|docs)/[\w/.-]+\.(?:py|md))`", text))
    paths |= {"docs/" + p for p in re.findall(r"\(docs/([\w/.-]+\.md)\)", text)}
    assert len(paths) > 10
    missing = sorted(p for p in paths if "NAME" not in p and not os.path.exists(os.path.join(ROOT, p)))
    assert not missing, f"docs/house.md names paths that do not exist: {missing}"
