"""Flavors: a framework's own configuration keys and defaults -> advcli's canonical configuration.

A flavor never holds math. It names the framework and commit whose semantics it reproduces, lists
the native keys with the framework's defaults, and translates a set of native values into the
canonical configuration (``advcli.config``). Adding a flavor is one module here defining
``FLAVOR = Flavor(...)``; modules are discovered automatically, and this registry is the one list of
flavors: the command-line help reads it (:func:`framework_names`, :func:`flavor_names_text`), and
``tests/flavors/test_flavor_registry.py`` checks that the static texts (README, pyproject, docs) name every one.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..config import Key
from ..errors import AdvcliError, did_you_mean
from ..plugins import load_modules
from ..records import record
from ._releases import Release, check_accepts, find, index_text


@record(frozen=True)
class Flavor:
    """One framework's semantics: its native keys and how they translate to the canonical configuration."""

    name: str  # what --flavor takes
    framework: str  # "verl-project/verl @ 1dda039b"
    keys: dict[str, Key]
    translate: Callable[[dict[str, Any]], dict]  # full native dict (defaults filled) -> canonical config
    title: str = ""  # the framework's name as its users write it ("NeMo RL"); "" for advcli's own keys
    notes: str = ""  # how this framework's semantics differ (for `advcli explain`)
    aliases: dict[str, str] = field(default_factory=dict)  # old key name -> current key name
    open_prefixes: tuple[str, ...] = ()  # key prefixes accepted without a fixed list (advcli: estimator.*)
    given_keys: bool = False  # translate(values, given=set of keys given) (AReaL: a section is on once a key is set)
    # the native key naming the estimator (--estimator NAME sets it when NAME is one of its choices), and the
    # value of it that runs on a response-level dump (one reward per response): the fix named when the
    # framework's default estimator needs token data
    estimator_key: str | None = None
    response_estimator: str | None = None
    # the values of estimator_key that name the flavor's own estimators, where the key declares no choices
    # (its translate refuses the others with the framework's own message): --estimator NAME and advcli.mix
    # terms among them run the flavor's estimator, as --set KEY=NAME does
    estimator_names: tuple[str, ...] = ()
    # other native keys whose choices name the flavor's own estimators too (NeMo RL's ppo.adv_estimator.name: gae,
    # raw_reward, beside the GRPO loop's grpo.adv_estimator.name): --estimator NAME sets the key that has NAME
    more_estimator_keys: tuple[str, ...] = ()
    group_size_key: str | None = None  # positional group size (default 1): taken from a trainer dump's groups
    reward_columns_key: str | None = None  # the key naming the reward columns (TRL's reward_funcs): what a dump
    #   shows of it is not taken where --column reward=NAME names the reward
    # the setting (--set ...) that takes the KL out of the reward: named where a dump without log-probs refuses KL in
    # the reward (advcli.formats.response_level.refusal)
    kl_off: str | None = None
    # dump format -> (native settings, where they come from): what the run that wrote such a dump used, taken
    # for the keys not given (ROLL's reward dtype, NeMo's valid-mask rule)
    dump_settings: dict[str, tuple[tuple[tuple[str, Any], ...], str]] = field(default_factory=dict)
    # the framework's own keys (or key prefixes) in a section the flavor reads that change nothing offline:
    # a --config file may hold them (config_file_settings); --set still refuses them
    unread: tuple[str, ...] = ()
    # the framework's keys that advcli takes another way (slime's reward_key: --column reward=NAME): --set KEY is
    # refused with that way as its hint
    elsewhere: dict[str, str] = field(default_factory=dict)
    # sections of the framework's whole configuration that the flavor reads but that mostly hold the trainer's
    # other settings (AReaL's `actor`: PPOActorConfig, with the model path, optimizer, engine): in a --config
    # file (the run's saved config.yaml) a key there that is not the flavor's is ignored and listed, unless it
    # is a near miss of one of the flavor's keys (refused as a misspelling); --set still refuses them
    mixed_sections: tuple[str, ...] = ()
    # (a --config file's flat keys, its path) -> the settings the trainer's own config code derives from them,
    # taken after the file's keys (--set still wins): NeMo RL's PPO config without ppo.adv_estimator runs
    # PPOConfig's default gae; ROLL's RLVRConfig overwrites actor_infer's num_return_sequences with
    # num_return_sequences_in_group. It may refuse the file (ROLL's agentic pipeline config)
    file_settings: Callable[[dict[str, Any], str], list[tuple[str, Any]]] | None = None
    # a section given as an empty table in a --config file -> the setting that means (prime-rl's pydantic
    # `length_penalty = {}` is LinearLengthPenaltyConfig() with its defaults: the penalty on)
    empty_tables: dict[str, tuple[str, Any]] = field(default_factory=dict)
    # (native values, defaults filled) -> one line saying why the estimator that runs has another name than
    # the one the user chose (ROLL adv_estimator=grpo runs reinforce_plus_plus), or None
    estimator_note: Callable[[dict[str, Any]], str | None] | None = None
    # the upstream releases/commits whose semantics advcli reproduces, oldest first (advcli.flavors._releases)
    releases: tuple[Release, ...] = ()
    # the release --flavor NAME runs with no @: None, the newest (the table's last); a release's name where the
    # newest changes numbers that the cross-check contract pins (NeMo RL: 7ea279a, before #3837 and #4158), with
    # why in a few words (``default_why``)
    default_release: str | None = None
    default_why: str = ""
    # what `advcli audit` tries when the logged advantages disagree: the non-bool keys whose values it tries
    # on the flavor given (bool keys are all flipped), and, on a dump with prompt ids, this flavor's group
    # estimators as settings, given the dump's usual group size n (>= 2)
    audit_switches: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    audit_tries: Callable[[int], list[dict[str, Any]]] | None = None
    # the default flavor's choice of estimator when none is named: (column, estimator) pairs, the first
    # whose column the dump has (verl: grpo with a prompt_id column, else gae with values)
    pick_estimator: tuple[tuple[str, str], ...] = ()
    # (native values, defaults filled; the release's table entry; the release as asked, None: the newest) ->
    # refuses a setting the release's own code does not run where Release.accepts (a list of values) cannot say
    # it: a check that differs within one table entry (TRL 0.15.0 refuses num_generations=1, 0.14.0 of the same
    # semantics does not), or a key whose values are open (AReaL 1.0.4's gae_lambda is a number, not a path)
    release_check: Callable[[dict[str, Any], Release, str | None], None] | None = None


FLAVORS: dict[str, Flavor] = {}
DEFAULT = "verl"  # the flavor a run has when none is named

