"""Helpers for the conformance tests (tests/conformance/test_conformance_*.py): the trainers' released packages' own
code, random batches in two shapes (advcli's Parquet rows, the trainer's right-padded tensors), and the
`advcli run` command a user types.

The released packages' modules often import a whole training stack at their top (OpenRLHF's
``models/utils.py`` imports deepspeed for one helper; SkyRL's ``ppo_utils.py`` imports ray and a pydantic
config that needs Python 3.12). :func:`package_code` compiles the named functions (or a method's
statements) from the installed package's own file, unmodified, in a namespace holding only what those
functions use: the numbers come from the released code, without its unrelated imports. A package that is
not installed skips the module with the `pip install` line that installs it (`.[conformance]`).
"""
from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import shlex
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

# the releases .ci/run installs (the newest of each on the package index): `pip install -e '.[conformance]'`
PACKAGES = {"verl": "verl", "trl": "trl", "openrlhf": "openrlhf", "skyrl": "skyrl", "areal": "areal"}


def require(dist: str) -> str:
    """The installed version of distribution ``dist``; skips the calling module when it is missing."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed: the conformance tests need the released package "
                    f"(pip install --no-deps {dist}, or pip install -e '.[conformance]' --no-deps)",
                    allow_module_level=True)


def package_file(module: str) -> str:
    """The path of ``module``'s file in the installed package, found without importing it."""
    top, _, rest = module.partition(".")
    spec = importlib.util.find_spec(top)
    assert spec is not None and spec.submodule_search_locations, f"{top} is not installed"
    path = os.path.join(list(spec.submodule_search_locations)[0], *rest.split(".")) + ".py"
    assert os.path.exists(path), f"{module}: no file {path} in the installed package"
    return path


def package_code(module: str, names: list[str], namespace: dict[str, Any], optional: bool = False) -> dict[str, Any]:
    """The top-level functions ``names`` of the installed ``module``, compiled from its file as released
    (decorators dropped: they register the function in the package's registries), in ``namespace``
    (the names the functions use). Returns the namespace, the functions added. ``optional``: a name the
    release does not have is left out (an older release that predates it) instead of failing."""
    path = package_file(module)
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    found = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    missing = [n for n in names if n not in found]
    assert optional or not missing, f"{module} ({path}) has no {', '.join(missing)}: the release renamed them"
    nodes = []
    for name in (n for n in names if n in found):
        node = found[name]
        node.decorator_list = [d for d in node.decorator_list if _keeps(d)]
        nodes.append(node)
    exec(compile(ast.Module(body=nodes, type_ignores=[]), path, "exec"), namespace)
    return namespace


def _keeps(decorator: ast.expr) -> bool:
    """torch.no_grad() and dataclass-like decorators change nothing we compare; registries are dropped."""
    return isinstance(decorator, ast.Call) and ast.unparse(decorator.func) in ("torch.no_grad",)


def method_statements(module: str, cls: str, method: str, first: Callable[[ast.stmt], bool],
                      last: Callable[[ast.stmt], bool]) -> Any:
    """The statements of ``cls.method`` in the installed ``module`` from the first one ``first`` accepts to
    the first one after it that ``last`` accepts, compiled as released: for trainers whose advantage code
    sits inline in a long method (TRL's ``_generate_and_score_completions``). Run with ``exec(code, ns)``."""
    path = package_file(module)
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == method)
    body = fn.body
    start = next(i for i, s in enumerate(body) if first(s))
    stop = next(i for i in range(start, len(body)) if last(body[i]))
    return compile(ast.Module(body=body[start:stop + 1], type_ignores=[]), path, "exec")


# ----------------------------------------------------------------------------------------------- batches
def group_sizes(seed: int) -> list[int]:
    """Uneven groups with a singleton among them, a different draw per seed."""
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(2, 6, size=4)]
    return [1, *sizes] if seed % 2 else [*sizes, 1]


def random_rows(seed: int, sizes: list[int], max_len: int = 7, rewards: str = "mixed") -> list[dict]:
    """Rows of one step: group g (prompt_id ``p<g>``) has ``sizes[g]`` consecutive rows; lengths 1..max_len;
    masks with interior and trailing zeros (every row keeps at least one 1); rewards drawn from {0, 1}, a
    normal, or a group that is all equal (``rewards="mixed"``); log-probs and values random."""
    rng = np.random.default_rng(seed)
    rows = []
    for g, size in enumerate(sizes):
        kind = ("binary", "normal", "equal")[g % 3] if rewards == "mixed" else rewards
        for _ in range(size):
            n = int(rng.integers(1, max_len + 1))
            mask = (rng.random(n) > 0.25).astype(int)
            mask[int(rng.integers(0, n))] = 1
            reward = {"binary": float(rng.integers(0, 2)), "normal": float(rng.normal()),
                      "equal": 0.7, "positive": float(rng.uniform(0.1, 1.0))}[kind]
            rows.append(dict(prompt_id=f"p{g}", reward=reward, mask=mask.tolist(),
                             old=rng.normal(-1.0, 0.5, n).astype(np.float32).tolist(),
                             ref=rng.normal(-1.0, 0.5, n).astype(np.float32).tolist(),
                             values=rng.normal(0.0, 0.5, n).astype(np.float32).tolist()))
    return rows


