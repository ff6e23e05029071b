"""Flavors: a framework's own configuration keys and defaults -> advcli's canonical configuration.

A flavor never holds math. It names the framework and commit whose semantics it reproduces, lists
the native keys with the framework's defaults, and translates a set of native values into the
canonical configuration (``advcli.config``). Adding a flavor is one module here defining
``FLAVOR = Flavor(...)``; modules are discovered automatically.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import Key, load_config_file
from ..errors import AdvcliError, did_you_mean
from ..plugins import load_modules


@dataclass(frozen=True)
class Flavor:
    name: str
    framework: str  # "verl-project/verl @ 1dda039b"
    keys: dict[str, Key]
    translate: Callable[[dict[str, Any]], dict]  # full native dict (defaults filled) -> canonical config
    notes: str = ""  # how this framework's semantics differ (for `advcli explain`)
    aliases: dict[str, str] = field(default_factory=dict)  # old key name -> current key name
    open_prefixes: tuple[str, ...] = ()  # key prefixes accepted without a fixed list (advcli: estimator.*)
    given_keys: bool = False  # translate(values, given=set of keys given) (AReaL: a section is on once a key is set)
    # the native key naming the estimator and the value of it that runs on a response-level dump (one reward
    # per response): the fix named when the framework's default estimator needs token data
    estimator_key: str | None = None
    response_estimator: str | None = None
    group_size_key: str | None = None  # positional group size (default 1): taken from a trainer dump's groups
    # dump format -> (native settings, where they come from): what the run that wrote such a dump used, taken
    # for the keys not given (AReaL's JSONL: its GRPO example's settings)
    dump_settings: dict[str, tuple[tuple[tuple[str, Any], ...], str]] = field(default_factory=dict)


FLAVORS: dict[str, Flavor] = {}

# advcli's own keys, accepted by every framework flavor (not the framework's): they change how the dump
# is read, never the math.
EXTENSION_KEYS: dict[str, Key] = {
    "advcli.group_by": Key("flavor", "advcli extension: `id` groups rows by the prompt_id column instead of "
                           "the framework's consecutive blocks of n rows (ROLL, OpenRLHF, TRL), for dumps whose "
                           "rows were reordered; `flavor` keeps the framework's own grouping",
                           ("flavor", "id"), "str"),
    "advcli.id_check": Key("flavor", "advcli extension: with the framework's blocks of n rows, a prompt_id column "
                           "that disagrees with them: `strict` stops the run, `warn` keeps the blocks (the "
                           "framework's own groups) with a warning, e.g. for a prompt drawn for two consecutive "
                           "groups; `flavor` keeps the flavor's rule", ("flavor", "strict", "warn"), "str"),
}


def _load() -> None:
    if FLAVORS:
        return
    for fl in load_modules(__name__, __path__, "FLAVOR"):
        FLAVORS[fl.name] = fl


def names() -> list[str]:
    _load()
    return sorted(FLAVORS)


def get(name: str) -> Flavor:
    _load()
    if name not in FLAVORS:
        raise AdvcliError(f"--flavor {name!r}: unknown flavor.{did_you_mean(name, FLAVORS)} "
                          f"Known: {', '.join(sorted(FLAVORS))}")
    return FLAVORS[name]


def native_values(flavor: Flavor, settings: list[tuple[str, Any]]) -> dict[str, Any]:
    """The flavor's defaults overlaid with the given settings, each key checked and coerced."""
    from ..config import coerce

    keys = flavor_keys(flavor)
    values = {k: key.default for k, key in keys.items()}
    for k, v in settings:
        k = flavor.aliases.get(k, k)
        if k in keys:
            values[k] = coerce(k, v, keys[k])
        elif any(k.startswith(p) for p in flavor.open_prefixes):
            values[k] = v
        else:
            valid = list(keys) + list(flavor.aliases)
            raise AdvcliError(f"key {k!r} is not a setting of --flavor {flavor.name}.{did_you_mean(k, valid)}",
                              hint=f"`advcli explain --flavor {flavor.name} --keys` lists its keys")
    return values


def flavor_keys(flavor: Flavor) -> dict[str, Key]:
    """The flavor's own keys plus advcli's extension keys (the canonical flavor has its own grouping keys)."""
    return dict(flavor.keys) if flavor.name == "advcli" else {**flavor.keys, **EXTENSION_KEYS}


def _apply_extensions(cfg: dict, values: dict) -> dict:
    if values.get("advcli.group_by") == "id" and cfg.get("grouping", {}).get("by") == "position":
        cfg["grouping"]["by"] = "id"  # the same per-group math, groups taken from prompt_id
    if values.get("advcli.id_check", "flavor") != "flavor" and cfg.get("grouping", {}).get("by") == "position":
        cfg["grouping"]["id_check"] = values["advcli.id_check"]
    return cfg


def resolve(flavor_name: str, settings: list[tuple[str, Any]], config_file: str | None = None):
    """(canonical config, the native settings that were given) for a flavor and its --set values."""
    flavor = get(flavor_name)
    items = list(load_config_file(config_file).items()) if config_file else []
    items += settings
    values = native_values(flavor, items)
    given = {flavor.aliases.get(k, k): v for k, v in items}
    given = {k: values[k] for k in given if k in values}
    translated = {k: v for k, v in values.items() if k not in EXTENSION_KEYS}
    cfg = flavor.translate(translated, given=set(given)) if flavor.given_keys else flavor.translate(translated)
    return _apply_extensions(cfg, values), given
