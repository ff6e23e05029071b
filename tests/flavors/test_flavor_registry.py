"""Adding a flavor is one module: the flavor registry (advcli.flavors) is the one list of flavors. The
command-line help is generated from it; the static texts that name the frameworks (README, pyproject's
description, the package docstring, docs/flavors.md) are checked here against the modules that exist,
so a new module in advcli/flavors/ that a list omits fails this file, naming the list."""
from __future__ import annotations

import ast
import os
import re

import pytest
from conftest import ROOT, run_main

FLAVOR_DIR = os.path.join(ROOT, "advcli", "flavors")


def _declared() -> list[tuple[str, str, str]]:
    """(module, --flavor name, title) of every flavor module, read from the source files (not from the
    registry under test): the ``FLAVOR = Flavor(name=..., title=...)`` of each public module."""
    found = []
    for fname in sorted(os.listdir(FLAVOR_DIR)):
        if not fname.endswith(".py") or fname.startswith("_"):
            continue
        tree = ast.parse(open(os.path.join(FLAVOR_DIR, fname), encoding="utf-8").read())
        calls = [n.value for n in tree.body if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "FLAVOR" for t in n.targets)]
        assert len(calls) == 1, f"advcli/flavors/{fname} defines no FLAVOR = Flavor(...)"
        kw = {k.arg: k.value for k in calls[0].keywords}
        name = ast.literal_eval(kw["name"])
        title = ast.literal_eval(kw["title"]) if "title" in kw else ""
        found.append((fname[:-3], name, title))
    return found


FRAMEWORKS = [(m, n, t) for m, n, t in _declared() if n != "advcli"]


def _words(text: str) -> str:
    return " ".join(text.split())


def test_every_module_is_registered_with_a_title():
    from advcli import flavors

    assert sorted(n for _, n, _ in _declared()) == flavors.names()
    assert len(FRAMEWORKS) >= 9  # verl, NeMo RL, ROLL, OpenRLHF, TRL, slime, SkyRL, AReaL, prime-rl
    for module, name, title in FRAMEWORKS:
        assert title, f"advcli/flavors/{module}.py: FLAVOR has no title (the framework's name in prose)"
        assert flavors.get(name).title == title


def test_help_is_generated_from_the_registry(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0
    top = _words(re.sub(r"[│╭╮╰╯─]", " ", out))
    code, out, _ = run_main(["run", "--help"], capsys)
    assert code == 0
    run_help = _words(re.sub(r"[│╭╮╰╯─]", " ", out))
    for _, name, title in FRAMEWORKS:
        assert re.search(rf"exact semantics of [^.]*\b{re.escape(title)}\b", top), f"advcli --help omits {title}"
        assert re.search(rf"Whose semantics: [^.]*\b{re.escape(name)}\b", run_help), \
            f"advcli run --help's --flavor omits {name}"
    assert "or advcli (canonical keys)" in run_help


@pytest.mark.parametrize("where", ["pyproject.toml description", "advcli/__init__.py docstring"])
def test_static_descriptions_name_every_framework(where):
    if where.startswith("pyproject"):
        toml = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
        text = re.search(r'^description = "([^"]*)"$', toml, re.M).group(1)  # (tomllib: Python 3.11+)
    else:
        text = ast.get_docstring(ast.parse(open(os.path.join(ROOT, "advcli", "__init__.py"), encoding="utf-8").read()))
    text = _words(text)
    missing = [t for _, _, t in FRAMEWORKS if not re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text)]
    assert not missing, f"{where} does not name {missing}"


def test_readme_intro_lists_every_flavor_name():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    intro = readme.split("\n\n")[1]  # the paragraph under the title
    listed = set(re.findall(r"`(?:--flavor )?([a-z-]+)`", intro))
    missing = [n for _, n, _ in FRAMEWORKS if n not in listed]
    assert not missing, f"README.md's first paragraph does not list --flavor {missing}"


