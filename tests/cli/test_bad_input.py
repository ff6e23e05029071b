"""The bad-input corpus: every malformed input or configuration gives ONE clear message naming the
file, row, column or key (and what to do), exit code 2, no traceback, the input untouched and nothing
at the output path (an existing output stays byte-for-byte as it was).

The corpus is generated at test time into a ``bad_inputs/`` temporary directory from a small valid
dump (``advcli.sample.make_table``); each case states what advcli must say. The cases run the real
command-line entry point (``advcli.cli.main``) in-process, which is what ``advcli`` runs, so a
case costs milliseconds; a few run as real subprocesses too. docs/errors.md lists the decisions
(NaN rewards, zero-length responses, empty files ...).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_cli, run_main

from advcli.sample import make_table

GRPO = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]
GAE = ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae"]
KL = GRPO + ["--set", "algorithm.use_kl_in_reward=true"]


def base_table() -> pa.Table:
    """24 rows, groups of 4 scattered, lengths 1..6, masked spans (a valid dump)."""
    return make_table(24, group_size=4, min_len=1, max_len=6, seed=3, masked_span_frac=0.5)


def set_column(t: pa.Table, name: str, arr) -> pa.Table:
    arr = arr if isinstance(arr, (pa.Array, pa.ChunkedArray)) else pa.array(arr)
    if name in t.column_names:
        return t.set_column(t.column_names.index(name), name, arr)
    return t.append_column(name, arr)


def replace_row(t: pa.Table, name: str, row: int, value, typ=None) -> pa.Table:
    vals = t.column(name).to_pylist()
    vals[row] = value
    return set_column(t, name, pa.array(vals, type=typ or t.schema.field(name).type))


def good_bytes() -> bytes:
    import io

    buf = io.BytesIO()
    pq.write_table(base_table(), buf)
    return buf.getvalue()


@dataclass
class Case:
    name: str
    build: object  # (dir) -> list of input paths (written into dir)
    args: list = field(default_factory=lambda: list(GRPO))
    expect: tuple = ()  # fragments the message must contain ({input}: the first input path)
    output: str = "out.parquet"  # relative to the case dir ({input}: the input itself)
    existing_output: bool = False  # put a file at the output path first; it must stay as it was
    skip_if: object = None  # () -> reason or None


def write(t: pa.Table, name: str = "in.parquet"):
    def build(d):
        p = os.path.join(d, name)
        pq.write_table(t, p)
        return [p]
    return build


def raw(data: bytes, name: str = "in.parquet"):
    def build(d):
        p = os.path.join(d, name)
        with open(p, "wb") as fh:
            fh.write(data)
        return [p]
    return build


def two_files(t1: pa.Table, t2: pa.Table):
    def build(d):
        ps = [os.path.join(d, "a.parquet"), os.path.join(d, "b.parquet")]
        pq.write_table(t1, ps[0])
        pq.write_table(t2, ps[1])
        return ps
    return build


def corrupt_pages() -> bytes:
    """A file whose footer is intact but whose data pages are garbage (uncompressed, no checksum:
    the decoder fails on the level/length data)."""
    import io

    buf = io.BytesIO()
    pq.write_table(base_table(), buf, compression="zstd")
    data = bytearray(buf.getvalue())
    start = 4
    footer_len = int.from_bytes(data[-8:-4], "little")
    stop = len(data) - 8 - footer_len
    rng = np.random.default_rng(0)
    data[start:stop] = rng.integers(0, 256, stop - start, dtype=np.uint8).tobytes()
    return bytes(data)


def with_nan(col: str, row: int, value=float("nan")):
    t = base_table()
    if col in ("reward",):
        return replace_row(t, col, row, value)
    vals = t.column(col).to_pylist()
    vals[row] = list(vals[row])
    vals[row][-1] = value
    return set_column(t, col, pa.array(vals, type=t.schema.field(col).type))


def longer_row(col: str, row: int):
    t = base_table()
    vals = t.column(col).to_pylist()
    vals[row] = list(vals[row]) + [0.0]
    return set_column(t, col, pa.array(vals, type=t.schema.field(col).type))


def mask_values(v):
    t = base_table()
    vals = t.column("response_mask").to_pylist()
    vals[5] = [v] * len(vals[5])
    return set_column(t, "response_mask", pa.array(vals, type=pa.list_(pa.int8())))


def _t(**changes):
    t = base_table()
    for k, v in changes.items():
        if v is None:
            t = t.drop_columns([k])
        else:
            t = set_column(t, k, v)
    return t


def _renamed(old, new):
    t = base_table()
    return t.rename_columns([new if c == old else c for c in t.column_names])


def _root():
    return "running as root: file permissions do not bind" if hasattr(os, "geteuid") and os.geteuid() == 0 else None


def _unreadable(d):
    p = os.path.join(d, "in.parquet")
    pq.write_table(base_table(), p)
    os.chmod(p, 0)
    return [p]


def _config_file(text, suffix=".yaml"):
    def build(d):
        p = os.path.join(d, "in.parquet")
        pq.write_table(base_table(), p)
        with open(os.path.join(d, "run" + suffix), "w") as fh:
            fh.write(text)
        return [p]
    return build


def _missing(d):
    return [os.path.join(d, "nope.parquet")]


def _empty_dir(d):
    sub = os.path.join(d, "dumps")
    os.makedirs(sub)
    return [sub]


def _glob(d):
    return [os.path.join(d, "step_*.parquet")]


def _gdpo_table():
    return base_table()


N = base_table().num_rows
CASES = [
    # ------------------------------------------------------------------- files that are not Parquet
    Case("not_parquet", raw(b"prompt_id,reward\nabc,1.0\n"), expect=("{input}", "not a readable Parquet file",
                                                                      "convert")),
    Case("empty_bytes", raw(b""), expect=("{input}", "not a readable Parquet file")),
    Case("truncated_half", raw(good_bytes()[: len(good_bytes()) // 2]), expect=("{input}", "Parquet")),
    Case("truncated_footer", raw(good_bytes()[:-10]), expect=("{input}", "Parquet")),
    Case("corrupt_pages", raw(corrupt_pages()), expect=("{input}", "corrupt")),
    Case("missing_file", _missing, expect=("nope.parquet", "no such file")),
    Case("dir_without_parquet", _empty_dir, expect=("dumps", "no *.parquet")),
    Case("glob_no_match", _glob, expect=("step_*.parquet", "no file matches")),
    Case("unreadable", _unreadable, expect=("{input}", "permission"), skip_if=_root),
    # ----------------------------------------------------------------- missing and mistyped columns
    Case("missing_mask", write(_t(response_mask=None)), expect=("{input}", "'response_mask'", "--column")),
    Case("misspelt_mask", write(_renamed("response_mask", "respons_mask")),
         expect=("{input}", "'response_mask'", "Did you mean 'respons_mask'")),
    Case("missing_reward", write(_t(reward=None)), expect=("{input}", "'reward'")),
    Case("column_map_typo", write(base_table()), args=GRPO + ["--column", "reward=rewrd"],
         expect=("{input}", "'rewrd'", "Did you mean 'reward'")),
    Case("unknown_role", write(base_table()), args=GRPO + ["--column", "rewrd=reward"],
         expect=("unknown role 'rewrd'", "Did you mean 'reward'")),
    Case("reward_is_string", write(_t(reward=pa.array([str(i) for i in range(N)]))),
         expect=("{input}", "'reward'", "string", "number")),
    Case("reward_is_list", write(_t(reward=pa.array([[1.0]] * N, type=pa.list_(pa.float32())))),
         expect=("{input}", "'reward'", "list")),
    Case("mask_not_a_list", write(_t(response_mask=pa.array([1] * N, type=pa.int8()))),
         expect=("{input}", "'response_mask'", "list")),
    Case("logprobs_of_strings", write(_t(old_log_probs=pa.array(
        [["x"] * len(v) for v in base_table().column("old_log_probs").to_pylist()]))),
         args=KL, expect=("{input}", "'old_log_probs'", "list<string>", "list of numbers")),
    Case("prompt_id_float", write(_t(prompt_id=pa.array(np.arange(N) // 4, type=pa.float64()))),
         expect=("{input}", "'prompt_id'", "double")),
    Case("step_float", write(_t(step=pa.array(np.zeros(N), type=pa.float64()))),
         expect=("{input}", "'step'", "integers")),
    # --------------------------------------------------------------------------------- nulls
    Case("null_reward", write(replace_row(base_table(), "reward", 5, None)),
         expect=("{input}", "'reward'", "row 5", "null")),
    Case("null_mask_row", write(replace_row(base_table(), "response_mask", 3, None)),
         expect=("{input}", "'response_mask'", "row 3", "null")),
    Case("null_inside_list", write(with_nan("old_log_probs", 7, None)), args=KL,
         expect=("{input}", "'old_log_probs'", "row 7", "null element")),
    Case("null_prompt_id", write(replace_row(base_table(), "prompt_id", 11, None)),
         expect=("{input}", "'prompt_id'", "row 11", "null")),
    Case("null_step", write(replace_row(_t(step=pa.array(np.zeros(N, dtype=np.int64))), "step", 2, None)),
         expect=("{input}", "'step'", "row 2", "null")),
    # ---------------------------------------------------------------- lists that disagree in length
    Case("values_longer_than_mask", write(longer_row("values", 9)), args=GAE,
         expect=("{input}", "row 9", "'values'", "'response_mask'")),
    Case("logprobs_longer_than_mask", write(longer_row("ref_log_probs", 4)), args=KL,
         expect=("{input}", "row 4", "'ref_log_probs'")),
    # --------------------------------------------------------------------- NaN and infinite numbers
    Case("nan_reward", write(with_nan("reward", 6)), expect=("{input}", "'reward'", "row 6", "nan")),
    Case("inf_reward", write(with_nan("reward", 8, float("inf"))), expect=("{input}", "'reward'", "row 8", "inf")),
    Case("nan_logprob", write(with_nan("old_log_probs", 10)), args=KL,
         expect=("{input}", "'old_log_probs'", "row 10", "nan")),
    Case("inf_values", write(with_nan("values", 12, float("-inf"))), args=GAE,
         expect=("{input}", "'values'", "row 12", "inf")),
    # ------------------------------------------------------------------------------ mask contents
    Case("mask_value_2", write(mask_values(2)), expect=("{input}", "'response_mask'", "row 5", "0 or 1")),
    Case("mask_value_negative", write(mask_values(-1)), expect=("{input}", "'response_mask'", "row 5", "0 or 1")),
    Case("gae_no_valid_tokens", write(_t(response_mask=pa.array(
        [[0] * len(v) for v in base_table().column("response_mask").to_pylist()], type=pa.list_(pa.int8())))),
         args=GAE, expect=("whiten", "response_mask")),
    # ----------------------------------------------------------------- several inputs that disagree
    Case("group_id_mixed_types", two_files(base_table(), _t(prompt_id=pa.array(np.arange(N) // 4))),
         expect=("b.parquet", "'prompt_id'", "int64", "string")),
    Case("inputs_lack_column", two_files(base_table(), _t(values=None)), expect=("b.parquet", "values")),
    # --------------------------------------------------------------------- keys and values
    Case("unknown_key", write(base_table()), args=GRPO + ["--set", "algorithm.gama=0.9"],
         expect=("'algorithm.gama'", "Did you mean 'algorithm.gamma'")),
    # the key without its section: the one key whose dotted path ends with it
    Case("key_without_its_section", write(base_table()), args=["--flavor", "verl", "--set", "adv_estimator=grpo"],
         expect=("'adv_estimator'", "Did you mean 'algorithm.adv_estimator'")),
    Case("unknown_estimator", write(base_table()), args=["--flavor", "verl", "--set", "algorithm.adv_estimator=grop"],
         expect=("algorithm.adv_estimator", "'grop'", "Did you mean 'grpo'")),
    Case("unknown_flavor", write(base_table()), args=["--flavor", "verll"], expect=("verll", "Did you mean 'verl'")),
    Case("unknown_kl_penalty", write(base_table()), args=KL + ["--set", "algorithm.kl_penalty=low_var_kll"],
         expect=("algorithm.kl_penalty", "Did you mean 'low_var_kl'")),
    Case("value_wrong_type", write(base_table()), args=GRPO + ["--set", "algorithm.gamma=abc"],
         expect=("algorithm.gamma", "'abc'", "float")),
    Case("value_bad_yaml", write(base_table()), args=GRPO + ["--set", "algorithm.gamma=[1,"], expect=("YAML",)),
    Case("set_without_equals", write(base_table()), args=GRPO + ["--set", "algorithm.gamma"],
         expect=("KEY=VALUE",)),
    Case("config_file_missing", write(base_table()), args=GRPO + ["--config", "no_such.yaml"],
         expect=("no_such.yaml", "no such file")),
    Case("config_file_unparsable", _config_file("algorithm: [unclosed\n"), args=GRPO + ["--config", "{dir}/run.yaml"],
         expect=("run.yaml", "cannot parse")),
    Case("config_file_unknown_key", _config_file("algorithm:\n  lamda: 0.9\n"),
         args=GRPO + ["--config", "{dir}/run.yaml"], expect=("'algorithm.lamda'", "Did you mean 'algorithm.lam'")),
    Case("gdpo_missing_component", write(base_table()),
         args=["--flavor", "verl", "--set", "algorithm.adv_estimator=gdpo",
               "--set", "algorithm.gdpo_reward_keys=[acc,fmtt]"],
         expect=("{input}", "'fmtt'", "Did you mean 'fmt'")),
    Case("gdpo_without_components", write(base_table()),  # the hint's "[acc, fmt]" is text, not rich markup
         args=["--flavor", "verl", "--set", "algorithm.adv_estimator=gdpo"],
         expect=("algorithm.gdpo_reward_keys", "=[")),
    Case("adaptive_target_zero", write(base_table()),
         args=KL + ["--set", "algorithm.kl_ctrl.type=adaptive", "--set", "algorithm.kl_ctrl.target_kl=0"],
         expect=("algorithm.kl_ctrl.target_kl", "got 0)", "must not be 0")),
    Case("adaptive_horizon_zero", write(base_table()),
         args=KL + ["--set", "algorithm.kl_ctrl.type=adaptive", "--set", "algorithm.kl_ctrl.horizon=0"],
         expect=("algorithm.kl_ctrl.horizon", "got 0)")),
    Case("chunk_rows_zero", write(base_table()), args=GRPO + ["--chunk-rows", "0"], expect=("--chunk-rows",)),
    Case("position_groups_uneven", write(base_table().slice(0, 23)),
         args=["--flavor", "advcli", "--set", "estimator.name=grpo", "--set", "grouping.by=position",
               "--set", "grouping.size=4"], expect=("{input}", "23 rows", "groups of 4")),
    # ----------------------------------------------------------------------------- output paths
    Case("output_is_input", write(base_table()), output="{input}", expect=("{input}", "input")),
    Case("output_dir_missing", write(base_table()), output="no/such/dir/out.parquet",
         expect=("no/such/dir", "does not exist", "mkdir")),
    Case("output_dir_is_a_file", write(base_table()), output="{input}/out.parquet",  # mkdir -p would fail on it
         expect=("{input} is a file, not a directory",)),
    Case("output_not_writable", write(base_table()), output="/proc/advcli-out.parquet",
         expect=("/proc", "not writable")),
    Case("output_exists", write(base_table()), existing_output=True, expect=("out.parquet", "already exists",
                                                                                "--force")),
    Case("several_inputs_output_is_file", two_files(base_table(), base_table()), existing_output=True,
         args=GRPO + ["--force"], expect=("out.parquet", "several inputs need an output directory")),
    # not there yet, but named like a file: refused too, not made a directory called out.parquet
    Case("several_inputs_output_named_like_a_file", two_files(base_table(), base_table()),
         expect=("out.parquet", "several inputs need an output directory", "out/")),
]


def sha(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def prepare(case: Case, tmp: str):
    d = os.path.join(tmp, "bad_inputs", case.name)
    os.makedirs(d)
    inputs = case.build(d)
    first = inputs[0]
    fmt = lambda s: s.replace("{input}", first).replace("{dir}", d)  # noqa: E731
    output = fmt(case.output)
    if not os.path.isabs(output):
        output = os.path.join(d, output)
    if case.existing_output:
        with open(output, "wb") as fh:
            fh.write(b"an earlier output")
    args = [fmt(a) if a.startswith("{dir}") else a for a in case.args]
    argv = ["run", *inputs, "--output", output, "--chunk-rows", "5", *args]
    return d, inputs, output, argv, [fmt(e) for e in case.expect]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case: Case, tmp_path, capsys, monkeypatch):
    reason = case.skip_if() if case.skip_if else None
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)
    d, inputs, output, argv, expect = prepare(case, str(tmp_path))
    before = {p: sha(p) for p in inputs}
    out_before = sha(output)
    listing_before = sorted(os.listdir(d))
    code, out, err = run_main(argv, capsys)
    assert code == 2, f"exit {code}\n{err}"
    assert "Traceback" not in err and "Traceback" not in out
    assert "internal error" not in err
    assert err.count("advcli: error:") == 1, err
    low = err.lower()
    for frag in expect:
        assert frag.lower() in low, f"{frag!r} not in message:\n{err}"
    assert {p: sha(p) for p in inputs} == before, "an input changed"
    assert sha(output) == out_before, "something was written at the output path"
    leftovers = [f for f in os.listdir(d) if f not in listing_before and f != os.path.basename(output)]
    assert not leftovers, leftovers
    if not case.existing_output and case.name != "output_is_input":
        assert not os.path.exists(output)


def test_corpus_size():
    assert len(CASES) >= 25
    assert len({c.name for c in CASES}) == len(CASES)


# -------------------------------------------------------------------- valid odd inputs (no error)
def _zero_length_rows() -> pa.Table:
    t = base_table()
    cols = {}
    for name in ("response_mask", "old_log_probs", "ref_log_probs", "values"):
        vals = t.column(name).to_pylist()
        vals[0] = []
        vals[13] = []
        cols[name] = pa.array(vals, type=t.schema.field(name).type)
    for k, v in cols.items():
        t = set_column(t, k, v)
    return t


@pytest.mark.parametrize("est", ["grpo", "rloo", "gae", "reinforce_plus_plus"])
def test_zero_length_responses_are_valid(est, tmp_path, capsys):
    """A response of no tokens (L_i = 0) is a valid row: its output lists are empty, the other rows
    are computed as usual (for grpo the empty row's score is 0: there is no token to hold its reward)."""
    src = tmp_path / "in.parquet"
    pq.write_table(_zero_length_rows(), src)
    code, _, err = run_main(["run", str(src), "-o", str(tmp_path / "o.parquet"), "--flavor", "verl",
                             "--set", f"algorithm.adv_estimator={est}", "-q"], capsys)
    assert code == 0, err
    out = pq.read_table(tmp_path / "o.parquet")
    adv = out.column("advantages").to_pylist()
    assert adv[0] == [] and adv[13] == []
    assert [len(a) for a in adv] == [len(m) for m in out.column("response_mask").to_pylist()]
    assert all(np.isfinite(x) for a in adv for x in a)


@pytest.mark.parametrize("estimator", ["grpo", "gae", "reinforce_plus_plus"])
def test_empty_file_gives_empty_output(tmp_path, capsys, estimator):
    """0 rows in, 0 rows out, with the output schema (new columns added); a whitening estimator too, since a file
    with no rows has no step to whiten (a step of rows with no valid token is refused: the test above)."""
    src = tmp_path / "in.parquet"
    pq.write_table(base_table().slice(0, 0), src)
    args = ["--flavor", "verl", "--set", f"algorithm.adv_estimator={estimator}"]
    code, _, err = run_main(["run", str(src), "-o", str(tmp_path / "o.parquet"), *args, "-q"], capsys)
    assert code == 0, err
    out = pq.read_table(tmp_path / "o.parquet")
    assert out.num_rows == 0
    assert "advantages" in out.column_names and "returns" in out.column_names


@pytest.mark.parametrize("flavor", ["verl", "nemo", "openrlhf", "skyrl", "areal", "trl", "roll", "prime-rl",
                                    "open-instruct", "slime"])
@pytest.mark.parametrize("with_step", [True, False])
def test_an_empty_sample_runs_under_every_flavor(tmp_path, capsys, flavor, with_step):
    """The sample's schema with no rows: every flavor's default pipeline (KL in the reward for OpenRLHF and AReaL,
    whitening for NeMo's and verl's) writes an empty output. Without a step column a whitening estimator
    refused it ('found 0' valid tokens in a step no row is in), and the KL flavors' per-step figures were an
    internal error; filter refused it as 'keeps no row: all 0 group(s)'."""
    t = pq.read_table(SAMPLE).slice(0, 0)
    src = tmp_path / "in.parquet"
    pq.write_table(t if with_step else t.drop(["step"]), src)
    extra = ["--set", "n_samples_per_prompt=8"] if flavor == "slime" else []
    code, _, err = run_main(["run", str(src), "-o", str(tmp_path / "o.parquet"), "--flavor", flavor, *extra, "-q"],
                            capsys)
    assert code == 0, err
    assert pq.read_table(tmp_path / "o.parquet").num_rows == 0
    if flavor == "verl":
        code, _, err = run_main(["filter", str(src), "-o", str(tmp_path / "f.parquet"), "--drop-uniform", "-q"], capsys)
        assert code == 0, err
        assert pq.read_table(tmp_path / "f.parquet").schema == pq.read_schema(src)


def test_output_exists_with_force_is_replaced(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    pq.write_table(base_table(), src)
    dst = tmp_path / "o.parquet"
    dst.write_bytes(b"old")
    code, _, err = run_main(["run", str(src), "-o", str(dst), *GRPO, "--force", "-q"], capsys)
    assert code == 0, err
    assert pq.read_table(dst).num_rows == N


@pytest.mark.parametrize("name", ["not_parquet", "nan_reward", "unknown_key"])
def test_bad_input_subprocess(name, tmp_path):
    """The same cases through a real ``python -m advcli`` process: exit 2, one line, no traceback."""
    case = next(c for c in CASES if c.name == name)
    d, inputs, output, argv, expect = prepare(case, str(tmp_path))
    p = run_cli(*argv)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert p.stderr.count("advcli: error:") == 1
    for frag in expect:
        assert frag.lower() in p.stderr.lower()
    assert not os.path.exists(output)


@pytest.mark.parametrize("kind", ["dangling", "fifo"])
def test_a_broken_link_or_fifo_among_parquet_inputs_is_refused(kind, tmp_path, capsys):
    """A directory or glob of Parquet inputs holding a symbolic link whose target is gone, or a FIFO (reading it
    waited forever): refused, naming it, whether reached through the directory, a glob or its own path."""
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(base_table(), d / "a.parquet")
    bad = d / "b.parquet"
    if kind == "dangling":
        os.symlink(tmp_path / "gone.parquet", bad)
        said = [f"{bad}: a broken symbolic link", str(tmp_path / "gone.parquet")]
    else:
        os.mkfifo(bad)
        said = [f"{bad}: not a regular file", "FIFO"]
    out = tmp_path / "out"
    for spec in (d, str(d / "*.parquet"), bad):
        code, _, err = run_main(["run", spec, "-o", f"{out}/", *GRPO], capsys)
        assert code == 2 and all(s in err for s in said), (spec, err)
        assert not out.exists()


@pytest.mark.parametrize("command", [["run", SAMPLE], ["validate", SAMPLE], ["filter", SAMPLE, "--drop-uniform"],
                                     ["sample", "--rows", "50"]])
def test_an_output_path_that_cannot_be_a_file_is_refused_before_the_work(tmp_path, capsys, command):
    """`-o out.parquet/` where out.parquet is a file was an internal error (run, validate: FileExistsError; sample:
    NotADirectoryError) or refused only after the whole filter; a dangling symbolic link at the output path passed
    validate and made run fail after its work ('appeared while this command worked'). Each is refused at once;
    --force replaces the link (not the missing file it names)."""
    existing = tmp_path / "o.parquet"
    existing.write_bytes(b"keep")
    code, _, err = run_main([*command, "-o", f"{existing}/"], capsys)
    assert code == 2 and f"{existing}/: names a directory (the trailing /), but {existing} is a file" in err, err
    assert existing.read_bytes() == b"keep"
    link = tmp_path / "link.parquet"
    link.symlink_to("nowhere.parquet")
    code, _, err = run_main([*command, "-o", link], capsys)
    assert code == 2 and "already exists (a symbolic link to nowhere.parquet, which does not exist)" in err, err
    if command[0] != "validate":
        code, _, err = run_main([*command, "-o", link, "--force"], capsys)
        assert code == 0, err
        assert not link.is_symlink() and pq.read_metadata(link).num_rows > 0
        assert not (tmp_path / "nowhere.parquet").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.parquet", "o.parquet"]  # no temporary left


@pytest.mark.parametrize("command", [["run", SAMPLE], ["run", SAMPLE, "--drop-uniform"],
                                     ["filter", SAMPLE, "--drop-uniform"], ["sample", "--rows", "50"]])
def test_a_long_output_name_is_written(tmp_path, capsys, command):
    """A 240-byte output name is legal (255 is the limit), but its temporary name (.NAME.advcli-tmp-PID...) was
    not: 'the output directory is not writable (File name too long)', or an internal error in convert."""
    out = tmp_path / ("é" * 60 + "a" * 112 + ".parquet")  # 240 bytes in UTF-8
    assert len(out.name.encode()) == 240
    code, _, err = run_main([*command, "-o", out], capsys)
    assert code == 0, err
    assert pq.read_metadata(out).num_rows > 0
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_filter_names_the_row_of_a_null_group_id_in_its_file(tmp_path, capsys):
    """filter said 'column prompt_id has null group ids' of the first file, with no row; with two files in, the
    row is named in its own file (rows counted from 0 in each)."""
    t = pq.read_table(SAMPLE)
    first, second = t.slice(0, 100), t.slice(100)
    ids = second.column("prompt_id").to_pylist()
    ids[7] = None
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(first, d / "a.parquet")
    pq.write_table(second.set_column(second.column_names.index("prompt_id"), "prompt_id",
                                     pa.array(ids, pa.string())), d / "b.parquet")
    code, _, err = run_main(["filter", d, "--drop-uniform", "-o", tmp_path / "out"], capsys)
    assert code == 2 and f"{d / 'b.parquet'}: column 'prompt_id', row 7: null group id (1 row(s) without one)" in err


@pytest.mark.parametrize("args", [["s3://bkt/run/rollout_data/1.jsonl", "--flavor", "verl"],
                                  ["s3://bkt/run/rollout_data/", "--from", "verl-jsonl"],
                                  ["gs://bkt/slime/rollout_data/0.pt"]])
def test_a_trainer_dump_on_a_store_that_cannot_be_reached_is_named(tmp_path, capsys, monkeypatch, args):
    """A trainer's dump on object storage is copied down and read (tests/formats/test_object_storage.py); on a
    store that cannot be reached (a closed local port here, gs:// without credentials) the URI is named, exit 2,
    never an internal error (a verl JSONL on S3 was once read as Parquet: 'not a readable Parquet file')."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("ADVCLI_GCS_RETRY_SECONDS", "1")
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = run_main(["run", *args, "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and f"{args[0]}: cannot" in err and "internal error" not in err, err


def test_a_damaged_footer_is_told_from_a_file_cut_short(tmp_path, capsys):
    """A Parquet file of full length whose footer bytes were overwritten was said 'cut short'; it is said
    damaged, while a file that lost its end is still said cut short."""
    src = open(SAMPLE, "rb").read()
    footer_len = int.from_bytes(src[-8:-4], "little")
    damaged = bytearray(src)
    start = len(src) - 8 - footer_len
    damaged[start:start + 64] = b"\xff" * 64
    (tmp_path / "damaged.parquet").write_bytes(bytes(damaged))
    (tmp_path / "short.parquet").write_bytes(src[:-100])
    code, _, err = run_main(["run", tmp_path / "damaged.parquet", "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and "whole in length, but its footer" in err and "cut short" not in err, err
    code, _, err = run_main(["run", tmp_path / "short.parquet", "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and "the file was cut short" in err, err


@pytest.mark.parametrize("command", [["filter", "--drop-uniform"], ["convert"], ["run"]])
def test_a_missing_input_is_named_before_an_existing_output(tmp_path, capsys, command):
    """filter and convert said 'OUT: already exists' of a command whose input does not exist (run named the
    input): the missing input is said first."""
    out = tmp_path / "exists.parquet"
    out.write_bytes(b"x")
    code, _, err = run_main([command[0], tmp_path / "nope", *command[1:], "-o", out], capsys)
    assert code == 2 and f"{tmp_path / 'nope'}: no such file" in err and "already exists" not in err, err


@pytest.mark.parametrize("command", [["run"], ["filter", "--drop-uniform"], ["convert"]])
def test_a_fifo_at_the_output_path_is_refused_even_with_force(tmp_path, capsys, command):
    """The output is written aside and renamed onto its path, so `-o FIFO --force` (or a device: run as root,
    `-o /dev/null --force`) replaced the node with a Parquet file. Such a path is refused, --force or not, and the
    node stays as it was."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for extra in ([], ["--force"]):
        code, _, err = run_main([*command, SAMPLE, "-o", fifo, *extra], capsys)
        assert code == 2 and "is a FIFO, not a file" in err, err
        assert os.path.exists(fifo) and not os.path.isfile(fifo)
    os.mkfifo(tmp_path / "pipe.md")
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "o.parquet", "--report", tmp_path / "pipe.md",
                             "--force"], capsys)
    assert code == 2 and "is a FIFO, not a file" in err and not os.path.isfile(tmp_path / "pipe.md"), err


