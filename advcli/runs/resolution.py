"""The configuration of a run on its inputs, resolved below the commands: the flavor's settings translated
to canonical keys (:mod:`advcli.flavors`), what a trainer's own dump tells the flavor, and the refusals of
defaults that would make nothing of it. ``advcli run`` and :func:`advcli.run` both call
:func:`resolve_for_inputs`; the pipeline then reads it as a typed :class:`advcli.config.runspec.RunSpec`.


* The group size: a slime or ROLL dump names each row's prompt group (slime's ``group_index``, ROLL's
  ``id``), so where every group has the same size ``n`` the flavor's positional group-size key takes ``n``
  unless the user set it.
* The settings of the run that wrote it, taken for the keys not given: the configuration the run saved
  beside the dump (``Format.run_config``: AReaL's trial ``config.yaml``), and a format's fixed settings
  (``Flavor.dump_settings``). Nothing is guessed: without them the keys not given are the trainer's
  defaults, and the summary says so.
* A default that cannot run on the data is refused before any work with the ``--set KEY=VALUE`` that
  runs (verl's and ROLL's default GAE on a response-level dump), and so is a default that makes every
  row its own group (a positional group size left at 1): both would otherwise end in an error deep in
  the run or a quiet exit 0 with degenerate advantages.

Each decision taken for the user becomes one line of the run's summary (``from dump``).

:func:`resolve_run` is the one front door to all of it: ``advcli run`` (and ``validate``, ``audit``,
``compare --estimators``) and :func:`advcli.run` hand it what the user gave and get a :class:`RunChoice`."""
from __future__ import annotations

import math
import os
from dataclasses import field
from typing import Any

from ..config.runspec import RunSpec
from ..errors import AdvcliError, GroupSizeNeeded
from ..records import record

PRECISIONS = ("float32", "float64")  # float32 reproduces the frameworks; float64 computes the intended math


@record
class RunChoice:
    """What a run was resolved to: the flavor at its release (:class:`advcli.flavors.FlavorAt`), the canonical
    configuration, the native settings given (coerced), what the dump told the flavor (one line each), the
    estimator chosen from the dump when none was named (``verl grpo (the dump has prompt_id)``, None when the
    user chose), what a ``--config`` file gave (:class:`advcli.flavors.ConfigFileKeys`, or None), and why the
    dump's trainer chose the flavor where it did (``flavor of the dump's trainer: ...``, None else)."""

    flavor: Any
    cfg: dict
    native: dict
    from_dump: list[str] = field(default_factory=list)
    chosen: str | None = None
    config_file: Any = None
    dump_note: str | None = None


def _keys_of(name: str, settings) -> bool:
    """Whether every key of ``settings`` but advcli's own is a key of flavor ``name`` (or its alias)."""
    from ..flavors import at, flavor_keys

    fl = at(name).flavor
    keys = flavor_keys(fl)
    return all(fl.aliases.get(k, k) in keys for k, _ in settings if not k.startswith("advcli."))


def _over(name: str, recorded: list, given: list) -> list:
    """The settings recorded in an advcli output with the ones given on top: a recorded key given again, and a
    recorded estimator where one is given (``--estimator``, or any of the flavor's estimator keys), give way, so
    that a recorded ``algorithm.adv_estimator=grpo`` and an audit's ``--estimator rloo`` are not two estimators
    the user named."""
    from ..flavors import ADVCLI_ESTIMATOR_KEYS, at, estimator_keys

    fl = at(name).flavor
    choosers = {*ADVCLI_ESTIMATOR_KEYS, *estimator_keys(fl)}
    keys = {fl.aliases.get(k, k) for k, _ in given}
    chooses = bool(keys & choosers)
    return [(k, v) for k, v in recorded if fl.aliases.get(k, k) not in keys
            and not (chooses and fl.aliases.get(k, k) in choosers)] + list(given)


def _names_default(dumped: str, settings, config: str | None, values: dict | None) -> bool:
    """Whether the keys given name the default flavor rather than ``dumped``, the flavor of the dump's trainer:
    ``--set`` keys (advcli's own aside) that are all the default flavor's and not all the trainer's
    (``algorithm.adv_estimator`` on a TRL dump), or a ``--config`` file (``values``, flat) that no other flavor
    reads more of (:func:`advcli.flavors.flavor_of_config` chose none) holding keys of the default flavor
    (``algorithm.*``), or keys it refuses as its own misspelt (``algoritm.*``: its error, not the trainer's
    silence)."""
    from ..flavors import DEFAULT, at, config_settings

    if values is not None:
        try:
            got = config_settings(at(DEFAULT).flavor, values, config)
        except AdvcliError:
            return True
        if any(not k.startswith("advcli.") for k, _ in got.taken + got.unresolved):
            return True
    return _keys_of(DEFAULT, settings) and not _keys_of(dumped, settings)


def check_precision(precision: str | None) -> str | None:
    """``--precision`` / ``precision=``: float32 or float64 (None: the configuration's, float32)."""
    if precision is not None and precision not in PRECISIONS:
        from ..errors import did_you_mean

        raise AdvcliError(f"--precision {precision!r}: expected float32 or float64."
                          f"{did_you_mean(str(precision), list(PRECISIONS))}")
    return precision


