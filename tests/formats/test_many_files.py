"""Many input files: INPUT may be several files, a directory or a glob; OUTPUT is then a directory
with one output per input, names kept. Groups span the files (prompt ids scattered over all of
them), so every group statistic must be the same as for the one-file dump."""
from __future__ import annotations

import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advcli import pipeline
from advcli.errors import AdvcliError
from advcli.flavors import resolve
from advcli.sample import make_table

SETTINGS = {
    "grpo": {"algorithm.adv_estimator": "grpo"},
    "gae_k3": {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True,
               "algorithm.kl_penalty": "low_var_kl"},
    "rloo_kl_adaptive": {"algorithm.adv_estimator": "rloo", "algorithm.use_kl_in_reward": True,
                         "algorithm.kl_ctrl.type": "adaptive"},
}
CUTS = [0, 70, 71, 190, 240]  # four files of 70, 1, 119 and 50 rows


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    d = tmp_path_factory.mktemp("many")
    table = make_table(240, group_size=6, min_len=1, max_len=40, seed=5, steps=2)
    whole = d / "whole.parquet"
    pq.write_table(table, whole)
    parts = d / "parts"
    parts.mkdir()
    for k, (a, b) in enumerate(zip(CUTS[:-1], CUTS[1:])):
        pq.write_table(table.slice(a, b - a), parts / f"part-{k}.parquet")
    return str(whole), str(parts), table


def run(inputs, out, settings, **kw):
    cfg, native = resolve("verl", list(settings.items()))
    return pipeline.run_pipeline([str(i) for i in inputs], str(out), cfg, flavor="verl", native=native,
                                 device="cpu", force=True, **kw)


def test_groups_span_files(dumps):
    whole, parts, table = dumps
    ids = table.column("prompt_id").to_pylist()
    spanning = set(ids[:70]) & set(ids[71:120])  # step 0 spans files 0, 1 and 2
    assert spanning, "the fixture must scatter groups over several files"


@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("form", ["directory", "glob", "files"])
def test_split_input_gives_the_one_file_result(name, form, dumps, tmp_path):
    whole, parts, _ = dumps
    ref = run([whole], tmp_path / "whole_out.parquet", SETTINGS[name], chunk_rows=50)
    want = pq.read_table(tmp_path / "whole_out.parquet")
    names = sorted(os.listdir(parts))
    inputs = {"directory": [parts], "glob": [os.path.join(parts, "part-*.parquet")],
              "files": [os.path.join(parts, n) for n in names]}[form]
    out = tmp_path / "out"
    got = run(inputs, out, SETTINGS[name], chunk_rows=17)
    assert sorted(os.listdir(out)) == names  # one output per input, names kept
    pieces = [pq.read_table(out / n) for n in names]
    assert [p.num_rows for p in pieces] == [b - a for a, b in zip(CUTS[:-1], CUTS[1:])]
    for n, p in zip(names, pieces):  # each output keeps its own input's rows
        assert p.column("prompt_id").equals(pq.read_table(os.path.join(parts, n)).column("prompt_id"))
    joined = pa.concat_tables([p.replace_schema_metadata(None) for p in pieces])
    for c in want.column_names:
        assert joined.column(c).to_pylist() == want.column(c).to_pylist(), c
    assert got.metrics["critic/advantages/mean"] == pytest.approx(ref.metrics["critic/advantages/mean"])
    assert got.rows == ref.rows == 240


def test_several_inputs_need_an_output_directory(dumps, tmp_path):
    whole, parts, _ = dumps
    target = tmp_path / "a_file.parquet"
    target.write_bytes(b"x")
    with pytest.raises(AdvcliError, match="several inputs need an output directory"):
        run([parts], target, SETTINGS["grpo"])


def test_inputs_must_share_a_schema(dumps, tmp_path):
    whole, parts, table = dumps
    odd = tmp_path / "odd.parquet"
    pq.write_table(table.drop_columns(["values"]), odd)
    with pytest.raises(AdvcliError, match="lacks column"):
        run([whole, str(odd)], tmp_path / "o", SETTINGS["grpo"])


@pytest.mark.parametrize("change, said", [
    ("extra", "has column(s) ['note'] that"), ("order", "its columns are in another order than"),
    ("not_null", "column 'prompt_id' is not null but"), ("type", "column 'step' has type int32 but")])