# advcli's own keys, accepted by every framework flavor (not the framework's): they change how the dump
# is read, never the math.
EXTENSION_KEYS: dict[str, Key] = {
    "advcli.group_by": Key("flavor", "advcli extension: `id` groups rows by the prompt_id column instead of "
                           "the framework's consecutive blocks of n rows (ROLL, OpenRLHF, TRL, slime) or runs of equal "
                           "prompt_id (AReaL), for dumps whose rows were reordered; `flavor` keeps the "
                           "framework's own grouping",
                           ("flavor", "id"), "str"),
    "advcli.id_check": Key("flavor", "advcli extension: with the framework's blocks of n rows, a prompt_id column "
                           "that disagrees with them: `strict` stops the run, `warn` keeps the blocks (the "
                           "framework's own groups) with a warning, e.g. for a prompt drawn for two consecutive "
                           "groups; `flavor` keeps the flavor's rule", ("flavor", "strict", "warn"), "str"),
}
# the estimator lab's keys, accepted by every flavor (the canonical one included): they choose the estimator
LAB_KEYS: dict[str, Key] = {
    "advcli.estimator": Key(None, "advcli extension (--estimator): the estimator that runs instead of the flavor's: "
                            "one of the flavor's own estimator names (its semantics and parameters), a registered "
                            "estimator (`advcli explain --flavor advcli --keys`), or your function as "
                            "module:function, file.py:function or an entry point of group advcli.estimators",
                            None, "str"),
    "advcli.mix": Key(None, "advcli extension: a weighted sum of estimators, e.g. `0.7*grpo+0.3*rloo`; each term "
                      "named as advcli.estimator names one (the flavor's own names take its semantics and "
                      "parameters); the stages around the estimator must agree between the terms", None, "str"),
}
EXTENSION_KEYS.update(LAB_KEYS)


def _load() -> None:
    if FLAVORS:
        return
    for fl in load_modules(__name__, __path__, "FLAVOR"):
        FLAVORS[fl.name] = fl


def names() -> list[str]:
    _load()
    return sorted(FLAVORS)


def listed() -> list[Flavor]:
    """Every flavor in the order the help lists them: verl (the default) first, the other frameworks
    by name, advcli's own canonical keys last."""
    _load()
    return sorted(FLAVORS.values(), key=lambda f: (f.name != "verl", not f.title, f.name))


def framework_names(last: str = "or") -> str:
    """The frameworks whose semantics the flavors reproduce, as prose: "verl, AReaL, ... or prime-rl"."""
    titles = [f.title for f in listed() if f.title]
    return f"{', '.join(titles[:-1])} {last} {titles[-1]}"


def flavor_names_text() -> str:
    """The --flavor values, as the help lists them: "verl, areal, ..., trl, or advcli (canonical keys)"."""
    names_ = [f.name for f in listed()]
    return ", ".join(names_[:-1]) + f", or {names_[-1]} (canonical keys)"


# advcli's own keys that choose the estimator, beside each flavor's (:func:`estimator_keys`)
ADVCLI_ESTIMATOR_KEYS = ("advcli.estimator", "advcli.mix")


def estimator_keys(flavor: Flavor) -> tuple[str, ...]:
    """The flavor's own keys that choose its estimator: ``estimator_key`` and ``more_estimator_keys``."""
    return tuple(k for k in (flavor.estimator_key, *flavor.more_estimator_keys) if k)


def split_spec(spec: str) -> tuple[str, str | None]:
    """``"nemo@7ea279a"`` -> ``("nemo", "7ea279a")``; ``"nemo"`` -> ``("nemo", None)``."""
    name, at_, release = spec.partition("@")
    return name.strip(), (release.strip() if at_ else None)


@record(frozen=True)
class FlavorAt:
    """A flavor at one of its releases: what ``--flavor NAME[@RELEASE]`` names, made once from what the user
    typed (:func:`at`) and carried as it is to everything that resolves, runs, labels or records a run
    (resolution, the engines' provenance, the reports, explain, audit, compare, validate), so that no step can
    drop the release by going back to the flavor's name. ``release`` is None only for advcli's own flavor
    (no upstream releases); ``asked`` is the text after ``@`` as given (None: the newest)."""

    flavor: Flavor
    release: Release | None
    asked: str | None = None

    @property
    def name(self) -> str:
        return self.flavor.name

    @property
    def spec(self) -> str:
        """``nemo@7ea279a`` as the user gave it; ``nemo`` with no release named."""
        return f"{self.flavor.name}@{self.asked}" if self.asked is not None else self.flavor.name

    def __str__(self) -> str:
        return self.spec

    def __hash__(self) -> int:  # the flavor and release hold dicts: their names stand for them
        return hash((self.flavor.name, self.release.name if self.release else None, self.asked))

    @property
    def newest(self) -> bool:
        releases = known_releases(self.flavor)
        return bool(releases) and self.release == releases[-1]

    def label(self) -> str | None:
        """Which release runs, in words: ``verl @ newest verified (0.9.1: ...)`` with no suffix, ``NeMo RL
        @7ea279a, the default (...)`` where the flavor's default is not its newest, ``NeMo RL @7ea279a (...)``
        with one; None for advcli's own flavor."""
        r = self.release
        if r is None:
            return None
        title = self.flavor.title or self.flavor.name
        note = r.note
        for said in (f"{title} {r.name}", f"{self.flavor.name} {r.name}"):  # "verl 0.9.1: verl 0.9.1: ..." once
            if note and note.lower().startswith(said.lower() + ":"):
                note = note[len(said) + 1:].strip() or None
                break
        if self.asked is None and not self.newest:
            return f"{title} @{r.name}, the default" + (f" ({note})" if note else "")
        if self.asked is None:
            return f"{title} @ newest verified ({r.name}" + (f": {note})" if note else ")")
        return f"{title} @{r.name}" + (f" ({note})" if note else "")

    def as_dict(self) -> dict | None:
        """The release that runs as the JSON reports and the output's provenance hold it."""
        r = self.release
        if r is None:
            return None
        return {"name": r.name, "date": r.date, "newest": self.newest, "asked": self.asked, "label": self.label()}


def at(spec: str | FlavorAt | Flavor) -> FlavorAt:
    """The flavor at its release of ``--flavor NAME`` or ``NAME@RELEASE`` (an unknown flavor or release
    refused naming it); a :class:`FlavorAt` is returned as it is, a :class:`Flavor` is taken at its newest."""
    if isinstance(spec, FlavorAt):
        return spec
    if isinstance(spec, Flavor):
        return FlavorAt(spec, release_of(spec, None), None)
    _load()
    base, text = split_spec(spec)
    if base not in FLAVORS:
        raise AdvcliError(f"--flavor {base!r}: unknown flavor.{did_you_mean(base, FLAVORS)} "
                          f"Known: {', '.join(sorted(FLAVORS))}")
    flavor = FLAVORS[base]
    return FlavorAt(flavor, release_of(flavor, text), text)


