"""--engine ray: what the driver holds per row (issue 31, "driver memory independent of rows").

The structure, not a timing: the per-row objects the driver puts in the object store for the workers
(the resolved table of :func:`advcli.engines.ray_rows.lean`), counted in rows through a hook on
``ray.put``: none holds more than one step's rows (the steps are resolved one at a time on the
workers, :mod:`advcli.engines.ray_steps`, and the driver puts no per-row table at all), and the
workers' write pass reads one table per step, never the whole dump's.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pyarrow.parquet as pq
import pytest
from _services import local_ray

HAVE_RAY = importlib.util.find_spec("ray") is not None
pytestmark = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (pip install 'advcli[ray]')")


def _per_row_rows(obj) -> int:
    """Rows of the largest per-row field in a payload the driver puts: the resolved table's
    ``beta_row`` (one value per row of what it covers)."""
    res = obj.get("res") if isinstance(obj, dict) else None
    beta = getattr(res, "beta_row", None)
    return 0 if beta is None else int(beta.shape[0])


@pytest.mark.parametrize("estimator", ["grpo", "gae"])  # gae: values, whitening moments on the steps
def test_driver_puts_at_most_one_steps_rows(tmp_path, monkeypatch, estimator):
    from advcli.engines import ray_steps
    from advcli.engines.ray_engine import run_ray
    from advcli.flavors import resolve
    from advcli.sample import make_table

    # 4 steps of 240 rows (groups of 6), the steps in row order: one step is a quarter of the dump
    t = make_table(960, 6, 2, 12, 3, shuffle=True, steps=4)
    path = str(tmp_path / "d.parquet")
    pq.write_table(t, path, row_group_size=120)
    step_rows = int(np.bincount(t["step"].to_numpy()).max())
    assert step_rows < t.num_rows
    with local_ray() as ray:
        put, seen, tables = ray.put, [], []

        def counting_put(value, *a, **kw):
            seen.append(_per_row_rows(value))
            return put(value, *a, **kw)

        real = ray_steps.resolve_steps

        def resolve_and_look(*a, **kw):  # the step tables the workers will fetch, one per step
            out = real(*a, **kw)
            tables.extend(_per_row_rows(ray.get(ref)) for ref, _, _ in out.index.steps)
            return out

        monkeypatch.setattr(ray, "put", counting_put)
        monkeypatch.setattr(ray_steps, "resolve_steps", resolve_and_look)
        cfg, native = resolve("verl", [("algorithm.adv_estimator", estimator)])
        result = run_ray([path], str(tmp_path / "out"), cfg, flavor="verl", native=native, device="cpu",
                         chunk_rows=64, row_pass="workers")
    assert result.rows == t.num_rows
    assert max(seen) <= step_rows  # nothing the driver puts holds more than one step's rows
    assert tables == np.bincount(t["step"].to_numpy()).tolist()  # the workers get one table per step
