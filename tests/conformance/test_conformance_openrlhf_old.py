"""OpenRLHF's releases before 0.7.1 (0.3.6.post1 ... 0.7.0.post1) against `advcli run --flavor openrlhf@RELEASE`:
a step of random rows (masks with interior and trailing zeros) made by two data-parallel ranks, each with two
micro-batches of right-padded experiences, through the installed release's own code:

- the advantages: ``compute_advantages_and_returns`` where the release has it (0.6.4, 0.7.0), else the statements of
  ``make_experience_list`` from ``process_experiences`` to the loop over the experiences (0.4.6-0.6.3.post2), else
  those of ``make_experience`` from the KL to ``get_advantages_and_returns`` (0.3.6-0.4.5), compiled unmodified
  from ``openrlhf/trainer/ppo_utils/experience_maker.py`` with ``compute_approx_kl`` / ``compute_reward`` of
  ``openrlhf/models/utils.py``;
- the replay buffer: each rank's items (``remove_padding_in_sequences`` where the release's ``append`` calls it),
  then ``NaiveReplayBuffer.normalize`` (``openrlhf/trainer/ppo_utils/replay_buffer.py``) on both ranks at once, its
  ``strategy.all_reduce`` summing over the two, where the release's trainer calls it for the estimator (the ``if``
  around ``.normalize(`` in ``trainer/ppo_trainer.py`` or ``trainer/ray/ppo_actor.py``, evaluated as released).

The tensors' ``.to(device="cuda")`` of the release's code stay on the CPU here. Later releases: the module skips
(test_conformance_openrlhf.py runs them)."""
from __future__ import annotations

import ast
import copy
import inspect
import logging
import threading
from types import SimpleNamespace
from typing import Any, Optional, Union

import pytest
import torch
from _released import advcli_run, package_code, package_file, padded, random_rows, require

from advcli.flavors import get, release_of

VERSION = require("openrlhf")
if tuple(int(x) for x in VERSION.split(".")[:3]) >= (0, 7, 1):
    pytest.skip(f"openrlhf {VERSION}: from 0.7.1 test_conformance_openrlhf.py runs the release",
                allow_module_level=True)
ENTRY = release_of(get("openrlhf"), VERSION)
MAKER = "openrlhf.trainer.ppo_utils.experience_maker"
BUFFER = "openrlhf.trainer.ppo_utils.replay_buffer"


def _ns() -> dict:
    import torch.nn.functional as F

    ns: dict[str, Any] = {"torch": torch, "F": F, "Optional": Optional, "Tuple": tuple, "Union": Union,
                          "List": list, "Any": Any, "Experience": Any, "BufferItem": Any, "Samples": Any,
                          "deepcopy": copy.deepcopy, "logger": logging.getLogger("openrlhf"),
                          "dist": SimpleNamespace(get_rank=lambda: 0), "ABC": object}
    package_code("openrlhf.models.utils", ["compute_approx_kl", "compute_reward", "masked_mean"], ns, optional=True)
    return ns


def _methods(module: str) -> dict[str, ast.FunctionDef]:
    path = package_file(module)
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    out = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            out.setdefault(fn.name, fn)
    return out


def _compile_fn(module: str, fn: ast.FunctionDef, ns: dict):
    fn = copy.deepcopy(fn)
    fn.decorator_list = []
    exec(compile(ast.Module(body=[fn], type_ignores=[]), package_file(module), "exec"), ns)
    return ns[fn.name]


def _statements(module: str, fn: ast.FunctionDef, first, last):
    body = fn.body
    start = next(i for i, s in enumerate(body) if first(s))
    stop = next(i for i in range(start, len(body)) if last(body[i]))
    return compile(ast.Module(body=body[start:stop + 1], type_ignores=[]), package_file(module), "exec")


NS = _ns()
METHODS = _methods(MAKER)
for _name in ("get_advantages_and_returns", "get_cumulative_returns", "process_experiences",
              "compute_advantages_and_returns"):
    if _name in METHODS:
        _compile_fn(MAKER, METHODS[_name], NS)
package_code(BUFFER, ["remove_padding_in_sequences", "NaiveReplayBuffer"], NS)
BUFFER_SRC = ast.unparse(_methods(BUFFER)["append"])
TRIMS = "remove_padding_in_sequences(items)" in BUFFER_SRC and "packing_samples" not in BUFFER_SRC.split(
    "remove_padding_in_sequences(items)")[0].split("\n")[-1]