def get(name: str | FlavorAt) -> Flavor:
    """The flavor of ``--flavor NAME`` or ``NAME@RELEASE`` (the release checked: :func:`at`)."""
    return at(name).flavor


PINNED = re.compile(r"@\s*([0-9a-f]{7,40})\b")


def known_releases(flavor: Flavor) -> tuple[Release, ...]:
    """The flavor's release table (oldest first); a flavor without one has its pinned commit (the commit of
    ``Flavor.framework``) as its one release; advcli's own flavor has none."""
    if flavor.releases:
        return flavor.releases
    m = PINNED.search(flavor.framework)
    if not m:
        return ()
    return (Release(m.group(1)[:7], "", aliases=(m.group(1),), note="the commit advcli was matched against"),)


def release_of(flavor: Flavor, text: str | None) -> Release | None:
    """The release ``@text`` names (None: the flavor's default, its ``default_release`` or else the newest verified,
    the table's last); None for a flavor without releases given no suffix. An unknown or too old release is
    refused (:func:`advcli.flavors._releases.find`)."""
    releases = known_releases(flavor)
    if text is None:
        if releases and flavor.default_release:
            return next(r for r in releases if r.name == flavor.default_release)
        return releases[-1] if releases else None
    return find(releases, text, f"--flavor {flavor.name}", package=flavor.name)


def release_label(spec: str | FlavorAt) -> str | None:
    """:meth:`FlavorAt.label` of ``spec``."""
    return at(spec).label()


def release_dict(spec: str | FlavorAt) -> dict | None:
    """:meth:`FlavorAt.as_dict` of ``spec``."""
    return at(spec).as_dict()


def history_rows(flavor: Flavor) -> list[tuple[str, str, str, str, str]]:
    """(release, date, PR, keys, effect) for every change of the flavor's table, a release with no change
    as one row with the release's note: what ``advcli explain --history`` and docs/flavors.md show."""
    rows = []
    for r in known_releases(flavor):
        if not r.changes:
            rows.append((r.name, r.date, "", "", r.note))
        for c in r.changes:
            rows.append((r.name, r.date, c.pr, ", ".join(c.keys), c.effect))
    return rows


def history_text(flavor: Flavor) -> str:
    """``advcli explain --flavor X --history``: the flavor's releases, oldest first, and what changed."""
    releases = known_releases(flavor)
    if not releases:
        return f"--flavor {flavor.name}: advcli's own configuration, no upstream releases"
    default = release_of(flavor, None)
    said = (f"no @ = the newest, {releases[-1].name}" if default is releases[-1] else
            f"no @ = {default.name} ({flavor.default_why}); @newest = {releases[-1].name}")
    lines = [f"{flavor.title or flavor.name} releases advcli reproduces (oldest first; --flavor {flavor.name}@RELEASE, "
             f"{said}):"]
    for r in releases:
        names = ", ".join(r.aliases)
        lines.append("")
        lines.append(f"{r.name}" + (f"  {r.date}" if r.date else "") + (f"  (also: {names})" if names else ""))
        if r.note:
            lines.append(f"  {r.note}")
        for k, v in r.settings.items():
            lines.append(f"  default {k}={v!r}")
        for c in r.changes:
            lines.append(f"  {c.pr or '(no PR)'}" + (f" [{', '.join(c.keys)}]" if c.keys else "") + f": {c.effect}")
    index = index_text(releases, flavor.name)  # the packaged trainers: each published release -> its entry
    return "\n".join(lines + ([""] + index if index else []))


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
        elif k in flavor.elsewhere:
            raise AdvcliError(f"key {k!r} is {flavor.title or flavor.name}'s, and advcli takes it another way",
                              hint=flavor.elsewhere[k].format(value=v))
        elif _mixed_section_rest(k, flavor, keys):
            section = k.split(".")[0]
            read = [n for n in keys if n.split(".")[0] == section]
            title = flavor.title or flavor.name
            raise AdvcliError(f"key {k!r} is not a setting of --flavor {flavor.name}: of {title}'s "
                              f"{section} section advcli reads {', '.join(read[:3])}"
                              f"{' and others' if len(read) > 3 else ''}; its other keys (the loss's, the workers', "
                              "the model's) change no advantage",
                              hint="leave it out of --set; a --config file holding it runs and lists it among the "
                                   "keys it ignored")
        else:
            raise AdvcliError(f"key {k!r} is not a setting of --flavor {flavor.name}.{_key_hint(k, flavor, keys)}",
                              hint=f"`advcli explain --flavor {flavor.name} --keys` lists its keys")
    return values


def _other_owners(k: str, flavor: Flavor) -> list[str]:
    """The other trainers' flavors whose key (or old name) ``k`` is."""
    return [f.name for f in FLAVORS.values() if f is not flavor and f.name != "advcli"
            and (k in f.keys or k in f.aliases)]


def _mixed_section_rest(k: str, flavor: Flavor, keys: dict) -> bool:
    """Whether ``k`` is one of the trainer's other keys in a section the flavor reads a few of
    (``Flavor.mixed_sections``: NeMo's loss_fn.ratio_clip_min), not a near miss of one of them, nor another
    flavor's key."""
    from ..config import SCHEMA

    section = k.split(".")[0]
    if section not in flavor.mixed_sections or "." not in k or k in SCHEMA:  # (advcli's reward.overlong.tokens)
        return False
    if _other_owners(k, flavor):
        return False
    return not _near_miss(k, [n for n in keys if n.split(".")[0] == section], ())


def check_given(spec, settings) -> None:
    """What the user typed (``--set``/``--estimator``, ``settings=``), checked before it is resolved: ``KEY=null``
    for an on/off key is refused (null is no third state, and the trainers read it as false: verl's grpo then skips
    the std, Dr. GRPO, which is not what "the default" means; a saved config file's null stays the trainer's
    value), and so is ``--estimator A`` with ``--set <estimator key>=B`` (two estimators: neither silently wins)."""
    flavor = at(spec).flavor
    keys = flavor_keys(flavor)
    for k, v in settings:
        key = keys.get(flavor.aliases.get(k, k))
        if v is None and key is not None and key.kind == "bool" and isinstance(key.default, bool):
            raise AdvcliError(f"key {k}: null is not an on/off value ({key.doc})",
                              hint=f"give true or false (default {str(key.default).lower()}), or leave the key out "
                                   "for the default")
    named = [str(v) for k, v in settings if k == "advcli.estimator"]
    if len(set(named)) > 1:
        raise AdvcliError(f"advcli.estimator is given twice, {named[0]} and {named[-1]}: two estimators",
                          hint="give one of them (--estimator NAME is --set advcli.estimator=NAME)")
    if named and flavor.estimator_key:
        key = own_estimator_key(flavor, named[-1]) or flavor.estimator_key
        own = [(k, str(v)) for k, v in settings if flavor.aliases.get(k, k) == key]
        if own and own[-1][1] != named[-1]:
            raise AdvcliError(f"--estimator {named[-1]} and --set {own[-1][0]}={own[-1][1]} name two estimators",
                              hint=f"give one of them: --estimator {named[-1]} alone runs "
                                   + (f"{flavor.title}'s own {named[-1]}" if own_estimator(flavor, named[-1])
                                      else f"advcli's {named[-1]} on {flavor.title}'s pipeline"))