def resolve_run(inputs: list[str], flavor=None, settings=(), *, estimator: str | None = None,
                config: str | None = None, padded: bool | None = None, precision: str | None = None,
                columns: dict | None = None) -> RunChoice:
    """The configuration of a run on ``inputs`` (opened: ``advcli.formats.open_inputs``) from what the user
    gave, the same for every caller: ``flavor`` (``NAME[@RELEASE]``, a FlavorAt, or None: the default flavor,
    its estimator chosen from the dump's columns, :func:`default_settings`), ``settings`` (native
    ``(key, value)`` pairs, ``--set``), ``estimator`` (``--estimator``: ``advcli.estimator``), ``config`` (a
    ``--config`` file, which may name the flavor), ``padded`` and ``precision`` (checked here), ``columns`` (the
    ``--column ROLE=NAME`` maps, which say where the dump's group id or values are)."""
    from ..config import CONFIG_FILES_READ
    from ..flavors import DEFAULT, at, config_file_flavor

    CONFIG_FILES_READ.clear()  # this run's --config only (a library session runs many)
    check_precision(precision)
    settings = list(settings) + ([("advcli.estimator", estimator)] if estimator else [])
    inferred = values = None
    if config:  # a --config file may name the flavor (flavor: nemo@7ea279a) or hold its keys; --flavor wins
        from ..config import load_config_file

        values = load_config_file(config)  # read once here (resolve reads it again, with the --set overrides)
        asked, flavor = flavor, config_file_flavor(config, flavor, values)
        if asked is None and flavor is not None and "flavor" not in values:
            inferred = flavor
        if flavor is None and at(DEFAULT).flavor.estimator_key in values:
            flavor = DEFAULT  # a file that names the default flavor's estimator: none picked for it
    dump_note = None
    if flavor is None and not config:  # an advcli output: the configuration that made it, --set on top
        recorded = recorded_choice(inputs)
        if recorded is not None and _keys_of(recorded[0], settings):
            flavor, settings, dump_note = recorded[0], _over(recorded[0], recorded[1], settings), recorded[2]
    if flavor is None:  # neither --flavor nor a --config file chose: a trainer's dump runs its trainer's semantics
        from ..audit.recompute import trainer_flavor

        dumped, note = trainer_flavor(inputs)
        # verl's dump: the default flavor, its estimator picked below
        if dumped is not None and dumped != DEFAULT and not _names_default(dumped, settings, config, values):
            flavor, dump_note = dumped, note
    fa, settings, chosen = default_settings(flavor, inputs, settings, columns)
    file_keys: list = []
    cfg, native, lines = resolve_for_inputs(fa, inputs, settings, config, file_keys, columns)
    if padded is not None:
        cfg["padded"] = padded
    if precision is not None:
        cfg["precision"] = precision
    if inferred is not None:
        chosen = (f"{inferred} {cfg['estimator']['name']} (no --flavor: {os.path.basename(config)} holds "
                  f"{inferred}'s keys)")
    elif dump_note is not None:
        chosen = f"{fa.flavor.name} {cfg['estimator']['name']} (no --flavor: {dump_note})"
    return RunChoice(fa, cfg, native, lines, chosen, file_keys[0] if file_keys else None, dump_note)


def recorded_choice(inputs: list[str]) -> tuple[str, list, str] | None:
    """(``NAME@RELEASE``, the settings given, a note) recorded in an advcli output's provenance (its ``advcli``
    metadata: the flavor, its release, the native settings), when every input is such an output of one
    configuration (the caller keeps it where the keys given with ``--set`` are that flavor's); None else (a
    dump, advcli's own flavor, outputs of different runs, a recorded configuration that no longer resolves: an
    estimator function of the caller's, a release unknown to this version)."""
    import json

    from ..errors import AdvcliError
    from ..flavors import at
    from ..io.footer import schema_facts  # the footer read without pyarrow: start-up stays light
    from ..io.reader import expand_inputs

    try:
        files = expand_inputs(inputs)
    except AdvcliError:
        return None
    if not files:
        return None
    seen = set()
    prov = None
    for f in files:
        try:
            raw = schema_facts(f).metadata.get(b"advcli")
            prov = json.loads(raw) if raw is not None else None
        except (AdvcliError, OSError, ValueError):
            return None
        if not prov or not prov.get("flavor") or prov.get("flavor") == "advcli":
            return None
        release = (prov.get("release") or {}).get("name")
        seen.add((prov["flavor"], release, json.dumps(prov.get("flavor_config") or {}, sort_keys=True)))
    if len(seen) != 1:
        return None
    name, release, _ = seen.pop()
    spec = f"{name}@{release}" if release else name
    settings = list((prov.get("flavor_config") or {}).items())
    try:
        at(spec)
    except AdvcliError:
        return None
    given = ", ".join(f"{k}={json.dumps(v)}" for k, v in settings)
    return spec, settings, (f"the configuration recorded in the advcli output: --flavor {spec}"
                            + (f" with {given}" if given else "") + "; another with --flavor or --set")