def _normalize_condition() -> str | None:
    """The test of the ``if`` around ``self.replay_buffer.normalize(`` in the release's trainer (None: it always
    normalises)."""
    for module in ("openrlhf.trainer.ray.ppo_actor", "openrlhf.trainer.ppo_trainer"):
        try:
            path = package_file(module)
        except AssertionError:
            continue
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Expr) and ".normalize(" in ast.unparse(n)]
        if not calls:
            continue
        for node in ast.walk(tree):  # the estimator's condition (0.6.0 on), not the update schedule's
            if isinstance(node, ast.If) and any(c in node.body for c in calls) \
                    and "advantage_estimator" in ast.unparse(node.test):
                return ast.unparse(node.test)
        return None
    raise AssertionError("no replay_buffer.normalize call found in the release's trainer")


CONDITION = _normalize_condition()


class Exp(SimpleNamespace):
    def to_device(self, device):
        return self


def _args(estimator: str, n: int, kl: str) -> SimpleNamespace:
    return SimpleNamespace(advantage_estimator=estimator, n_samples_per_prompt=n, reward_clip_range=(-10.0, 10.0),
                           use_kl_estimator_k3=kl == "k3", kl_estimator=kl, micro_rollout_batch_size=3,
                           packing_samples=False, no_advantage_std_norm=False, use_kl_loss=False, perf=False)


def _kl(old, ref, mask, kl: str):
    fn = NS["compute_approx_kl"]
    params = inspect.signature(fn).parameters
    kw = {"action_mask": mask} if "action_mask" in params else {}  # 0.7.0 no longer masks it
    if "kl_estimator" in params:
        kw["kl_estimator"] = kl
    elif "use_kl_estimator_k3" in params:
        kw["use_kl_estimator_k3"] = kl == "k3"
    return fn(old, ref, **kw)


def rank_advantages(rows, estimator, n, gamma, lambd, beta, kl):
    """One rank's micro-batches of 3 rows through the release's advantage code: [(experience, its rows)]."""
    args = _args(estimator, n, kl)
    maker = SimpleNamespace(strategy=SimpleNamespace(args=args, is_rank_0=lambda: True), args=args,
                            kl_ctl=SimpleNamespace(value=beta), advantage_estimator=estimator, packing_samples=False)
    for name in ("get_advantages_and_returns", "get_cumulative_returns", "process_experiences"):
        if name in NS:
            setattr(maker, name, NS[name].__get__(maker))
    gen = {"gamma": gamma, "lambd": lambd}
    parts = [rows[i:i + 3] for i in range(0, len(rows), 3)]
    experiences = []
    for part in parts:
        mask = padded(part, "mask").bool()
        old, ref, values = (padded(part, k) for k in ("old", "ref", "values"))
        reward = torch.tensor([r["reward"] for r in part], dtype=torch.float32)
        experiences.append(Exp(action_mask=mask, values=values, kl=_kl(old, ref, mask, kl), old=old, ref=ref,
                               info={"reward": reward, "num_actions": mask.size(1)}, advantages=None, returns=None))
    if "compute_advantages_and_returns" in NS:  # 0.6.4, 0.7.0
        experiences = NS["compute_advantages_and_returns"](maker, experiences, **gen)
    elif "make_experience_list" in METHODS and "process_experiences" in NS:  # 0.4.6-0.6.3.post2
        code = _statements(MAKER, METHODS["make_experience_list"],
                           lambda s: "process_experiences(" in ast.unparse(s),
                           lambda s: isinstance(s, ast.For) and "experiences" in ast.unparse(s.iter))
        scope = {**NS, "self": maker, "args": args, "experiences": experiences, "generate_kwargs": gen,
                 "kwargs": gen}
        exec(code, scope)
        experiences = scope["experiences"]
    else:  # 0.3.6-0.4.5: make_experience, one micro-batch at a time
        code = _statements(MAKER, METHODS["make_experience"],
                           lambda s: "compute_reward(" in ast.unparse(s) or "compute_approx_kl(" in ast.unparse(s),
                           lambda s: "get_advantages_and_returns(" in ast.unparse(s))
        for e in experiences:
            scope = {**NS, "self": maker, "args": args, "generate_kwargs": gen, "action_mask": e.action_mask,
                     "action_log_probs": e.old, "base_action_log_probs": e.ref, "value": e.values,
                     "r": e.info["reward"], "num_actions": e.action_mask.size(1)}
            exec(code, scope)
            e.advantages, e.returns = scope["advantage"], scope["returns"]
    return list(zip(experiences, parts))


