"""advcli.io.readahead: the inputs handed to the kernel's readahead while the process starts."""
import os

import pytest
from conftest import SAMPLE, run_main

from advcli.io import readahead


@pytest.fixture
def files(tmp_path):
    """Three files of known sizes: a/x.parquet (100 B), a/y.parquet (50 B), b.parquet (30 B)."""
    (tmp_path / "a").mkdir()
    for name, size in (("a/x.parquet", 100), ("a/y.parquet", 50), ("b.parquet", 30)):
        (tmp_path / name).write_bytes(b"\0" * size)
    (tmp_path / "a" / "notes.txt").write_text("not an input")
    return tmp_path


@pytest.fixture
def advised(monkeypatch):
    """Every posix_fadvise call as (path, offset, length, advice)."""
    calls = []

    def fake(fd, offset, length, advice):
        calls.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice))

    monkeypatch.setattr(os, "posix_fadvise", fake)
    return calls


def test_local_files_expands_like_the_reader_and_skips_what_names_nothing(files):
    specs = [str(files / "a"), str(files / "b.parquet"), str(files / "missing.parquet"), "s3://bucket/key.parquet",
             str(files / "*.parquet"), "file://" + str(files / "a" / "y.parquet")]
    got = readahead.local_files(specs)
    # the directory's *.parquet sorted, the file, nothing for the missing file or the URI, the glob, file://
    assert got == [str(files / "a" / "x.parquet"), str(files / "a" / "y.parquet"), str(files / "b.parquet"),
                   str(files / "b.parquet"), str(files / "a" / "y.parquet")]


@pytest.mark.skipif(not hasattr(os, "posix_fadvise") or not os.path.isdir("/proc/self/fd"),
                    reason="needs posix_fadvise and /proc")
def test_advise_asks_for_whole_files_in_order_until_the_budget(files, advised):
    paths = [str(files / "a" / "x.parquet"), str(files / "a" / "y.parquet"), str(files / "b.parquet")]
    assert readahead.advise(paths, None) == 180
    assert advised == [(p, 0, n, os.POSIX_FADV_WILLNEED) for p, n in zip(paths, (100, 50, 30))]
    advised.clear()
    assert readahead.advise(paths, 120) == 120  # 100 + the first 20 bytes of the second; the third not at all
    assert [(p, n) for p, _, n, _ in advised] == [(paths[0], 100), (paths[1], 20)]


def test_advise_skips_files_it_cannot_open_or_advise(files, monkeypatch):
    def refuse(fd, offset, length, advice):
        raise OSError(22, "fadvise not supported here")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    assert readahead.advise([str(files / "gone.parquet"), str(files / "b.parquet")], None) == 0


@pytest.mark.skipif(not hasattr(os, "posix_fadvise") or not os.path.isdir("/proc/self/fd"),
                    reason="needs posix_fadvise and /proc")
def test_start_works_in_the_background_and_never_raises(files, advised, monkeypatch):
    t = readahead.start([str(files / "b.parquet"), str(files / "nothing-here")])
    t.join(10)
    assert not t.is_alive()
    assert advised == [(str(files / "b.parquet"), 0, 30, os.POSIX_FADV_WILLNEED)]

    def broken(specs):
        raise RuntimeError("a bug in the expansion")

    monkeypatch.setattr(readahead, "local_files", broken)
    t = readahead.start([str(files / "b.parquet")])  # the thread swallows it: a hint never fails a run
    t.join(10)
    assert not t.is_alive()


def test_available_bytes_reads_meminfo():
    got = readahead.available_bytes()
    if os.path.exists("/proc/meminfo"):
        assert got is not None and got > 0
    else:
        assert got is None


def test_run_starts_the_readahead_on_its_inputs(tmp_path, capsys, monkeypatch):
    seen = []
    monkeypatch.setattr(readahead, "start", lambda specs: seen.append(list(specs)))
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "out.parquet", "-q"], capsys)
    assert code == 0, err
    assert seen == [[SAMPLE]]


def test_inspect_reads_footers_and_asks_for_no_readahead(capsys, monkeypatch):
    seen = []
    monkeypatch.setattr(readahead, "start", lambda specs: seen.append(list(specs)))
    code, _, err = run_main(["inspect", SAMPLE], capsys)
    assert code == 0, err
    assert seen == []