def _inverted_flag(k: str, keys: dict) -> str:
    """The hint for a trainer's ``--disable-X`` / ``--no-X`` flag given as a key (slime's
    ``--disable-rewards-normalization``): the flavor's boolean key X, set false; empty for any other key."""
    bare = k.lstrip("-").replace("-", "_")
    for prefix in ("disable_", "no_"):
        target = bare.removeprefix(prefix) if bare.startswith(prefix) else None
        named = [name for name in keys if target and (name == target or name.endswith("." + target))]
        if len(named) == 1 and getattr(keys[named[0]], "kind", None) == "bool":
            return (f" The trainer's flag --{bare.replace('_', '-')} is the key {named[0]!r} inverted: "
                    f"--set {named[0]}=false (and {k}=false is {named[0]}=true).")
    return ""


def _key_hint(k: str, flavor: Flavor, keys: dict) -> str:
    """" Did you mean …?" for an unknown key: the one key whose dotted path ends with it (verl's
    ``adv_estimator`` for ``algorithm.adv_estimator``), else the nearest spelling."""
    inverted = _inverted_flag(k, keys)
    if inverted:
        return inverted
    ends = [name for name in keys if name.endswith("." + k)]
    if len(ends) == 1:
        return f" Did you mean {ends[0]!r}?"
    owners = _other_owners(k, flavor)  # another trainer's key: its flavor named
    near = did_you_mean(k, list(keys) + list(flavor.aliases))
    return near + (f" It is a key of --flavor {' and --flavor '.join(owners)}." if owners else "")


def unread_at_release(fa: FlavorAt, given: dict[str, Any]) -> str | None:
    """The line naming the keys given that the release's code never reads (``Release.ignores``), or None."""
    if fa.release is None or not fa.release.ignores:
        return None
    default = native_values(fa.flavor, _release_items(fa))
    unread = [(k, why) for k, why in fa.release.ignores.items()
              if k in (given or {}) and given[k] != default.get(k)]
    if not unread:
        return None
    return "; ".join(f"{k}={given[k]} has no effect at {fa.flavor.name}@{fa.release.name}: {why}" for k, why in unread)


def estimator_note(spec: str | FlavorAt, given: dict[str, Any]) -> str | None:
    """The one line on why the estimator that runs is not simply the flavor's one the user named: an estimator
    or mix the flavor does not have (advcli's, with what it matches, or the user's function, on the flavor's
    pipeline), or the flavor's own named otherwise in advcli (``Flavor.estimator_note``), for the native
    settings ``given`` at the release ``spec`` names; None when there is nothing to say."""
    fa = at(spec)
    name = (given or {}).get("advcli.estimator")
    mix = (given or {}).get("advcli.mix")
    title = fa.flavor.title
    if title and mix is not None:
        return (f"advcli.mix={mix} is advcli's mix of estimators, not one of {title}'s: it runs on {title}'s "
                "pipeline (its rewards, KL and grouping)")
    if title and name is not None and not own_estimator(fa.flavor, name):
        from ..estimators import get as get_estimator  # loaded with the run's math already

        try:
            source = get_estimator(str(name)).source
        except AdvcliError:
            source = None
        who = "your function" if ":" in str(name) else f"advcli's {name}"
        return (f"{name} is not one of {title}'s estimators: {who}" + (f" ({source})" if source else "")
                + f" runs on {title}'s pipeline (its rewards, KL and grouping)")
    values = _run_values(fa, given)
    note = fa.flavor.estimator_note(values) if fa.flavor.estimator_note is not None else None
    unread = unread_at_release(fa, given)
    if unread:
        return f"{note}; {unread}" if note else unread
    key = fa.flavor.estimator_key
    chosen = [k for k in estimator_keys(fa.flavor) if k in (given or {})]
    if note is None and title and key and name is None and not chosen and key in values:
        # nothing named an estimator: say it is the flavor's default (verl's is gae, not the grpo a
        # run without --flavor picks on a dump with prompt ids), and how to choose another
        return (f"{values[key]} is {title}'s default {key} (none was given): --set {key}=NAME or "
                "--estimator NAME runs another")
    return note


def estimator_origin(spec: str | FlavorAt, given: dict[str, Any] | None, source: str | None) -> str | None:
    """What the estimator that ran is, in the provenance (``estimator_source``) and ``explain``'s ``matches``
    line: ``source``, the canonical estimator's citation, where it cites the flavor's own function, or where
    advcli's own estimator, a user's function or a mix ran, or for the canonical flavor; otherwise the flavor's
    own estimator as the flavor names it (``slime's grpo, release 624b824 (THUDM/slime)``) for the native
    settings ``given``: a formula shared by several trainers cites the one it was first matched against, which
    would name the wrong trainer."""
    fa = at(spec)
    fl = fa.flavor
    given = given or {}
    name = given.get("advcli.estimator")
    if not fl.title or fl.name == "advcli" or given.get("advcli.mix") is not None or (
            name is not None and not own_estimator(fl, name)) or (source and fl.title in source):
        return source  # (a citation of the flavor's own function is the more precise one)
    values = _run_values(fa, given)
    if fl.estimator_key:
        est = values.get(fl.estimator_key)
    else:  # chosen by another key (open-instruct's advantage_normalization_type)
        est = "advantages with " + ", ".join(f"{k}={values.get(k)}" for k in (fl.audit_switches or {}))
    repo = fl.framework.split(" @ ")[0]
    release = f", release {fa.release.name}" if fa.release is not None else ""
    return f"{fl.title}'s {est}{release} ({repo})"


def own_estimator(flavor: Flavor, name) -> bool:
    """Whether ``--estimator name`` is one of the flavor's own estimators (a choice of its estimator key, or
    one of ``estimator_names``, or a choice of one of ``more_estimator_keys``): it then runs as that key set to
    it, the flavor's semantics and parameters."""
    return own_estimator_key(flavor, name) is not None


