"""Dumps on object storage: every command against a local S3-compatible server (moto, on 127.0.0.1).

`advcli run s3://bucket/dump.parquet --output s3://bucket/out.parquet` gives the local result (the
same table, schema and provenance); an output appears only when complete (a rejected or interrupted run
leaves no object and no temporary key); --force is needed to replace one; inputs are never modified;
directories (prefixes) and globs work there too; validate, inspect, stats and compare read s3:// inputs.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _services import s3_keys

pytest.importorskip("moto", reason="the S3 tests need moto[server] (pip install -e '.[test]')")
pytest.importorskip("flask", reason="moto's server mode needs flask (pip install 'moto[server]')")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(ROOT, "sample_data", "rollouts.parquet")
GRPO = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]


def put(fs, local: str, key: str) -> str:
    with open(local, "rb") as src, fs.open_output_stream(key) as out:
        out.write(src.read())
    return f"s3://{key}"


def get(fs, key: str) -> bytes:
    with fs.open_input_stream(key) as f:
        return f.read()


def _table(data: bytes) -> pa.Table:
    return pq.read_table(pa.BufferReader(data))


def cli(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "advcli", *map(str, args)], capture_output=True, text=True, env=e)


def test_run_s3_to_s3_gives_the_local_bytes(s3, tmp_path):
    src = put(s3, SAMPLE, "bkt/t1/rollouts.parquet")
    before = get(s3, "bkt/t1/rollouts.parquet")
    p = cli("run", src, "--output", "s3://bkt/t1/out/rollouts.parquet", *GRPO, "--chunk-rows", "50", "-q")
    assert p.returncode == 0, p.stderr
    local_in = tmp_path / "rollouts.parquet"
    shutil.copy(SAMPLE, local_in)
    local_out = tmp_path / "out.parquet"
    assert cli("run", local_in, "--output", local_out, *GRPO, "-q").returncode == 0
    # the same table, schema and provenance (the local run splices the input's pages; a remote input is
    # re-encoded, so the bytes differ: tests/unit/test_splice.py holds the two writers to the same table)
    assert _table(get(s3, "bkt/t1/out/rollouts.parquet")).equals(pq.read_table(local_out), check_metadata=True)
    assert get(s3, "bkt/t1/rollouts.parquet") == before  # the input is never modified
    assert s3_keys(s3, "bkt/t1") == ["bkt/t1/out/rollouts.parquet", "bkt/t1/rollouts.parquet"]  # no temporary key


@pytest.mark.parametrize("extra", [[], ["--drop-uniform"]])
def test_a_local_dump_to_object_storage(s3, tmp_path, extra):
    """A local input written to s3:// (the run splices the input's pages, its spill files local; with
    --drop-uniform the kept rows go through a local file first): the object holds what a local output holds,
    provenance included (the input's fingerprint named by the input, not by the kept rows' PID-named file),
    and nothing is left in the working directory (both runs once failed on a path 'CWD/s3:/bucket/...')."""
    local_in = tmp_path / "rollouts.parquet"
    shutil.copy(SAMPLE, local_in)
    local_out = tmp_path / "out.parquet"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    assert cli("run", local_in, "--output", local_out, *GRPO, *extra, "-q").returncode == 0
    key = f"bkt/t9-{len(extra)}/o.parquet"
    p = subprocess.run([sys.executable, "-m", "advcli", "run", str(local_in), "--output", f"s3://{key}",
                        *GRPO, *extra, "-q"], capture_output=True, text=True, cwd=cwd)
    assert p.returncode == 0, p.stderr
    got, want = _table(get(s3, key)), pq.read_table(local_out)
    assert got.equals(want), [n for n in want.column_names if not got.column(n).equals(want.column(n))]
    assert got.schema.metadata == want.schema.metadata
    assert s3_keys(s3, key.rsplit("/", 1)[0]) == [key] and os.listdir(cwd) == []


def test_an_output_under_a_prefix_leaves_no_directory_marker(s3):
    """The bucket afterwards holds the input and the output, nothing else: no temporary key, and no
    zero-byte "t5/out/" marker (pyarrow adds one when a key under it is deleted, apache/arrow#36275)."""
    import boto3

    src = put(s3, SAMPLE, "bkt/t5/in.parquet")
    p = cli("run", src, "--output", "s3://bkt/t5/out/deep/r.parquet", *GRPO, "-q")
    assert p.returncode == 0, p.stderr
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    listed = client.list_objects_v2(Bucket="bkt", Prefix="t5/").get("Contents", [])
    assert sorted(o["Key"] for o in listed) == ["t5/in.parquet", "t5/out/deep/r.parquet"]
    top = client.list_objects_v2(Bucket="bkt", Delimiter="/").get("Contents", [])
    assert [o["Key"] for o in top if "advcli-tmp" in o["Key"]] == []


def test_existing_output_needs_force(s3):
    src = put(s3, SAMPLE, "bkt/t2/in.parquet")
    put(s3, SAMPLE, "bkt/t2/out.parquet")  # an earlier object at the output key
    p = cli("run", src, "--output", "s3://bkt/t2/out.parquet", *GRPO, "-q")
    assert p.returncode == 2 and "already exists" in p.stderr and "--force" in p.stderr
    assert get(s3, "bkt/t2/out.parquet") == open(SAMPLE, "rb").read()
    p = cli("run", src, "--output", "s3://bkt/t2/out.parquet", *GRPO, "-q", "--force")
    assert p.returncode == 0, p.stderr
    assert "advantages" in pq.read_table(pa.BufferReader(get(s3, "bkt/t2/out.parquet"))).column_names


def test_rejected_run_leaves_no_object_and_no_temporary_key(s3, tmp_path):
    t = pq.read_table(SAMPLE)
    rewards = t.column("reward").to_pylist()
    rewards[-1] = float("nan")  # found by the row pass: nothing may be written
    bad = tmp_path / "bad.parquet"
    pq.write_table(t.set_column(t.column_names.index("reward"), "reward", pa.array(rewards, pa.float32())), bad)
    src = put(s3, str(bad), "bkt/t3/bad.parquet")
    p = cli("run", src, "--output", "s3://bkt/t3/out.parquet", *GRPO, "-q")
    assert p.returncode == 2 and "not finite" in p.stderr and "Traceback" not in p.stderr
    assert s3_keys(s3, "bkt/t3") == ["bkt/t3/bad.parquet"]


def test_interrupted_run_leaves_no_object_and_no_temporary_key(s3, tmp_path):
    src = put(s3, SAMPLE, "bkt/t4/in.parquet")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, ADVCLI_TEST_SLOW_WRITE="0.3", TMPDIR=str(tmpdir))
    proc = subprocess.Popen([sys.executable, "-m", "advcli", "run", src, "--output", "s3://bkt/t4/out.parquet",
                             *GRPO, "--chunk-rows", "20", "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    t0 = time.monotonic()
    while not any(".advcli-tmp-" in n for n in os.listdir(tmpdir)):  # the local file being written
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() - t0 < 120, "no temporary output appeared"
        time.sleep(0.02)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err, err
    assert s3_keys(s3, "bkt/t4") == ["bkt/t4/in.parquet"]
    assert not any(".advcli-tmp-" in n for n in os.listdir(tmpdir))


def test_prefix_and_glob_inputs_write_one_object_per_input(s3, tmp_path):
    t = pq.read_table(SAMPLE)
    half = t.num_rows // 2
    for i, part in enumerate((t.slice(0, half), t.slice(half))):
        pq.write_table(part, tmp_path / f"part{i}.parquet")
        put(s3, str(tmp_path / f"part{i}.parquet"), f"bkt/t5/in/part{i}.parquet")
    for spec, out in (("s3://bkt/t5/in", "s3://bkt/t5/out_dir"), ("s3://bkt/t5/in/part*.parquet", "s3://bkt/t5/out_glob")):
        p = cli("run", spec, "--output", out, *GRPO, "-q")
        assert p.returncode == 0, p.stderr
        got = [pq.read_table(pa.BufferReader(get(s3, f"{out[5:]}/part{i}.parquet"))) for i in range(2)]
        assert [g.num_rows for g in got] == [half, t.num_rows - half]
    # the same rows as one local run over both files
    p = cli("run", tmp_path / "part0.parquet", tmp_path / "part1.parquet", "--output", tmp_path / "o", *GRPO, "-q")
    assert p.returncode == 0, p.stderr
    for i in range(2):
        assert _table(get(s3, f"bkt/t5/out_dir/part{i}.parquet")).equals(
            pq.read_table(tmp_path / "o" / f"part{i}.parquet"), check_metadata=True)


def test_other_commands_read_s3_inputs(s3, tmp_path):
    src = put(s3, SAMPLE, "bkt/t6/in.parquet")
    assert cli("validate", src, *GRPO).returncode == 0
    p = cli("inspect", src)
    assert p.returncode == 0 and "384" in p.stdout.replace(",", ""), p.stderr
    p = cli("stats", src, "--json")
    assert p.returncode == 0 and "response_length/mean" in p.stdout, p.stderr
    assert cli("run", src, "--output", "s3://bkt/t6/a.parquet", *GRPO, "-q").returncode == 0
    p = cli("compare", "s3://bkt/t6/a.parquet", "s3://bkt/t6/a.parquet")
    assert p.returncode == 0, p.stderr
    p = cli("run", "s3://bkt/t6/missing.parquet", "--output", tmp_path / "o.parquet", *GRPO)
    assert p.returncode == 2 and "s3://bkt/t6/missing.parquet: no such object" in p.stderr
    p = cli("run", src, "--output", "s3://nobucket/o.parquet", *GRPO)
    assert p.returncode == 2 and "bucket" in p.stderr and "does not exist" in p.stderr
    p = cli("run", "s3://nobucket/run/in.parquet", "--output", tmp_path / "o.parquet", *GRPO)  # an input's bucket
    assert p.returncode == 2 and "the bucket s3://nobucket does not exist" in p.stderr, p.stderr


@pytest.mark.parametrize("out", ["s3://bkt/./t10/in.parquet", "s3://bkt/t10/../t10/in.parquet",
                                 "s3://bkt/x/../t10/in.parquet", "s3://bkt/t10//in.parquet"])
def test_a_key_with_dot_or_empty_parts_is_refused_and_the_input_kept(s3, out):
    """`s3://bkt/./t10/in.parquet` is the input object to the store, not to a string comparison: with --force it
    once replaced the input; `//` ended in an internal error. Such keys are refused, as output and as input."""
    src = put(s3, SAMPLE, "bkt/t10/in.parquet")
    before = get(s3, "bkt/t10/in.parquet")
    p = cli("run", src, "--output", out, *GRPO, "-q", "--force")
    assert p.returncode == 2 and f"{out}: the key has" in p.stderr and "hint:" in p.stderr, p.stderr
    assert "internal error" not in p.stderr
    p = cli("run", out, "--output", "s3://bkt/t10/o.parquet", *GRPO, "-q")
    assert p.returncode == 2 and f"{out}: the key has" in p.stderr, p.stderr
    p = cli("filter", src, "--output", out, "--drop-uniform", "--force", "-q")
    assert p.returncode == 2 and "the key has" in p.stderr
    assert get(s3, "bkt/t10/in.parquet") == before
    assert s3_keys(s3, "bkt/t10") == ["bkt/t10/in.parquet"]


def test_key_parts_unit():
    from advcli.errors import AdvcliError
    from advcli.io.remote import check_key

    for ok in ("", "a", "a/", "a/b.parquet", "a/b/", "a/*.parquet", "a.b/..c/d."):
        check_key("s3://bkt/" + ok, ok)
    for bad, said in (("./a", "'.'"), ("a/../b", "'..'"), ("a//b", "empty"), ("/a", "empty"), ("a/.", "'.'")):
        with pytest.raises(AdvcliError, match=said):
            check_key("s3://bkt/" + bad, bad)


def test_gs_gives_up_after_its_retry_limit():
    """gs:// without credentials (or a store that cannot be reached): google-cloud-cpp's default retries for 15
    minutes in native code, deaf to Ctrl-C; advcli bounds them (ADVCLI_GCS_RETRY_SECONDS) and exits 2."""
    for creds in ({}, {"GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/creds.json"}):  # retried / permanent
        env = {"ADVCLI_GCS_RETRY_SECONDS": "1", "HOME": "/nonexistent", **creds}
        t0 = time.monotonic()
        p = cli("inspect", "gs://advcli-no-such-bucket/in/rollouts.parquet", env=env)
        assert p.returncode == 2 and "gs://advcli-no-such-bucket/in/rollouts.parquet: cannot" in p.stderr, p.stderr
        assert "GOOGLE_APPLICATION_CREDENTIALS" in p.stderr and "internal error" not in p.stderr
        assert time.monotonic() - t0 < 120  # not google-cloud-cpp's 15 minutes
    p = cli("inspect", "gs://b/x.parquet", env={"ADVCLI_GCS_RETRY_SECONDS": "soon"})
    assert p.returncode == 2 and "ADVCLI_GCS_RETRY_SECONDS='soon'" in p.stderr


def test_hdfs_without_its_libraries_says_what_to_set():
    p = cli("inspect", "hdfs://127.0.0.1:1/in/rollouts.parquet",
            env={"ARROW_LIBHDFS_DIR": "/nonexistent", "HADOOP_HOME": "/nonexistent", "JAVA_HOME": "/nonexistent"})
    assert p.returncode == 2 and "hdfs://127.0.0.1:1/in/rollouts.parquet: cannot open a filesystem" in p.stderr
    assert "JAVA_HOME" in p.stderr and "ARROW_LIBHDFS_DIR" in p.stderr and "Traceback" not in p.stderr


def test_refused_credentials_are_named_as_such(tmp_path):
    """A store that answers but refuses the credentials (S3's AccessDenied / InvalidAccessKeyId): every command
    stops before any work with exit 2, names the object, says the store refused access and which variables hold
    the credentials; no traceback, nothing written (locally or there)."""
    from _services import local_s3_server

    with local_s3_server(tmp_path, open_requests=20) as fs:
        put(fs, SAMPLE, "bkt/in.parquet")
        for _ in range(40):  # spend the requests the server answers without checking
            try:
                fs.get_file_info("bkt/in.parquet")
            except OSError as e:
                assert "ACCESS_DENIED" in str(e) or "INVALID_ACCESS_KEY" in str(e)
                break
        else:
            pytest.fail("the local S3 server never started checking credentials")
        out = tmp_path / "out.parquet"
        for args, uri in ((["run", "s3://bkt/in.parquet", "-o", out, *GRPO], "s3://bkt/in.parquet"),
                          (["stats", "s3://bkt/in.parquet"], "s3://bkt/in.parquet"),
                          (["validate", "s3://bkt/in.parquet"], "s3://bkt/in.parquet"),
                          (["run", SAMPLE, "-o", "s3://bkt/out.parquet", *GRPO], "s3://bkt/out.parquet")):
            p = cli(*args)
            assert p.returncode == 2, (args, p.stdout, p.stderr)
            assert f"{uri}: the store refused access" in p.stderr, p.stderr
            assert "AWS_ACCESS_KEY_ID" in p.stderr and "Traceback" not in p.stderr
        assert not out.exists()


def _advantages(table: pa.Table) -> list:
    col = table.column("advantages").to_pylist()
    return [a[0] if isinstance(a, list) else a for a in col]


def test_a_file_on_object_storage_runs_as_the_same_file_on_disk(s3, tmp_path):
    """What a file records is read from object storage as from disk: an advcli output runs with the flavor and
    settings that made it (verl's RLOO, not the default GRPO), a file `advcli convert` wrote runs as its dump
    (NeMo's, groups of its records), and a table of rewards runs one token a row; a trainer's Parquet dump
    named as one (TRL's completions_N.parquet) is refused as a dump to read from disk."""
    import test_format_nemo as nemo

    out = tmp_path / "rloo.parquet"
    assert cli("run", SAMPLE, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=rloo", "-q"
               ).returncode == 0
    (tmp_path / "n").mkdir()
    nemo.write_step(tmp_path / "n" / "train_data_step1.jsonl", nemo.SAMPLES, 1)
    conv = tmp_path / "nemo.parquet"
    assert cli("convert", tmp_path / "n", "-o", conv).returncode == 0
    table = tmp_path / "rewards.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "a", "b", "b"], "reward": [1.0, 0.0, 0.5, 0.5]}), table)
    for name, local in (("rloo", out), ("nemo", conv), ("table", table)):
        remote = put(s3, str(local), f"bkt/same/{name}.parquet")
        here = cli("run", local, "-o", tmp_path / f"{name}_here.parquet")
        there = cli("run", remote, "-o", tmp_path / f"{name}_there.parquet")
        assert here.returncode == 0 and there.returncode == 0, (name, here.stderr, there.stderr)
        ran = [x for x in here.stderr.splitlines() if x.startswith("ran")]
        assert ran == [x for x in there.stderr.splitlines() if x.startswith("ran")], name
        a = pq.read_table(tmp_path / f"{name}_here.parquet")
        b = pq.read_table(tmp_path / f"{name}_there.parquet")
        assert _advantages(a) == _advantages(b), name
    assert "rloo" in [x for x in cli("run", out, "-o", tmp_path / "again.parquet").stderr.splitlines()
                      if x.startswith("ran")][0]




def test_a_trainers_dump_on_object_storage_runs_as_on_disk(s3, tmp_path):
    """A trainer's own dump under a prefix (verl's {step}.jsonl, TRL's completions_N.parquet), one of its files, a
    glob of them: its files are copied down and read as the local dump is, the same advantages; messages and the
    output's provenance name the objects (it was refused: read from local disk only)."""
    import json

    import test_format_trl as trl
    import test_format_verl as verl

    local = tmp_path / "verl"
    local.mkdir()
    for step in (11, 12):
        verl.write(local / f"{step}.jsonl", verl.v1_records(step, step, n=4))
        put(s3, str(local / f"{step}.jsonl"), f"bkt/dumps/verl/{step}.jsonl")
    grpo = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]
    here = cli("run", local, "-o", tmp_path / "here.parquet", *grpo)
    assert here.returncode == 0, here.stderr
    want = _advantages(pq.read_table(tmp_path / "here.parquet"))
    for i, spec in enumerate(("s3://bkt/dumps/verl/", "s3://bkt/dumps/verl", "s3://bkt/dumps/verl/1*.jsonl")):
        out = tmp_path / f"there{i}.parquet"
        there = cli("run", spec, "-o", out, *grpo)
        assert there.returncode == 0, (spec, there.stderr)
        assert _advantages(pq.read_table(out)) == want, spec
        meta = json.loads(pq.read_schema(out).metadata[b"advcli"])
        assert "s3://bkt/dumps/verl" in json.dumps(meta["inputs"]) and "advcli-" not in json.dumps(meta), meta
    one = cli("run", "s3://bkt/dumps/verl/12.jsonl", "-o", tmp_path / "one.parquet", *grpo)
    assert one.returncode == 0 and "s3://bkt/dumps/verl/12.jsonl" in one.stderr, one.stderr
    # a bad record is named by the object's key and line
    bad = tmp_path / "13.jsonl"
    bad.write_text((local / "12.jsonl").read_text().replace('"score"', '"scor"', 1))
    put(s3, str(bad), "bkt/dumps/bad/13.jsonl")
    p = cli("run", "s3://bkt/dumps/bad/", "-o", tmp_path / "bad.parquet", *grpo)
    assert p.returncode == 2 and "s3://bkt/dumps/bad/13.jsonl:1" in p.stderr and "advcli-" not in p.stderr, p.stderr
    # TRL's completions parquet, named as TRL writes it
    (tmp_path / "trl").mkdir()
    trl.write_step(tmp_path / "trl" / "completions_00010.parquet", 10, 1)
    put(s3, str(tmp_path / "trl" / "completions_00010.parquet"), "bkt/dumps/trl/completions_00010.parquet")
    a = cli("run", tmp_path / "trl", "-o", tmp_path / "trl_here.parquet", "--flavor", "trl")
    b = cli("run", "s3://bkt/dumps/trl/", "-o", tmp_path / "trl_there.parquet", "--flavor", "trl")
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    assert _advantages(pq.read_table(tmp_path / "trl_here.parquet")) == \
        _advantages(pq.read_table(tmp_path / "trl_there.parquet"))
    audit = cli("audit", "s3://bkt/dumps/trl/", "--flavor", "trl", "--no-search")  # TRL logs its advantages
    assert audit.returncode == 0 and "s3://bkt/dumps/trl" in audit.stderr + audit.stdout, audit.stderr
    # convert reads it there too, the same rows as from disk
    assert cli("convert", "s3://bkt/dumps/verl/", "-o", tmp_path / "conv_there.parquet").returncode == 0
    assert cli("convert", local, "-o", tmp_path / "conv_here.parquet").returncode == 0
    assert pq.read_table(tmp_path / "conv_there.parquet").equals(pq.read_table(tmp_path / "conv_here.parquet"))
    p = cli("convert", "s3://bkt/same/rloo.parquet", "-o", tmp_path / "x.parquet")
    assert p.returncode == 2 and "needs no conversion" in p.stderr, p.stderr


def test_sample_writes_to_object_storage(s3, tmp_path):
    """`advcli sample -o s3://...` (it ended in an internal error, renaming its local temporary file to the URI):
    the object holds the bytes of the same sample written locally, and no temporary key is left."""
    p = cli("sample", "-o", "s3://bkt/samp/x.parquet", "--rows", "64", "--seed", "3")
    assert p.returncode == 0, p.stderr
    assert "wrote s3://bkt/samp/x.parquet: 64 rows" in p.stderr
    local = tmp_path / "x.parquet"
    assert cli("sample", "-o", local, "--rows", "64", "--seed", "3").returncode == 0
    assert get(s3, "bkt/samp/x.parquet") == local.read_bytes()
    assert s3_keys(s3, "bkt/samp") == ["bkt/samp/x.parquet"]
    again = cli("sample", "-o", "s3://bkt/samp/x.parquet", "--rows", "64")
    assert again.returncode == 2 and "already exists" in again.stderr


def test_an_unreadable_object_gets_the_local_files_hint(s3, tmp_path):
    """A Parquet object cut short, or a CSV object, on the store: the hint a local file gets (it had none)."""
    data = open(SAMPLE, "rb").read()
    with s3.open_output_stream("bkt/bad/cut.parquet") as out:
        out.write(data[: len(data) // 2])
    with s3.open_output_stream("bkt/bad/table.parquet") as out:
        out.write(b"prompt_id,reward\na,1.0\na,0.0\n")
    cut = cli("run", "s3://bkt/bad/cut.parquet", "-o", tmp_path / "o.parquet", *GRPO)
    assert cut.returncode == 2 and "footer is missing: the file was cut short" in " ".join(cut.stderr.split())
    csv = cli("run", "s3://bkt/bad/table.parquet", "-o", tmp_path / "o.parquet", *GRPO)
    assert csv.returncode == 2 and "pd.read_csv" in csv.stderr


@pytest.mark.parametrize("command", [["sample"], ["filter", SAMPLE, "--drop-uniform"]])
def test_one_object_to_a_prefix_with_a_trailing_slash_is_refused(s3, command):
    """`-o s3://bkt/samp2/` for a command that writes one object wrote the object `samp2` and said it wrote
    `s3://bkt/samp2/`; a local `-o nd/` is refused the same way."""
    p = cli(*command, "-o", "s3://bkt/samp2/")
    assert p.returncode == 2 and "names a prefix (the trailing /)" in p.stderr, p.stderr
    assert s3_keys(s3, "bkt") == [k for k in s3_keys(s3, "bkt") if not k.startswith("bkt/samp2")]
