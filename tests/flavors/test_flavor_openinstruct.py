"""--flavor open-instruct against open-instruct's own advantage code.

The expected values are computed here with the numpy lines of ``DataPreparationActor._data_preparation_loop``
(allenai/open-instruct @ e6c3044a, open_instruct/data_loader.py L1471-1484), in float64 as open-instruct runs
them: ``scores.reshape(-1, n)``, ``.mean(axis=-1)``, ``.std(axis=-1)`` (ddof 0), ``np.repeat`` back to rows,
then ``(scores − mean)/(std + 1e-8)`` (standard) or ``scores − mean`` (centered). open-instruct places the
advantage on the response tokens of the packed sequence (``lookup_advantages[packed_mask]``): advcli on
mask=1 tokens, 0 elsewhere."""
import numpy as np
import pytest
from _flavor_rows import assert_rows_close, run_rows
from conftest import run_main

from advcli.errors import AdvcliError

# consecutive blocks of 4 are the groups: a non-dyadic mixed group, an all-equal group, a 0/1 group
REWARDS = [0.1, 0.7, 0.3, 0.3, 0.9, 0.9, 0.9, 0.9, 1.0, 0.0, 0.0, 1.0]
MASKS = [[1, 1, 0], [1], [0, 1, 1, 1], [1, 1], [1, 0, 1], [1, 1, 1, 1, 0], [1, 1], [1], [1, 1, 0, 0], [1, 1, 1],
         [0, 1], [1, 1, 1, 1, 1, 1]]
N = 4


def open_instruct(kind: str, n: int = N) -> list[float]:
    scores = np.array(REWARDS)
    per_prompt = scores.reshape(-1, n)
    mean = np.repeat(per_prompt.mean(axis=-1), n, axis=0)
    std = np.repeat(per_prompt.std(axis=-1), n, axis=0)
    if kind == "standard":
        return list((scores - mean) / (std + 1e-8))
    return list(scores - mean)


def rows():
    return [{"reward": r, "mask": m} for r, m in zip(REWARDS, MASKS)]


@pytest.mark.parametrize("kind", ["standard", "centered"])
def test_matches_open_instructs_code(tmp_path, kind):
    cols, _ = run_rows(str(tmp_path), rows(), "open-instruct",
                       {"advantage_normalization_type": kind, "num_samples_per_prompt_rollout": N})
    adv = open_instruct(kind)
    assert_rows_close(cols["advantages"], [[a * x for x in m] for a, m in zip(adv, MASKS)], rtol=1e-5, atol=1e-5)


def test_default_is_centered_and_population_std_differs_from_torch_std(tmp_path):
    cols, _ = run_rows(str(tmp_path), rows(), "open-instruct", {"num_samples_per_prompt_rollout": N})
    adv = open_instruct("centered")
    assert_rows_close(cols["advantages"], [[a * x for x in m] for a, m in zip(adv, MASKS)], rtol=1e-5, atol=1e-6)
    # standard: numpy's ddof-0 std, not torch.std's (verl): the 0/1 group gives ±1, not ±0.866
    cols, _ = run_rows(str(tmp_path), rows(), "open-instruct",
                       {"num_samples_per_prompt_rollout": N, "advantage_normalization_type": "standard"})
    assert cols["advantages"][8][0] == pytest.approx(1.0, abs=1e-6)


def test_groups_of_one_run_as_open_instruct_runs_them_and_an_unknown_type_is_refused(tmp_path):
    """num_samples_per_prompt_rollout=1: open-instruct raises with filter_zero_std_samples (its default,
    data_loader.py L518-522 @e6c3044a) and otherwise gives each sample s − s = 0 under both types (where
    advcli's grpo gives a group of one s/(1 + eps))."""
    with pytest.raises(AdvcliError, match="filter_zero_std_samples=true"):
        run_rows(str(tmp_path), rows(), "open-instruct", {"num_samples_per_prompt_rollout": 1})
    for kind in ("centered", "standard"):
        cols, _ = run_rows(str(tmp_path), rows(), "open-instruct",
                           {"num_samples_per_prompt_rollout": 1, "filter_zero_std_samples": False,
                            "advantage_normalization_type": kind})
        assert all(a == 0.0 for row in cols["advantages"] for a in row), kind
    with pytest.raises(AdvcliError, match="advantage_normalization_type"):
        run_rows(str(tmp_path), rows(), "open-instruct", {"advantage_normalization_type": "zscore"})


def test_explain_names_the_semantics(capsys):
    code, out, err = run_main(["explain", "--flavor", "open-instruct", "--set", "advantage_normalization_type=standard"],
                              capsys)
    assert code == 0, err
    assert "open-instruct" in out and "population" in out and "1e-08" in out


@pytest.mark.parametrize("value,n", [(0.9, 3), (0.1, 8), (1 / 3, 8), (0.7, 5)])
def test_an_all_equal_group_gives_zero_as_numpy_float64_does(tmp_path, value, n):
    """open-instruct's statistics are numpy float64: an all-equal group has std 0 and mean its value, so
    standard gives 0 (numpy, by the code above: at most ~1e-8). In float32 the mean's residue over a residue
    std + 1e-8 is of order 1 (0.9 x 3 gave 0.856), so the flavor computes in float64."""
    rs = [{"reward": value, "mask": [1, 1]} for _ in range(n)]
    want = (np.full(n, value) - np.full(n, value).mean()) / (np.full(n, value).std() + 1e-8)
    assert np.max(np.abs(want)) < 1e-7
    cols, _ = run_rows(str(tmp_path), rs, "open-instruct",
                       {"advantage_normalization_type": "standard", "num_samples_per_prompt_rollout": n})
    assert max(abs(x) for row in cols["advantages"] for x in row) < 1e-6