def own_estimator_key(flavor: Flavor, name) -> str | None:
    """The native key ``--estimator name`` sets (:func:`own_estimator`), None where ``name`` is not the flavor's."""
    key = flavor.estimator_key
    if not key or name is None:
        return None
    choices = flavor.keys[key].choices if key in flavor.keys else None
    if choices is None and flavor.name == "advcli":
        return key
    if str(name) in (choices if choices is not None else flavor.estimator_names):
        return key
    return next((k for k in flavor.more_estimator_keys if str(name) in (flavor.keys[k].choices or ())), None)


def _run_values(fa: FlavorAt, given: dict[str, Any] | None) -> dict[str, Any]:
    """The flavor's native values a run with the settings ``given`` has at the release ``fa`` names: the
    release's defaults, then ``given``, with ``--estimator NAME`` as the flavor's estimator key set to it (as
    :func:`estimator_config` runs it)."""
    given = given or {}
    items = _release_items(fa) + list(given.items())
    name = given.get("advcli.estimator")
    if name is not None:
        items.append((own_estimator_key(fa.flavor, name) or fa.flavor.estimator_key, str(name)))
    return _drop_unread(fa, native_values(fa.flavor, items))


def _release_items(fa: FlavorAt) -> list[tuple[str, Any]]:
    """The release's defaults as settings, to go before the user's (which win over them)."""
    return list(fa.release.settings.items()) if fa.release is not None else []


def flavor_keys(flavor: Flavor) -> dict[str, Key]:
    """The flavor's own keys plus advcli's extension keys (the canonical flavor has its own grouping keys)."""
    return {**flavor.keys, **LAB_KEYS} if flavor.name == "advcli" else {**flavor.keys, **EXTENSION_KEYS}


def _apply_extensions(cfg: dict, values: dict) -> dict:
    if values.get("advcli.group_by") == "id" and cfg.get("grouping", {}).get("by") in ("position", "runs"):
        cfg["grouping"]["by"] = "id"  # the same per-group math, groups taken from prompt_id
    if values.get("advcli.id_check", "flavor") != "flavor" and cfg.get("grouping", {}).get("by") == "position":
        cfg["grouping"]["id_check"] = values["advcli.id_check"]
    return cfg


@record
class ConfigFileKeys:
    """What a ``--config`` file gave a flavor: the keys it reads (``taken``, in file order) and the
    rest, which a training config holds plenty of: top-level sections the flavor reads nothing from
    (``ignored_sections``: a verl ``ppo_trainer.yaml``'s ``data``, ``trainer``, ...) and keys inside a
    section it reads that are not its settings (``ignored_keys``, named at their first unknown
    component: ``algorithm.filter_groups``)."""

    path: str
    flavor: str
    taken: list[tuple[str, Any]]
    ignored_sections: list[str]
    ignored_keys: list[str]
    # the flavor's keys whose value is an interpolation of a key the file does not hold (AReaL's
    # `max_new_tokens: ${gconfig.max_new_tokens}`): not taken; a run refuses them unless --set gives them
    unresolved: list[tuple[str, Any]] = field(default_factory=list)

    def line(self) -> str | None:
        """One line naming what was ignored; None when every key of the file was taken."""
        if not (self.ignored_sections or self.ignored_keys):
            return None
        parts = []
        if self.ignored_sections:
            parts.append(f"sections {_some(self.ignored_sections)} (--flavor {self.flavor} reads none of their keys)")
        if self.ignored_keys:  # a section's rest, "actor_rollout_ref.*", beside keys taken from that section
            shown = [f"{k} other than the key(s) taken" if k.endswith(".*") and any(
                t.startswith(k[:-1]) for t, _ in self.taken) else k for k in self.ignored_keys]
            parts.append(f"keys {_some(shown)} (no settings of --flavor {self.flavor})")
        return f"{self.path}: {len(self.taken)} keys taken; ignored {' and '.join(parts)}"

    def as_dict(self) -> dict:
        return {"path": self.path, "taken": [k for k, _ in self.taken], "ignored_sections": self.ignored_sections,
                "ignored_keys": self.ignored_keys}


def _some(names: list[str], most: int = 12) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def config_file_flavor(path: str, flavor: str | FlavorAt | None, values: dict[str, Any] | None = None
                       ) -> str | FlavorAt | None:
    """The flavor a run uses given ``--flavor`` (``flavor``, None when not given) and a ``--config`` file that
    may name one (``flavor: nemo@7ea279a``): --flavor wins; the file's release is taken where --flavor names
    the same flavor with no release; two different flavors are refused; with neither, the flavor whose keys the
    file holds (:func:`flavor_of_config`). ``values``: the file as ``load_config_file`` read it, where the caller
    has it already."""
    from ..config import load_config_file

    values = load_config_file(path) if values is None else values
    named = values.get("flavor")
    if named is None:
        return flavor if flavor is not None else flavor_of_config(values, path)
    if not isinstance(named, str):
        raise AdvcliError(f"config file {path}: flavor is {named!r}; expected a flavor name such as nemo or "
                          "nemo@7ea279a")
    get(named)  # an unknown flavor or release is refused naming it
    if flavor is None:
        return named
    mine = at(flavor)
    if mine.name != split_spec(named)[0]:
        raise AdvcliError(f"--flavor {mine.spec} but config file {path} says flavor: {named}",
                          hint="drop one of them (--flavor wins only over a release of the same flavor)")
    return named if mine.asked is None else flavor


