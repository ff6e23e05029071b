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
