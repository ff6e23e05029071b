"""The progress bars of a run on a terminal: each pass's bar goes when that pass ends (docs/reports.md),
not when the whole command ends."""
import sys

import pyarrow.parquet as pq

from advcli.commands.progress import progress


def test_a_finished_pass_bar_goes_when_the_pass_ends(monkeypatch, tmp_path, sample_path):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    cb, stop = progress(True)
    assert cb is not None
    seen = []  # (pass, rows done, rows total, the bars on screen after the call)

    def watching(name, done, total):
        cb(name, done, total)
        seen.append((name, done, total, [t.description for t in cb.bars.tasks]))

    import time

    time.sleep(0.6)  # past the half second after which bars appear
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    cfg, native = resolve("verl", [("algorithm.adv_estimator", "gae")])
    try:
        run_pipeline([sample_path], str(tmp_path / "o.parquet"), cfg, flavor="verl", native=native, chunk_rows=50,
                     progress=watching)
    finally:
        stop()
    passes = list(dict.fromkeys(name for name, *_ in seen))
    assert len(passes) >= 2, passes
    total = pq.read_metadata(sample_path).num_rows
    for name, done, rows, bars in seen:
        assert rows == total
        if done < rows:
            assert bars == [name], (name, done, bars)  # only the running pass's bar: earlier ones are gone
        else:
            assert name not in bars
    assert cb.bars.tasks == []


def test_sample_reports_progress_while_it_generates_and_writes(monkeypatch, tmp_path, capsys):
    """`advcli sample` of a large dump takes a while: it reports generating and writing as it goes, and
    writes exactly the table make_table builds."""
    from conftest import run_main

    import advcli.cli
    from advcli.sample import make_table

    calls = []
    monkeypatch.setattr(advcli.cli, "progress", lambda show: (lambda *a: calls.append(a), lambda: None))
    monkeypatch.setattr(advcli.cli, "SAMPLE_ROW_GROUP", 700)
    out = tmp_path / "s.parquet"
    code, _, err = run_main(["sample", out, "--rows", "2000", "--max-len", "40", "--seed", "3"], capsys)
    assert code == 0, err
    want = make_table(2000, 8, 16, 40, 3)
    assert pq.read_table(out).equals(want)
    assert pq.read_metadata(out).num_row_groups == 3  # 700 + 700 + 600 rows
    generate = [d for name, d, t in calls if name == "generate"]
    write = [d for name, d, t in calls if name == "write"]
    assert generate == sorted(generate) and generate[-1] == 2000 and len(generate) >= 3
    assert write == [700, 1400, 2000]
    tokens = sum(len(m) for m in want.column("response_mask").to_pylist())
    assert f"{tokens:,} tokens" in err