def write_parquet(rows: list[dict], path: str, rename: dict[str, str] | None = None,
                  reward_type: pa.DataType = pa.float32()) -> str:
    """advcli's canonical Parquet of ``rows`` (the columns a trainer's batch holds); ``rename``: column
    names the flavor reads under another name (AReaL: ``rollout_log_probs``); ``reward_type``: the reward
    column's type (float64: the rewards as a trainer holding Python floats sees them)."""
    cols = {"prompt_id": pa.array([r["prompt_id"] for r in rows], pa.string()),
            "reward": pa.array([r["reward"] for r in rows], reward_type),
            "response_mask": pa.array([r["mask"] for r in rows], pa.list_(pa.int8())),
            "old_log_probs": pa.array([r["old"] for r in rows], pa.list_(pa.float32())),
            "ref_log_probs": pa.array([r["ref"] for r in rows], pa.list_(pa.float32())),
            "values": pa.array([r.get("values") for r in rows], pa.list_(pa.float32()))}
    if "values" not in rows[0]:  # no critic (AReaL's GRPO runs: V = 0)
        del cols["values"]
    if "step" in rows[0]:  # several training steps in one dump
        cols["step"] = pa.array([r["step"] for r in rows], pa.int64())
    for name in rows[0].get("extra", {}):  # per-row number columns: reward functions' outputs (TRL)
        cols[name] = pa.array([r["extra"][name] for r in rows], pa.float32())
    cols = {(rename or {}).get(k, k): v for k, v in cols.items()}
    pq.write_table(pa.table(cols), path)
    return path


def padded(rows: list[dict], key: str, dtype=torch.float32) -> torch.Tensor:
    """The right-padded [B, T] tensor of a token field (0 after each row's end), as the trainers batch it."""
    width = max(len(r["mask"]) for r in rows)
    out = torch.zeros(len(rows), width, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, :len(r[key])] = torch.tensor(r[key], dtype=dtype)
    return out


def lengths(rows: list[dict]) -> list[int]:
    return [len(r["mask"]) for r in rows]


def scores_at_last(rows: list[dict]) -> torch.Tensor:
    """token_level_scores as verl's / SkyRL's / AReaL's reward managers build them: the row's reward at
    index L_i − 1 of its response, 0 elsewhere."""
    out = torch.zeros(len(rows), max(lengths(rows)))
    for i, r in enumerate(rows):
        out[i, len(r["mask"]) - 1] = r["reward"]
    return out


# ------------------------------------------------------------------------------------------------ advcli
def release_settings(release) -> list[str]:
    """The ``--set`` arguments of a :class:`advcli.flavors._releases.Release` (its settings): what
    ``--flavor NAME@RELEASE`` will stand for."""
    args = []
    for key, value in release.settings.items():
        text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        args += ["--set", f"{key}={text}"]
    return args


def release(flavor: str, name: str):
    from advcli.flavors import get

    found = [r for r in get(flavor).releases if r.name == name]
    assert found, f"--flavor {flavor}: no release {name} in its releases table"
    return found[0]


def advcli_run(tmp_path, rows: list[dict], flavor: str, settings: dict[str, Any], extra: list[str] = (),
               rename: dict[str, str] | None = None, reward_type: pa.DataType = pa.float32()) -> dict:
    """``advcli run in.parquet out.parquet --flavor FLAVOR --set k=v ...`` through the CLI; the output's
    advantages / returns / token_level_rewards, one list per row."""
    from typer.testing import CliRunner

    from advcli.cli import app

    src = write_parquet(rows, os.path.join(tmp_path, "in.parquet"), rename, reward_type)
    out = os.path.join(tmp_path, "out.parquet")
    argv = ["run", src, "-o", out, "--flavor", flavor, "--force", "--device", "cpu", *extra]
    for key, value in settings.items():
        argv += ["--set", f"{key}={value}"]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, f"advcli {shlex.join(argv)} failed:\n{res.output}"
    table = pq.read_table(out)
    return {c: table.column(c).to_pylist() for c in ("advantages", "returns", "token_level_rewards")
            if c in table.column_names}


def assert_matches(got: list[list[float]], expected: torch.Tensor, rows: list[dict], what: str,
                   rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """advcli's per-row lists against the package's padded tensor, over each row's own length."""
    assert len(got) == len(rows)
    for i, r in enumerate(rows):
        n = len(r["mask"])
        want = expected[i, :n].double()
        have = torch.tensor(got[i], dtype=torch.float64)
        assert len(got[i]) == n, f"{what}: row {i} has {len(got[i])} values, expected {n}"
        assert torch.allclose(have, want, rtol=rtol, atol=atol), (
            f"{what}: row {i} (group {r['prompt_id']}) advcli {have.tolist()} != package {want.tolist()}")


def package_method(module: str, cls: str, method: str, namespace: dict[str, Any]) -> Callable:
    """``cls.method`` of the installed ``module`` as a plain function (call it with the instance's
    attributes on any object as ``self``), compiled from the package's file as released; the class's other
    methods and decorators (tracing, stats) are left out."""
    path = package_file(module)
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method)
    fn.decorator_list = [d for d in fn.decorator_list if _keeps(d)]
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), namespace)
    return namespace[method]


def installed_release_args(flavor: str, version: str) -> list[str]:
    """The ``--set`` arguments of the release of ``flavor`` named ``version`` (the installed package's), or none
    when the flavor's table does not list it (the newest state): what tools/conformance_matrix.py relies on
    to run an older release's own code against that release's semantics."""
    from advcli.flavors import get

    for r in get(flavor).releases:
        if version in (r.name, *r.aliases):
            return release_settings(r)
    return []
