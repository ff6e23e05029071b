"""``first_stage`` of an audit that disagrees: a dump whose logged intermediate values (``token_level_rewards``,
``returns``) and advantages come from a run with one stage changed — the KL coefficient, the reward, the
estimator's γ, the whitening's moments, a clip — names that stage, its first row and token, the expected and
logged values, and the setting that reproduces it where there is one."""
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import run_main

from advcli.sample import make_table

GAE = ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae", "--set", "algorithm.use_kl_in_reward=true",
       "--set", "algorithm.kl_penalty=k1"]
AUDITED = [*GAE, "--set", "algorithm.kl_ctrl.kl_coef=0.05"]


@pytest.fixture(scope="module")
def table():
    return make_table(60, 6, 2, 8, 1, steps=2)


def _logged(tmp_path, capsys, table, extra, change=None) -> str:
    """A dump: the input plus the columns a run with ``extra`` settings writes (``change``: a function of
    the advantages' flat values, applied to them)."""
    src = tmp_path / "in.parquet"
    pq.write_table(table, src)
    out = tmp_path / "dump.parquet"
    code, _, err = run_main(["run", str(src), "-o", str(out), "--force", "-q", *GAE, *extra], capsys)
    assert code == 0, err
    if change is not None:
        d = pq.read_table(out)
        adv = d.column("advantages").combine_chunks()
        flat = change(pc.list_flatten(adv).to_numpy().astype(np.float64), d)
        d = d.set_column(d.schema.get_field_index("advantages"), "advantages",
                         pa.ListArray.from_arrays(adv.offsets, pa.array(flat, pa.float32())))
        pq.write_table(d, out)
    return str(out)


def _audit(capsys, dump) -> tuple[dict, str]:
    code, out, _ = run_main(["audit", dump, *AUDITED, "--no-search", "--json"], capsys)
    assert code == 1
    rep = json.loads(out)
    code, _, err = run_main(["audit", dump, *AUDITED, "--no-search"], capsys)
    assert code == 1
    return rep["first_stage"], " ".join(err.split())


def _first_disagreeing(dump, col, want_col, want) -> tuple[int, int]:
    """(row, token offset) of the first mask=1 token where the dump's ``col`` differs from ``want``."""
    t = pq.read_table(dump)
    for r, (a, m) in enumerate(zip(t.column(col).to_pylist(), t.column("response_mask").to_pylist())):
        for k, (x, y, keep) in enumerate(zip(a, want[r], m)):
            if keep and abs(x - y) > 1e-5 + 1e-4 * abs(y):
                return r, k
    raise AssertionError("no difference")


def _recomputed(tmp_path, capsys, dump, col):
    out = tmp_path / "re.parquet"
    code, _, err = run_main(["run", dump, "-o", str(out), "--force", "-q", "--output-mode", "sidecar", *AUDITED],
                            capsys)
    assert code == 0, err
    return pq.read_table(out).column(col).to_pylist()


def test_another_kl_coefficient_is_the_kl_penalty(tmp_path, capsys, table):
    dump = _logged(tmp_path, capsys, table, ["--set", "algorithm.kl_ctrl.kl_coef=0.02"])
    stage, text = _audit(capsys, dump)
    want = _recomputed(tmp_path, capsys, dump, "token_level_rewards")
    row, pos = _first_disagreeing(dump, "token_level_rewards", "token_level_rewards", want)
    assert (stage["stage"], stage["column"], stage["row"], stage["position"]) == ("KL penalty", "token_level_rewards",
                                                                                  row, pos)
    assert stage["where"] == f"{dump}, row {row}"
    assert stage["expected"] == pytest.approx(want[row][pos], rel=1e-6)
    assert stage["reproduce"] == "kl.coef=0.02"  # the coefficient the logged values were made with
    assert "first stage that differs KL penalty:" in text and "reproduced by kl.coef=0.02" in text


def test_another_reward_is_the_reward_postprocessing(tmp_path, capsys, table):
    dump = _logged(tmp_path, capsys, table, ["--set", "algorithm.kl_ctrl.kl_coef=0.05", "--column", "reward=acc"])
    stage, _ = _audit(capsys, dump)
    assert stage["stage"] == "reward postprocessing" and stage["column"] == "token_level_rewards"
    t = pq.read_table(dump)
    # the first row whose reward differs from its acc, at its last mask=1 token (verl places the score there)
    r = next(i for i, (a, b) in enumerate(zip(t.column("reward").to_pylist(), t.column("acc").to_pylist()))
             if abs(a - b) > 1e-5)
    last = max(k for k, m in enumerate(t.column("response_mask")[r].as_py()) if m)
    assert (stage["row"], stage["position"]) == (r, last)


def test_another_gamma_is_the_estimator(tmp_path, capsys, table):
    dump = _logged(tmp_path, capsys, table, ["--set", "algorithm.kl_ctrl.kl_coef=0.05", "--set", "algorithm.gamma=0.9"])
    stage, _ = _audit(capsys, dump)
    want = _recomputed(tmp_path, capsys, dump, "returns")
    row, pos = _first_disagreeing(dump, "returns", "returns", want)
    assert (stage["stage"], stage["column"], stage["row"], stage["position"]) == ("estimator", "returns", row, pos)
    assert stage["actual"] == pytest.approx(pq.read_table(dump).column("returns")[row].as_py()[pos], rel=1e-6)


