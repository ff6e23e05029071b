"""Every ``bash`` command example of README.md and docs/**/*.md runs, as a user would type it, and exits
as the page says: 0, or the status a trailing ``# exit N`` comment names (an example that shows an
error). The examples of one page run in order in one fresh directory holding small dumps in each
trainer's own format, built by the format tests' builders, under the paths the pages use
(``logs/exp_001``, ``dump.parquet``, ...). A command that cannot run here is listed in SKIPPED with
the reason; any other example, a new one included, runs."""
import ast
import glob
import os
import re
import shlex
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, SAMPLE, run_main

DOCS = ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"),
                                                                         recursive=True))]

# (text the command contains, why it is not run here). Each entry must still match an example.
SKIPPED = [
    ("python3 -m venv", "creates a virtual environment and installs from the network"),
    ("pip install", "installs from the network"),
    ("s3://", "needs an object store and credentials (tests/formats/test_object_storage.py runs against a local one)"),
    ("export AWS_", "credentials for an object store"),
    ("--engine ray", "starts Ray (tests/distributed/test_ray.py runs the Ray engine where Ray is installed)"),
    ("ray start", "starts a Ray cluster node"),
    ("python benchmarks/", "benchmarks take minutes of the whole machine (docs/performance.md)"),
    ("tools/gpu_check.sh", "needs a CUDA GPU (docs/performance.md, On a GPU)"),
    ("advcli server", "starts or stops the user's background server (tests/cli/test_server.py uses private ones)"),
    ("--log ", "needs the optional wandb / tensorboard extras "
              "(tests/reports/test_tracker.py runs --log and reads it back)"),
    ("my_adv.py", "needs the file docs/api.md shows (tests/cli/test_lab.py writes it from the page and runs these)"),
]

# Placeholders of the pages that are not relative paths: what they stand for in the test directory.
PATHS = {"/abs/rollout_dump": "rollout_dump"}

EXIT = re.compile(r"#\s*exit\s+(\d+)")


def examples(doc: str) -> list[tuple[int, str, int, str | None]]:
    """(line, command, expected exit status, shown output) of every command of the page's ```bash
    blocks, in order; continuation lines joined, comments dropped. A block followed by "prints ..." and
    a ```text block shows what its last command prints (stdout, then stderr)."""
    text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
    found = []
    for block in re.finditer(r"^```bash\n(.*?)^```\n(?:\nprints[^\n]*\n\n```text\n(.*?)^```)?", text, re.S | re.M):
        first = text[:block.start()].count("\n") + 2
        cur, start = "", 0
        for k, line in enumerate(block.group(1).splitlines()):
            if not cur:
                start = first + k
            if line.rstrip().endswith("\\"):
                cur += line.rstrip()[:-1] + " "
                continue
            cur += line
            cmd, cur = cur.strip(), ""
            if not cmd or cmd.startswith("#"):
                continue
            m = EXIT.search(cmd)
            words = shlex.split(cmd, comments=True)
            found.append((start, shlex.join(words) if words[0] != "export" else cmd, int(m.group(1)) if m else 0,
                          None))
        if block.group(2) is not None:
            found[-1] = (*found[-1][:3], block.group(2))
    return found


def skip_reason(cmd: str):
    return next((why for text, why in SKIPPED if text in cmd), None)


