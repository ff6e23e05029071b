"""``--log wandb`` / ``--log tensorboard:DIR``: what the trackers hold, read back with their own readers
(TensorBoard's ``EventAccumulator``; wandb's reader of its offline run file, ``wandb leet inspect
--json``), is the command's JSON report value for value, at the step the training run used (the
``--log-step-offset``). The figures themselves are checked against the dump's scores and verl's GRPO
computed here (tests/formats/test_format_verl.py's builder and formula), not against advcli's own output."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import run_main
from test_format_verl import v1_records, verl_grpo, write


@pytest.fixture
def verl_dump(tmp_path):
    """verl's rollout_data_dir with two steps (1 and 2) of 4 prompts × 3 responses; its records."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = v1_records(1, 1) + v1_records(2, 2)
    write(d / "1.jsonl", recs[:12])
    write(d / "2.jsonl", recs[12:])
    return d, recs


def _expected_step_figures(recs) -> dict[int, dict]:
    """critic/score/mean and critic/advantages/mean per step, from the records: verl's GRPO per (step,
    prompt) group; one mask=1 token a response (verl's dump holds text, no token ids)."""
    adv = verl_grpo([r["score"] for r in recs], [(r["step"], r["uid"].rsplit("_", 2)[0]) for r in recs])
    out = {}
    for s in sorted({r["step"] for r in recs}):
        idx = [i for i, r in enumerate(recs) if r["step"] == s]
        out[s] = {"critic/score/mean": np.mean([recs[i]["score"] for i in idx]),
                  "critic/advantages/mean": np.mean([adv[i] for i in idx])}
    return out