def test_docs_flavors_table_has_a_row_and_a_page_for_every_flavor():
    text = open(os.path.join(ROOT, "docs", "flavors.md"), encoding="utf-8").read()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z-]+)` \|.*\[[^]]+\]\(([^)]+)\) \|$", text, re.M)}
    for module, name, _ in FRAMEWORKS:
        assert name in rows, f"docs/flavors.md's table has no row for --flavor {name}"
        assert rows[name] == f"flavors/{module}.md", f"docs/flavors.md: --flavor {name} links {rows[name]}"
        assert os.path.exists(os.path.join(ROOT, "docs", "flavors", f"{module}.md")), \
            f"docs/flavors/{module}.md (the page of --flavor {name}) is missing"
    assert "advcli" in rows


def _flavors():
    from advcli.flavors import FLAVORS, get

    get("verl")  # loads the registry
    return list(FLAVORS.values())


@pytest.mark.parametrize("flavor", _flavors(), ids=lambda f: f.name)
def test_what_a_flavor_declares_names_its_own_keys(flavor):
    """The estimator key, the audit's switches and the settings the audit tries are read from each flavor
    (no list of flavor names elsewhere): each names keys the flavor has, with values it accepts."""
    from advcli.flavors import resolve

    if flavor.estimator_key:
        assert flavor.estimator_key in flavor.keys or flavor.estimator_key.startswith(flavor.open_prefixes)
    for key, values in flavor.audit_switches.items():
        assert key in flavor.keys
        for v in values:
            resolve(flavor.name, [(key, v)])  # a value the key refuses raises AdvcliError
    for settings in (flavor.audit_tries(4) if flavor.audit_tries else []):
        resolve(flavor.name, list(settings.items()))
    if flavor.kl_off:  # the setting named to take the KL out of the reward: a key of the flavor, a value it takes
        from advcli.config import parse_set

        given = parse_set([flavor.kl_off.removeprefix("--set ").split(",")[0]])  # as --set reads it
        assert all(key in flavor.keys for key, _ in given)
        resolve(flavor.name, given)


def test_the_audit_tries_every_flavors_declared_group_estimators():
    """`advcli audit`'s search is what the flavors declare: each flavor's audit_tries (for the dump's group
    size), after the given flavor's switches; TRL's scale_rewards values are tried on TRL."""
    from advcli.audit.recompute import candidates

    tried = candidates("trl", {}, True, group_size=6)
    assert ("trl", {"scale_rewards": "batch"}) in tried and ("trl", {"scale_rewards": "none"}) in tried
    assert ("verl", {"algorithm.adv_estimator": "opo"}) in tried
    assert ("openrlhf", {"algo.advantage.estimator": "group_norm", "rollout.n_samples_per_prompt": 6,
                         "advcli.group_by": "id"}) in tried
    assert ("nemo", {}) in tried
    assert {f for f, _ in tried} == {"trl"} | {f.name for f in _flavors() if f.audit_tries}
    assert not any(f == "verl" for f, _ in candidates("trl", {}, False))  # no prompt ids: no group estimators


@pytest.mark.parametrize("flavor, key, owners", [("verl", "grpo.normalize_rewards", "--flavor nemo"),
                                                 ("nemo", "algorithm.adv_estimator", "--flavor verl"),
                                                 ("trl", "n_samples_per_prompt", "--flavor openrlhf and --flavor slime")])
def test_another_trainers_key_names_its_flavor(flavor, key, owners):
    """A key of another trainer given to a flavor (a config copied from the wrong run, the wrong --flavor) is refused
    naming the flavor(s) it belongs to, beside a near spelling among this flavor's keys where there is one."""
    from advcli.errors import AdvcliError
    from advcli.flavors import get, native_values

    with pytest.raises(AdvcliError, match=f"is not a setting of --flavor {flavor}.* It is a key of {owners}."):
        native_values(get(flavor), [(key, "x")])


@pytest.mark.parametrize("flavor, key, reads", [
    ("nemo", "loss_fn.kl_input_clamp_value", "loss_fn.use_kl_in_reward"),
    ("prime-rl", "orchestrator.algo.sampling.source", "orchestrator.algo.type"),
    ("verl", "reward.num_workers", "reward.reward_manager.name")])
def test_the_trainers_other_keys_of_a_section_it_reads_are_named_as_such(flavor, key, reads):
    """A trainer's key of a section the flavor reads a few keys of (the loss's clamp, the sampler's source): said to
    change no advantage, naming what advcli reads there, not 'Did you mean' an unrelated key; a near miss of a key
    advcli reads keeps its 'Did you mean'."""
    from advcli.errors import AdvcliError
    from advcli.flavors import get, native_values

    with pytest.raises(AdvcliError) as refused:
        native_values(get(flavor), [(key, "x")])
    said = str(refused.value)
    assert "change no advantage" in said and reads in said and "Did you mean" not in said
    with pytest.raises(AdvcliError, match="Did you mean 'loss_fn.reference_policy_kl_penalty'"):
        native_values(get("nemo"), [("loss_fn.reference_policy_kl_penalt", 0.1)])