# ------------------------------------------------------------------------------------------ the dumps
def _with_module_constant(module, name, value, fn, *args):
    """Call a format test's builder with its module-level group size set to ``value`` (restored after)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, name, value)
        return fn(*args)


def build_fixtures(root):
    """The inputs the pages name, under the names they use."""
    import json

    import test_format_areal
    import test_format_nemo
    import test_format_openinstruct
    import test_format_primerl
    import test_format_primerl_stream
    import test_format_roll
    import test_format_slime_train
    import test_format_trl
    import test_format_verl

    os.symlink(os.path.join(ROOT, "sample_data"), root / "sample_data")
    shutil.copy(SAMPLE, root / "rollouts.parquet")
    # dump.parquet: the sample with the rollout engine's log-probs, as verl's rollout correction reads them
    t = pq.read_table(SAMPLE)
    old = t.column("old_log_probs").combine_chunks()
    shift = np.resize(np.array([0.02, -0.03, 0.01, 0.0], np.float32), len(old.values))
    rollout = pa.ListArray.from_arrays(old.offsets, pa.array(old.values.to_numpy() + shift, pa.float32()))
    pq.write_table(t.append_column("rollout_log_probs", rollout), root / "dump.parquet")
    # bad.parquet: the sample with a NaN reward in row 6
    reward = t.column("reward").to_pylist()
    reward[6] = float("nan")
    i = t.schema.get_field_index("reward")
    pq.write_table(t.set_column(i, "reward", pa.array(reward, t.schema.field(i).type)), root / "bad.parquet")
    # rewards.parquet: a table of one reward a response (a DataFrame's), groups of 4 under the uid column
    pq.write_table(pa.table({"uid": [f"q{i // 4}" for i in range(16)],
                             "reward": [float(x) for x in (1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 1, 0.5, 1, 0, 0)]}),
                   root / "rewards.parquet")
    # NeMo RL's train_data_step*.jsonl
    nemo = root / "logs" / "exp_001"
    nemo.mkdir(parents=True)
    test_format_nemo.write_step(nemo / "train_data_step1.jsonl", test_format_nemo.SAMPLES, 1)
    test_format_nemo.write_step(nemo / "train_data_step2.jsonl", test_format_nemo.SAMPLES[::-1], 2)
    # verl's rollout_data_dir: one {step}.jsonl a step (steps/ and rollout_data/ hold the same dump)
    for name in ("steps", "rollout_data"):
        (root / name).mkdir()
        for step in (11, 12):
            test_format_verl.write(root / name / f"{step}.jsonl", test_format_verl.v1_records(step, step, n=4))
    # TRL's completions_*.parquet, groups of 8 as the page's --set num_generations=8
    trl = root / "outputs" / "completions"
    trl.mkdir(parents=True)
    for step, seed in ((10, 1), (20, 2)):
        _with_module_constant(test_format_trl, "G", 8, test_format_trl.write_step,
                              trl / f"completions_{step:05d}.parquet", step, seed)
    # prime-rl's outputs/rollouts/step_*/train/{all,effective}/traces.jsonl
    test_format_primerl.build(root / "outputs")
    # prime-rl's current outputs/run/monitors/file/traces/{stream,annotations}/ (sealed .zst + live chunks)
    test_format_primerl_stream.build(root / "outputs" / "run")
    # open-instruct's --save_traces shards rollouts/myrun_rollouts_*.jsonl (advantage_normalization_type=standard)
    test_format_openinstruct.build(root / "rollouts", kind="standard", run="myrun")
    # ROLL's rollout_dump_data.step_*.jsonl, groups of 8 as the page's num_return_sequences=8
    roll = root / "rollout_dump"
    roll.mkdir()
    for s in (0, 1):
        obj = _with_module_constant(test_format_roll, "N", 8, test_format_roll.rlvr, s, s + 1)
        (roll / f"rollout_dump_data.step_{s}.jsonl").write_text(json.dumps(obj) + "\n")
    # SkyRL's exports/dumped_evals/global_step_*_evals/*.jsonl
    from test_format_skyrl import rec
    for step in (10, 20):
        d = root / "exports" / "dumped_evals" / f"global_step_{step}_evals"
        d.mkdir(parents=True)
        rng = np.random.default_rng(step)
        recs = [rec(f"q{i % 3}", float(rng.integers(0, 2)), "openai/gsm8k") for i in range(9)]
        (d / "openai_gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    # AReaL's rollout/<version>/<task>.jsonl under logs/$USER/exp/trial
    test_format_areal.build(root / "logs" / "researcher" / "exp" / "trial")
    test_format_areal.save_config(root / "logs" / "researcher" / "exp" / "trial")  # AReaL's config.yaml
    # slime's --dump-details DIR: DIR/rollout_data/<rollout_id>.pt and DIR/train_data/<rollout_id>.pt
    for k in (0, 1):
        test_format_slime_train.build(root / "dump_details", k, test_format_slime_train.RAW[k], 4, k)
    # two outputs to compare
    import advcli
    for est in ("grpo", "rloo"):
        advcli.run(SAMPLE, str(root / f"{est}.parquet"), settings={"algorithm.adv_estimator": est})


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    root = tmp_path_factory.mktemp("doc-dumps")
    build_fixtures(root)
    return root


def _workdir(fixtures, tmp_path):
    """A fresh directory holding the dumps (links), so that each page starts with no outputs."""
    for entry in os.listdir(fixtures):
        os.symlink(fixtures / entry, tmp_path / entry)
    return tmp_path


# -------------------------------------------------------------------------------------------- the tests
def test_examples_are_found():
    cmds = [c for doc in DOCS for _, c, _, _ in examples(doc)]
    assert len(cmds) > 30 and any(c.startswith("advcli run") for c in cmds)
    for text, _ in SKIPPED:  # a stale skip would hide a new example that contains its text
        assert any(text in c for c in cmds), f"SKIPPED entry {text!r} matches no example any more"


def python_blocks(doc: str) -> list[tuple[int, str]]:
    """(line, code) of the page's ```python blocks. docs/api.md's run in tests/reports/test_report.py, from the
    repository root; the others run after the page's commands, in its directory, in one namespace."""
    if doc == "docs/api.md":
        return []
    text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