def test_a_negative_sample_seed_is_a_usage_error(tmp_path, capsys):
    code, _, err = run_main(["sample", "-o", tmp_path / "s.parquet", "--seed", "-1"], capsys)
    assert code == 2 and "--seed" in err and not (tmp_path / "s.parquet").exists()


def test_a_float64_reward_beyond_float32_is_named_so_by_validate_and_run(tmp_path, capsys):
    """A reward of 1e300 in a float64 column is finite in the file and inf in the run's float32: the message says
    so and names --precision float64 (it said 'reward inf is not finite'), and validate refuses it as run does (it
    passed)."""
    t = pq.read_table(SAMPLE)
    r = t.column("reward").to_pylist()
    r[3] = 1e300
    t = t.set_column(t.column_names.index("reward"), "reward", pa.array(r, pa.float64()))
    src = tmp_path / "big.parquet"
    pq.write_table(t, src)
    for command in (["validate", src], ["run", src, "-o", tmp_path / "o.parquet"]):
        code, _, err = run_main(command, capsys)
        assert code == 2 and "row 3: value 1e+300 is beyond float32" in err and "--precision float64" in err, err


def test_an_output_naming_a_missing_directory_says_the_command_writes_one_file(tmp_path, capsys):
    code, _, err = run_main(["filter", SAMPLE, "--drop-uniform", "-o", f"{tmp_path / 'nd4'}{os.sep}"], capsys)
    said = " ".join(err.split())
    assert code == 2 and "is a directory" not in said and "names a directory (the trailing" in said
    assert "nd4.parquet" in said and not (tmp_path / "nd4").exists()


def test_a_bad_value_in_a_config_file_names_the_file(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("algorithm:\n  adv_estimator: grpo\n  norm_adv_by_std_in_grpo: maybe\n")
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "o.parquet", "--config", cfg], capsys)
    assert code == 2 and f"config file {cfg}: key algorithm.norm_adv_by_std_in_grpo: 'maybe'" in err
    # the same bad value by --set names no file; a --set over the file's value runs
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "o.parquet", "--set", "algorithm.adv_estimator=grpo",
                             "--set", "algorithm.norm_adv_by_std_in_grpo=maybe"], capsys)
    assert code == 2 and "config file" not in err
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "o.parquet", "--config", cfg, "--set",
                             "algorithm.norm_adv_by_std_in_grpo=true", "-q"], capsys)
    assert code == 0, err


def test_a_column_map_to_no_column_is_named_without_a_flavor(tmp_path, capsys):
    """--column prompt_id=uid where the input has no uid, no flavor: it said the dump had neither prompt_id nor
    values (it has prompt_id)."""
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "o.parquet", "--column", "prompt_id=uid"], capsys)
    said = " ".join(err.split())
    assert code == 2 and "--column prompt_id=uid: no column 'uid'" in said and "neither" not in said
