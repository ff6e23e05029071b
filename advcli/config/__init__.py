"""advcli's canonical configuration: every stage of the pipeline and its switches.

A configuration is a nested dict with the keys of :data:`SCHEMA` (dotted paths) plus
``estimator.*``, whose keys depend on the estimator (see ``advcli.estimators``). Flavors translate a
framework's own keys into this form; ``--flavor advcli`` takes it directly. ``--set KEY=VALUE``
parses VALUE as YAML. Nothing here imports torch.
"""
from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import AdvcliError, did_you_mean
from ..records import record
from .column_roles import ROLES


@record(frozen=True)
class Key:
    """One configuration key as ``--set`` checks it: its default, doc, choices and kind."""

    default: Any
    doc: str
    choices: tuple | None = None
    kind: str = "any"  # "bool", "float", "int", "str", "clip", "list", "any"


def _schema() -> dict[str, Key]:
    from .runspec import declared_default, declared_keys

    return {path: Key(declared_default(f), f.metadata["doc"], f.metadata["choices"], f.metadata["kind"])
            for path, f in declared_keys().items()}


# The canonical keys, made from their one declaration: the fields of advcli.config.runspec's dataclasses (in the
# pipeline's order: grouping -> reward -> kl -> rollout correction -> advantage -> output)
SCHEMA: dict[str, Key] = _schema()


def default_config() -> dict:
    cfg: dict = {}
    for path, key in SCHEMA.items():
        set_path(cfg, path, copy.deepcopy(key.default))
    cfg["columns"] = {}
    cfg["estimator"] = {"name": "grpo"}
    return cfg