def test_other_moments_are_the_whitening(tmp_path, capsys, table):
    """verl's GAE whitens per step: logged = 2·A + 0.25 is A whitened with std/2 and another mean."""
    dump = _logged(tmp_path, capsys, table, ["--set", "algorithm.kl_ctrl.kl_coef=0.05"], lambda a, d: 2 * a + 0.25)
    stage, text = _audit(capsys, dump)
    assert stage["stage"] == "whitening" and (stage["row"], stage["position"]) == (0, 0)
    e, a = stage["expected_moments"], stage["actual_moments"]
    # A = (pre − μ)/σ and L = 2A + 0.25 = (pre − μ')/σ' with σ' = σ/2, μ' = μ − 0.125σ
    assert a["std"] == pytest.approx(e["std"] / 2, rel=1e-4)
    assert a["mean"] == pytest.approx(e["mean"] - 0.125 * e["std"], rel=1e-4, abs=1e-6)
    assert "first stage that differs whitening:" in text


def test_clipped_advantages_are_the_clipping(tmp_path, capsys, table):
    dump = _logged(tmp_path, capsys, table, ["--set", "algorithm.kl_ctrl.kl_coef=0.05"], lambda a, d: a.clip(-0.5, 0.5))
    stage, _ = _audit(capsys, dump)
    assert stage["stage"] == "clipping" and stage["reproduce"] == "advantage.clip=0.5"
    assert abs(stage["actual"]) == 0.5 and abs(stage["expected"]) > 0.5


def test_no_intermediate_values_no_stage(tmp_path, capsys, table):
    """A GRPO dump logs no token rewards nor returns and does not whiten: nothing tells the stage."""
    src = tmp_path / "in.parquet"
    t = table.append_column("advantages", pa.array([[1.0] * len(m) for m in table.column("response_mask").to_pylist()],
                                                   pa.list_(pa.float32())))
    pq.write_table(t, src)
    code, out, _ = run_main(["audit", str(src), "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                             "--no-search", "--json"], capsys)
    assert code == 1 and "first_stage" not in json.loads(out)


def test_a_directory_of_step_files_is_audited_stage_by_stage(tmp_path, capsys, table):
    """The same dump as one Parquet file per step in a directory (as a trainer writes it): the stage-by-stage
    recomputation writes one sidecar per file too (it once named one output file for two inputs and stopped
    with exit 2), and names the KL penalty in the step file that holds the first disagreeing row."""
    dump = _logged(tmp_path, capsys, table, ["--set", "algorithm.kl_ctrl.kl_coef=0.02"])
    t = pq.read_table(dump)
    d = tmp_path / "steps"
    d.mkdir()
    steps = t.column("step").to_numpy()
    for s in np.unique(steps):
        pq.write_table(t.filter(pa.array(steps == s)), d / f"step_{int(s)}.parquet")
    stage, text = _audit(capsys, str(d))
    assert stage["stage"] == "KL penalty" and stage["reproduce"] == "kl.coef=0.02"
    assert stage["where"].startswith(str(d / "step_"))


def test_logged_token_rewards_are_checked_when_the_advantages_agree(tmp_path, capsys, table):
    """A dump whose advantages are right but whose logged token_level_rewards were made with another KL
    coefficient (a trainer logging a stale β): the advantages agree, the audit still disagrees (exit 1), names
    the column, row and token, and the stage with the coefficient that reproduces the logged values."""
    dump = _logged(tmp_path, capsys, table, ["--set", "algorithm.kl_ctrl.kl_coef=0.05"])
    other = tmp_path / "other"
    other.mkdir()
    stale = pq.read_table(_logged(other, capsys, table, ["--set", "algorithm.kl_ctrl.kl_coef=0.02"]))
    d = pq.read_table(dump)
    i = d.column_names.index("token_level_rewards")
    pq.write_table(d.set_column(i, "token_level_rewards", stale.column("token_level_rewards")), dump)
    code, out, _ = run_main(["audit", dump, *AUDITED, "--no-search", "--json"], capsys)
    rep = json.loads(out)
    assert code == 1 and not rep["agree"] and rep["tokens_disagreeing"] == 0
    want = _recomputed(tmp_path, capsys, dump, "token_level_rewards")
    row, pos = _first_disagreeing(dump, "token_level_rewards", "token_level_rewards", want)
    inter = rep["intermediate_disagreeing"]
    assert (inter["column"], inter["row"], inter["position"]) == ("token_level_rewards", row, pos)
    assert inter["expected"] == pytest.approx(want[row][pos], rel=1e-6)
    assert rep["first_stage"]["stage"] == "KL penalty" and rep["first_stage"]["reproduce"] == "kl.coef=0.02"
    code, _, err = run_main(["audit", dump, *AUDITED, "--no-search"], capsys)
    assert code == 1 and "the advantages agree" in " ".join(err.split())
    # the same dump with its own token rewards: agree, exit 0
    pq.write_table(d, dump)
    assert run_main(["audit", dump, *AUDITED, "--no-search"], capsys)[0] == 0


def test_another_kl_estimator_is_the_kl_penalty_and_is_named(tmp_path, capsys, table):
    """Token rewards logged with verl's low_var_kl (k3) where the audit says k1: the KL term differs by no one
    factor, so the stage is the KL penalty, and the estimator that reproduces the logged values is named."""
    dump = _logged(tmp_path, capsys, table, ["--set", "algorithm.kl_ctrl.kl_coef=0.05",
                                             "--set", "algorithm.kl_penalty=low_var_kl"])
    stage, text = _audit(capsys, dump)
    assert stage["stage"] == "KL penalty" and stage["column"] == "token_level_rewards"
    assert stage["reproduce"] == "kl.estimator=k3" and "reproduced by kl.estimator=k3" in text