@pytest.mark.parametrize("first", ["plain", "changed"])
def test_inputs_that_differ_in_schema_are_refused_before_any_work(dumps, tmp_path, capsys, change, said, first):
    """The second file with one more column, its columns in another order, a column marked not-null, or another
    type: each output is its input's pages under one footer, so these once ended in "internal error: the spliced
    file does not read back" after the work (and only one file order caught an extra column); now refused up
    front, in either order, by run and by validate alike, naming the file and what differs."""
    from conftest import run_main

    whole, parts, table = dumps
    odd = {"extra": lambda t: t.append_column("note", pa.array(["n"] * t.num_rows)),
           "order": lambda t: t.select(list(reversed(t.column_names))),
           "not_null": lambda t: t.cast(pa.schema([f.with_nullable(f.name != "prompt_id") for f in t.schema])),
           "type": lambda t: t.set_column(t.column_names.index("step"), "step", t.column("step").cast(pa.int32())),
           }[change](table)
    if change == "type" and pa.types.is_int32(table.schema.field("step").type):
        pytest.skip("the dump's step is int32 already")
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(table, d / "a.parquet")
    pq.write_table(odd, d / "b.parquet")
    files = [str(d / "a.parquet"), str(d / "b.parquet")]
    if first == "changed":
        files.reverse()
    if first == "changed" and change in ("extra", "not_null", "type"):  # said from the other file's side
        said = {"extra": "lacks column(s) ['note'] that", "not_null": "column 'prompt_id' is nullable but",
                "type": "column 'step' has type"}[change]
    with pytest.raises(AdvcliError, match=re.escape(said)):
        run(files, tmp_path / "o", SETTINGS["grpo"])
    assert not (tmp_path / "o").exists()
    for cmd in (["run", *files, "-o", tmp_path / "o2"], ["validate", *files]):
        code, out, err = run_main([*cmd, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"], capsys)
        assert code == 2 and said in " ".join(err.split()) and "internal error" not in err, err
        assert files[1] in err and "hint:" in err


def test_many_more_inputs_than_open_files_allowed(tmp_path):
    """A directory of shards runs under a descriptor limit far below the number of files: no input
    stays open between reads and a finished input's output is closed (and renamed at the end)."""
    import subprocess
    import sys

    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    t = make_table(150 * 4, group_size=4, min_len=2, max_len=6, seed=5)
    for i in range(150):
        pq.write_table(t.slice(4 * i, 4), src / f"part-{i:04d}.parquet")
    code = ("import resource, sys\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
            "import advcli\n"
            "r = advcli.run(sys.argv[1], sys.argv[2] + '/', settings={'algorithm.adv_estimator': 'grpo'}, force=True)\n"
            "print('ROWS', r.rows)\n")
    r = subprocess.run([sys.executable, "-c", code, str(src), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("ROWS 600")
    names = sorted(os.listdir(out))
    assert names == [f"part-{i:04d}.parquet" for i in range(150)]
    got = pa.concat_tables([pq.read_table(out / n) for n in names])
    assert got.column("prompt_id").to_pylist() == t.column("prompt_id").to_pylist()


@pytest.mark.parametrize("existed", [True, False])
def test_a_failure_in_a_later_input_leaves_no_output_of_the_earlier_ones(existed, dumps, tmp_path, monkeypatch):
    """Finished inputs' outputs are closed early but renamed only when the whole run succeeded: an
    error in the last input leaves no output and no temporary file at all; an output directory the
    run created itself (``-o out/`` not there yet) is removed again, one that was there stays."""
    _, parts, _ = dumps
    out = tmp_path / "out" if existed else tmp_path / "new" / "out"  # -o new/out/: both made by the run
    if existed:
        out.mkdir()
    import advcli.pipeline.write  # noqa: F401  (loaded by the first run otherwise)

    real = pipeline.output_batch

    def failing(plan, batch, *a, **k):
        if failing.calls == 3:  # the last input (files of 70, 1, 119 and 50 rows; chunks of 50)
            raise KeyboardInterrupt
        failing.calls += 1
        return real(plan, batch, *a, **k)

    failing.calls = 0
    monkeypatch.setattr(pipeline.write, "output_batch", failing)
    with pytest.raises(KeyboardInterrupt):
        run([parts], str(out) + os.sep, {"algorithm.adv_estimator": "grpo"}, chunk_rows=200)
    assert failing.calls == 3  # it failed while writing, after the directory was made
    if existed:
        assert os.listdir(out) == []
    else:
        assert os.listdir(tmp_path) == []


def test_validate_with_an_output_directory_creates_nothing(dumps, tmp_path):
    from advcli.pipeline.checks import check_run

    _, parts, _ = dumps
    cfg, native = resolve("verl", [("algorithm.adv_estimator", "grpo")])
    result, deep = check_run([parts], cfg, flavor="verl", native=native, output=str(tmp_path / "a" / "b") + os.sep)
    assert result.rows == 240 and not deep
    assert os.listdir(tmp_path) == []


def test_too_many_open_files_is_named_as_such(tmp_path):
    """EMFILE is the process's limit, not a bad file: the message says so and what to do."""
    import subprocess
    import sys

    p = tmp_path / "x.parquet"
    pq.write_table(make_table(4, group_size=2, min_len=2, max_len=4, seed=1), p)
    code = ("import resource, sys\n"
            "import pyarrow.parquet\n"  # imported before a run opens its inputs (open_parquet imports it late)
            "from advcli.io.reader import open_parquet\n"
            "from advcli.errors import AdvcliError\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (32, hard))\n"
            "held = []\n"
            "try:\n"
            "    while True:\n"
            "        held.append(open(sys.argv[1], 'rb'))\n"
            "except OSError:\n"
            "    pass\n"
            "try:\n"
            "    open_parquet(sys.argv[1])\n"
            "except AdvcliError as e:\n"
            "    print('MSG', e, '|', e.hint)\n")
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True)
    assert "too many open files" in r.stdout and "ulimit -n" in r.stdout, (r.stdout, r.stderr[-1000:])


def test_a_hive_partitioned_dataset_is_named_not_merged(dumps, tmp_path, capsys):
    """DIR/step=0/part-0.parquet: the directory holds no file itself (said, with the glob that reaches them), and
    files whose step is only in their directory's name are refused (they ran as one step: GAE whitened across
    steps); with the step written into the files the same glob runs."""
    from conftest import run_main

    _, _, table = dumps
    d = tmp_path / "ds"
    steps = sorted(set(table.column("step").to_pylist()))
    for s in steps:
        (d / f"step={s}").mkdir(parents=True)
        part = table.filter(pa.array([v == s for v in table.column("step").to_pylist()]))
        pq.write_table(part.drop_columns(["step"]), d / f"step={s}" / f"part-{s}.parquet")
    gae = ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae"]
    code, _, err = run_main(["run", d, "-o", tmp_path / "o", *gae], capsys)
    assert code == 2 and f"{d}: no *.parquet files directly in this directory; {len(steps)} in its subdirectories" \
        in " ".join(err.split()) and os.path.join(str(d), "*", "*.parquet") in err, err
    files = os.path.join(str(d), "*", "*.parquet")
    code, _, err = run_main(["run", files, "-o", tmp_path / "o", *gae], capsys)
    assert code == 2 and "its directory step=0 says step 0, but the file has no 'step' column" in " ".join(err.split())
    assert not (tmp_path / "o").exists()
    for s in steps:  # the step written into each file: runs, and equals the one-file run step by step
        part = table.filter(pa.array([v == s for v in table.column("step").to_pylist()]))
        pq.write_table(part, d / f"step={s}" / f"part-{s}.parquet")
    code, _, err = run_main(["run", files, "-o", tmp_path / "o", *gae, "-q"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("kind", ["large_binary", "fixed_size_binary", "string_view"])
def test_prompt_id_binary_types_group_as_strings_and_views_are_refused(dumps, tmp_path, capsys, kind):
    """prompt_id as large_binary or fixed_size_binary groups as the string ids do (binary was read, these two
    refused as "expected strings"); the view layouts are refused with the cast that reads them."""
    from conftest import run_main

    _, _, table = dumps
    ids = [str(x) for x in table.column("prompt_id").to_pylist()]
    width = max(map(len, ids))
    col = {"large_binary": lambda: pa.array([i.encode() for i in ids], pa.large_binary()),
           "fixed_size_binary": lambda: pa.array([i.ljust(width).encode() for i in ids], pa.binary(width)),
           "string_view": lambda: pa.array(ids, pa.string_view())}[kind]()
    i = table.column_names.index("prompt_id")
    pq.write_table(table.set_column(i, "prompt_id", pa.array(ids)), tmp_path / "s.parquet")
    pq.write_table(table.set_column(i, "prompt_id", col), tmp_path / "b.parquet")
    grpo = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "-q"]
    code, _, err = run_main(["run", tmp_path / "b.parquet", "-o", tmp_path / "b_out.parquet", *grpo], capsys)
    if kind == "string_view":
        assert code == 2 and "has type string_view; expected string" in err and "pa.string()" in err, err
        return
    assert code == 0, err
    code, _, err = run_main(["run", tmp_path / "s.parquet", "-o", tmp_path / "s_out.parquet", *grpo], capsys)
    got, want = pq.read_table(tmp_path / "b_out.parquet"), pq.read_table(tmp_path / "s_out.parquet")
    assert got.column("advantages").to_pylist() == want.column("advantages").to_pylist()
    assert got.schema.field("prompt_id").type == col.type