def set_path(cfg: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    node = cfg
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def parse_value(text: str) -> Any:
    """A --set VALUE, parsed as YAML (``true``, ``0.95``, ``null``, ``[acc,fmt]``)."""
    import yaml

    try:
        return yaml.safe_load(text) if text.strip() != "" else ""
    except yaml.YAMLError as e:
        raise AdvcliError(f"cannot parse value {text!r} as YAML: {str(e).splitlines()[0]}") from None


def parse_set(items: list[str] | None) -> list[tuple[str, Any]]:
    """``["a.b=1", ...]`` -> ``[("a.b", 1), ...]`` in order."""
    out = []
    for item in items or []:
        if "=" not in item:
            raise AdvcliError(f"--set {item!r}: expected KEY=VALUE, e.g. --set algorithm.gamma=0.99")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k:
            raise AdvcliError(f"--set {item!r}: the key is empty")
        out.append((k, parse_value(v)))
    return out


def parse_column_maps(items: list[str] | None) -> dict[str, str]:
    """``--column reward=score`` -> {"reward": "score"}."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise AdvcliError(f"--column {item!r}: expected ROLE=NAME, e.g. --column reward=score")
        role, name = item.split("=", 1)  # the name as given: a column may be named with spaces (" reward")
        role = role.strip()
        check_column_roles({role: name}, f"--column {item!r}")
        out[role] = name
    return out


def check_column_roles(columns: dict, given: str) -> None:
    """Refuse a role advcli does not know (``reward/NAME``: one reward function's column), as ``given``
    (``--column 'x=y'``, ``columns=``) names it, with the nearest role."""
    for role, name in columns.items():
        if role not in ROLES and not role.startswith("reward/"):
            where = given if given.startswith("--") else f"{given}{{{role!r}: {name!r}}}"
            raise AdvcliError(f"{where}: unknown role {role!r}.{did_you_mean(role, ROLES)} Roles: {', '.join(ROLES)}")


# the real paths of the configuration files read (a --config, a run's saved configuration): a dump's directory that
# holds one does not list it among its files left out (advcli.formats.response_level.unread_files)
CONFIG_FILES_READ: set[str] = set()


def load_config_file(path: str, overrides: list[tuple[str, Any]] | tuple = ()) -> dict:
    """A YAML or TOML file of the same keys as --set (nested or dotted), as a flat {key: value}, as the
    trainers read their own training configs (NeMo RL's nemo_rl/utils/config.py ``load_config_with_inheritance``
    and OmegaConf @7ea279ab):

    - ``defaults: parent.yaml`` (or a list of such files, relative to the file's folder): the parents read first,
      in order, the file's own keys over theirs; a top-level mapping holding ``_override_: true`` replaces the
      parents' whole section (NeMo honours the marker on top-level keys only); a ``???`` (OmegaConf's missing
      value) keeps what the parents gave. Hydra's ``defaults`` lists (verl: config groups, ``_self_``) name no
      files and are ignored.
    - ``overrides`` (``--set``'s (key, value) pairs) replace the file's values before the interpolations
      resolve, as the trainers apply their command line's overrides: a key that interpolates an overridden
      one follows it.
    - ``${a.b.c}`` (OmegaConf interpolation) takes the value of key ``a.b.c`` — a whole section too —, ``${.x}`` /
      ``${..x}`` a key relative to the value's own section / its parent; NeMo's resolvers ``${add:a,b}``,
      ``${mul:a,b}``, ``${div:a,b}``, ``${max:a,b}`` compute; one inside a longer string is replaced by its text.
      Other resolvers (``${oc.env:HOME}``) and unknown keys are left as written (a flavor refuses them on a key
      it reads).

    An empty section (prime-rl's ``length_penalty = {}``) is kept as the key's value ``{}``. A file that does not
    parse is refused naming the file and the line and column of the error."""
    tree = _load_tree(path, ())
    CONFIG_FILES_READ.add(os.path.realpath(path))
    for key, value in overrides:
        found = _walk(tree, tuple(str(key).split(".")))
        if found is not None:  # a key the file holds (one it lacks no interpolation names)
            parent, last = found
            parent[last] = value
    return flatten_keys(_resolved(tree), keep_empty=True)


def _walk(tree: dict, parts: tuple) -> tuple[dict, str] | None:
    """(the mapping that holds it, its name there) of the key ``parts`` in a nested configuration whose
    mappings may also hold dotted names (``actor.kl_ctl:`` beside ``actor: {...}``), or None."""
    for j in range(len(parts), 0, -1):
        name = ".".join(parts[:j])
        if name in tree:
            if j == len(parts):
                return tree, name
            if isinstance(tree[name], dict):
                found = _walk(tree[name], parts[j:])
                if found is not None:
                    return found
    return None


def _load_tree(path: str, seen: tuple) -> dict:
    """The nested mapping of one config file with its ``defaults`` parents merged under it."""
    data = _parse_config_file(path)
    parents = data.get("defaults")
    if isinstance(parents, str):
        parents = [parents]
    if not (isinstance(parents, list) and parents and all(isinstance(x, str) and x.lower().endswith((".yaml", ".yml"))
                                                          for x in parents)):
        return data  # no defaults, or Hydra's (config groups): not files to read
    data = {k: v for k, v in data.items() if k != "defaults"}
    here = Path(path).parent
    merged: dict = {}
    for parent in parents:
        parent_path = str(Path(parent) if Path(parent).is_absolute() else here / parent)
        if os.path.realpath(parent_path) in seen:
            raise AdvcliError(f"config file {path}: its defaults come back to {parent} (a cycle)")
        if not Path(parent_path).is_file():
            raise AdvcliError(f"config file {path}: defaults names {parent}, which is not a file "
                              f"({parent_path})", hint="keep the parent configs beside it, as the trainer reads "
                                                       "them relative to the file's folder")
        merged = _merge_config(merged, _load_tree(parent_path, seen + (os.path.realpath(path),)))
    return _merge_config(merged, data)


def _merge_config(base: dict, over: dict, top: bool = True) -> dict:
    """OmegaConf.merge of two nested mappings (``over`` wins; mappings merged key by key, anything else
    replaced, a ``???`` never replacing a value), with NeMo's ``_override_: true`` on a top-level mapping
    replacing it whole (``merge_with_override``)."""
    out = dict(base)
    for k, v in over.items():
        if v == "???" and k in out:
            continue
        if top and isinstance(v, dict) and v.get("_override_"):
            out[k] = {kk: vv for kk, vv in v.items() if kk != "_override_"}
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge_config(out[k], v, top=False)
        else:
            out[k] = v
    return out


_INNERMOST = re.compile(r"\$\{([^${}]*)\}")  # an interpolation holding none
_RESOLVERS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b, "max": max}
_UNRESOLVED = object()


def _resolved(tree: dict) -> dict:
    """The nested configuration with its interpolations resolved (:func:`load_config_file`); a cycle, a resolver
    other than NeMo's four, or a key the file does not hold leaves the value as written."""
    def lookup(ref: str, where: tuple, depth: int):
        dots = len(ref) - len(ref.lstrip("."))
        path = (where[:len(where) - dots] if dots else ()) + tuple(ref[dots:].split("."))
        found = _walk(tree, path)
        if found is None:
            return _UNRESOLVED
        return resolve(found[0][found[1]], path, depth + 1)

    def evaluate(inner: str, where: tuple, depth: int):
        name, colon, args = inner.partition(":")
        if not colon:
            return lookup(inner.strip(), where, depth)
        fn = _RESOLVERS.get(name.strip())
        if fn is None:
            return _UNRESOLVED
        import yaml

        try:
            return fn(*(yaml.safe_load(a) for a in args.split(",")))
        except Exception:  # noqa: BLE001 - arguments the resolver cannot take: left as written
            return _UNRESOLVED

    def resolve(v: Any, where: tuple, depth: int = 0):
        if isinstance(v, dict):
            return {k: resolve(x, where + (k,), depth) for k, x in v.items()}
        if isinstance(v, list):
            return [resolve(x, where, depth) for x in v]
        if not isinstance(v, str) or "${" not in v or depth > 32:
            return v
        text = v
        while (m := _INNERMOST.search(text)) is not None:
            got = evaluate(m.group(1), where, depth)
            if got is _UNRESOLVED or (isinstance(got, str) and "${" in got):
                return v
            if m.span() == (0, len(text)):
                return got  # the whole value: its type kept (a number, a bool, a section)
            if isinstance(got, (dict, list)):
                return v
            text = text[:m.start()] + str(got) + text[m.end():]
        return text

    return resolve(tree, ())


def _parse_config_file(path: str) -> dict:
    """One YAML or TOML file as its nested mapping (``load_config_file``)."""
    p = Path(path)
    if p.is_dir():
        raise AdvcliError(f"config file {path}: is a directory", hint="give the YAML or TOML file itself")
    if not p.is_file():
        raise AdvcliError(f"config file {path}: no such file")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # (a BOM, as Windows editors write it, is not part of the text)
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise AdvcliError(f"config file {path}, line {line}: not UTF-8 text (byte 0x{raw[e.start]:02x})",
                          hint="save the file as UTF-8 (iconv -f latin1 -t utf-8 FILE, for a Latin-1 one)") from None
    try:
        if p.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            data = _load_yaml_unique(text) or {}
    except Exception as e:  # noqa: BLE001 - any parse error is the user's file
        raise AdvcliError(f"config file {path}{_parse_error_place(e, text)}: cannot parse: {_parse_error_text(e)}",
                          hint="fix the file there: " + ("TOML is key = value, strings quoted, [section] headers"
                                                         if p.suffix.lower() == ".toml" else
                                                         "YAML is key: value, nested keys indented by spaces, "
                                                         "brackets and quotes closed")) from None
    if not isinstance(data, dict):
        raise AdvcliError(f"config file {path}: expected a mapping of keys to values")
    return data


def _load_yaml_unique(text: str):
    """``yaml.safe_load`` refusing a key given twice in one mapping, as OmegaConf (which verl, NeMo RL, ROLL and
    AReaL load their configs with) refuses it ("found duplicate key"): PyYAML would keep the last silently."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be overridden
                continue
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r} (first given at "
                    f"line {seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return loader.construct_mapping(node, deep=deep)

    UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return yaml.load(text, Loader=UniqueKeys)  # noqa: S506 - a SafeLoader subclass


def _parse_error_place(e: Exception, text: str) -> str:
    """``, line L, column C`` (1-based) of a YAML or TOML parse error, or "" when it names none."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)  # PyYAML's MarkedYAMLError
    if mark is not None:
        return f", line {mark.line + 1}, column {mark.column + 1}"
    if getattr(e, "lineno", None):  # tomllib from Python 3.14
        return f", line {e.lineno}, column {e.colno}"
    m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))  # tomllib up to 3.13: in the message
    if m:
        return f", line {m.group(1)}, column {m.group(2)}"
    if "end of document" in str(e):
        lines = text.splitlines() or [""]
        return f", line {len(lines)}, column {len(lines[-1]) + 1} (the end of the file)"
    return ""


def _parse_error_text(e: Exception) -> str:
    """The parser's own words without the place (said once, before them)."""
    problem = getattr(e, "problem", None)
    if problem:  # PyYAML: "expected ',' or ']', but got ':'" (+ "while parsing a flow sequence")
        context = getattr(e, "context", None)
        return f"{problem} ({context})" if context else str(problem)
    msg = getattr(e, "msg", None) or str(e).splitlines()[0]
    return re.sub(r"\s*\((at line \d+, column \d+|at end of document)\)", "", str(msg))


def flatten_keys(data: dict, prefix: str = "", keep_empty: bool = False, whole=frozenset()) -> dict[str, Any]:
    """Nested dicts to dotted keys; leaves (including lists) kept as values; an empty dict a value of its own
    with ``keep_empty``, else dropped; a key in ``whole`` keeps its dict as its value."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping) and (v or not keep_empty) and path not in whole:
            out.update(flatten_keys(v, path + ".", keep_empty, whole))
        else:
            out[path] = v
    return out


def coerce(path: str, value: Any, key: Key) -> Any:
    """Check and normalise one canonical value; raise AdvcliError naming the key."""
    if value is None:
        return None
    if _has_nan(value):  # YAML's .nan: every value it enters is NaN, written with exit 0 unless refused here
        raise AdvcliError(f"key {path}: NaN is not a setting ({key.doc}); every value computed with it would be NaN",
                          hint=f"give {path} a number")
    kind = key.kind
    try:
        if kind == "bool":
            if isinstance(value, bool) or (type(value).__module__ == "numpy"  # numpy's bool too
                                           and type(value).__name__ in ("bool", "bool_")):
                return bool(value)
            raise ValueError
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind == "str" and isinstance(value, bool) and key.choices is not None:
            # YAML 1.1 (PyYAML) reads an unquoted off/on/no/yes as a boolean; OmegaConf, which the trainers load
            # their configs with, keeps them text: a key whose choices hold the word takes it back
            words = ("on", "yes", "true") if value else ("off", "no", "false")
            value = next((w for w in words if w in key.choices), value)
        if kind == "str":
            value = str(value)
        if kind == "list":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, (list, tuple)):
                raise ValueError
            return list(value)
        if kind == "clip":
            return normalize_clip(value)
    except (TypeError, ValueError):
        example = {"bool": "true or false", "float": "a number such as 0.5", "int": "a whole number",
                   "list": "a list such as [a, b]", "clip": "a number c (for ±c) or [low, high]"}.get(kind, f"a {kind}")
        raise AdvcliError(f"key {path}: {value!r} is not a valid {kind} ({key.doc})",
                          hint=f"give {path} {example}") from None
    if key.choices is not None and value not in key.choices:
        # YAML 1.1 (PyYAML) reads an unquoted off/on/no/yes as a boolean: say so rather than show 'False'
        told = (" (a YAML file reads an unquoted on/off/yes/no as true/false: quote the value)"
                if kind == "str" and value in ("True", "False") else "")
        raise AdvcliError(f"key {path}: unknown value {value!r}{told}.{did_you_mean(value, key.choices)} "
                          f"Valid: {', '.join(map(str, key.choices))}")
    return value


def _has_nan(value: Any) -> bool:
    """Whether ``value`` is a float NaN or a list holding one (a YAML ``.nan``)."""
    if isinstance(value, float):
        return value != value
    return isinstance(value, (list, tuple)) and any(_has_nan(v) for v in value)


def normalize_clip(value: Any) -> list[float] | None:
    """``c`` -> [-c, c]; ``[lo, hi]`` kept; 0/false/null -> None."""
    if value is None or value is False:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        c = float(value)
        return [-abs(c), abs(c)]
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo = None if value[0] is None else float(value[0])
        hi = None if value[1] is None else float(value[1])
        return [lo, hi]
    raise ValueError
