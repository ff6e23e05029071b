"""What a sweep of routes (the command line and the library, --set and config files, run and validate) found to
differ in what they accept or say, each held to one answer."""
from __future__ import annotations

import pytest
from conftest import SAMPLE, run_main

import advcli
from advcli.errors import AdvcliError, library_words


def test_library_messages_keep_english_after_flavor():
    """A message raised under a library call names keywords (flavor='nemo'); an English word after --flavor in
    the command-line text ('--flavor wins', '--flavor is') became flavor='wins'."""
    assert library_words("(--flavor wins only over a release)") == "(flavor wins only over a release)"
    assert library_words("no --flavor is given") == "no flavor is given"
    assert library_words("try --flavor nemo@0.7.0") == "try flavor='nemo@0.7.0'"
    assert library_words("--flavor NAME@RELEASE") == "flavor='NAME@RELEASE'"


def test_an_on_off_choice_given_unquoted_is_the_word(capsys):
    """`--set algo.advantage.is_correction_level=off` (OpenRLHF's own flag value) was read by YAML 1.1 as false
    and refused, where the library's 'off' ran: a key whose choices hold off/on takes the word back, as OmegaConf
    keeps it text."""
    code, out, err = run_main(["explain", "--flavor", "openrlhf", "--set", "algo.advantage.is_correction_level=off"],
                              capsys)
    assert code == 0 and 'is_correction_level="off"' in out, err
    code, _, err = run_main(["explain", "--flavor", "verl", "--set", "algorithm.adv_estimator=off"], capsys)
    assert code == 2 and "unknown value 'False'" in err  # no such choice: still refused, saying why


def test_validate_refuses_a_missing_cuda_device_as_run_does(tmp_path, capsys):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    for command in (["validate", SAMPLE, "--device", "cuda"],
                    ["run", SAMPLE, "--device", "cuda", "-o", tmp_path / "x.parquet"]):
        code, _, err = run_main(command, capsys)
        assert code == 2 and "no CUDA device is available here" in err, (command, err)


def test_the_why_line_knows_nemos_ppo_estimator_key(tmp_path):
    """With ppo.adv_estimator.name=gae the run said 'grpo is NeMo RL's default grpo.adv_estimator.name (none was
    given)': the PPO key chooses the estimator too."""
    res = advcli.run(SAMPLE, str(tmp_path / "o.parquet"), flavor="nemo", device="cpu",
                     settings={"ppo.adv_estimator.name": "gae"})
    assert not res.estimator_note or "none was given" not in res.estimator_note
    with pytest.raises(AdvcliError):
        advcli.run(SAMPLE, None, flavor="nemo", settings={"ppo.adv_estimator.name": "nope"}, device="cpu")


def test_two_estimators_by_two_routes_are_refused(tmp_path, capsys):
    """`--estimator rloo --set advcli.estimator=grpo` ran grpo (the first) without a word; the same name twice runs."""
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "x.parquet", "--estimator", "rloo",
                             "--set", "advcli.estimator=grpo"], capsys)
    assert code == 2 and "advcli.estimator is given twice, grpo and rloo" in err, err
    assert not (tmp_path / "x.parquet").exists()
    with pytest.raises(AdvcliError, match="given twice"):
        advcli.run(SAMPLE, None, estimator="rloo", settings={"advcli.estimator": "grpo"}, device="cpu")
    code, _, err = run_main(["explain", "--estimator", "rloo", "--set", "advcli.estimator=rloo"], capsys)
    assert code == 0, err


def test_compare_checks_both_configurations_before_running_either():
    """A mistake in configuration B stopped compare only after A had run over the whole dump."""
    from advcli.runs.compare import compare_configurations

    started = []
    with pytest.raises(AdvcliError, match="unknown value 'nope'"):
        compare_configurations(SAMPLE, [{"flavor": "verl", "settings": {"algorithm.adv_estimator": "grpo"}},
                                        {"flavor": "verl", "settings": {"algorithm.adv_estimator": "nope"}}],
                               device="cpu", announce=lambda i, label: started.append(i))
    assert started == []


def test_an_estimator_given_over_a_recorded_configuration_replaces_its_estimator(tmp_path, capsys):
    """An advcli output records its configuration (algorithm.adv_estimator=grpo, or advcli.estimator=grpo); an audit
    of it with --estimator rloo was refused as naming two estimators, one of which the user never typed."""
    import json

    for given in (["--set", "algorithm.adv_estimator=grpo"], ["--estimator", "grpo"]):
        out = tmp_path / "g.parquet"
        code, _, err = run_main(["run", SAMPLE, "-o", out, "-q", "--force", *given], capsys)
        assert code == 0, err
        code, stdout, err = run_main(["audit", out, "--estimator", "rloo", "--no-search", "--json"], capsys)
        rep = json.loads(stdout)
        assert code == 1 and rep["estimator"] == "rloo" and not rep["agree"], err  # GRPO's numbers are not RLOO's
        code, stdout, err = run_main(["audit", out, "--no-search", "--json"], capsys)
        assert code == 0 and json.loads(stdout)["agree"], err


@pytest.mark.parametrize("key", ["advantage.whiten", "advantage.batch_normalize"])
def test_whitening_every_position_of_a_row_estimator_counts_its_masked_zeros(tmp_path, capsys, key):
    """advantage.whiten_mask=all with a row-level estimator that writes 0 at mask=0 (mask_output, the default): the
    statistics are those of the advantages on every position, those zeros included (docs/configuration.md); they
    were taken from each row's value on every position."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt_id": ["a", "a", "b", "b", "b"], "reward": [1.0, 0.0, 0.5, 1.0, 0.0],
                             "response_mask": pa.array([[1, 0], [1, 1], [0, 1, 1], [1], [1, 0, 0]],
                                                       pa.list_(pa.int8()))}), tmp_path / "i.parquet")
    base = ["run", tmp_path / "i.parquet", "--flavor", "advcli", "--precision", "float64", "-q"]
    code, _, err = run_main([*base, "-o", tmp_path / "plain.parquet"], capsys)
    assert code == 0, err
    code, _, err = run_main([*base, "-o", tmp_path / "w.parquet", "--set", f"{key}=true", "--set",
                             "advantage.whiten_mask=all"], capsys)
    assert code == 0, err
    plain = pq.read_table(tmp_path / "plain.parquet").column("advantages").to_pylist()
    flat = np.concatenate([np.asarray(r) for r in plain])
    assert (flat == 0).sum() >= 4  # the masked zeros are there
    mean = flat.mean()
    if key == "advantage.whiten":  # verl masked_whiten over every position: unbiased var, rsqrt(var + 1e-8)
        want = (flat - mean) / np.sqrt(flat.var(ddof=1) + 1e-8)
    else:  # SkyRL batch normalisation: the mean over the [B, T] grid (padding cells 0), the biased var over the
        mean = flat.sum() / (len(plain) * max(len(r) for r in plain))  # counted positions, rsqrt(max(var, 1e-8))
        want = (flat - mean) / np.sqrt(max(((flat - mean) ** 2).mean(), 1e-8))
    got = np.concatenate([np.asarray(r) for r in pq.read_table(tmp_path / "w.parquet").column("advantages")
                          .to_pylist()])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