def _numbers(d: dict) -> dict:
    return {k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


# ------------------------------------------------------------------------------------------- TensorBoard
def _tensorboard(logdir) -> dict[str, dict[int, object]]:
    """{tag: {step: value}} of every tensor summary in ``logdir``, read with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    acc.Reload()
    out: dict = {}
    for tag in acc.Tags()["tensors"]:
        for ev in acc.Tensors(tag):
            v = tensor_util.make_ndarray(ev.tensor_proto)
            out.setdefault(tag, {})[ev.step] = v.item() if v.dtype != object else v.reshape(-1)[0].decode()
    return out


def test_run_to_tensorboard_holds_the_json_report_at_the_training_steps(verl_dump, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    d, recs = verl_dump
    tb = tmp_path / "tb"
    code, out, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                               "algorithm.adv_estimator=grpo", "--json", "--log", f"tensorboard:{tb}",
                               "--log-name", "grpo", "--log-step-offset", "100"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert f"event files in {tb / 'grpo'}" in err
    got = _tensorboard(tb / "grpo")
    assert [e["step"] for e in rep["per_step"]] == [1, 2]
    for entry in rep["per_step"]:
        numbers = _numbers(entry)
        numbers.pop("step")
        assert numbers
        for name, value in numbers.items():
            assert got[name][entry["step"] + 100] == value, name  # float64 in the file: the JSON value exactly
    # the figures are the dump's: mean score and mean GRPO advantage of each step, computed from the records
    for step, figures in _expected_step_figures(recs).items():
        for name, value in figures.items():
            assert got[name][step + 100] == pytest.approx(value, abs=1e-6), (name, step)
    # the summary numbers at the last step, under summary/
    for name, value in _numbers(rep["metrics"]).items():
        assert got[f"summary/{name}"][102] == value, name
    assert got["summary/rows"][102] == rep["rows"] == len(recs)
    for diag in rep["diagnostics"]:
        assert got[f"summary/diagnostics/{diag['kind']}"][102] == diag["count"]
    # the configuration as text: what ran, the resolved canonical configuration included
    config = json.loads(got["config"][100].split("```json\n", 1)[1].rsplit("```", 1)[0])
    assert config["command"] == "run" and config["flavor"] == "verl"
    assert config["settings"] == rep["settings"] and config["config"] == rep["config"]
    assert all(d["kind"] in got["diagnostics"][100] for d in rep["diagnostics"])


def test_compare_and_audit_to_tensorboard(verl_dump, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    d, recs = verl_dump
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--set", "algorithm.adv_estimator=grpo", "-q"], capsys)
    assert code == 0, err
    # an output against itself: correlation 1, every sign agrees, no difference
    code, text, err = run_main(["compare", out, out, "--json", "--log", f"tensorboard:{tmp_path / 'cmp'}"], capsys)
    assert code == 0, err
    res = json.loads(text)
    got = _tensorboard(tmp_path / "cmp")
    assert got["summary/tokens/pearson"][0] == res["tokens"]["pearson"] == pytest.approx(1.0)
    assert got["summary/tokens/sign_agreement"][0] == res["tokens"]["sign_agreement"] == 1.0
    assert got["summary/tokens/max_abs_diff"][0] == res["tokens"]["max_abs_diff"] == 0.0
    assert got["summary/row_level/sign_flips"][0] == 0
    assert got["summary/rows"][0] == res["rows"] == len(recs)
    # the output's advantages are verl's GRPO: the audit agrees, every number of its report in the file
    code, text, err = run_main(["audit", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "--json",
                                "--log", f"tensorboard:{tmp_path / 'audit'}", "--log-step-offset", "7"], capsys)
    assert code == 0, err
    rep = json.loads(text)
    got = _tensorboard(tmp_path / "audit")
    assert rep["agree"] is True and got["summary/agree"][7] == 1
    for name in ("rows", "rows_disagreeing", "max_abs_diff"):
        assert got[f"summary/{name}"][7] == rep[name], name
    # verl's JSONL holds no token data: no token counts in the report, none logged (figures the dump cannot give)
    for name in ("valid_tokens", "tokens_disagreeing"):
        assert name not in rep and f"summary/{name}" not in got, name
    assert got["summary/rows_disagreeing"][7] == 0 and got["summary/rows"][7] == len(recs)
    assert json.loads(got["config"][7].split("```json\n", 1)[1].rsplit("```", 1)[0])["command"] == "audit"


# ------------------------------------------------------------------------------------------------ wandb
def _wandb_records(run_dir) -> list[dict]:
    """The records of an offline wandb run, read by wandb's own reader of its run file."""
    exe = shutil.which("wandb", path=os.path.dirname(sys.executable)) or shutil.which("wandb")
    proc = subprocess.run([exe, "leet", "inspect", str(run_dir), "--json"], capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0 and "No such command" in proc.stderr:
        pytest.skip("this wandb has no reader of its run file (`wandb leet inspect`, wandb >= 0.31)")
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """No wandb login anywhere: no WANDB_MODE, no API key, a HOME without ~/.netrc."""
    pytest.importorskip("wandb")
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_DIR", "NETRC", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / ".config" / "wandb"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(home / ".cache" / "wandb"))
    return tmp_path


def test_stats_to_wandb_offline_holds_the_json_report(verl_dump, offline_wandb, tmp_path, capsys):
    d, recs = verl_dump
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--set", "algorithm.adv_estimator=grpo", "-q"], capsys)
    assert code == 0, err
    code, text, err = run_main(["stats", out, "--json", "--log", f"wandb:{tmp_path / 'wb'}", "--log-project", "audits",
                                "--log-name", "grpo-recomputed", "--log-step-offset", "40"], capsys)
    assert code == 0, err
    rep = json.loads(text)  # stdout is the JSON alone: wandb's own messages are silenced
    runs = sorted((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert f"wandb: offline run in {runs[0]}; upload it with `wandb sync {runs[0]}`" in err
    records = _wandb_records(runs[0])
    run = next(r["run"] for r in records if r["type"] == "run")
    assert run["project"] == "audits" and run["display_name"] == "grpo-recomputed"
    config = run["config"]["update"]
    assert config["command"] == "stats" and config["inputs"] == rep["inputs"] and config["config"] == rep["config"]
    history = {r["history"]["step"]["num"]: r["history"]["item"] for r in records if r["type"] == "history"}
    assert sorted(history) == [41, 42]
    for entry in rep["per_step"]:
        logged = history[entry["step"] + 40]
        numbers = _numbers(entry)
        numbers.pop("step")
        for name, value in numbers.items():
            assert logged[name] == value, name
    for step, figures in _expected_step_figures(recs).items():
        for name, value in figures.items():
            assert history[step + 40][name] == pytest.approx(value, abs=1e-6), (name, step)
    summary: dict = {}
    for r in records:
        if r["type"] == "summary":
            summary.update(r["summary"].get("update") or {})
    for name, value in _numbers(rep["metrics"]).items():
        assert summary[name] == value, name
    assert summary["critic/score/mean"] == pytest.approx(np.mean([r["score"] for r in recs]), abs=1e-6)
    for diag in rep["diagnostics"]:
        assert summary[f"diagnostics/{diag['kind']}"] == diag["count"]
        assert summary["diagnostics"][diag["kind"]]["count"] == diag["count"]


def test_wandb_mode_is_respected(verl_dump, offline_wandb, tmp_path, monkeypatch, capsys):
    d, _ = verl_dump
    monkeypatch.setenv("WANDB_MODE", "disabled")
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--set", "algorithm.adv_estimator=grpo",
                             "--log", f"wandb:{tmp_path / 'wb'}"], capsys)
    assert code == 0, err
    assert "wandb: WANDB_MODE=disabled: nothing was logged" in err
    assert not list((tmp_path / "wb").glob("wandb/offline-run-*"))  # disabled: no run file written


# ------------------------------------------------------------------------------------- refused before work
def test_log_wandb_without_the_extra_names_the_install(verl_dump, tmp_path, monkeypatch, capsys):
    d, _ = verl_dump
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    out = tmp_path / "o.parquet"
    code, text, err = run_main(["run", d, "-o", out, "--set", "algorithm.adv_estimator=grpo", "--log", "wandb"], capsys)
    assert code == 2 and "Traceback" not in err
    assert "--log wandb: the wandb package is not installed" in err and "pip install 'advcli[wandb]'" in err
    assert not out.exists() and text == ""


@pytest.mark.parametrize("args, message", [
    (["--log", "mlflow"], "--log 'mlflow': unknown tracker 'mlflow'"),
    (["--log", "tensorboard"], "TensorBoard needs the directory of its event files"),
    (["--log-step-offset", "5"], "--log-project, --log-name and --log-step-offset go with --log"),
])
def test_bad_log_options_exit_2_before_any_work(verl_dump, tmp_path, capsys, args, message):
    d, _ = verl_dump
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--set", "algorithm.adv_estimator=grpo", *args], capsys)
    assert code == 2 and message in err and "Traceback" not in err
    assert not out.exists()


def test_wandb_is_offline_unless_logged_in(tmp_path, monkeypatch):
    from advcli.results.tracker import wandb_mode

    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))
    assert wandb_mode() == "offline"  # no key, no netrc
    netrc.write_text("machine github.com login me password x\n")
    assert wandb_mode() == "offline"  # a netrc without a wandb login
    netrc.write_text("machine api.wandb.ai login user password 0123456789abcdef\n")
    netrc.chmod(0o600)
    assert wandb_mode() == "online"  # `wandb login` wrote this
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_mode() == "offline"  # WANDB_MODE wins
    monkeypatch.delenv("WANDB_MODE")
    netrc.unlink()
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef")
    assert wandb_mode() == "online"


