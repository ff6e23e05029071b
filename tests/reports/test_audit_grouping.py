"""The audit's groups are the run's: on a positional dump (no prompt_id) it asks the pipeline's grouping
(advcli.pipeline.grouping), so blocks stay inside their step and a step that is not a whole number of blocks
is the one group the framework makes of it (slime's reshape to the whole batch, arguments.py / rollout.py),
rather than counting blocks of n over the whole file across steps."""
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from conftest import run_main

import advcli

N = 4
STEPS = [1] * 6 + [2] * 8  # step 1: 6 rows (not two blocks of 4: slime normalises it as one group), step 2: 8


def _dump(path):
    rng = np.random.default_rng(3)
    lengths = rng.integers(2, 6, size=len(STEPS))
    t = pa.table({"step": pa.array(STEPS, pa.int64()),
                  "reward": pa.array(rng.choice([0.0, 1.0], size=len(STEPS)).tolist(), pa.float32()),
                  "response_mask": pa.array([[1] * int(n) for n in lengths], pa.list_(pa.int8()))})
    pq.write_table(t, path)
    return t


def test_audit_groups_a_multi_step_positional_dump_as_the_run_does(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    t = _dump(src)
    settings = {"n_samples_per_prompt": N}
    ran = advcli.run(str(src), None, flavor="slime", settings=settings, device="cpu")
    assert ran.group_health is not None
    out = tmp_path / "ran.parquet"
    advcli.run(str(src), str(out), flavor="slime", settings=settings, device="cpu")
    logged = pq.read_table(out).column("advantages").to_pylist()
    logged[1] = [x + 1.0 for x in logged[1]]  # one row of step 1 disagrees
    pq.write_table(t.append_column("advantages", pa.array(logged, pa.list_(pa.float32()))), tmp_path / "d.parquet")
    code, stdout, err = run_main(["audit", tmp_path / "d.parquet", "--flavor", "slime", "--set",
                                  f"n_samples_per_prompt={N}", "--no-search", "--json"], capsys)
    assert code == 1, err
    rep = json.loads(stdout)
    # the run's groups: step 1 whole (rows 0-5), step 2 in two blocks (6-9, 10-13); counting blocks of 4 over
    # the file would give 4 groups, the first two straddling rows 0-3 / 4-7 across the steps
    assert rep["groups"] == 3 and rep["groups_disagreeing"] == 1
    assert rep["worst"][0]["group"] == "rows 0-5"