def flavor_of_config(values: dict[str, Any], path: str) -> str | None:
    """With neither --flavor nor ``flavor:`` in the file: the flavor whose settings a --config file's keys
    (``values``, flat) are. The flavor reading the most of them wins (a NeMo RL ``grpo_math_1B.yaml``: nemo, whose
    keys ``grpo.*`` and ``loss_fn.*`` it holds); between as many, the one whose trainer sections
    (``mixed_sections``) that no other flavor reads hold the most keys (a prime-rl ``rl.toml`` that keeps the
    advantage defaults: its ``orchestrator``; not SkyRL's ``trainer``, a name TRL reads too). None where the
    default flavor does as well as any, or nothing tells (the default flavor then runs, as without the file).
    advcli's extension keys (``advcli.*``), every flavor's, tell none apart.
    Two other flavors told alike are refused: the file does not say which it is."""
    from ..config import coerce

    flavors = listed()
    read = {fl.name: set(read_sections(fl)) for fl in flavors}

    def fits(flavor: Flavor, k: str, v: Any) -> bool:
        """Whether the flavor would take ``v`` for its key ``k``: SkyRL's ``trainer: {algorithm: ...}`` is a
        mapping where TRL's ``trainer`` key (grpo or rloo) takes a word, so it does not tell for TRL."""
        key = flavor_keys(flavor).get(flavor.aliases.get(k, k))
        if key is None:
            return True
        try:
            coerce(k, v, key)
        except AdvcliError:
            return False
        return True

    def score(flavor: Flavor) -> tuple[int, int]:
        try:
            got = config_settings(flavor, values, path)
        except AdvcliError:  # a key this flavor would refuse as its own misspelt: not its file
            return 0, 0
        # its trainer sections that no other flavor reads (SkyRL's generator, not its trainer: TRL's key too)
        own = set(flavor.mixed_sections).difference(*(r for name, r in read.items() if name != flavor.name))
        return (sum(1 for k, v in got.taken if not k.startswith("advcli.") and fits(flavor, k, v))
                + sum(1 for k, _ in got.unresolved if not k.startswith("advcli.")),
                sum(1 for k in values if k.split(".")[0] in own))

    scores = {fl.name: score(fl) for fl in flavors}
    best = max(scores.values())
    if scores[DEFAULT] == best:
        return None
    first = [f"--flavor {name}" for name, n in scores.items() if n == best]
    if len(first) > 1:
        raise AdvcliError(f"config file {path}: its keys are settings of {', '.join(first[:-1])} and {first[-1]} "
                          "alike, and no --flavor is given",
                          hint=f"name the trainer: {' or '.join(first)} (or `flavor: NAME` in the file)")
    return first[0].removeprefix("--flavor ")


# an unknown top-level name this close to a section the flavor reads is taken for a misspelling of it
MISSPELLING_RATIO = 0.8


def read_sections(flavor: Flavor) -> list[str]:
    """The top-level sections of a config file the flavor reads keys from (sorted): the first parts of its keys,
    old names and open prefixes; its mixed sections are among them."""
    known = [*flavor_keys(flavor), *flavor.aliases, *flavor.open_prefixes]
    return sorted({k.split(".")[0] for k in known})


def config_file_settings(flavor: Flavor, path: str, overrides: list[tuple[str, Any]] | tuple = ()) -> ConfigFileKeys:
    """The settings a ``--config`` file gives ``flavor`` (:class:`ConfigFileKeys`).

    A full training configuration is accepted. The flavor's sections are the first components of its
    keys (verl: ``algorithm``; a flavor of flat keys, like ROLL's, has one section a key). A key is

    - taken when it is one of the flavor's keys;
    - ignored with its top-level section when the flavor reads no key of that section (``data``,
      ``trainer``, ``actor_rollout_ref`` for verl), unless the section's name is a near miss of one it
      reads (``algoritm``: refused as a misspelling);
    - inside a section the flavor reads: ignored when it is Hydra's (a component starting with ``_``,
      ``_target_``) or one of the framework keys the flavor declares it does not read
      (``Flavor.unread``: verl's ``algorithm.filter_groups``); any other key is refused naming it, with
      the nearest key, as ``--set`` refuses it (``algorithm.adv_estimater``); in one of the flavor's
      ``mixed_sections`` (AReaL's ``actor``, whose saved ``config.yaml`` holds the whole experiment; verl's
      ``actor_rollout_ref``, of which it reads ``actor.use_kl_loss``) only a near miss of one of the flavor's
      keys is refused, any other key there is ignored (named ``SECTION.*``)."""
    from ..config import load_config_file

    values = load_config_file(path, overrides)
    found = config_settings(flavor, values, path)
    if flavor.file_settings is not None:  # what the trainer's config code derives from the file (or refuses)
        found.taken += flavor.file_settings(values, path)
    return found


def _near_miss(key: str, names: list[str], present) -> bool:
    """Whether ``key`` reads as a misspelling of one of ``names`` (the flavor's keys of its section): one of them
    under the same parent whose last part is a near miss of its last part (``kl_coeff`` for ``kl_coef``; not
    ``use_dynamic_bsz`` for ``use_kl_loss``, which a long shared prefix made look alike), and which the file
    does not also hold (``present``: then the key is another setting of its own)."""
    import difflib

    parent, _, last = key.rpartition(".")
    tails = [n.rpartition(".")[2] for n in names if n.rpartition(".")[0] == parent and n not in present]
    return bool(difflib.get_close_matches(last, tails, n=1, cutoff=MISSPELLING_RATIO))