def test_a_result_logs_itself_from_python(tmp_path):
    pytest.importorskip("tensorboard")
    import pandas as pd

    import advcli

    frame = pd.DataFrame({"prompt_id": ["a", "a", "b", "b"], "step": [5, 5, 6, 6], "reward": [1.0, 0.0, 0.5, 0.5],
                          "response_mask": [[1, 1], [1], [1, 1, 1], [1]]})
    result = advcli.run(frame, settings={"algorithm.adv_estimator": "grpo"}, device="cpu")
    where = result.log(f"tensorboard:{tmp_path / 'tb'}", step_offset=10)
    assert str(tmp_path / "tb") in where
    got = _tensorboard(tmp_path / "tb")
    # group a: scores 1 and 0 -> mean score 0.5 at step 5; group b: 0.5 and 0.5 -> 0.5 at step 6
    assert got["critic/score/mean"] == {15: 0.5, 16: 0.5}
    # verl's GRPO: a's advantages ±0.5/(sqrt(0.5) + 1e-6) (unbiased std of {1, 0}) on 2 and 1 tokens; b's are
    # 0 (a group whose rows tie)
    a = 0.5 / (np.sqrt(0.5) + 1e-6)
    assert got["critic/advantages/mean"][15] == pytest.approx((2 * a - a) / 3, rel=1e-5)
    assert got["critic/advantages/mean"][16] == 0
    assert got["summary/rows"][16] == 4


def test_a_negative_step_for_wandb_is_refused_before_writing(verl_dump, offline_wandb, tmp_path, capsys):
    d, _ = verl_dump
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--set", "algorithm.adv_estimator=grpo", "--log",
                             f"wandb:{tmp_path / 'wb'}", "--log-step-offset", "-2"], capsys)
    assert code == 2 and "the first step would be logged at -1" in err
    assert not out.exists() and not list(tmp_path.glob("wb/wandb/offline-run-*"))


def test_entries_per_step_and_domain_are_logged_under_the_domain(tmp_path, capsys):
    """ROLL's figures per step and domain: each domain's names under DOMAIN/ at the step."""
    pytest.importorskip("tensorboard")
    import pyarrow as pa
    import pyarrow.parquet as pq

    rewards = [1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.0, 1.0]
    domains = ["math", "math", "code", "code"] * 2
    steps = [1, 1, 1, 1, 2, 2, 2, 2]
    pq.write_table(pa.table({"prompt_id": ["a", "a", "b", "b"] * 2, "step": steps, "domain": domains,
                             "reward": pa.array(rewards, pa.float32()),
                             "response_mask": pa.array([[1, 1], [1], [1, 1, 1], [1]] * 2, pa.list_(pa.int8()))}),
                   tmp_path / "in.parquet")
    code, text, err = run_main(["run", tmp_path / "in.parquet", "-o", tmp_path / "o.parquet", "--flavor", "roll",
                                "--set", "adv_estimator=grpo", "--set",
                                "actor_infer.generating_args.num_return_sequences=2", "--json",
                                "--log", f"tensorboard:{tmp_path / 'tb'}"], capsys)
    assert code == 0, err
    got = _tensorboard(tmp_path / "tb")
    for step in (1, 2):
        for domain in ("math", "code"):
            mine = [r for r, d, s in zip(rewards, domains, steps) if d == domain and s == step]
            assert got[f"{domain}/critic/score/mean"][step] == pytest.approx(np.mean(mine)), (domain, step)
    entries = json.loads(text)["per_step"]
    assert {(e["step"], e["domain"]) for e in entries} == {(1, "math"), (1, "code"), (2, "math"), (2, "code")}