def buffer_items(exp_parts):
    items = []
    for e, part in exp_parts:
        for i in range(len(part)):
            width = e.action_mask.size(1)
            items.append(SimpleNamespace(
                sequences=torch.zeros(width + 2), attention_mask=torch.ones(width + 2, dtype=torch.long),
                action_log_probs=torch.zeros(width), base_action_log_probs=torch.zeros(width),
                values=e.values[i].clone(), returns=e.returns[i].clone(), advantages=e.advantages[i].clone(),
                action_mask=e.action_mask[i].clone(), info={}))
    return NS["remove_padding_in_sequences"](items) if TRIMS else items


def normalize_two_ranks(buffers, estimator):
    """Both ranks' ``normalize`` at once, ``all_reduce`` summing over them."""
    if CONDITION is not None and not eval(CONDITION, {"self": SimpleNamespace(args=_args(estimator, 1, "k1"))}):
        return
    barrier, slots = threading.Barrier(len(buffers)), [None] * len(buffers)
    errors = []

    def run(rank):
        def all_reduce(t, op):
            assert op == "sum"
            slots[rank] = torch.as_tensor(t).clone()
            barrier.wait()
            total = sum(slots)
            barrier.wait()
            return total

        strategy = SimpleNamespace(all_reduce=all_reduce)
        buf = buffers[rank]
        try:
            params = list(inspect.signature(buf.normalize).parameters)
            buf.normalize(*(("advantages", strategy) if params[0] == "attribute" else (strategy, "advantages")))
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(buffers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.fixture
def cpu_only(monkeypatch):
    """The release's ``.to(device="cuda")`` calls stay on the CPU."""
    orig = torch.Tensor.to

    def to(self, *a, **k):
        a = tuple("cpu" if x == "cuda" else x for x in a)
        if k.get("device") == "cuda":
            k["device"] = "cpu"
        return orig(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "to", to)


def release_step(rows, estimator, n, gamma, lambd, beta, kl):
    half = len(rows) // 2  # a prompt's n rows on one rank
    buffers = []
    for rank_rows in (rows[:half], rows[half:]):
        buf = object.__new__(NS["NaiveReplayBuffer"])
        buf.items = buffer_items(rank_advantages(rank_rows, estimator, n, gamma, lambd, beta, kl))
        buf.packing_samples = False
        buffers.append(buf)
    normalize_two_ranks(buffers, estimator)
    out = []
    for item, row in zip([it for b in buffers for it in b.items], rows):
        a = item.advantages.tolist()[:len(row["mask"])]
        out.append(a + [0.0] * (len(row["mask"]) - len(a)))
    return out


ESTIMATORS = ENTRY.accepts["algo.advantage.estimator"][0]
KLS = ENTRY.accepts["algo.kl.estimator"][0]
GROUPED = ("rloo", "reinforce_baseline", "group_norm", "dr_grpo")


@pytest.mark.parametrize("seed", (0, 1))
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_estimator_matches_release(tmp_path, cpu_only, seed, estimator):
    n = 3 if estimator in GROUPED else 1
    rows = random_rows(seed, [n] * (4 if n == 3 else 12))
    gamma, lambd, beta = (0.9, 0.95, 0.02)
    want = release_step(rows, estimator, n, gamma, lambd, beta, "k1")
    got = advcli_run(tmp_path, rows, f"openrlhf@{VERSION}",
                     {"advantage_estimator": estimator, "n_samples_per_prompt": n, "gamma": gamma, "lambd": lambd,
                      "init_kl_coef": beta})["advantages"]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == pytest.approx(w, rel=1e-4, abs=2e-5), f"openrlhf {VERSION} {estimator} row {i}: {g} != {w}"


@pytest.mark.parametrize("kl", KLS)
def test_reward_kl_matches_release(tmp_path, cpu_only, kl):
    est = ESTIMATORS[-1]
    n = 3 if est in GROUPED else 1
    rows = random_rows(3, [n] * (4 if n == 3 else 12))
    want = release_step(rows, est, n, 1.0, 1.0, 0.05, kl)
    # γ and λ given as the release's code is called: --lambd defaults to 0.95 in 0.3.6-0.5.6 and 0.6.0-0.6.3.post2
    got = advcli_run(tmp_path, rows, f"openrlhf@{VERSION}",
                     {"advantage_estimator": est, "n_samples_per_prompt": n, "init_kl_coef": 0.05,
                      "kl_estimator": kl, "gamma": 1.0, "lambd": 1.0})["advantages"]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == pytest.approx(w, rel=1e-4, abs=2e-5), f"openrlhf {VERSION} {est} kl {kl} row {i}: {g} != {w}"
