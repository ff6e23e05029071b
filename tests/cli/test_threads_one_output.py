"""Two library calls in two threads of one process, writing the same output (a thread pool given a shard
twice): each stages its own temporary file, so the output is one run's, whole, its metadata naming the run
whose numbers it holds (the last to finish wins, as between two processes), and nothing is left behind.
The temporary names used to carry only the PID: both threads wrote one file, and a call failed with a raw
pyarrow error or the output held one run's metadata over the other's advantages."""
from __future__ import annotations

import json
import os
import threading

import pyarrow.parquet as pq

import advcli
from advcli.io.temps import TMP_TAG
from advcli.io.writer import clean_stale_temps, temp_path_for
from advcli.sample import make_table


def test_each_thread_stages_its_own_file(tmp_path):
    target = str(tmp_path / "out.parquet")
    names = {"main": temp_path_for(target)}
    both_alive = threading.Barrier(2)  # (a thread's id may be reused once it has ended: two at once differ)

    def name(k):
        names[k] = temp_path_for(target)
        both_alive.wait(30)

    threads = [threading.Thread(target=name, args=(k,)) for k in ("a", "b")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(set(names.values())) == 3
    for path in names.values():  # the PID first: a later run tells a dead process's leftovers by it
        assert os.path.basename(path).split(TMP_TAG)[1].split("-")[0] == str(os.getpid())
    for path in names.values():  # a live process's files, whichever thread staged them, are kept
        open(path, "w").close()
    assert clean_stale_temps(target) == []
    assert all(os.path.exists(p) for p in names.values())


def test_two_threads_one_output_leave_one_whole_run(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(make_table(3000, group_size=8, min_len=16, max_len=400, seed=2), src)
    runs = {"gae": {"algorithm.adv_estimator": "gae"},
            "reinforce_plus_plus": {"algorithm.adv_estimator": "reinforce_plus_plus"}}
    alone = {}
    for name, settings in runs.items():
        advcli.run(str(src), str(tmp_path / f"{name}.parquet"), flavor="verl", settings=settings)
        alone[name] = pq.read_table(tmp_path / f"{name}.parquet").column("advantages")
    out = tmp_path / "same.parquet"
    for _ in range(3):
        errors = []
        start = threading.Barrier(2)

        def go(settings, start=start, errors=errors):
            start.wait()
            try:
                advcli.run(str(src), str(out), flavor="verl", settings=settings, force=True)
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                errors.append(repr(e))

        threads = [threading.Thread(target=go, args=(s,)) for s in runs.values()]
        [t.start() for t in threads]
        [t.join(300) for t in threads]
        assert errors == []
        f = pq.ParquetFile(out)
        name = json.loads(f.schema_arrow.metadata[b"advcli"])["config"]["estimator"]["name"]
        assert f.read(columns=["advantages"]).column("advantages").equals(alone[name])
        assert sorted(p.name for p in tmp_path.iterdir()) == ["gae.parquet", "in.parquet",
                                                              "reinforce_plus_plus.parquet", "same.parquet"]