def resolve_for_inputs(spec, inputs: list[str], settings: list, config: str | None = None,
                       file_keys: list | None = None, columns: dict | None = None):
    """(canonical config, native settings, summary lines) of a flavor and its settings on these inputs:
    what the dump tells taken for the keys not given, then the refusals of this module; what ``advcli
    run`` and :func:`advcli.run` both use. ``spec``: the flavor at its release (:class:`advcli.flavors.FlavorAt`,
    or ``NAME[@RELEASE]``), every configuration made here made at that release. ``file_keys`` receives what the
    --config file gave; ``columns``: the --column maps (a reward column named there is the reward, whatever
    reward functions the dump shows)."""
    from ..config import set_path
    from ..flavors import at, check_given, given_settings, resolve
    from ..formats import check_config, implied_settings

    fa = at(spec)
    check_given(fa, settings)
    refused = None
    try:
        cfg, native = resolve(fa, settings, config, file_keys)
    except GroupSizeNeeded as e:
        raise _with_input_group_size(e, inputs) from None
    except AdvcliError as e:  # settings that need what the dump shows (TRL's reward_weights: its reward functions)
        refused, native = e, given_settings(fa, settings, config, None if file_keys else file_keys)  # (once)
    flavor = fa.flavor
    given = dict(native)
    typed = {flavor.aliases.get(k, k) for k, _ in settings}  # --set (and --estimator): what the records never override
    implied, lines = from_dump(flavor, inputs, given, config, typed, columns)
    if refused is not None and not implied:
        raise refused
    if implied:
        settings = implied + list(settings)
        try:
            cfg, native = resolve(fa, settings, config)
        except GroupSizeNeeded as e:
            raise _with_input_group_size(e, inputs) from None
        if flavor.group_size_key in dict(implied) and RunSpec.from_config(cfg).grouping.by != "position":
            lines = [x for x in lines if not x.startswith("group size")]  # no positional groups: nothing to say
    try:
        check_config(inputs, cfg, flavor.kl_off)  # a response-level trainer dump refuses token-level estimators
    except AdvcliError as e:
        refuse_default_estimator(flavor, inputs, settings, config, {**dict(implied), **given}, e, fa)
    sessions = False
    for path, value in implied_settings(inputs, cfg).items():  # what the dump's sessions call for
        if path not in given:  # a canonical key the user gave (--flavor advcli) stands
            set_path(cfg, path, value)
            sessions = sessions or path == "grouping.trajectories"
    if sessions:
        lines = lines + [f"sessions: the dump's agent-loop sessions with several outputs: {cfg['estimator']['name']} "
                         "computes each session's advantage from its last output and gives it to all of its outputs, "
                         "as verl does (grouping.trajectories=last_step)"]
    refuse_singletons(flavor, cfg, inputs, given)
    refuse_unfit_group_size(flavor, cfg, inputs, given, columns)
    return cfg, native, grouping_note(cfg, inputs) + lines


def _infos(inputs: list[str]) -> list:
    from ..formats import info_for

    return [info_for(p) for p in inputs]


def _sizes(infos: list) -> dict[int, int]:
    """size -> number of groups, over every imported input."""
    hist: dict[int, int] = {}
    for info in infos:
        for size, count in info.group_sizes.items():
            hist[int(size)] = hist.get(int(size), 0) + int(count)
    return hist


def _one_prompt_a_step(infos: list) -> bool:
    """Every file of the dump (a step each) is one group: its rows all log one prompt."""
    return all(i.starts and i.groups == len(i.starts) for i in infos)


def _runs_hold_groups(infos: list) -> bool:
    from ..formats import FORMATS

    return all(FORMATS.get(i.format) is not None and FORMATS[i.format].runs_hold_groups for i in infos)


def _group_key(info) -> str:
    from ..formats import FORMATS

    fmt = FORMATS.get(info.format)
    return fmt.group_key if fmt else "prompt groups"


