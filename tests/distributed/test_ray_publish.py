"""--engine ray writing to an object-storage prefix: its part files go to a temporary prefix
(``.NAME.advcli-tmp-PID``) and are then copied, one by one, to the output prefix. A Ctrl-C between two copies
must not leave the prefix with some new parts and some of an earlier run's: the publish runs to its end and the
signal is taken afterwards (the library), or the publish is the command's last step, with signals held
(``advcli run``: status 0, the output complete). Needs Ray and moto's S3 server on 127.0.0.1."""
from __future__ import annotations

import io
import signal
import time

import pyarrow.parquet as pq
import pytest
from _services import s3_keys
from conftest import run_main

GRPO = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]
EARLIER = {"bkt/out/part-000000000000.parquet": b"an earlier run's first part",
           "bkt/out/part-000000000099.parquet": b"an earlier run's last part"}


@pytest.fixture(scope="module")
def dump(s3, ray_session, tmp_path_factory):
    from advcli.sample import make_table

    p = tmp_path_factory.mktemp("raypub") / "in.parquet"
    pq.write_table(make_table(240, 6, 2, 24, 3), p)
    return str(p)


def _earlier_output(s3):
    for key in s3_keys(s3, "bkt"):
        s3.delete_file(key)
    for key, data in EARLIER.items():
        with s3.open_output_stream(key) as f:
            f.write(data)


def _interrupted_between_copies(monkeypatch, seen):
    """ray_engine's publish_prefix, given a filesystem whose second copy delivers a SIGINT once the first
    part is in place."""
    from advcli.engines import ray_engine, ray_output

    class Fs:
        def __init__(self, fs):
            self.fs = fs

        def __getattr__(self, name):
            return getattr(self.fs, name)

        def copy_file(self, src, dst):
            seen["copies"] += 1
            if seen["copies"] == 2:
                signal.raise_signal(signal.SIGINT)
                time.sleep(0.01)  # the handler runs here, on this thread
            return self.fs.copy_file(src, dst)

    monkeypatch.setattr(ray_engine, "publish_prefix", lambda fs, tmp, out: ray_output.publish_prefix(Fs(fs), tmp, out))


def _parts(s3) -> list[str]:
    return [k for k in s3_keys(s3, "bkt") if k.startswith("bkt/out/")]


def _read_output(s3):
    import pyarrow as pa

    tables = []
    for key in _parts(s3):
        with s3.open_input_file(key) as f:
            tables.append(pq.read_table(io.BytesIO(f.read())))
    return pa.concat_tables(tables)


def test_the_library_publishes_every_part_then_takes_the_interrupt(s3, dump, monkeypatch):
    """advcli.run with --engine ray to s3://: a Ctrl-C between the first and second part copied is held until
    every part is copied and the earlier run's extra part removed; then KeyboardInterrupt. The prefix holds
    this run's output whole (it held one new part beside the earlier run's others)."""
    import advcli

    _earlier_output(s3)
    seen = {"copies": 0}
    _interrupted_between_copies(monkeypatch, seen)
    with pytest.raises(KeyboardInterrupt):
        advcli.run(dump, "s3://bkt/out", flavor="verl", settings={"algorithm.adv_estimator": "grpo"},
                   engine="ray", device="cpu", chunk_rows=4, force=True)  # 64 rows a part: 4 parts
    assert seen["copies"] >= 2
    keys = _parts(s3)
    assert "bkt/out/part-000000000099.parquet" not in keys and len(keys) == seen["copies"]
    out = _read_output(s3)
    assert out.num_rows == 240 and "advantages" in out.column_names
    assert [k for k in s3_keys(s3, "bkt") if "advcli-tmp" in k] == []


def test_the_command_publishes_last_and_a_signal_then_changes_nothing(s3, dump, monkeypatch, capsys):
    """advcli run --engine ray -o s3://...: the prefix is published as the command's last step, signals held;
    a SIGINT between two copies ends the command with status 0 and the whole output (it ended with 130 and
    a prefix of mixed parts)."""
    _earlier_output(s3)
    seen = {"copies": 0}
    _interrupted_between_copies(monkeypatch, seen)
    code, _, err = run_main(["run", dump, "-o", "s3://bkt/out", *GRPO, "--engine", "ray", "--device", "cpu",
                             "--chunk-rows", "4", "--force", "-q"], capsys)
    assert code == 0, err
    assert seen["copies"] >= 2
    assert "bkt/out/part-000000000099.parquet" not in _parts(s3)
    out = _read_output(s3)
    assert out.num_rows == 240 and "advantages" in out.column_names
    assert [k for k in s3_keys(s3, "bkt") if "advcli-tmp" in k] == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_response_level_dump_to_an_s3_prefix_gets_scalar_advantages(s3, dump, tmp_path, capsys):
    """A trainer dump without token data (verl's rollout_data_dir JSONL) run with --engine ray to s3://: the
    parts get the scalar columns a response-level run writes, as the local engine's file does (the rewrite
    looked for the staged prefix on the local disk: an internal error)."""
    import json

    import numpy as np

    for key in s3_keys(s3, "bkt"):
        s3.delete_file(key)
    rd = tmp_path / "rollout_data"
    rd.mkdir()
    rng = np.random.default_rng(3)
    with open(rd / "1.jsonl", "w") as fh:
        for p in range(4):
            for sess in range(3):
                fh.write(json.dumps({"input": f"q{p}", "output": f"a{sess}", "score": float(rng.choice([0, 0.5, 1])),
                                     "step": 1, "uid": f"p{p}_{sess}_0"}) + "\n")
    argv = ["run", str(rd), "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "--device", "cpu", "-q"]
    code, _, err = run_main([*argv, "-o", str(tmp_path / "local.parquet")], capsys)
    assert code == 0, err
    code, _, err = run_main([*argv, "-o", "s3://bkt/out", "--engine", "ray", "--force"], capsys)
    assert code == 0, err
    out, want = _read_output(s3), pq.read_table(tmp_path / "local.parquet")
    assert out.schema.field("advantages").type == want.schema.field("advantages").type
    assert out.column("advantages").to_pylist() == want.column("advantages").to_pylist()
    assert [k for k in s3_keys(s3, "bkt") if "advcli-tmp" in k] == []


def test_an_output_under_a_prefix_leaves_no_directory_marker(s3, dump, capsys):
    """--engine ray to s3://bkt/sub/out: the parts and nothing else; the temporary prefix beside the output, when
    removed, left a zero-byte `bkt/sub/` marker (pyarrow keeps a deleted key's parent "directory"): it is at the
    bucket's top level now, as the local engine's temporary key is."""
    import os

    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    for o in client.list_objects_v2(Bucket="bkt").get("Contents", []):  # the earlier tests' markers included
        client.delete_object(Bucket="bkt", Key=o["Key"])
    code, _, err = run_main(["run", dump, "-o", "s3://bkt/sub/out", *GRPO, "--engine", "ray", "--device", "cpu",
                             "-q"], capsys)
    assert code == 0, err
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="bkt").get("Contents", [])]
    assert keys and all(k.startswith("sub/out/part-") for k in keys), keys