def _nested_values(values: dict[str, Any], known, open_prefixes: tuple[str, ...]) -> dict[str, Any]:
    """The file's flattened ``values`` with a mapping-valued setting put back together: the loader flattens every
    nested table, so the canonical ``reward: {norm: {mean_level: group}}`` that ``explain`` prints arrives as
    ``reward.norm.mean_level``. A key under one of the flavor's keys (the longest: ``reward.norm``), or more
    than one level under an open prefix (``estimator.norm.eps``: the estimator's parameter ``norm``), is
    nested back into that key's mapping, as ``--set 'reward.norm={...}'`` gives it."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if k in known:  # a setting of its own (verl's algorithm.kl_ctrl.kl_coef), whatever stands above it
            out[k] = v
            continue
        owner = max((p for p in known if k.startswith(p + ".")), key=len, default=None)
        if owner is None:
            prefix = next((p for p in open_prefixes if k.startswith(p) and "." in k[len(p):]), None)
            if prefix is not None:
                owner = prefix + k[len(prefix):].split(".", 1)[0]
        if owner is None or (owner in out and not isinstance(out[owner], dict)):
            out[k] = v
            continue
        node = out.setdefault(owner, {})
        parts = k[len(owner) + 1:].split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = v
    return out


def config_settings(flavor: Flavor, values: dict[str, Any], path: str) -> ConfigFileKeys:
    """:func:`config_file_settings` of the flattened ``values`` read from ``path`` (a --config file, or the
    configuration a run saved beside its dump)."""
    import difflib

    known = {**flavor_keys(flavor), **dict.fromkeys(flavor.aliases)}
    values = _nested_values(values, known, flavor.open_prefixes)
    read = read_sections(flavor)
    sections_given = {k.split(".")[0] for k in values}
    taken, sections, keys, unresolved = [], [], [], []
    for k, v in values.items():
        if k == "flavor":  # the file's `flavor: NAME[@RELEASE]` (config_file_flavor)
            continue
        if v == {}:  # an empty table: a switch of its own where the flavor says so (prime-rl's
            if k in flavor.empty_tables:  # `length_penalty = {}`: on, with its defaults), else nothing set
                taken.append(flavor.empty_tables[k])
            continue
        if k in known or any(k.startswith(p) for p in flavor.open_prefixes):
            if isinstance(v, str) and ("${" in v or v == "???"):  # an interpolation load_config_file could not
                # resolve, or OmegaConf's mandatory value left to the command line
                unresolved.append((k, v))
            else:
                taken.append((k, v))
            continue
        if v is None and any(name.startswith(k + ".") for name in known):
            continue  # a section of the flavor's keys saved as null (AReaL's actor.reward_norm: null): none set
        parts = k.split(".")
        if parts[0] not in read and _inverted_flag(k, known):  # the trainer's --disable-X flag: X, inverted
            raise AdvcliError(f"config file {path}: key {k!r} is not a setting of --flavor {flavor.name}."
                              f"{_inverted_flag(k, known)}",
                              hint=f"`advcli explain --flavor {flavor.name} --keys` lists its keys")
        if parts[0] not in read:
            # a near miss of a section the file also holds is a section of its own (AReaL's econfig beside gconfig)
            near = [n for n in difflib.get_close_matches(parts[0], read, n=1, cutoff=MISSPELLING_RATIO)
                    if n not in sections_given]
            if near:
                raise AdvcliError(f"config file {path}: section {parts[0]!r} (key {k!r}) is not read by --flavor "
                                  f"{flavor.name}. Did you mean {near[0]!r}?",
                                  hint=f"`advcli explain --flavor {flavor.name} --keys` lists its keys")
            sections.append(parts[0])
            continue
        hydra = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
        unread = next((u for u in flavor.unread if k == u or k.startswith(u + ".")), None)
        if hydra is not None or unread is not None:
            keys.append(unread or ".".join(parts[:hydra + 1]))
            continue
        same_section = [name for name in known if name.split(".")[0] == parts[0]]  # gconfig.max_new_tokens is
        # not a misspelling of actor.max_new_tokens
        if parts[0] in flavor.mixed_sections and not _near_miss(k, same_section, values):
            # the trainer's other settings in that section (AReaL's actor.path, verl's actor_rollout_ref.model),
            # named once as the section's rest
            keys.append(parts[0] + ".*")
            continue
        raise AdvcliError(f"config file {path}: key {k!r} is not a setting of --flavor {flavor.name}."
                          f"{_inverted_flag(k, known) or did_you_mean(k, same_section or list(known))}",
                          hint=f"`advcli explain --flavor {flavor.name} --keys` lists its keys")
    return ConfigFileKeys(path, flavor.name, taken, list(dict.fromkeys(sections)), list(dict.fromkeys(keys)),
                          unresolved)


def resolve(spec: str | FlavorAt, settings: list[tuple[str, Any]], config_file: str | None = None,
            file_keys: list | None = None):
    """(canonical config, the native settings that were given) for a flavor at its release and its --set
    values. ``spec``: a :class:`FlavorAt` (or ``NAME[@RELEASE]``, read by :func:`at`); every configuration
    made here, an estimator's or a mix's terms included, is made at that release. ``config_file``: a YAML/TOML
    file read by :func:`config_file_settings` (its --set values win); ``file_keys``: a list that receives its
    :class:`ConfigFileKeys`."""
    fa = at(spec)
    flavor = fa.flavor
    values, given, items = _native(fa, settings, config_file, file_keys)
    translated = {k: v for k, v in values.items() if k not in EXTENSION_KEYS}
    cfg = flavor.translate(translated, given=set(given)) if flavor.given_keys else flavor.translate(translated)
    cfg = _apply_extensions(cfg, values)
    if values.get("advcli.mix") is not None or values.get("advcli.estimator") is not None:
        rest = [(k, v) for k, v in items if k not in LAB_KEYS]
        if values.get("advcli.mix") is not None:
            if values.get("advcli.estimator") not in (None, "mix"):  # --estimator mix names the same choice
                raise AdvcliError(f"advcli.estimator (--estimator {values['advcli.estimator']}) and advcli.mix both "
                                  "choose the estimator; give one",
                                  hint="--estimator mix --set advcli.mix=... or --set advcli.mix=... alone")
            cfg = mix_config(fa, rest, str(values["advcli.mix"]))
        else:
            cfg = estimator_config(fa, rest, str(values["advcli.estimator"]))
    return cfg, given


def given_settings(spec: str | FlavorAt, settings: list[tuple[str, Any]], config_file: str | None = None,
                   file_keys: list | None = None) -> dict:
    """The native settings given (the --config file's and --set's, by current name), checked as :func:`resolve`
    checks them, without translating: what a run asks of the dump where the translation itself refuses them
    alone (TRL's reward_weights, whose reward functions the dump's columns name)."""
    return _native(at(spec), settings, config_file, file_keys)[1]


def _native(fa: FlavorAt, settings: list[tuple[str, Any]], config_file: str | None, file_keys: list | None):
    """(every native value at the release, the given ones, the items in order) of :func:`resolve`."""
    flavor = fa.flavor
    items = []
    if config_file:
        found = config_file_settings(flavor, config_file, settings)  # --set first, as the trainers' overrides
        items = _old_names_first(flavor, found.taken)
        set_here = {flavor.aliases.get(k, k) for k, _ in settings}
        for k, v in found.unresolved:
            if flavor.aliases.get(k, k) not in set_here:
                why = ("OmegaConf's mandatory value, which the trainer's command line must give" if v == "???" else
                       "which advcli cannot resolve: an environment variable, a resolver other than NeMo's add, mul, "
                       "div and max, or a key the file does not hold")
                raise AdvcliError(f"config file {config_file}: key {k!r} is {v}, {why}",
                                  hint=f"give the value: --set {k}=VALUE")
        if file_keys is not None:
            file_keys.append(found)
    items += _old_names_first(flavor, settings)
    chosen = dict(items).get("advcli.estimator")  # the flavor's own: translated with its key set to it
    own_key = own_estimator_key(flavor, chosen)
    as_key = [(own_key, str(chosen))] if own_key is not None else []
    # the release's defaults first: the --config file and --set win over them, and they are not "given"
    try:
        asked = native_values(flavor, _release_items(fa) + items + as_key)
    except AdvcliError as e:  # a bad value the --config file gave (not --set over it): the message names the file
        if config_file:
            import re

            from_file = {flavor.aliases.get(k, k) for k, _ in found.taken} - set_here
            m = re.match(r"key '?([^\s':]+)'?", e.message)
            if m and flavor.aliases.get(m.group(1), m.group(1)) in from_file:
                e.message = f"config file {config_file}: {e.message}"
                e.args = (e.message,)
        raise
    values = _drop_unread(fa, asked)
    if fa.release is not None and fa.release.accepts:  # a setting the release's code lacks is refused
        check_accepts(fa.release, values, f"--flavor {flavor.name}", fa.asked)
    if flavor.release_check is not None and fa.release is not None:
        flavor.release_check(values, fa.release, fa.asked)
    given = {flavor.aliases.get(k, k): v for k, v in items}
    given = {k: asked[k] for k in given if k in asked}  # as asked: a key the release never reads included
    return values, given, items


def _drop_unread(fa: FlavorAt, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the keys the release never reads (``Release.ignores``) at the release's defaults."""
    if fa.release is None or not fa.release.ignores:
        return values
    base = native_values(fa.flavor, _release_items(fa))
    return {k: (base[k] if k in fa.release.ignores and k in base else v) for k, v in values.items()}