@pytest.mark.parametrize("doc", [d for d in DOCS if examples(d) or python_blocks(d)])
def test_doc_examples_run(doc, fixtures, tmp_path, monkeypatch, capsys):
    work = _workdir(fixtures, tmp_path)
    monkeypatch.chdir(work)
    monkeypatch.setenv("ADVCLI_SERVER", "off")
    monkeypatch.setenv("USER", "researcher")
    failures, ran = [], 0
    for line, cmd, expected, shown in examples(doc):
        if skip_reason(cmd):
            continue
        words = [PATHS.get(w, os.path.expandvars(w)) for w in shlex.split(cmd, comments=True)]
        assert words[0] == "advcli", f"{doc}:{line}: `{cmd}` is not an advcli command; run it or add it to SKIPPED"
        code, out, err = run_main(words[1:], capsys)
        ran += 1
        if code != expected:
            failures.append(f"{doc}:{line}: `{cmd}` exited {code}, the page says {expected}\n{(out + err)[-1500:]}")
        elif shown is not None and out + err != shown:
            failures.append(f"{doc}:{line}: `{cmd}` printed\n{out + err}\nthe page shows\n{shown}")
    namespace = {}
    for line, code in python_blocks(doc):
        exec(compile(code, f"{doc} line {line}", "exec"), namespace)  # noqa: S102 - our own documentation
        ran += 1
    assert not failures, "\n\n".join(failures)
    if not ran:
        pytest.skip(f"{doc}: every example is in SKIPPED")


OUTSIDE = re.compile(r"\.\./shared|shared/spec|`spec/|spec/\w+\.md|§|/work/|"
                     r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) session|"
                     r"\b(this|last|previous|next|earlier) session\b|\b[Ii]ssue \d+")


@pytest.mark.parametrize("doc", DOCS)
def test_docs_name_nothing_outside_the_repository(doc):
    """The pages are for users: no developer notes outside the repository, no log of past work."""
    text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
    bad = [f"{doc}:{text[:m.start()].count(chr(10)) + 1}: {m.group(0)!r}" for m in OUTSIDE.finditer(text)]
    assert not bad, "\n".join(bad)


PRINTS = re.compile(r"^```python\n((?:(?!```).)*?)^```\n\nprints\n\n```text\n(.*?)^```", re.S | re.M)


def _read(doc: str) -> str:
    return open(os.path.join(ROOT, doc), encoding="utf-8").read()


@pytest.mark.parametrize("doc", [d for d in DOCS if "\nprints\n" in _read(d)])
def test_shown_output_is_what_advcli_prints(doc, monkeypatch, capsys):
    """A Python example followed by "prints" and a text block: run from the repository root, on its own,
    it prints exactly that text (error messages included)."""
    text = _read(doc)
    pairs = PRINTS.findall(text)
    assert pairs, doc
    monkeypatch.chdir(ROOT)
    for code, shown in pairs:
        exec(compile(code, doc, "exec"), {})  # noqa: S102 - our own documentation
        assert capsys.readouterr().out == shown, code


def test_docs_list_every_flavor():
    """docs/api.md's flavor table and its printed flavors.names() name every flavor there is (open-instruct was
    missing from both)."""
    from advcli import flavors

    text = _read("docs/api.md")
    shown = re.search(r"print\(flavors\.names\(\)\)\s+# (\[.*\])", text).group(1)
    assert ast.literal_eval(shown) == flavors.names()
    for name in flavors.names():
        assert f"| `{name}` |" in text, name
