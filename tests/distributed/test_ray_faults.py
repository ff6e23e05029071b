"""--engine ray losing a worker node mid-run: the local engine's output, or one clear error and
nothing left at the output (local directory or s3:// prefix), never a stall (skipped without Ray).

The cluster is ``ray.cluster_utils.Cluster`` on this machine: a head node with no CPU for tasks (the
driver's node, where the statistics actor lives) and two worker nodes of one CPU, separate raylets.
A node is removed (``allow_graceful=False``: its raylet and workers are killed) from a thread that
waits for the run's first progress report in the compute-and-write pass, so the kill always lands
while batches are being computed, whatever the machine's load."""
from __future__ import annotations

import glob
import importlib.util
import os
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _services import local_ray_cluster, s3_keys

HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (pip install 'advcli[ray]')")

WAIT = 240  # seconds: a generous bound on events (the first batch; the kill) on a loaded 2-core machine


@pytest.fixture()
def cluster():
    """Head (0 CPU) + two one-CPU worker nodes; Ray Data blocks small, so a run has many batches."""
    with local_ray_cluster(block_size=16 * 1024) as c:
        yield c


def _dump(tmp_path, rows=900, rollout_log_probs: bool = False):
    """Two files (a third and two thirds of ``rows``, row groups of 50) of a sample dump with groups
    scattered in 2 steps; ``rollout_log_probs``: plus that column (old_log_probs + noise), so verl's
    rollout correction has a pass of its own on the workers."""
    import numpy as np

    from advcli.sample import make_table

    t = make_table(rows, 5, 2, 30, 11, shuffle=True, steps=2)
    if rollout_log_probs:
        old = t.column("old_log_probs").combine_chunks()
        flat = old.values.to_numpy(zero_copy_only=False)
        noise = np.random.default_rng(5).normal(0.0, 0.3, len(flat))
        t = t.append_column("rollout_log_probs", pa.ListArray.from_arrays(old.offsets,
                                                                          pa.array((flat + noise).astype(np.float32))))
    paths = []
    for i, (a, b) in enumerate([(0, rows // 3), (rows // 3, rows)]):
        p = str(tmp_path / f"in{i}.parquet")
        pq.write_table(t.slice(a, b - a), p, row_group_size=50)
        paths.append(p)
    return paths


def _actor_node(ray, fallback):
    """The node of the Ray Data map actor (the one whose loss matters most), else ``fallback``."""
    try:
        from ray._private import state

        for info in state.actors().values():
            if "MapWorker" in str(info.get("ActorClassName", "")) and info.get("State") == "ALIVE":
                return info["Address"]["NodeID"]
    except Exception:  # noqa: BLE001 - Ray's private state API moved: kill the first worker node
        pass
    return fallback


class _Killer:
    """Removes worker node(s) once a pass reports its first rows to the run's progress callback
    (``stage``: "advantages" for the compute-and-write pass, told by advcli's NodeWatch thread; "rows"
    and "rollout correction" for the per-row passes on the workers, told per batch the driver
    receives, before the pass's last row, which then waits until the node is gone): an event set
    there, a thread of its own does the kill, which takes a while."""

    def __init__(self, cluster, workers, which: str, stage: str = "advantages"):
        self.cluster, self.workers, self.which, self.stage = cluster, workers, which, stage
        self.seen_stages: list[str] = []
        self.started = threading.Event()
        self.done = threading.Event()
        self.killed: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def progress(self, stage, done, total):
        if not self.seen_stages or self.seen_stages[-1] != stage:
            self.seen_stages.append(stage)
        if stage == self.stage and 0 < done < total:
            self.started.set()
            if stage != "advantages":  # told by the driver's own thread, mid-pass: it waits for the kill, so
                self.done.wait(WAIT)   # the loss lands before the pass's remaining rows are received

    def _run(self):
        import ray

        if not self.started.wait(WAIT):
            return
        if self.which == "all":
            victims = self.workers
        else:
            nid = _actor_node(ray, self.workers[0].node_id)
            victims = [w for w in self.workers if w.node_id == nid][:1] or self.workers[:1]
        for w in victims:
            self.cluster.remove_node(w, allow_graceful=False)
            self.killed.append(w.node_id)
        self.done.set()


def _local(paths, tmp_path, cfg, native):
    from advcli.pipeline import run_pipeline

    loc = run_pipeline(paths, str(tmp_path / "local") + "/", cfg, flavor="verl", native=native, chunk_rows=64,
                       device="cpu")
    table = pa.concat_tables([pq.read_table(tmp_path / "local" / os.path.basename(p)) for p in paths])
    return loc, table


def _report(r) -> dict:
    import json

    return json.loads(json.dumps({"metrics": r.metrics, "per_step": r.per_step, "histograms": r.histograms,
                                  "group_health": r.group_health, "diagnostics": r.diagnostics,
                                  "rows": r.rows, "tokens": r.tokens}, default=str))


def _one_node_lost(run, killer, out, tmp_path, table, loc, what: str) -> None:
    """``run()`` (a run_ray losing one worker node) recovers with the local engine's output and report, or
    stops with the one clear error naming the node and leaves nothing (no output, no temporary)."""
    from advcli.engines.ray_output import read_output
    from advcli.errors import AdvcliError

    try:
        got = run()
    except AdvcliError as e:
        assert killer.done.is_set()
        assert "left the cluster during the run" in e.message and killer.killed[0][:12] in e.message
        assert "\n" not in e.message and e.hint
        assert not os.path.exists(out) and glob.glob(str(tmp_path / ".ray*")) == []
        print(f"node loss{what}: clear error:", e.message)  # which outcome this run had (pytest -s shows it)
        return
    assert killer.done.is_set(), "the run ended before the node was removed: the test did not test a loss"
    assert read_output(out).equals(table)
    assert _report(got) == _report(loc)
    assert glob.glob(str(tmp_path / ".ray*")) == []
    print(f"node loss{what}: recovered, output and report equal to the local engine's")


@needs_ray
def test_worker_node_lost_mid_run(cluster, tmp_path):
    """One worker node (the one running the map actor) removed while batches are computed: Ray
    restarts the actor on the other node and runs the lost batches again, and the output and the
    report are the local engine's; or, if the nodes left cannot finish, one clear error naming the
    node within the stall timeout, and nothing at the output path (no directory, no temporary)."""
    from advcli.engines.ray_engine import run_ray
    from advcli.flavors import resolve

    c, workers = cluster
    paths = _dump(tmp_path)
    cfg, native = resolve("verl", [("algorithm.adv_estimator", "grpo")])
    loc, table = _local(paths, tmp_path, cfg, native)
    killer = _Killer(c, workers, "one")
    out = str(tmp_path / "ray")
    _one_node_lost(lambda: run_ray(paths, out, cfg, flavor="verl", native=native, device="cpu", chunk_rows=30,
                                   rows_per_file=150, row_pass="driver", stall_timeout=60, progress=killer.progress),
                   killer, out, tmp_path, table, loc, "")


RC = "algorithm.rollout_correction."


@needs_ray
@pytest.mark.parametrize("stage", ["rows", "rollout correction"])
def test_worker_node_lost_in_a_per_row_pass(cluster, tmp_path, stage):
    """A worker node removed while a per-row pass runs on the workers (the row pass, ``row_pass="workers"``;
    verl's rollout-correction pass: token-level truncated IS with batch normalisation and a sequence
    rejection), killed once the driver has received some of the pass's rows and not all: the run recovers
    and gives the local engine's output and report, or stops with the one clear error and leaves nothing."""
    from advcli.engines.ray_engine import run_ray
    from advcli.flavors import resolve

    c, workers = cluster
    if stage == "rows":
        paths = _dump(tmp_path)
        settings = [("algorithm.adv_estimator", "grpo")]
    else:
        paths = _dump(tmp_path, rollout_log_probs=True)
        settings = [("algorithm.adv_estimator", "grpo"), (RC + "rollout_is", "token"),
                    (RC + "rollout_is_threshold", 2.0), (RC + "rollout_is_batch_normalize", True),
                    (RC + "rollout_rs", "seq_max_k3"), (RC + "rollout_rs_threshold", 0.5)]
    cfg, native = resolve("verl", settings)
    loc, table = _local(paths, tmp_path, cfg, native)
    killer = _Killer(c, workers, "one", stage=stage)
    out = str(tmp_path / "ray")
    _one_node_lost(lambda: run_ray(paths, out, cfg, flavor="verl", native=native, device="cpu", chunk_rows=30,
                                   rows_per_file=150, row_pass="workers", stall_timeout=60, progress=killer.progress),
                   killer, out, tmp_path, table, loc, f" in {stage}")
    assert stage in killer.seen_stages, f"the pass did not report its rows: {killer.seen_stages}"


@needs_ray
def test_all_worker_nodes_lost_in_the_row_pass_fails_cleanly(cluster, tmp_path):
    """Both worker nodes removed while the row pass runs on the workers: advcli stops within the stall
    timeout with one line naming the lost nodes and the pass, and leaves nothing at the output."""
    from advcli.engines.ray_engine import run_ray
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve

    c, workers = cluster
    paths = _dump(tmp_path, rows=600)
    cfg, native = resolve("verl", [("algorithm.adv_estimator", "grpo")])
    killer = _Killer(c, workers, "all", stage="rows")
    out = str(tmp_path / "ray")
    with pytest.raises(AdvcliError) as info:
        run_ray(paths, out, cfg, flavor="verl", native=native, device="cpu", chunk_rows=30, rows_per_file=150,
                row_pass="workers", stall_timeout=5, progress=killer.progress)
    assert killer.done.is_set()
    msg = info.value.message
    assert "left the cluster during the run" in msg and "\n" not in msg
    assert all(nid[:12] in msg for nid in killer.killed)
    assert not os.path.exists(out) and glob.glob(str(tmp_path / ".ray*")) == []


@needs_ray
def test_all_worker_nodes_lost_fails_cleanly_s3(s3, cluster, tmp_path):
    """Both worker nodes removed mid-run: nothing can run the remaining batches and Ray Data would
    wait forever; advcli stops within the stall timeout with one line naming the lost nodes, and
    leaves no object under the output prefix nor under its temporary prefix."""
    from advcli.engines.ray_engine import run_ray
    from advcli.errors import AdvcliError
    from advcli.flavors import resolve

    c, workers = cluster
    paths = _dump(tmp_path, rows=600)
    for p in paths:
        with open(p, "rb") as src, s3.open_output_stream(f"bkt/fdump/{os.path.basename(p)}") as dst:
            dst.write(src.read())
    cfg, native = resolve("verl", [("algorithm.adv_estimator", "grpo")])
    killer = _Killer(c, workers, "all")
    with pytest.raises(AdvcliError) as info:
        run_ray(["s3://bkt/fdump/"], "s3://bkt/fout", cfg, flavor="verl", native=native, device="cpu",
                chunk_rows=30, rows_per_file=150, row_pass="driver", stall_timeout=5, progress=killer.progress)
    assert killer.done.is_set()
    msg = info.value.message
    assert "left the cluster during the run" in msg and "no progress for 5 s" in msg and "\n" not in msg
    assert all(nid[:12] in msg for nid in killer.killed)
    assert [k for k in s3_keys(s3, "bkt") if not k.startswith("bkt/fdump/")] == []  # no output, no temporary


def test_stall_timeout_setting(monkeypatch):
    from advcli.engines.ray_faults import ENV_STALL, STALL_TIMEOUT, stall_timeout
    from advcli.errors import AdvcliError

    monkeypatch.delenv(ENV_STALL, raising=False)
    assert stall_timeout(None) == STALL_TIMEOUT
    assert stall_timeout(7) == 7.0
    monkeypatch.setenv(ENV_STALL, "12.5")
    assert stall_timeout(None) == 12.5
    monkeypatch.setenv(ENV_STALL, "soon")
    with pytest.raises(AdvcliError, match="expected a number"):
        stall_timeout(None)
    with pytest.raises(AdvcliError, match="positive"):
        stall_timeout(0)


def test_ray_system_errors_are_told_from_advcli_errors():
    """After a node loss, Ray's own failures (an actor that died with its node, wrapped) are reported
    as the loss; an error raised by advcli's code is not (it is the user's to see as it is)."""
    from advcli.engines.ray_faults import _is_system_error

    class ActorDiedError(Exception):
        pass

    wrapped = RuntimeError("task failed")
    wrapped.__cause__ = ActorDiedError("The actor died because its node has died.")
    assert _is_system_error(wrapped)
    assert not _is_system_error(ValueError("values: NaN at row 3"))


class _FakeRay:
    """The part of the ``ray`` module NodeWatch reads: the node table (no cluster needed)."""

    def __init__(self):
        self.b_alive = True

    def nodes(self):
        return [{"NodeID": "a" * 40, "NodeManagerAddress": "10.0.0.1", "Alive": True},
                {"NodeID": "b" * 40, "NodeManagerAddress": "10.0.0.2", "Alive": self.b_alive}]


def test_watch_aborts_a_wait_that_cannot_end_after_a_node_loss():
    """A node goes; the driver's main thread waits on something that never comes (as Ray Data
    waits for resources that left): the watch interrupts it after the stall timeout, and its
    error names the lost node."""
    from advcli.engines.ray_faults import NodeWatch

    fake = _FakeRay()
    watch = NodeWatch(fake, timeout=0.3, poll=0.05)
    with watch:
        fake.b_alive = False
        with pytest.raises(KeyboardInterrupt):
            threading.Event().wait(60)  # interrupted long before this
    assert watch.fired and "no progress for 0.3 s" in watch.fired
    err = watch.error(KeyboardInterrupt())
    assert "worker node 10.0.0.2 (node bbbbbbbbbbbb) left the cluster" in err.message and err.hint


def test_watch_never_times_out_a_run_that_lost_no_node_or_progresses():
    """No loss: however long the run, no abort. A loss while batches keep coming: no abort either."""
    import time

    from advcli.engines.ray_faults import NodeWatch

    fake = _FakeRay()
    with NodeWatch(fake, timeout=0.2, poll=0.05) as watch:
        time.sleep(0.8)
    assert watch.fired is None and watch.error(RuntimeError("x")) is None
    with NodeWatch(fake, timeout=0.4, poll=0.05) as watch:
        fake.b_alive = False
        for _ in range(16):
            time.sleep(0.05)
            watch.tick()  # a batch received
    assert watch.fired is None and list(watch.lost) == ["b" * 40]
    assert watch.error(ValueError("values: NaN at row 3")) is None  # advcli's own error: reported as it is