def _old_names_first(flavor: Flavor, items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``items`` with the keys given by an old name (``Flavor.aliases``) before the others, order kept
    otherwise: within one source (the --set list, a config file) the current name wins over its old one
    whatever the order, as an explicit value beats NeMo's YAML interpolation
    (``grpo.adv_estimator.normalize_rewards: ${grpo.normalize_rewards}``)."""
    return sorted(items, key=lambda kv: kv[0] not in flavor.aliases)


def estimator_config(spec: str | FlavorAt, items: list[tuple[str, Any]], name: str) -> dict:
    """The canonical configuration of ``items`` with the estimator ``name``: where ``name`` is one of the
    flavor's own estimators (a choice of its estimator key), the flavor with that key set (its semantics
    and parameters); otherwise the flavor's pipeline around its group estimator (``response_estimator``,
    or the estimator given), with the estimator section replaced by ``name``, a registered estimator
    or a user function (module:function, file.py:function, an entry point). Both are resolved at the
    release ``spec`` names (never the flavor's newest)."""
    fa = at(spec)
    flavor = fa.flavor
    own_key = own_estimator_key(flavor, name)
    key = own_key or flavor.estimator_key
    others = [(k, v) for k, v in items if flavor.aliases.get(k, k) != key]
    if own_key is not None:
        return resolve(fa, others + [(key, name)])[0]
    if key in flavor.keys and flavor.response_estimator and len(others) == len(items):
        others.append((key, flavor.response_estimator))  # no estimator given: the flavor's group estimator
    else:
        others = list(items)
    cfg = resolve(fa, others)[0]
    from ..estimators import get as get_estimator

    get_estimator(name)  # an unknown name, a missing function: refused here, with the registry's message
    cfg["estimator"] = {"name": name}
    return cfg


def mix_config(spec: str | FlavorAt, items: list[tuple[str, Any]], expression: str) -> dict:
    """The canonical configuration of ``advcli.mix=0.7*grpo+0.3*rloo``: the estimator ``mix`` whose terms
    are each named estimator's section as :func:`estimator_config` resolves it for this flavor, with its
    weight. Every other section (reward, KL, whitening, clip) must be the same for all terms: one
    pipeline runs around the weighted sum."""
    fa = at(spec)
    flavor = fa.flavor
    terms = parse_mix(expression)
    try:
        cfgs = [estimator_config(fa, items, name) for _, name in terms]
    except AdvcliError as e:  # a term's name is the user's word, not the internal key estimator.name
        if not e.message.startswith("key estimator.name: "):
            raise
        raise AdvcliError(f"advcli.mix={expression!r}: {e.message.removeprefix('key estimator.name: ')}",
                          hint=e.hint) from None
    base = cfgs[0]
    for (_, name), cfg in zip(terms[1:], cfgs[1:]):
        # the diagnostics' wording names each estimator's own float32 rule: not a pipeline setting
        differ = _differing_keys({k: v for k, v in base.items() if k not in ("estimator", "diagnostics")},
                                 {k: v for k, v in cfg.items() if k not in ("estimator", "diagnostics")})
        if differ:
            shown = ", ".join(f"{k} ({terms[0][1]}: {a!r}, {name}: {b!r})" for k, a, b in differ[:4])
            raise AdvcliError(f"advcli.mix={expression!r}: under --flavor {flavor.name} the terms {terms[0][1]} and "
                              f"{name} run different pipelines around the estimator: {shown}",
                              hint="a mix runs one pipeline around the weighted sum; mix estimators whose flavor "
                                   "settings agree, or set the differing keys with --set")
    from ..estimators import get as get_estimator

    # a parameter given once (--set estimator.lam=0.95 under --flavor advcli) goes to the terms that have it
    specs = [get_estimator(cfg["estimator"]["name"]) for cfg in cfgs]
    anywhere = {k for spec in specs for k in spec.params}
    sections = [{k: v for k, v in cfg["estimator"].items() if k == "name" or k in spec.params or k not in anywhere}
                for spec, cfg in zip(specs, cfgs)]
    out = {k: v for k, v in base.items() if k != "estimator"}
    if any(cfg.get("diagnostics") != base.get("diagnostics") for cfg in cfgs):  # terms with their own rules
        out["diagnostics"] = {**base.get("diagnostics", {}), "rule": None}
    out["estimator"] = {"name": "mix", "terms": [{"weight": w, **sec} for (w, _), sec in zip(terms, sections)]}
    return out


def parse_mix(expression: str) -> list[tuple[float, str]]:
    """``0.7*grpo+0.3*rloo`` -> [(0.7, "grpo"), (0.3, "rloo")]; a term without ``w*`` has weight 1; ``-`` before a
    term negates it. A user function's reference (``./my_adv.py:fn``) is a name too."""
    import re

    text = re.sub(r"(?<=.)(?<![0-9][eE])-(?=[0-9.]+\*)", "+-", expression.replace(" ", ""))  # a − w*name: + (−w)*name
    # terms are joined by single +; a name may end in ++ (SkyRL's reinforce++): 0.5*reinforce+++0.5*grpo
    parts = re.findall(r"[^+]+(?:\+\+(?=\+|$))?", text)
    if "+".join(parts) != text:
        raise AdvcliError(f"advcli.mix={expression!r}: an empty term (terms are WEIGHT*NAME joined by +)")
    terms: list[tuple[float, str]] = []
    for part in parts:
        weight, star, name = part.rpartition("*") if "*" in part else ("", "", part)
        try:
            w = float(weight) if star else (-1.0 if name.startswith("-") else 1.0)
        except ValueError:
            raise AdvcliError(f"advcli.mix={expression!r}: {weight!r} is not a number (terms are "
                              "WEIGHT*NAME)") from None
        name = name if star else name.lstrip("-")
        if not name:
            raise AdvcliError(f"advcli.mix={expression!r}: an empty term (terms are WEIGHT*NAME joined by +)")
        terms.append((w, name))
    if len(terms) < 2:
        raise AdvcliError(f"advcli.mix={expression!r}: expected a weighted sum of at least two estimators, like "
                          "0.7*grpo+0.3*rloo")
    return terms


def _differing_keys(a: Any, b: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _differing_keys(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [(prefix.rstrip("."), a, b)]