def _fmt(value) -> str:
    """A setting as the user would type it after ``--set KEY=``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return format(value, "g") if isinstance(value, float) else str(value)


def from_dump(flavor, inputs: list[str], given: dict, config: str | None = None,
              typed: set | None = None, columns: dict | None = None) -> tuple[list[tuple[str, object]], list[str]]:
    """(native settings the dump implies for keys not in ``given``, one summary line for each). ``typed``: the
    keys the user set with --set (default: all of ``given``); what the records show (AReaL's
    gconfig.reward_normalization) wins over a --config file's value and the saved configuration's, not over
    those; nor over ``columns``' reward (``--column reward=NAME``: that column is the reward, the reward functions
    a TRL dump shows are not summed, :attr:`Flavor.reward_columns_key`)."""
    infos = _infos(inputs)
    if not infos or any(i is None for i in infos):
        return [], []
    settings: list[tuple[str, object]] = []
    notes: list[str] = []
    formats = {i.format for i in infos}
    shown_keys = {k for i in infos for k in (getattr(i, "shown_settings", None) or {})}
    for fmt, (pairs, why) in flavor.dump_settings.items():  # what the records show wins (ROLL's agentic float32)
        take = [(k, v) for k, v in pairs if k not in given and k not in shown_keys] if fmt in formats else []
        if take:
            settings += take
            notes.append(f"{len(take)} key(s) from {why}: "
                         f"{', '.join(k for k, _ in take)} (values in settings; set a key to override)")
    taken, lines = saved_settings(flavor, infos, given, config)
    # what the records show happened wins over the saved configuration (AReaL applies reward_normalization to
    # some workflows only), never over what the user set
    typed = set(given) if typed is None else typed
    mapped = []  # the reward named by --column: what the dump shows of its reward columns is not taken
    if columns and "reward" in columns and flavor.reward_columns_key:
        if flavor.reward_columns_key in given:  # --set or a --config file named the reward columns too
            raise AdvcliError(f"--column reward={columns['reward']} and {flavor.reward_columns_key}="
                              f"{_fmt(given[flavor.reward_columns_key])} ("
                              + ("--set" if flavor.reward_columns_key in typed else "the --config file")
                              + ") both name the reward; give one",
                              hint=f"one reward column: --column reward=NAME (or --set "
                                   f"'{flavor.reward_columns_key}=[NAME]'); several: {flavor.reward_columns_key} alone")
        mapped = [flavor.reward_columns_key]
    shown = _shown_settings(flavor, infos, typed | {k for k, _ in settings} | set(mapped))
    if mapped and any(flavor.reward_columns_key in (i.shown_settings or {}) for i in infos):
        funcs = next(i.shown_settings[flavor.reward_columns_key] for i in infos
                     if flavor.reward_columns_key in (i.shown_settings or {}))
        notes.append(f"reward: column {columns['reward']!r} (--column reward={columns['reward']}), not the dump's "
                     f"reward functions {', '.join(map(str, funcs))} summed ({flavor.reward_columns_key} from the "
                     "dump not taken)")
    saved = {**{k: v for k, v in given.items() if k not in typed}, **dict(taken)}  # the --config file's, the dump's
    settings += [(k, v) for k, v in taken if k not in dict(shown)] + shown
    notes += lines
    # said where the settings line would show it without a source (also when it is the flavor's default: AReaL's
    # reward_normalization=false, which the records decide); not where a --config file or saved config said the same
    said = [(k, v) for k, v in shown if k not in saved or v != saved[k]]
    if said:
        notes.append(f"{', '.join(f'{k}={_fmt(v)}' for k, v in said)} from the dump's records (set a key to "
                     "override)")
    key = flavor.group_size_key
    sizes = _sizes(infos)
    n = math.gcd(*sizes) if sizes else 1
    if key and key not in given and n > 1:
        settings.append((key, n))
        if len(sizes) == 1 and _runs_hold_groups(infos) and _one_prompt_a_step(infos):
            found = "; advcli audit finds it from the logged advantages" if all(i.logged for i in infos) else ""
            notes.append(f"group size {n} from the dump's {_group_key(infos[0])}: every row of a step logs one "
                         "prompt (one prompt a step, one drawn for consecutive groups, or a vision-language run's "
                         "prompts told apart only by images the log leaves out): if the trainer ran fewer samples "
                         f"per prompt, set {key}{found}")
        elif len(sizes) == 1:
            notes.append(f"group size {n} from the dump's {_group_key(infos[0])} (set {key} to override)")
        else:  # a prompt drawn for consecutive groups: its run of rows holds several of them
            runs = ", ".join(str(s) for s in sorted(sizes))
            notes.append(f"group size {n} from the dump's {_group_key(infos[0])}: runs of {runs} rows, each a whole "
                         f"number of groups of {n} (a prompt drawn for consecutive groups; set {key} to override)")
            if "advcli.id_check" not in given:  # the run of a prompt spans several blocks: the blocks are the groups
                settings.append(("advcli.id_check", "warn"))
    elif key and n > 1 and "advcli.id_check" not in given and _runs_hold_groups(infos) and _one_prompt_a_step(infos):
        # the group size given where the dump cannot tell its groups apart: each step's rows log one prompt text, a
        # whole number of groups of it (elsewhere a group size that splits every prompt's run is refused as too small)
        m = given.get(key)
        if isinstance(m, int) and not isinstance(m, bool) and m > 1 and all(s % m == 0 for s in sizes) \
                and any(s != m for s in sizes):
            settings.append(("advcli.id_check", "warn"))
            runs = ", ".join(str(s) for s in sorted(sizes))
            notes.append(f"the dump's {_group_key(infos[0])} ({runs} rows) taken as groups of {m} ({key}={m}): a "
                         "run holds several groups where a prompt repeats (drawn for consecutive groups, or a "
                         "vision-language run's prompts, told apart only by images the log leaves out)")
    for line in dict.fromkeys(n for i in infos for n in i.reward_notes):  # which of the dump's rewards runs
        notes.append(line)
    padding = sum(getattr(i, "padding", 0) for i in infos)
    if padding:  # verl's synthetic padding rows: one line says how many were set aside
        from ..formats.conversion import PADDING_NOTE
        notes.append(PADDING_NOTE.format(n=padding))
    return settings, notes


def _shown_settings(flavor, infos: list, set_already: dict) -> list[tuple[str, object]]:
    """The native settings the dump's records show (``ImportInfo.shown_settings``: AReaL's records carry
    original_reward exactly where rollout-time normalisation ran, so they show gconfig.reward_normalization
    true or false), for the trainer's own flavor and the keys not in ``set_already`` (the user's --set)."""
    from ..formats import FORMATS

    out: dict = {}
    for info in infos:
        fmt = FORMATS.get(info.format)
        if fmt is not None and fmt.trainer_flavor() == flavor.name:
            out.update({k: v for k, v in info.shown_settings.items() if k not in set_already})
    return list(out.items())


def saved_settings(flavor, infos: list, given: dict, config: str | None = None) -> tuple[list[tuple[str, object]],
                                                                                        list[str]]:
    """The flavor's keys not in ``given`` as the run's saved configuration holds them (``ImportInfo.run_config``,
    AReaL's trial config.yaml), and one summary line; for a format whose runs save one
    (``Format.run_config``) but where none was found, the line that says the trainer's defaults run."""
    from ..flavors import config_settings
    from ..formats import FORMATS

    info = next((i for i in infos if i.run_config_path), None)
    if info is None:
        fmt = FORMATS.get(infos[0].format) if infos else None
        if config or fmt is None or fmt.run_config is None or fmt.trainer_flavor() != flavor.name:
            return [], []  # (a --config file stands for the run's configuration: its own line says so)
        return [], [f"no configuration of the run beside the dump ({fmt.run_config_where}): "
                    f"{flavor.title or flavor.name}'s defaults for the keys not set"]
    # read as a --config file is: a near miss of one of the flavor's keys is refused, not dropped
    take = [(k, v) for k, v in config_settings(flavor, info.run_config, info.run_config_path).taken if k not in given]
    if not take:
        return [], []
    return take, [f"{len(take)} key(s) from the run's saved configuration {info.run_config_path} (set a key to "
                  "override)"]


def grouping_note(cfg: dict, inputs: list[str]) -> list[str]:
    """'groups: the dump's task_id' where the run groups rows by the dump's own group key."""
    infos = _infos(inputs)
    if not infos or any(i is None for i in infos) or RunSpec.from_config(cfg).grouping.by not in ("id", "runs"):
        return []
    return [f"groups: the dump's {_group_key(infos[0])}"]


def refuse_default_estimator(flavor, inputs: list[str], settings: list, config: str | None, given: dict,
                             error: AdvcliError, spec=None) -> None:
    """``error`` (a response-level dump refusing the estimator) said with the ``--set`` that runs, where the
    estimator is the flavor's default and the flavor's response-level choice passes the same check
    (``spec``: the flavor at its release, :class:`advcli.flavors.FlavorAt`)."""
    from ..flavors import resolve
    from ..formats import check_config

    key, value = flavor.estimator_key, flavor.response_estimator
    if not key or not value or key in given:
        raise error
    try:
        cfg, _ = resolve(spec or flavor.name, settings + [(key, value)], config)
        check_config(inputs, cfg, flavor.kl_off)
    except AdvcliError:
        raise error from None
    then = ""
    try:  # the fix alone would meet the next refusal: say both
        refuse_singletons(flavor, cfg, inputs, given)
    except AdvcliError as more:
        then = f"; with it, {more.hint}"
    raise AdvcliError(f"{error.message}. {_not_chosen(flavor, key, 'dump')}",
                      hint=f"add --set {key}={value} (group-relative advantages on the dump's groups){then}; "
                           f"`advcli explain --flavor {flavor.name} --keys` lists the other estimators") from None


def _not_chosen(flavor, key: str, what: str) -> str:
    """"KEY=DEFAULT is the default of --flavor NAME, not a choice made for this WHAT": the estimator a refusal
    names is the flavor's default, not the user's."""
    return f"{key}={_fmt(flavor.keys[key].default)} is the default of --flavor {flavor.name}, not a choice made for " \
           f"this {what}"


def refuse_default_estimator_column(spec, native: dict, error, inputs: list[str]) -> None:
    """Raise ``error`` (a :class:`advcli.errors.MissingColumn` of the run), said with its fix where the estimator
    that needs the missing column is only the flavor's default (``spec``: the flavor at its release; ``native``:
    the settings given, none of them the estimator key): the flavor's estimators that do without that column, its
    group estimator first (verl's and OpenRLHF's default gae on a file without ``values``)."""
    from ..estimators import get as get_estimator
    from ..flavors import at, resolve

    fa = at(spec)
    flavor = fa.flavor
    key = flavor.estimator_key
    if (getattr(error, "estimator", None) is None or not key or key not in flavor.keys
            or any(flavor.aliases.get(k, k) in (key, "advcli.estimator") for k in native)):
        raise error
    fits = []  # (not a group estimator, choice): the group estimators first, the flavor's own group one leading
    choices = list(flavor.keys[key].choices or flavor.estimator_names or ())
    if flavor.response_estimator in choices:
        choices.remove(flavor.response_estimator)
        choices.insert(0, flavor.response_estimator)
    sizes, scattered = _group_layout(inputs)
    for choice in choices:
        items, size = list(native.items()) + [(key, choice)], ""
        try:
            try:
                cfg = resolve(fa, items)[0]
            except GroupSizeNeeded as e:  # the group-size setting it needs too (OpenRLHF's n_samples_per_prompt 1)
                cfg = resolve(fa, items + [(e.key, 2)])[0]
                size = f" --set {e.key}={next(iter(sizes)) if sizes and len(sizes) == 1 else 'N'}"
            est = get_estimator(cfg["estimator"]["name"])
        except AdvcliError:
            continue
        run = RunSpec.from_config(cfg)
        norm = run.reward.normalize  # OpenRLHF's group estimators: a group reward shaping
        groups = est.uses_groups or bool({"group", "loo"} & {norm.mean, norm.std})
        if groups and scattered and run.grouping.by == "position":  # blocks of rows, but the ids are not blocks
            size += " --set advcli.group_by=id"
        if est.name != error.estimator and error.role not in est.needs and "reward_components" not in est.needs:
            fits.append((not groups, choice, size))
    if not fits:
        raise error
    fits.sort(key=lambda f: f[0])
    size = fits[0][2]
    fits = [c for _, c, _ in fits]
    more = f" (or {', '.join(fits[1:4])})" if len(fits) > 1 else ""
    raise AdvcliError(f"{error.message}. {_not_chosen(flavor, key, 'file')}",
                      hint=f"add --set {key}={fits[0]}{size}{more}, an estimator that needs no {error.role!r} column, "
                           f"or map one with --column {error.role}=NAME; `advcli explain --flavor {flavor.name} "
                           "--keys` lists the estimators") from None


def refuse_singletons(flavor, cfg: dict, inputs: list[str], given: dict) -> None:
    """Refuse positional groups of one row that come from the group-size key's default: every group-normalised
    advantage would be 0 (or NaN with a group std), a run with no signal that looks like a success. Not where
    another term carries the signal: slime's on-policy distillation (``use_opd``) at its default
    n_samples_per_prompt 1 is that method's normal case (the group term 0, A = −coef·(lp − teacher)), which
    slime runs; nor a KL in the reward beside a group mean without a group std (ROLL's reinforce with
    add_token_level_kl): the advantages are the KL's, as the trainer's."""
    key = flavor.group_size_key
    run = RunSpec.from_config(cfg)
    if not key or key in given or run.grouping.by != "position" or run.grouping.size != 1:
        return
    if run.advantage.distill_coef:
        return
    from ..estimators import get as get_estimator

    if (run.kl.in_reward and run.kl.coef and run.reward.normalize.std not in ("group", "loo")
            and not get_estimator(run.estimator.name).uses_groups):
        return  # the token KL carries the signal and nothing divides by a std of one: ROLL's reinforce with a group
        # mean and add_token_level_kl at its default num_return_sequences 1 runs so
    sizes, scattered = _group_layout(inputs)
    fix = _size_from_ids(key, sizes, scattered) or _no_single_size_fix(key, sizes)
    raise AdvcliError(f"--flavor {flavor.name}: {key} is not set and defaults to 1, so every row would be its own "
                      "group and every group-normalised advantage 0 (NaN with a group std)", hint=fix)


def refuse_unfit_group_size(flavor, cfg: dict, inputs: list[str], given: dict, columns: dict | None = None) -> None:
    """Refuse a positional group size that comes from the key's default (TRL's num_generations 8, open-instruct's
    num_samples_per_prompt_rollout 4) where the trainer dump's own prompt groups are not whole blocks of it: the
    trainer with that setting could not have written the dump, and blocks of the default would cut across its
    groups (an error naming only the step's row count at best, wrong groups at worst). A group size the dump
    shows is taken from it (:func:`from_dump`); this is the case it could not: groups of several sizes."""
    key = flavor.group_size_key
    run = RunSpec.from_config(cfg)
    n = run.grouping.size
    if not key or key in given or run.grouping.by != "position" or not n or n <= 1:
        return
    infos = _infos(inputs)
    if not infos or any(i is None for i in infos) or not _sizes(infos):  # (a table: no groups of its own known)
        _own_parquet_group_size(flavor, run, inputs, key, n, columns)
        return
    sizes = _sizes(infos)
    if not sizes or all(size % n == 0 for size in sizes):
        return
    shown = _sizes_said(sizes)
    raise AdvcliError(f"--flavor {flavor.name}: {key} is not set, and its default {n} does not fit the dump's "
                      f"{_group_key(infos[0])} ({shown}): blocks of {n} rows would cut across them",
                      hint=f"add --set {key}=N, the responses sampled per prompt in the run (groups of several "
                           "sizes: rows were dropped or added after sampling; with N given, advcli groups as the "
                           "trainer does and says what does not fit)")


def _no_single_size_fix(key: str, sizes: dict[int, int] | None) -> str:
    """The group-size fix where the input's prompt ids show no one size above 1 (:func:`_size_from_ids`)."""
    if sizes and set(sizes) == {1}:  # the input's own groups are of one row: the trainer's default fits them
        return (f"every prompt_id of the input has one row, so no group has a second response to compare with: "
                f"add --set {key}=1 to run the trainer's groups of one all the same, or give each prompt's rows "
                "one prompt_id")
    if sizes:
        return (f"add --set {key}=N, the responses sampled per prompt (the input's prompt_id groups are not of one "
                f"size, which the framework's blocks of N rows need: {_sizes_said(sizes)})")
    return f"add --set {key}=N, the responses sampled per prompt"


def _with_input_group_size(e: GroupSizeNeeded, inputs: list[str]) -> GroupSizeNeeded:
    """``e`` with its hint naming the group size the input's prompt ids show, where every group has the same
    size m > 1 (and the ids' grouping where a prompt's rows are not consecutive); else ``e`` as it is."""
    e.hint = _size_from_ids(e.key, *_group_layout(inputs)) or e.hint
    return e


def _size_from_ids(key: str, sizes: dict[int, int] | None, scattered: bool) -> str | None:
    """The fix naming the group size the input's prompt ids show, where every group has the same size m > 1
    (with the ids' grouping where a prompt's rows are not consecutive); None otherwise."""
    if not sizes or len(sizes) != 1 or next(iter(sizes)) <= 1:
        return None
    fix = f"add --set {key}={next(iter(sizes))} (every prompt_id group of the input has that many rows)"
    return fix + (f"{SCATTERED}, and --set advcli.group_by=id" if scattered else "")


def in_flavor_words(e: AdvcliError, flavor, inputs: list[str]) -> AdvcliError:
    """``e`` (an error of the run) with the positional group size named by the flavor's key where its hint names
    the canonical ``grouping.size`` (TRL's num_generations), and the groups the trainer's dump shows: what to set,
    or to leave out for the dump's own."""
    key = getattr(flavor, "group_size_key", None)
    if not key or not e.hint or "grouping.size" not in e.hint:
        return e
    e.hint = e.hint.replace("grouping.size", key)
    infos = _infos(inputs)
    sizes = _sizes(infos) if infos and all(i is not None for i in infos) else {}
    if sizes:
        e.hint += (f" (the dump's {_group_key(infos[0])}: {_sizes_said(sizes)}"
                   + (f"; --set {key}={next(iter(sizes))}, or leave {key} out to take it from the dump)"
                      if len(sizes) == 1 else ")"))
    return e


def _sizes_said(sizes: dict[int, int]) -> str:
    """The dump's group sizes in a message: "3 of 1 rows, 1 of 3 rows" (the six smallest sizes)."""
    return ", ".join(f"{count} of {size} rows" for size, count in sorted(sizes.items())[:6])


SCATTERED = " (their rows are not consecutive, as the framework's blocks are)"


def _own_parquet_group_size(flavor, run: RunSpec, inputs: list[str], key: str, n: int,
                            columns: dict | None = None) -> None:
    """advcli's own Parquet (or a table) whose prompt_id groups all have m rows, m ≠ the default ``n`` of the
    group-size key: blocks of n would disagree with the ids, which the run refuses (grouping.id_check=strict) with a
    hint about the order; the group size is the likelier fix, so it is named first (and the ids' grouping where the
    rows of a prompt are not consecutive). The prompt_id is where ``columns`` maps it; an input without one whose
    column named like a group id (``uid``, ``group_id``, ...) holds groups of one size m ≠ n is refused the same
    way (the blocks of the default ignored it: wrong groups, silently). Groups of several sizes (a prompt drawn
    twice, rows dropped): left to the run."""
    if run.grouping.id_check == "warn":
        return
    column = (columns or {}).get("prompt_id", "prompt_id")
    sizes, scattered = _group_layout(inputs, column)
    named_like = None
    if sizes is None and "prompt_id" not in (columns or {}):
        named_like = _group_like_column(inputs)
        if named_like is not None:
            sizes, scattered = _group_layout(inputs, named_like)
    if named_like is not None and sizes and set(sizes) != {1} and (set(sizes) != {n} or scattered):
        # a column only named like a group id has no id check in the run: any groups that are not whole blocks of
        # n (several sizes, or groups of n whose rows are not consecutive) would be cut across, silently
        shown = _sizes_said(sizes)
        size = next(iter(sizes)) if len(sizes) == 1 else "N"
        fix = (f"add --set {key}={size}, the responses sampled per prompt, and --column prompt_id={named_like} to "
               "check the blocks against it" + (f"{SCATTERED}; or group by it: --column prompt_id={named_like} --set "
                                          "advcli.group_by=id" if scattered else ""))
        raise AdvcliError(f"--flavor {flavor.name}: {key} is not set and defaults to {n}, but the input's column "
                          f"{named_like!r}, named like a group id, holds other groups ({shown}"
                          + (", not consecutive" if scattered else "") + f"): blocks of {n} consecutive rows would "
                          "cut across them", hint=f"{fix}; or, if {n} is right and the column holds no groups, give "
                                                  f"it: --set {key}={n}")
    if not sizes or len(sizes) != 1 or next(iter(sizes)) in (1, n):
        return
    m = next(iter(sizes))
    fix = f"add --set {key}={m}, the responses sampled per prompt"
    if scattered:
        fix += f"{SCATTERED}, and --set advcli.group_by=id"
    raise AdvcliError(f"--flavor {flavor.name}: {key} is not set and defaults to {n}, but every {column} group of the "
                      f"input has {m} rows: blocks of {n} consecutive rows would cut across them",
                      hint=f"{fix}; or, if {n} is right and the ids are not the prompts' groups, give it: --set "
                           f"{key}={n} --set advcli.id_check=warn")


def _group_like_column(inputs: list[str] | None = None, names=None) -> str | None:
    """The first column named like a group id (``config.columns.OTHER_NAMES['prompt_id']``) among ``names``, or
    among the first input file's columns."""
    from ..config.columns import OTHER_NAMES

    if names is None:
        from ..io.footer import schema_facts
        from ..io.reader import expand_inputs

        names = schema_facts(expand_inputs(inputs)[0]).names
    return next((n for n in OTHER_NAMES["prompt_id"] if n in names), None)


def _group_layout(inputs: list[str], column: str = "prompt_id") -> tuple[dict[int, int] | None, bool]:
    """(size -> count of the input's (step, ``column``) groups, whether some group's rows are not consecutive):
    the importer's count for a dump (taken as consecutive), the columns read for Parquet (None, False without that
    column)."""
    infos = _infos(inputs)
    if infos and all(i is not None for i in infos) and _sizes(infos):
        return _sizes(infos), False
    import numpy as np
    import pandas as pd

    from ..io.reader import expand_inputs, open_parquet
    from ..ops.grouprule import id_groups, scope_codes, size_counts

    pids, steps = [], []
    for path in expand_inputs(inputs):
        f = open_parquet(path)
        names = f.schema_arrow.names
        if column not in names:
            return None, False
        t = f.read(columns=[column] + (["step"] if "step" in names else []))
        pids.append(t.column(column).to_numpy())
        steps.append(t.column("step").to_numpy().astype(np.float64) if "step" in names else
                     np.full(t.num_rows, np.nan))
    codes = pd.factorize(np.concatenate(pids) if pids else np.zeros(0), sort=False)[0]
    # the (step, prompt_id) groups, as the run forms them by id (a file without a step column: a step of its own)
    groups = id_groups(scope_codes(np.concatenate(steps) if steps else np.zeros(0))[0], codes)[0]
    runs = int(np.count_nonzero(groups[1:] != groups[:-1])) + 1 if groups.size else 0  # maximal runs of one group
    return size_counts(groups), runs > (int(groups.max()) + 1 if groups.size else 0)


def default_settings(flavor, inputs: list[str], settings: list, columns: dict | None = None) -> tuple:
    """(the flavor at its release (:class:`advcli.flavors.FlavorAt`), settings, the note on what was chosen)
    of ``flavor`` (``NAME[@RELEASE]``, a FlavorAt, or None). With no flavor: the default flavor (verl), and the
    estimator its ``pick_estimator`` chooses from the dump's columns (GRPO when it has a group id, GAE when it
    has values), a role's column being where ``columns`` (``--column ROLE=NAME``) puts it."""
    from ..flavors import ADVCLI_ESTIMATOR_KEYS, DEFAULT, at, estimator_keys

    if flavor is not None:
        return at(flavor), settings, None
    fa = at(DEFAULT)
    fl = fa.flavor
    if any(k in (*estimator_keys(fl), *ADVCLI_ESTIMATOR_KEYS) for k, _ in settings):
        return fa, settings, None
    from ..io.footer import schema_facts
    from ..io.reader import expand_inputs

    first = expand_inputs(inputs)[0]
    names = schema_facts(first).names
    from ..formats import info_for

    dumped = info_for(inputs[0]) is not None  # a trainer's dump: its group ids come from its own fields (verl's uid)
    for column, _ in fl.pick_estimator:  # a --column map to no column: said, not "the dump has no prompt_id"
        named = (columns or {}).get(column)
        if named is not None and named not in names:
            import difflib

            from ..io.reader import shown_name
            near = difflib.get_close_matches(named, names, n=1)
            raise AdvcliError(f"{shown_name(first)}: --column {column}={named}: no column {named!r}"
                              + (f". Did you mean {near[0]!r}?" if near else ".")
                              + f" Columns present: {', '.join(names)}",
                              hint=f"name a column the input has: --column {column}=NAME")
    for i, (column, est) in enumerate(fl.pick_estimator):
        named = (columns or {}).get(column, column)
        if named in names:
            said = "group ids" if dumped and column == "prompt_id" else column
            why = (f"the dump has {said}" + (f" (column {named!r})" if named != column else "")
                   + "".join(f" and no {c}" for c, _ in fl.pick_estimator[:i]))
            return (fa, settings + [(fl.estimator_key, est)], f"{fl.name} {est} ({why})")
    from ..formats.discovery import named_but_lacking  # a trainer's dump that lacks a column its reader needs?

    lacking = named_but_lacking(first, names)
    if lacking is not None:
        raise lacking
    wants = " nor ".join(f"{c} (for {e.upper()})" for c, e in fl.pick_estimator)
    from ..formats.registry import dump_like_hint

    group_like = None if "prompt_id" in (columns or {}) else _group_like_column(names=names)
    info = info_for(inputs[0])  # a trainer's dump renamed (mytrl.parquet), or a table of its records, read as a table
    dump = dump_like_hint(names) if info is None or info.format == "table" else ""
    raise AdvcliError(f"no --flavor or estimator given and the dump has neither {wants}",
                      hint=dump + (f"if column {group_like!r} holds the group ids: --column prompt_id={group_like}; "
                                   if group_like and not dump else "")
                      + f"choose one: --flavor {fl.name} --set {fl.estimator_key}=NAME")
