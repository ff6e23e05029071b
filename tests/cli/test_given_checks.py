"""What the user typed, checked before it runs: an on/off key set to null, two estimators named at once, and the
library's curation keywords in the types Python users pass (checked against the command line's results)."""
import pytest
from conftest import SAMPLE, run_main

import advcli
from advcli.errors import AdvcliError


def test_null_for_an_on_off_key_is_refused_not_read_as_false(tmp_path, capsys):
    """verl reads norm_adv_by_std_in_grpo=null as false (Dr. GRPO): a user who wrote null for "the default"
    would get other advantages without a word. Refused on the command line and in the library alike."""
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo", "--set", "algorithm.norm_adv_by_std_in_grpo=null"], capsys)
    assert code == 2 and "null is not an on/off value" in err and "default true" in err
    assert not (tmp_path / "o.parquet").exists()
    with pytest.raises(AdvcliError, match="null is not an on/off value"):
        advcli.run(SAMPLE, None, flavor="verl", settings={"algorithm.norm_adv_by_std_in_grpo": None})


def test_estimator_and_the_flavors_estimator_key_naming_two_estimators_are_refused(tmp_path, capsys):
    """--estimator grpo with --set algorithm.adv_estimator=gae once ran grpo silently and recorded the key as
    grpo; naming the same estimator twice runs it."""
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", SAMPLE, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=gae",
                             "--estimator", "grpo"], capsys)
    assert code == 2 and "--estimator grpo and --set algorithm.adv_estimator=gae name two estimators" in err
    with pytest.raises(AdvcliError, match="estimator='grpo' and settings="):
        advcli.run(SAMPLE, None, flavor="verl", estimator="grpo", settings={"algorithm.adv_estimator": "gae"})
    code, _, err = run_main(["run", SAMPLE, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                             "--estimator", "grpo", "-q"], capsys)
    assert code == 0, err


def test_the_library_takes_solve_rate_as_a_pair_and_curates_in_memory(tmp_path, capsys):
    """solve_rate=(0.2, 0.8) is the command line's --solve-rate 0.2:0.8, with or without an output file (an
    in-memory run once stopped on a TypeError), and gives the command line's rows and advantages."""
    out = tmp_path / "cli.parquet"
    code, _, err = run_main(["run", SAMPLE, "-o", out, "--drop-uniform", "--solve-rate", "0.2:0.8", "-q"], capsys)
    assert code == 0, err
    import pyarrow.parquet as pq

    want = pq.read_table(out)
    got = advcli.run(SAMPLE, None, drop_uniform=True, solve_rate=(0.2, 0.8))
    assert got.rows == want.num_rows
    assert got.output_table is None or got.output_table.column("advantages").equals(want.column("advantages"))
    lib = advcli.run(SAMPLE, tmp_path / "lib.parquet", drop_uniform=True, solve_rate=[0.2, 0.8])
    assert lib.rows == want.num_rows
    assert pq.read_table(tmp_path / "lib.parquet").column("advantages").equals(want.column("advantages"))
    with pytest.raises(AdvcliError, match="solve_rate='0.2-0.8': expected LO:HI"):
        advcli.run(SAMPLE, None, solve_rate="0.2-0.8")
    with pytest.raises(AdvcliError, match="min_group_size='x': expected a whole number"):
        advcli.run(SAMPLE, None, min_group_size="x")


def test_the_library_names_its_own_keywords_in_the_curation_note_and_refusals(tmp_path):
    """Under advcli.run the drop note and a filter that keeps nothing name the call's keywords, not the
    command line's flags (a notebook user cannot type --solve-rate or --allow-empty)."""
    got = advcli.run(SAMPLE, None, drop_uniform=True, solve_rate=(0.1, 0.9), min_group_size=2)
    assert got.warnings[0].startswith("drop_uniform=True solve_rate=(0.1, 0.9) min_group_size=2: advantages "
                                      "computed as if"), got.warnings[0]
    assert not any("--" in w for w in got.warnings), got.warnings
    with pytest.raises(AdvcliError) as e:
        advcli.run(SAMPLE, None, solve_rate=(0.95, 0.99))
    assert e.value.message.startswith("solve_rate=(0.95, 0.99) keeps no row"), e.value.message
    assert "allow_empty=True" in e.value.hint and "--" not in e.value.hint, e.value.hint
    with pytest.raises(AdvcliError) as e:
        advcli.run(SAMPLE, tmp_path / "o.parquet", chunk_rows=0)
    assert e.value.message.startswith("chunk_rows must be"), e.value.message


def test_a_named_flavor_says_when_its_estimator_is_its_default(tmp_path):
    """--flavor verl with nothing naming an estimator runs verl's default, gae (no --flavor picks grpo on a
    dump with prompt_id): the run says so and how to choose another; naming one, or no flavor, says nothing."""
    def note(**kw):
        return advcli.run(SAMPLE, tmp_path / "o.parquet", force=True, **kw).estimator_note

    said = note(flavor="verl")
    assert said.startswith("gae is verl's default algorithm.adv_estimator (none was given)"), said
    assert note(flavor="verl", settings={"algorithm.adv_estimator": "gae"}) is None
    assert note(flavor="verl", estimator="grpo") is None
    assert note() is None  # the default flavor's choice is said by its own note (result.chosen)


def test_the_provenance_names_the_flavors_own_estimator_not_another_trainers(tmp_path):
    """slime's grpo runs advcli code first matched against NeMo RL's estimator: the output's estimator_source
    names slime's (not NeMo RL's); open-instruct's likewise (not verl's); where the citation is the flavor's
    own function (verl's rloo) it stays."""
    import json

    import pyarrow.parquet as pq

    def source(flavor, settings=None):
        out = tmp_path / "o.parquet"
        advcli.run(SAMPLE, out, flavor=flavor, settings=settings or {}, force=True)
        return json.loads(pq.read_schema(out).metadata[b"advcli"])["estimator_source"]

    assert source("slime", {"n_samples_per_prompt": 8}) == "slime's grpo, release 624b824 (THUDM/slime)"
    got = source("open-instruct", {"advantage_normalization_type": "standard", "advcli.group_by": "id"})
    assert got.startswith("open-instruct's advantages with advantage_normalization_type=standard, release "), got
    assert "compute_rloo_outcome_advantage" in source("verl", {"algorithm.adv_estimator": "rloo"})


def test_an_unknown_flavor_is_named_with_the_librarys_keyword():
    with pytest.raises(AdvcliError) as e:
        advcli.run(SAMPLE, None, flavor="Verl")
    assert e.value.message.startswith("flavor='Verl': unknown flavor. Did you mean 'verl'?"), e.value.message
