"""``advcli audit|stats|run RUN_DIR --follow``: a training run's dump directory followed as the trainer
writes it, one step at a time.

The loop (:func:`follow`): every ``--poll`` it lists the dump's steps (:class:`Watcher`: the files the
format names, grouped by the step their name gives), takes each step once it is complete (a later step
appeared, or its files have been quiet for ``--settle`` seconds; a JSON Lines file whose last line has no
newline yet is not complete, and where a later step forces it, the torn line is left out and said), copies
it (:func:`snapshot`: the complete bytes, fingerprinted) and runs the command on that copy alone
(:class:`StepRunner`), with what a step's numbers depend on from the earlier steps carried in:

- the configuration resolved once, from the first step (the flavor, its release, what the dump told it);
- the adaptive KL controller's coefficient (:data:`advcli.pipeline.rows.KL_CARRY`: the value after the
  step becomes the next step's ``kl.coef``);
- prime-rl's EMA baselines per agent (:data:`advcli.estimators.cohort.EMA_CARRY`);
- the step numbers, from the trainer's own file names.

Every statistic advcli resolves is scoped to a step otherwise (``advcli.engines.ray_steps``), so the steps
followed one by one give the numbers of one run over the finished dump, bit for bit. Runs whose
statistics span steps (``grouping.scope: all``) are refused.

State (:class:`FollowState`, JSON written atomically after every step, before its line is printed, ``--state``
or beside the outputs): the last step taken, the carried values, the counts, and the fingerprints of the last
:data:`WATCHED` steps' files: a restarted follower resumes after the last step it finished, and a taken file that
changes afterwards is reported once (never read again). Memory does not grow with the run: one step is
held at a time, the state is a few numbers per agent.

prime-rl's trace streams (``monitors/file/traces/stream/NNNNN.jsonl[.zst]`` and the annotation streams)
plug in through :data:`advcli.commands.follow_units.CHUNK_LISTERS` (:mod:`advcli.commands.follow_stream`:
a chunk is not a step there, each step is cut out of the streams once its records and annotations have
arrived); every other format is followed by its step file names.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field

import typer

from ..errors import AdvcliError
from .follow_units import CHUNK_LISTERS, WATCHED, Unit

STATE_VERSION = 1
CHANGED_KEPT = 10000  # the files reported as changed or late, remembered so as to report each once
TEXT_SUFFIXES = (".jsonl", ".json")
# formats whose files are numbered by the training step but not written at every step (TRL writes its
# completions every logging_steps): a gap there is one larger than the smallest stride seen so far
STRIDED = {"trl-completions"}


# ------------------------------------------------------------------------------------- the watcher
class Watcher:
    """The steps of a dump directory as they appear: its format found once (:func:`advcli.formats.discover`
    on the first files), then each poll a walk of the directory for that format's files."""

    def __init__(self, root: str, source: str | None, settle: float, shown: str | None = None,
                 step_column: str = "step"):
        self.root, self.source, self.settle = os.path.abspath(root), source, settle
        self.shown = shown or root  # the directory as the user gave it, for the messages
        self.step_column = step_column  # advcli's own Parquet: the column whose values are the steps
        self.notes: list[str] = []  # lines to report (drain)
        self._steps: dict = {}  # Parquet path -> ((size, mtime_ns), (first, last step of its column) or None)
        self._noted: set = set()  # the relabelled files already said
        self.fmt = None  # a Format, or "parquet" (advcli's own Parquet, one file per step)
        self.last_error: AdvcliError | None = None
        self.after: int | None = None  # the last step a resumed follow took
        self.lister = None  # CHUNK_LISTERS' lister for the format, once known
        # audit: where the folder's dump logs no advantages and another format's files beside it do (slime's
        # debugging guide: data_{id}.pt beside train_{id}.pt), those are followed, as the one-off audit reads them
        self.logged = False

    def _find_format(self) -> bool:
        from ..formats import discover, get

        if self.source == "parquet":
            self.fmt = "parquet"
            return True
        try:
            found = discover(self.root, get(self.source) if self.source not in (None, "", "auto") else None)
        except AdvcliError as e:  # nothing written yet, a first line still being written: look again
            if self.source is None and self._parquet_files() and not self._trainer_named():
                self.fmt = "parquet"  # advcli's own Parquet, one file per step
                return True
            self.last_error = _renamed_error(e, self.root, self.shown)  # named as the user named the directory
            return False
        self.fmt = found.fmt
        if self.logged and found.fmt.logged is None and self.source in (None, "", "auto"):
            from ..formats.discovery import logging_formats

            beside = {f for p in found.alone if os.path.dirname(p) == self.root for f in logging_formats(p)}
            beside = [f for f in beside if f.name in found.fmt.beside_formats]
            if len(beside) == 1:
                self.fmt = beside[0]
        return True

    def _walk(self):
        from ..formats.discovery import SKIPPED_DIRS

        for base, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            for name in sorted(files):
                yield os.path.join(base, name)

    def _trainer_named(self) -> bool:
        """Whether a file is named as a trainer's dump (TRL's completions while its first file is written)."""
        from ..formats.registry import FORMATS, load

        load()
        return any(f.matches(p) for p in self._walk() for f in FORMATS.values())

    def _parquet_files(self) -> list[str]:
        return [p for p in self._walk() if p.endswith(".parquet") and not os.path.basename(p).startswith(".")]

    def units(self) -> list[Unit]:
        """Every step present now, ascending (empty while the format is not known yet)."""
        if self.fmt is None and not self._find_format():
            return []
        name = "parquet" if self.fmt == "parquet" else self.fmt.name
        from . import follow_stream  # noqa: F401 - registers prime-rl's stream lister

        if name in CHUNK_LISTERS:
            if self.lister is None:
                entry = CHUNK_LISTERS[name]
                self.lister = entry.start(self.root, self.settle, self.after) if hasattr(entry, "start") else entry
            return self.lister(self.root)
        by_step: dict[int, list[str]] = {}
        through: dict[int, int] = {}
        steps, self._steps = self._steps, {}
        for p in (self._parquet_files() if self.fmt == "parquet" else self._walk()):
            if self.fmt != "parquet":
                if not self.fmt.matches(p) or self.fmt.companion(p):
                    continue
                step = self.fmt.step_of(p)
            else:
                step = None
            if step is None:  # a name without the format's step group (slime's --save-debug-rollout-data
                nums = re.findall(r"\d+", os.path.basename(p))  # TEMPLATE, Parquet): its last number
                step = int(nums[-1]) if nums else None
            if self.fmt == "parquet":  # advcli's own Parquet: the step column decides, as a one-off run reads it
                held = self._column_steps(p, steps)
                if held is not None:
                    if step is not None and step != held[0] and p not in self._noted:
                        self._noted.add(p)
                        what = f"step {held[0]}" if held[0] == held[1] else f"steps {held[0]}–{held[1]}"
                        self.notes.append(f"{self.named(p)}: its name says step {step}, its {self.step_column} "
                                          f"column holds {what}; followed as step {held[0]}, as the one-off "
                                          "command reads the directory")
                    step = held[0]
                    through[step] = max(through.get(step, step), held[1])
            if step is None:
                continue
            by_step.setdefault(step, []).append(p)
        units = [Unit(s, by_step[s], through=through.get(s) if through.get(s, s) != s else None)
                 for s in sorted(by_step)]
        if self.fmt != "parquet" and self.fmt.beside is not None:
            for u in units:
                self._with_beside(u)
        return units

    def _with_beside(self, u: Unit) -> None:
        """A step of a format whose reader opens files beside its data (slime's train dump: the rollout dump in
        ../rollout_data/) copied with them, as the trainer laid them out from the followed directory's parent;
        the command reads the followed directory's copy, named as the user named it."""
        base, root, fmt = os.path.dirname(self.root), self.root, self.fmt

        def write(into: str) -> tuple[dict, list[str]]:  # the step's files, then the files they read beside them
            taken, notes = snapshot(root, Unit(u.step, u.files), os.path.join(into, os.path.basename(root)))
            snapshot(base, Unit(u.step, [q for p in u.files for q in fmt.beside(p)]), into)
            return taken, notes

        u.write, u.read_at = write, os.path.basename(root)
        u.named_as = os.path.dirname(self.shown.rstrip(os.sep)) or "."

    def named(self, p: str) -> str:
        """``p`` (under the followed directory) as the user named that directory."""
        return os.path.join(self.shown, os.path.relpath(p, self.root))

    def _column_steps(self, p: str, before: dict) -> tuple[int, int] | None:
        """(first, last) step of a whole Parquet file's step column, from its row groups' statistics where
        written (else the column read); None while it has no footer (being written) or has no such column.
        Kept per file while its size and mtime stay (``before``: the last poll's)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        try:
            st = os.stat(p)
        except FileNotFoundError:
            return None
        key = (st.st_size, st.st_mtime_ns)
        if p in before and before[p][0] == key:
            self._steps[p] = before[p]
            return before[p][1]
        held = None
        try:
            meta = pq.read_metadata(p)
            names = [meta.schema.column(i).name for i in range(meta.num_columns)]
            if self.step_column in names and meta.num_rows:
                i = names.index(self.step_column)
                stats = [meta.row_group(g).column(i).statistics for g in range(meta.num_row_groups)]
                if all(x is not None and x.has_min_max for x in stats):
                    held = (int(min(x.min for x in stats)), int(max(x.max for x in stats)))
                else:
                    mm = pc.min_max(pq.read_table(p, columns=[self.step_column]).column(0))
                    if mm["min"].is_valid:
                        held = (int(mm["min"].as_py()), int(mm["max"].as_py()))
        except Exception:  # noqa: BLE001 - no footer yet (or not Parquet): the name decides until it is whole
            return None
        self._steps[p] = (key, held)
        return held

    def signature(self) -> str:
        """A digest of every file under the directory (path, size, modification time): it changes when a file
        appears, grows or is rewritten, so ``--until-idle`` counts from the dump's last change, not from the last
        step taken."""
        h = hashlib.sha1()
        for p in self._walk():
            try:
                st = os.stat(p)
            except FileNotFoundError:
                continue
            h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def taken(self, step: int) -> None:
        if hasattr(self.lister, "taken"):
            self.lister.taken(step)

    def drain(self) -> list[str]:
        lines, self.notes = self.notes, []
        return lines + (self.lister.drain() if hasattr(self.lister, "drain") else [])

    def complete(self, unit: Unit, later: Unit | None, now: float) -> bool:
        """Whether ``unit`` can be taken: sealed, or every file quiet for the settle time and either whole (its
        last line ended (JSON Lines), its footer written (Parquet), its archive's directory there (``.pt``)) or
        left so by a trainer that moved on: the ``later`` step (the next one on disk) written since the unit's
        files last changed (its torn last line is then left out). A later step says nothing of a unit still
        changing: files land out of order and interleave (a dump written on a background thread)."""
        if unit.sealed is not None:
            return unit.sealed
        stats = []  # each file's stat, taken once
        for p in unit.files:
            try:
                st = os.stat(p)
            except FileNotFoundError:
                return False
            if now - st.st_mtime < self.settle:
                return False
            if st.st_size == 0 and (later is None or _newest_change(later.files) < st.st_mtime_ns):
                return False  # not written yet; left empty once the trainer moved on (the one-off leaves it out)
            stats.append((p, st))
        if later is not None and stats and _newest_change(later.files) >= max(st.st_mtime_ns for _, st in stats):
            return True
        for p, st in stats:
            if p.endswith(TEXT_SUFFIXES):
                with open(p, "rb") as fh:
                    fh.seek(st.st_size - 1)
                    if fh.read(1) != b"\n":
                        return False  # a half-written last line: the trainer is still writing it
            elif p.endswith(".parquet"):
                import pyarrow.parquet as pq

                try:
                    pq.read_metadata(p)
                except Exception:  # noqa: BLE001 - no footer yet
                    return False
            elif not _archive_whole(p, st.st_size):
                return False  # a torch.save archive or a pickle still being written (a slow file system)
        return True


def _archive_whole(path: str, size: int) -> bool:
    """Whether a binary dump file is whole as far as its bytes tell: a zip archive (``torch.save``'s) holds its
    end-of-central-directory record in its last 64 KiB, a pickle ends with its STOP opcode (``.``); any other
    file: True (its reader says what is wrong)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            fh.seek(max(0, size - 65557))
            tail = fh.read()
    except OSError:
        return False
    if head == b"PK\x03\x04":
        return b"PK\x05\x06" in tail
    if path.endswith((".pkl", ".pickle")) and head[:1] == b"\x80":  # pickle protocol 2+
        return tail.endswith(b".")
    return True


def _newest_change(files: list[str]) -> int:
    """The latest modification time (ns) of ``files``; 0 when one is missing or empty (not written yet)."""
    newest = 0
    for p in files:
        try:
            st = os.stat(p)
        except OSError:
            return 0
        if st.st_size == 0:
            return 0
        newest = max(newest, st.st_mtime_ns)
    return newest


def fingerprint(path: str, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        left = size
        while left > 0:
            b = fh.read(min(left, 1 << 20))
            if not b:
                break
            h.update(b)
            left -= len(b)
    return h.hexdigest()


TORN_NOTE = "torn last line"  # snapshot's note of a line left out


def snapshot(root: str, unit: Unit, into: str, whole: bool = False) -> tuple[dict, list[str]]:
    """Copy the step's complete bytes under ``into`` (the same relative paths, so the format reads them as
    the trainer named them) -> ({relative path: [size taken, mtime_ns, sha256]}, notes). A JSON Lines file
    is copied up to its last newline: a torn last line is never read as data (said in the notes). ``whole``:
    every byte, a last line without its newline included (the last step at the end of ``--until-idle``, read
    as the one-off command reads the finished dump: its reader says a torn line). A unit with its own writer
    (``Unit.write``) writes its copy itself."""
    if unit.write is not None:
        return unit.write(into)
    taken, notes = {}, []
    for p in unit.files:
        rel = os.path.relpath(p, root)
        dst = os.path.join(into, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        st = os.stat(p)
        with open(p, "rb") as fh:
            data = fh.read(st.st_size)
        if p.endswith(TEXT_SUFFIXES) and data and not data.endswith(b"\n") and not whole:
            cut = data.rfind(b"\n") + 1
            notes.append(f"{p}: {TORN_NOTE} ({len(data) - cut} bytes without a newline) left out")
            data = data[:cut]
        with open(dst, "wb") as fh:
            fh.write(data)
        taken[rel] = [len(data), st.st_mtime_ns, hashlib.sha256(data).hexdigest()]
    return taken, notes


# --------------------------------------------------------------------------------------- the state
@dataclass
class FollowState:
    """What a restarted follower needs (written as JSON, atomically, after every step)."""
    command: str
    root: str
    last_step: int | None = None
    steps: int = 0
    disagreed: int = 0
    disagreed_steps: list = field(default_factory=list)  # the first 100
    flavor: str | None = None
    cfg: dict | None = None
    native: dict | None = None
    columns: dict | None = None
    notes: dict = field(default_factory=dict)  # auto_note, flavor_note
    options: dict = field(default_factory=dict)  # the options the configuration was resolved from
    kl_coef: float | None = None
    ema: dict = field(default_factory=dict)  # agent -> baseline
    taken: list = field(default_factory=list)  # [[step, {rel: [size, mtime_ns, sha]}]] of the last WATCHED steps
    changed: list = field(default_factory=list)  # "path" reported as changed after it was taken

    @classmethod
    def load(cls, path: str | None, command: str, root: str) -> FollowState:
        if path and os.path.isdir(path):
            raise AdvcliError(f"{path}: is a directory; --state names the follower's state file",
                              hint=f"e.g. --state {os.path.join(path, 'follow-state.json')}")
        if path and os.path.exists(path):
            try:
                with open(path) as fh:
                    d = json.load(fh)
            except (OSError, ValueError) as e:
                raise AdvcliError(f"{path}: not a follower's state file ({e})",
                                  hint="give another --state file, or remove this one to follow the run from its "
                                       "first step") from None
            if not isinstance(d, dict) or not d.get("command") or not d.get("root"):
                raise AdvcliError(f"{path}: not a follower's state file (it does not record the command and the "
                                  "directory of a follow)",
                                  hint="give another --state file, or remove this one to follow the run from its "
                                       "first step")
            if d.get("version") != STATE_VERSION or d.get("command") != command or d.get("root") != root:
                raise AdvcliError(f"{path}: the state of another follow ({d.get('command')} of {d.get('root')})",
                                  hint="give this follow its own --state file")
            d.pop("version")
            return cls(**d)
        return cls(command, root)

    def save(self, path: str | None) -> None:
        if not path:
            return
        d = {"version": STATE_VERSION, **self.__dict__}
        tmp = f"{path}.tmp{os.getpid()}"
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            with open(tmp, "w") as fh:
                json.dump(d, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:  # never a stray temporary file beside the state
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise


# ------------------------------------------------------------------------------ one step, per command
@dataclass
class Options:
    """The command's own options, as the follower passes them to each step's run."""
    command: str
    flavor: str | None = None
    estimator: str | None = None
    set_: list | None = None
    config: str | None = None
    column: list | None = None
    source: str | None = None
    chunk_rows: int = 4096
    device: str = "auto"
    # audit
    against: str | None = None
    rtol: float = 1e-4
    atol: float = 1e-5
    search: bool = True
    top: int = 10
    # run
    out_dir: str | None = None
    output_mode: str = "full"
    write_columns: str | None = None
    report: str | None = None  # each step's report: REPORT with .step_N before its suffix
    precision: str | None = None
    padded: bool | None = None

    def resolution(self) -> dict:
        """What the configuration is resolved from (a restarted follower must be given the same)."""
        return {"flavor": self.flavor, "estimator": self.estimator, "set": list(self.set_ or []),
                "config": self.config, "column": list(self.column or []), "from": self.source,
                "precision": self.precision, "padded": self.padded}

    def words(self) -> str:
        """The options that resolve the configuration, as the command line gives them (a one-off command that
        reads a file the follow did not take uses them too)."""
        import shlex

        out = [("--flavor", self.flavor), ("--estimator", self.estimator), ("--config", self.config),
               ("--from", self.source), ("--precision", self.precision)]
        out += [("--set", x) for x in self.set_ or []] + [("--column", x) for x in self.column or []]
        text = " ".join(f"{k} {shlex.quote(str(v))}" for k, v in out if v not in (None, ""))
        if self.padded is not None:
            text += " --padded" if self.padded else " --ragged"
        return (" " + text) if text else ""

    def step_report(self, step: int) -> str | None:
        if not self.report:
            return None
        stem, ext = os.path.splitext(self.report)
        return f"{stem}.step_{step}{ext}"


def _renamed_text(text: str, tmp: str, root: str) -> str:
    """``text`` with the snapshot directory's paths (under ``tmp``) named by the user's directory ``root``."""
    if root in ("", "."):  # the copy stands for the working directory: its paths relative to it
        return text.replace(tmp.rstrip("/") + "/", "").replace(tmp.rstrip("/"), ".")
    return text.replace(tmp.rstrip("/") + "/", root.rstrip("/") + "/").replace(tmp.rstrip("/"), root.rstrip("/"))


def _renamed(obj, tmp: str, root: str):
    """``obj`` (a report) with the snapshot directory's paths named by the trainer's own directory."""
    return json.loads(_renamed_text(json.dumps(obj, default=str), tmp, root))


def _renamed_error(e: AdvcliError, tmp: str, root: str) -> AdvcliError:
    """``e`` (raised on a step's copy in ``tmp``) with the copy's paths named by the user's ``root``: a message
    names the file the user can open, never the follower's temporary copy."""
    e.message, e.hint = (_renamed_text(t, tmp, root) if t else t for t in (e.message, e.hint))
    e.args = (e.message,)
    return e


def _num(x, fmt: str = ".4g") -> str:
    return "–" if x is None else format(x, fmt)


class StepRunner:
    """Runs the command on one step's copy, with the carried state in (:mod:`this module's docstring`)."""

    def __init__(self, opts: Options, state: FollowState):
        self.opts, self.state = opts, state

    def _resolve(self, specs: list[str]) -> None:
        """The configuration, once (the first step; a resumed follow keeps the one in its state)."""
        st, o = self.state, self.opts
        st.options = st.options or o.resolution()
        if st.cfg is not None or o.command == "stats":
            return
        from .resolve import resolve_cli_config

        dumped: list[str] = []  # without --flavor, the dump's trainer's semantics (advcli.runs.resolution)
        flavor, cfg, native, columns, auto_note = resolve_cli_config(specs, o.flavor, o.set_, o.config, o.column,
                                                                     None, estimator=o.estimator, dump_notes=dumped)
        flavor_note = dumped[0] if dumped and o.command == "audit" else None
        from ..config.runspec import RunSpec

        if RunSpec.from_config(cfg).grouping.scope == "all":
            raise AdvcliError("--follow: this configuration computes its statistics over the whole dump as one "
                              "step (grouping.scope: all); a followed run takes one step at a time",
                              hint="run it once the dump is finished, without --follow")
        if o.precision is not None:
            cfg["precision"] = o.precision
        if o.padded is not None:
            cfg["padded"] = o.padded
        # the flavor as the user named it (NAME or NAME@RELEASE): the state file is JSON
        st.flavor, st.cfg, st.native, st.columns = str(flavor), cfg, dict(native or {}), dict(columns or {})
        st.notes = {"auto_note": auto_note, "flavor_note": flavor_note}
        st.kl_coef = float(RunSpec.from_config(cfg).kl.coef)

    def run(self, unit: Unit, tmp: str, root: str) -> dict:
        """The command's report of the step (its copy in ``tmp`` named as the trainer's ``root``), the
        carried state updated from it."""
        from ..estimators.cohort import EMA_CARRY
        from ..formats import name_dumps, open_inputs
        from ..formats.input_edge import release_inputs
        from ..io.reader import SHOWN_AS
        from ..pipeline.rows import KL_CARRY

        o, st = self.opts, self.state
        given = [os.path.join(tmp, unit.read_at) if unit.read_at else tmp]
        shown = {g: _renamed_text(g, tmp, root) for g in given}  # the outputs' provenance names the user's files
        SHOWN_AS.update(shown)
        if o.command == "audit":  # the step's files that log the advantages, as the one-off audit reads a folder
            from ..audit.recompute import logged_inputs

            given = logged_inputs(given, o.source, o.against)
        specs = open_inputs(given, "parquet" if o.source == "parquet" else o.source)
        kl, ema = {}, {"start": dict(st.ema)}
        k1, k2 = KL_CARRY.set(kl), EMA_CARRY.set(ema)
        try:
            if o.command == "audit":
                from ..audit.recompute import require_logged

                require_logged(specs, o.against)  # as the one-off audit checks its inputs first
            self._resolve(specs)
            rep = name_dumps(getattr(self, "_" + o.command)(unit, specs))
        except AdvcliError as e:  # named by the step's files (file and line) while its conversion is still known
            from ..formats import name_dump_rows

            e.message, e.args = name_dump_rows(e.message), (name_dump_rows(e.message),)
            raise
        finally:
            KL_CARRY.reset(k1)
            EMA_CARRY.reset(k2)
            release_inputs(specs)
            for g in shown:
                SHOWN_AS.pop(g, None)
        if "end" in kl:
            st.kl_coef = kl["end"]
        if ema.get("end"):
            st.ema = next(iter(ema["end"].values()))  # the run's own decay: its first call
        return _renamed(rep, tmp, root)

    def _cfg(self) -> dict:
        cfg = copy.deepcopy(self.state.cfg)
        if self.state.kl_coef is not None:
            cfg["kl"]["coef"] = self.state.kl_coef
        return cfg

    def _audit(self, unit: Unit, specs: list[str]) -> dict:
        from ..audit.recompute import audit_dump

        o, st = self.opts, self.state
        rep = audit_dump(specs, st.flavor, self._cfg(), st.native, st.columns, auto_note=st.notes.get("auto_note"),
                         flavor_note=st.notes.get("flavor_note"), against=o.against, rtol=o.rtol, atol=o.atol,
                         chunk_rows=o.chunk_rows, device=o.device, search=o.search, top=o.top, whole=False,
                         torn=unit.torn)
        return rep

    def _stats(self, unit: Unit, specs: list[str]) -> dict:
        from ..config import parse_column_maps
        from ..runs.stats import dump_statistics

        return dump_statistics(specs, parse_column_maps(self.opts.column), self.opts.chunk_rows)

    def _run(self, unit: Unit, specs: list[str]) -> dict:
        from ..report import build_report
        from ..runs.runner import RunRequest, run_inputs, with_mean_between

        o, st = self.opts, self.state
        final = os.path.join(o.out_dir, f"step_{unit.step}.parquet")
        part = os.path.join(o.out_dir, f".part-step_{unit.step}.parquet")
        req = RunRequest(output=part, cfg=self._cfg(), flavor=st.flavor, native=st.native, columns=st.columns,
                         chunk_rows=o.chunk_rows, device=o.device, force=True, output_mode=o.output_mode,
                         write_columns=o.write_columns)
        try:
            # the flavor's group filter (OpenRLHF's dynamic filtering) drops whole groups first, as `run` does
            result, _ = run_inputs(specs, req, curation=with_mean_between(None, req.cfg, False))
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(part)
            raise
        os.replace(part, final)  # the step's output appears whole or not at all
        result.outputs = [final]
        return build_report(result, flavor=st.flavor, native=st.native, command="run",
                            note=st.notes.get("auto_note"))


# the figures each command's per-step line leads with, in its own words (catalog names, read through their
# entries: advcli.report.catalog.value); the catalog's other ``follow`` figures come after them (follow_figures)
LEAD = {"run": ("rows",),
        "stats": ("rows", "critic/score/mean", "group_health/overall/solved_share",
                  "group_health/overall/uniform_groups", "group_health/overall/groups"),
        "audit": ("rows", "agree", "max_abs_diff", "rows_disagreeing", "rows_without_logged_value",
                  "rows_of_torn_groups")}


def step_line(command: str, step: int, rep: dict) -> tuple[str, bool, dict]:
    """(the step's one line, whether it agrees, the numbers for the trackers)."""
    from ..report.catalog import value
    from ..results.tracker import summary_values

    values = summary_values(rep)
    lead = LEAD.get(command, LEAD["run"])

    def fig(name: str):
        if name not in lead:  # a figure the line prints is one of its lead figures (a test reads LEAD)
            raise KeyError(f"{name!r} is not one of the --follow {command} line's figures (LEAD)")
        return value(rep, name)

    if command == "audit":
        agree = bool(fig("agree"))
        line = (f"step {step}: {fig('rows')} rows, {'agree' if agree else 'DISAGREE'}, "
                f"max |diff| {_num(fig('max_abs_diff'), '.3g')}")
        unchecked = fig("rows_without_logged_value")
        if unchecked:  # prime-rl: traces not shipped (yet): the verdict is over the others
            line += f", {unchecked} row(s) without a logged value (not checked)"
        torn = fig("rows_of_torn_groups")
        if torn:  # the rest of the torn line's group: recomputed without that row, so not comparable
            line += (f", {torn} row(s) of group {', '.join(rep.get('torn_groups') or [])} not checked (the group lost "
                     "its torn row)")
        if not agree:
            line += f", {fig('rows_disagreeing')} row(s) disagree"
            if rep.get("worst"):
                w = rep["worst"][0]
                line += (f"; worst {w.get('where', 'row ' + str(w.get('row')))} token {w.get('position')}: "
                         f"logged {_num(w.get('logged'), '.6g')}, recomputed {_num(w.get('recomputed'), '.6g')}")
            stage = rep.get("first_stage")
            if stage:
                line += f"; first stage that differs: {stage['stage']}"
        return line, agree, values
    if command == "stats":
        uniform, groups = fig("group_health/overall/uniform_groups"), fig("group_health/overall/groups")
        line = (f"step {step}: {fig('rows')} rows, score {_num(fig('critic/score/mean'))}, solved "
                f"{_num(fig('group_health/overall/solved_share'), '.1%')}, uniform "
                f"groups {'–' if uniform is None else uniform} of {'–' if groups is None else groups}")
    else:
        line = f"step {step}: {fig('rows')} rows -> {(rep.get('outputs') or ['?'])[0]}"
    return line + follow_figures(rep.get("metrics") or {}), True, values


def follow_figures(m: dict) -> str:
    """The catalog's ``follow`` figures (:mod:`advcli.report.catalog`) of a step's metrics ``m`` that no line
    leads with (:data:`LEAD`), a family at a time under its first figure's label, each figure named by its
    last part (", advantages mean 0.1 min -1 max 1"; a figure alone: ", LABEL 0.1"); a family whose first
    figure the step lacks is left out."""
    from ..report.catalog import shown_in

    lead = {n for names in LEAD.values() for n in names}
    families: dict[str, list] = {}
    for f in shown_in("follow"):
        if f.name not in lead:
            families.setdefault(f.family, []).append(f)
    text = ""
    for figs in families.values():
        if m.get(figs[0].name) is None:
            continue
        last = [f.name.rpartition("/")[2] for f in figs]
        if len(figs) == 1:
            text += f", {figs[0].label or figs[0].name} {_num(m.get(figs[0].name))}"
        else:
            text += f", {figs[0].label or figs[0].family} " + " ".join(f"{k} {_num(m.get(f.name))}"
                                                                        for k, f in zip(last, figs))
    return text


# ----------------------------------------------------------------------------------------- the loop
class _Stop(Exception):
    pass


class _Signals:
    """SIGTERM and Ctrl-C end the follow as KeyboardInterrupt, except while a step is being committed
    (:meth:`held`: the state updated and saved, the step logged and printed): a signal there is delivered once the
    commit is whole, so the state file never lags a step the terminal or the summary shows."""

    def __init__(self):
        self.holding, self.pending = False, False

    def handler(self, signum, frame):
        if self.holding:
            self.pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def held(self):
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt


def audited_folder(root: str, shown: str, echo=None, flavor: str | None = None) -> tuple[str, str]:
    """``audit --follow`` on a folder a trainer lays out with the dump that logs its advantages in a subfolder
    (:attr:`advcli.formats.registry.Format.logged_folder`; slime's ``--dump-details`` DIR: the rollout dumps in
    ``rollout_data/`` log none, the train dumps in ``train_data/`` hold those slime trained on): that subfolder is
    followed, as the one-off audit reads it (:func:`advcli.audit.recompute.logged_inputs`), and waited for when the
    trainer has not written it yet; only under that trainer's ``flavor`` when one is given. -> ``(root, shown)``,
    the folder followed and its name as the user would type it."""
    from ..formats.registry import FORMATS, load

    load()
    asked = (flavor or "").partition("@")[0].strip() or None
    for fmt in FORMATS.values():
        if fmt.logged_folder is None or asked not in (None, fmt.trainer_flavor()):
            continue
        sub = fmt.logged_folder(root)
        if sub is not None:
            named = os.path.join(shown, os.path.relpath(sub, root))
            if echo is not None:
                echo(f"following {named}{'' if os.path.isdir(sub) else ' (not written yet)'}: the {fmt.title} "
                     f"files beside it log no advantages; {fmt.logged_elsewhere.split(':')[0]}", err=True)
            return sub, named
    return root, shown


def follow(root: str, opts: Options, *, settle: float = 2.0, poll: float | None = None,
           until_idle: float | None = None, fail_fast: bool = False, state_path: str | None = None,
           trackers=None, json_out: bool = False, quiet: bool = False, echo=None) -> int:
    """Follow ``root`` until Ctrl-C / SIGTERM, ``until_idle`` seconds without a change in the dump (the step on
    disk then taken as the last one, or, if it cannot be read, named: AdvcliError after the summary), or
    (``fail_fast``) the first step that disagrees. Returns the exit code: 1 if a step disagreed (over the whole
    follow, resumed runs included), else 0."""
    from ..io import remote

    if remote.is_uri(root):
        raise AdvcliError(f"{root}: --follow watches a local directory the trainer writes into, not object storage",
                          hint="follow the run where it writes, or read the dump on the store once it is written "
                               "(without --follow)")
    if not os.path.isdir(root):
        raise AdvcliError(f"{root}: --follow watches a trainer's dump directory; no such directory",
                          hint="give the directory the trainer writes its step files into")
    if settle <= 0 or (until_idle is not None and until_idle <= 0):
        raise AdvcliError("--settle and --until-idle take a number of seconds > 0")
    poll = poll if poll is not None else min(1.0, max(0.05, settle / 4))
    echo = echo or (lambda s, err=False: typer.echo(s, err=err))
    shown, root = root, os.path.abspath(root)
    # audit a folder whose logged advantages are in a subfolder (slime's --dump-details DIR: train_data/): that one,
    # known from the layout now or, on a folder the trainer has not written yet, once its first files show it
    look_for_logged = opts.command == "audit" and opts.against is None and opts.source in (None, "", "auto")
    if look_for_logged:
        given = root
        root, shown = audited_folder(root, shown, None if quiet else echo, opts.flavor)
        look_for_logged = root == given
    if opts.command == "run":
        real_out, real_root = os.path.realpath(opts.out_dir), os.path.realpath(root)
        if real_out == real_root or real_out.startswith(real_root + os.sep):  # as the one-off command refuses it
            stem = os.path.basename(real_root.rstrip(os.sep)) or "out"
            where = "the followed directory" if real_out == real_root else "inside the followed directory"
            raise AdvcliError(f"{opts.out_dir}: is {where}; the outputs would land among the dump's files (and be "
                              "followed as the trainer's)", hint=f"name a directory outside the dump: -o "
                                                                 f"{stem}_advantages/")
        os.makedirs(opts.out_dir, exist_ok=True)
        state_path = state_path or os.path.join(opts.out_dir, "follow-state.json")
    st = FollowState.load(state_path, opts.command, root)
    if st.options and st.options != opts.resolution():
        raise AdvcliError(f"{state_path}: this follow was started with other options ({json.dumps(st.options)}); "
                          "its steps so far were computed with those",
                          hint="restart it with the same --flavor/--set/--config/--column/--estimator/--from, or "
                               "give a new --state to follow the run again from its first step")
    from ..config import parse_column_maps

    if opts.source not in (None, "", "auto", "parquet"):  # the format named: refused before any wait
        from ..formats import get

        refuse_format(get(opts.source), shown, opts.command)
    def watching(root: str, shown: str) -> Watcher:
        watcher = Watcher(root, opts.source, settle, shown, parse_column_maps(opts.column).get("step", "step"))
        watcher.logged = opts.command == "audit" and opts.against is None  # the files that log the advantages
        watcher.after = st.last_step
        return watcher

    watcher = watching(root, shown)
    runner = StepRunner(opts, st)
    logger = None
    if trackers:
        from ..results.tracker import StepLogger

        logger = StepLogger(trackers, {"command": opts.command, "follow": root, "flavor": st.flavor})
    if st.last_step is not None and not quiet:
        echo(f"resuming after step {st.last_step} ({st.steps} step(s) taken before)", err=True)
    ended, last_change, seen = "", time.monotonic(), None
    unfinished: AdvcliError | None = None
    checked = False  # the format found and accepted (refuse_format)
    since_ns = time.time_ns()  # a file of a step older than one taken, written since then, landed late
    old = {}

    signals = _Signals()  # SIGTERM ends the follow as Ctrl-C does; neither while a step is committed
    with contextlib.suppress(ValueError):  # not the main thread: Ctrl-C only
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, signals.handler)
    existed = root if os.path.isdir(root) else None  # the followed directory, once seen (a follow may move below)
    try:
        while True:
            now = time.time()
            if existed == root and not os.path.isdir(root):  # removed (or renamed) under the follow: nothing to take
                after = f"after step {st.last_step} " if st.last_step is not None else ""
                unfinished = AdvcliError(f"{shown}: removed (or renamed) while followed; any step it held {after}was "
                                         "not taken", hint="follow the dump where it is now: the same --state resumes "
                                                           "after the last step taken")
                ended = "the followed directory went away (below)"
                break
            existed = root if os.path.isdir(root) else existed
            sig = watcher.signature() if until_idle is not None else None
            if sig != seen:  # a file appeared, grew or was rewritten: the idle clock starts again
                seen, last_change = sig, time.monotonic()
            reported = len(st.changed)
            _check_changed(st, root, echo, quiet, watcher.named, opts.command, opts.words())
            units = watcher.units()
            if watcher.fmt not in (None, "parquet") and not checked:
                if look_for_logged and watcher.fmt.logged_folder is not None:
                    look_for_logged = False
                    sub, named = audited_folder(root, shown, None if quiet else echo, opts.flavor)
                    if sub != root:  # the trainer's first files show the layout: follow the logged subfolder
                        root, shown, st.root = sub, named, sub
                        watcher = watching(root, shown)
                        continue
                refuse_format(watcher.fmt, shown, opts.command)
                checked = opts.command != "audit" or nothing_to_audit(watcher.fmt, units, shown, opts.against)
            _check_late(st, units, root, echo, quiet, since_ns, watcher.named, opts.command, opts.words())
            for line in watcher.drain():
                if not quiet:
                    echo(line, err=True)
            if len(st.changed) != reported:
                with signals.held():
                    st.save(state_path)  # a restart does not report them again
            todo = [u for u in units if st.last_step is None or u.step > st.last_step]
            took = False
            for i, u in enumerate(todo):
                if not watcher.complete(u, todo[i + 1] if i + 1 < len(todo) else None, now):
                    break  # steps are taken in order: never one after a step still being written
                if _left_empty(u, st, watcher, echo, quiet, state_path, signals):
                    continue
                fmt = watcher.fmt if watcher.fmt == "parquet" else watcher.fmt.name
                gap = gap_note(st, u.step, fmt)
                if fmt == "parquet" and len(u.files) > 1:
                    gap.append(several_files(u, [watcher.named(p) for p in u.files], opts.command))
                _take(u, root, shown, st, runner, opts, logger, json_out, quiet, echo, gap, state_path=state_path,
                      signals=signals)
                watcher.taken(u.step)
                took = True
                if fail_fast and st.disagreed:
                    raise _Stop("--fail-fast: a step disagrees")
            if took:
                last_change = time.monotonic()
            elif until_idle is not None and time.monotonic() - last_change >= until_idle:
                if watcher.fmt is None and not os.path.isdir(root):  # audited_folder's, never written
                    raise AdvcliError(f"{shown}: not written in {until_idle:g} s (--until-idle)",
                                      hint="the trainer writes the dump that logs its advantages there as it "
                                           "trains, when started with the option that writes it (slime: "
                                           "--dump-details DIR or --save-debug-train-data)")
                if watcher.fmt is None and watcher.last_error is not None:
                    # the dump's first files never became readable (a file cut short and no longer written, a
                    # folder of no dump): the summary, then the reader's error (exit 2)
                    unfinished = watcher.last_error
                    ended = (f"no change in {shown} for {until_idle:g} s (--until-idle), and no step could be "
                             "read (below)")
                    break
                pending = [u for u in units if st.last_step is None or u.step > st.last_step]
                if not pending:
                    ended = f"no new step for {until_idle:g} s (--until-idle)"
                    break
                # a step on disk but not taken (still being written, landed within --settle of the deadline, or
                # left with a torn last line): never dropped silently. Taken as the last step once the dump has
                # been quiet for --settle, as the one-off command reads it; a step that cannot be read so ends
                # the follow naming it, with the one-off command's error (exit 2)
                if time.monotonic() - last_change < settle:
                    time.sleep(poll)
                    continue
                try:
                    if st.steps and _left_empty(pending[0], st, watcher, echo, quiet, state_path, signals):
                        last_change = time.monotonic()  # (a trainer's Parquet file of 0 bytes: no footer to wait on)
                        continue
                    if waiting_on_parquet(pending[0], settle, watcher.named):
                        time.sleep(poll)
                        continue
                    if pending[0].sealed is False:
                        raise AdvcliError(f"step {pending[0].step}: still open when nothing in {shown} had changed "
                                          f"for {until_idle:g} s (--until-idle): a live chunk ending in a "
                                          "half-written line?; not taken",
                                          hint="audit the finished directory without --follow to see what it "
                                               "holds; a restarted follow (same --state) takes the step once "
                                               "it is complete")
                    u = pending[0]
                    fmt = watcher.fmt if watcher.fmt == "parquet" else watcher.fmt.name
                    _take(u, root, shown, st, runner, opts, logger, json_out, quiet, echo, gap_note(st, u.step, fmt),
                          whole=True, state_path=state_path, signals=signals)
                except AdvcliError as e:
                    unfinished = e
                    ended = (f"no change in the dump for {until_idle:g} s (--until-idle), and step {pending[0].step}, "
                             "on disk, could not be taken (below)")
                    break
                watcher.taken(u.step)
                last_change = time.monotonic()
                if fail_fast and st.disagreed:
                    raise _Stop("--fail-fast: a step disagrees")
                continue
            time.sleep(poll)
    except KeyboardInterrupt:
        ended = "interrupted"
    except _Stop as e:
        ended = str(e)
    except AdvcliError as e:
        if not st.steps:  # refused before any step (a format --follow does not take, other options): the error alone
            raise
        unfinished = e  # a step that cannot be taken after others were: the summary of those, then the error
        ended = "a step could not be taken (below)"
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    summary = {"steps": st.steps, "disagreed": st.disagreed, "last_step": st.last_step}
    if logger is not None:
        for line in logger.close(summary):
            if not quiet:
                echo(line, err=True)
    if not quiet:
        tail = ""
        if opts.command == "audit":
            tail = f", {st.disagreed} disagreed" + (f" (steps {', '.join(map(str, st.disagreed_steps))})"
                                                    if st.disagreed else "")
        last = f"last step {st.last_step}" if st.last_step is not None else "none taken"
        echo(f"followed {shown}: {st.steps} step(s), {last}{tail}; stopped: {ended}"
             + (f"; state in {state_path}" if state_path and os.path.exists(state_path) else ""), err=True)
    if unfinished is not None:
        raise unfinished  # after the summary: exit 2, the step and file named as the one-off command names them
    return 1 if st.disagreed else 0


def _left_empty(u: Unit, st: FollowState, watcher, echo, quiet: bool, state_path, signals) -> bool:
    """A step whose every file is empty (0 bytes) and left so (the trainer moved on, or the dump is quiet): passed
    over as the one-off command leaves such a file out of the dump, said, and recorded in the state (a restart
    does not wait on it); False for any other step. A Parquet file of 0 bytes is no step either way: the
    one-off command refuses it, and so does taking it."""
    if watcher.fmt == "parquet" or not u.files or u.sealed is not None:
        return False
    try:
        stats = {p: os.stat(p) for p in u.files}
    except OSError:
        return False
    if any(x.st_size for x in stats.values()):
        return False
    empty = hashlib.sha256(b"").hexdigest()  # recorded as taken: written to later, it is said to have changed
    st.taken = (st.taken + [[u.step, {os.path.relpath(p, watcher.root): [0, x.st_mtime_ns, empty]
                                      for p, x in stats.items()}]])[-WATCHED:]
    if not quiet:
        names = ", ".join(watcher.named(p) for p in u.files)
        echo(f"step {u.step}: left out: {names} (empty), as the one-off command leaves an empty dump file out",
             err=True)
    st.last_step = u.step if st.last_step is None else max(st.last_step, u.step)
    with signals.held():
        st.save(state_path)
    watcher.taken(u.step)
    return True


def _take(u: Unit, root: str, shown: str, st: FollowState, runner: StepRunner, opts: Options, logger,
          json_out: bool, quiet: bool, echo, first_notes: list[str] = (), whole: bool = False,
          state_path: str | None = None, signals: _Signals | None = None) -> None:
    """Take step ``u``: its copy run through the command, then committed — the state updated and saved
    (atomically), the step logged and printed — with SIGTERM/Ctrl-C held off (``signals``) until the commit is
    whole: the state never lags a step the terminal shows."""
    tmp = tempfile.mkdtemp(prefix="advcli-follow-")
    named = u.named_as or shown  # the step's files named as the user gave the directory, as a one-off run names them
    try:
        taken, notes = snapshot(root, u, tmp, whole)
        u.torn = any(TORN_NOTE in n for n in notes)  # its row's group is short of it (audit: not checked)
        notes = [_renamed_text(n, root, named) for n in notes]  # the torn line's file as the user named it
        rep = runner.run(u, tmp, named)
    except AdvcliError as e:  # its message names the copy: name the user's file instead
        raise _renamed_error(e, tmp, named) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notes = list(first_notes) + notes
    line, agree, values = step_line(opts.command, u.step, rep)
    path = opts.step_report(u.step)
    if path:
        write_step_report(opts.command, path, rep)
    with (signals or _Signals()).held():
        st.last_step, st.steps = u.step if u.through is None else u.through, st.steps + 1
        if not agree:
            st.disagreed += 1
            if len(st.disagreed_steps) < 100:
                st.disagreed_steps.append(u.step)
        st.taken = (st.taken + [[u.step, taken]])[-WATCHED:]
        st.changed = st.changed[-CHANGED_KEPT:]  # bounded however long the run
        st.save(state_path)  # before the step is printed or logged
        if logger is not None:
            logger.log(u.step, values)
        if json_out:
            from ..report.primitives import to_json

            echo(to_json({"step": u.step, "line": line, "notes": notes, "report": rep}))
        elif not quiet:
            for n in notes:
                echo(f"step {u.step}: {n}", err=True)
            echo(line)


def gap_note(st: FollowState, step: int, fmt: str) -> list[str]:
    """The note for a step taken after a gap in the step numbers (no file for the steps between the last step
    taken and ``step``): the steps missing, and, under an adaptive KL controller, that the coefficient carried
    across the gap is not the one the trainer had (it moved during the missing steps)."""
    if st.last_step is None or step <= st.last_step + 1:
        return []
    stride = 1
    if fmt in STRIDED:
        seen = [s for s, _ in st.taken]
        strides = [b - a for a, b in zip(seen, seen[1:]) if b > a]
        if not strides:
            return []  # one step taken: its stride not known yet
        stride = min(strides)
    missing = list(range(st.last_step + stride, step, stride))
    if not missing:
        return []
    if len(missing) == 1:
        which = f"step {missing[0]}"
    elif len(missing) <= 5:
        which = "steps " + ", ".join(map(str, missing))
    else:
        which = f"steps {missing[0]}–{missing[-1]} ({len(missing)} steps)"
    note = (f"{which} missing: no file for {'it' if len(missing) == 1 else 'them'} before step {step} was taken "
            f"(the step numbers jump from {st.last_step} to {step}); a file that lands for "
            f"{'it' if len(missing) == 1 else 'them'} now is reported, not followed")
    if st.cfg is not None:
        from ..config.runspec import RunSpec

        if RunSpec.from_config(st.cfg).kl.controller == "adaptive":
            note += (f"; the adaptive KL controller's coefficient carried into step {step} is the one step "
                     f"{st.last_step} left, not the trainer's after the missing step(s): a disagreement in step "
                     f"{step} may be the KL coefficient's")
    return [note]


def refuse_format(fmt, shown: str, command: str) -> None:
    """Refuse to follow a format whose file names carry no step (open-instruct's ``{run_name}_rollouts_{shard}``:
    a shard is appended to across steps, a new one every 10,000 samples): its files are not steps, so neither a
    later file nor a quiet one says a step is complete. Formats followed by a lister of their own
    (:data:`CHUNK_LISTERS`: prime-rl's chunked streams) are not refused."""
    if fmt.name in CHUNK_LISTERS or "(?P<step>" in fmt.pattern:
        return
    raise AdvcliError(f"{shown}: --follow takes a dump one step file at a time, and {fmt.title} files are numbered "
                      "by shard, not by step (a shard is appended to across steps), so a step cannot be told "
                      "complete from its files; a follow would take shards as steps and mix steps in one",
                      hint=f"{command} the directory once the run is finished, without --follow (advcli {command} "
                           f"{shown}{' -o OUT' if command == 'run' else ''}): it steps the rows by each record's "
                           "step field")


def nothing_to_audit(fmt, units: list[Unit], shown: str, against: str | None) -> bool:
    """``audit --follow``'s first check, the one-off audit's (:func:`advcli.audit.recompute.require_logged`), made
    on the format as soon as it is found, before any step is waited for: a format that logs no advantages
    (verl's rollout_data_dir, AReaL, ROLL, slime, SkyRL) whose first record carries none of the logged columns
    either is refused as what it is, not through an estimator's or a column's error at the first step. ->
    whether the check is done (False: no record to look at yet); each step's copy is checked again as the
    one-off audit checks it."""
    from ..audit.recompute import LOGGED_DEFAULTS, nothing_logged
    from ..formats.records import first_json_record

    if against is not None or fmt.logged:
        return True
    files = [p for u in units for p in u.files]
    if not files:
        return False
    first = (fmt.first_record or first_json_record)(files[0])
    if first is None:
        return False  # its first line still being written
    if any(c in first for c in LOGGED_DEFAULTS):
        return True
    raise nothing_logged(shown, fmt.title, fmt.logged_elsewhere)


def waiting_on_parquet(u: Unit, settle: float, named) -> bool:
    """At the end of ``--until-idle``, the step not taken yet: whether one of its Parquet files, without a
    footer, is still changing (written in the last ``settle`` seconds: the follow waits for it). One that has
    stopped changing without a footer was cut short: the one-off command's error for it (exit 2), the file
    named as the user gave it (``named``)."""
    from ..io.reader import open_parquet

    for p in u.files:
        if not p.endswith(".parquet"):
            continue
        try:
            mtime = os.stat(p).st_mtime
            open_parquet(p)
        except FileNotFoundError:
            continue
        except AdvcliError as e:
            if time.time() - mtime < settle:
                return True
            raise _renamed_error(e, p, named(p)) from None
    return False


def several_files(u: Unit, names: list[str], command: str) -> str:
    """The note for a step that several Parquet files hold (``step_2.parquet`` and ``step_2_retry.parquet``):
    audit and stats take them as one step, as the one-off command reads the directory; ``run`` writes one
    ``step_N.parquet`` a step, which cannot stand for two inputs (the one-off run writes one output per input
    file), so it refuses, naming them."""
    files = f"{len(names)} files hold this step ({', '.join(names)})"
    if command == "run":
        raise AdvcliError(f"step {u.step}: {files}; run --follow writes one step_{u.step}.parquet a step",
                          hint="move the file that is not this run's (a rerun's?) out of the directory and "
                               "follow again, or run the finished directory without --follow (one output per "
                               "input file)")
    return f"{files}; taken as one step, as the one-off command reads the directory"


def _one_off(command: str, path: str, words: str) -> str:
    """The one-off command that reads ``path`` as the follow does (its options ``words``: Options.words)."""
    return f"advcli {command} {path}" + (" -o OUT" if command == "run" else "") + words


def _check_changed(st: FollowState, root: str, echo, quiet: bool, named=lambda p: p, command: str = "audit",
                   words: str = "") -> None:
    """Report once each taken file (of the last WATCHED steps) that changed after it was taken (``named``: its
    path as the user named the directory), with the command that reads it as it is now."""
    for step, files in st.taken:
        for rel, (size, mtime_ns, sha) in files.items():
            p = os.path.join(root, rel)
            if p in st.changed:
                continue
            try:
                s = os.stat(p)
            except FileNotFoundError:
                continue
            if s.st_size == size and s.st_mtime_ns == mtime_ns:
                continue
            if s.st_size >= size and s.st_mtime_ns == mtime_ns:
                continue
            if s.st_size == size and fingerprint(p, size) == sha:
                continue
            st.changed.append(p)
            if not quiet:
                alone = _one_off(command, named(p), words)
                echo(f"step {step}: {named(p)} changed after it was taken (now {s.st_size} bytes, {size} taken); "
                     f"its numbers above are of the bytes taken then, not read again (a restarted trainer that "
                     f"rewrote the step?); to see the file as it is now: {alone}", err=True)


def write_step_report(command: str, path: str, rep: dict) -> None:
    """A step's report (``--report``), as the command writes its own: JSON, Markdown or HTML."""
    if command == "audit":
        from ..report.sections import audit_sections
        from ._sections import stamp, write

        write(path, stamp(rep, "audit"), audit_sections)
    else:
        from ..report.output import write_report

        write_report(path, rep)


def _check_late(st: FollowState, units: list[Unit], root: str, echo, quiet: bool, since_ns: int = 0,
                named=None, command: str = "audit", words: str = "") -> None:
    """Report once each file that appeared in a step (of the last WATCHED) after that step was taken (AReaL
    writes a version's task files as its rollouts finish): not read, its rows are not in that step's numbers.
    And each file, written since this follow started (``since_ns``), of a step older than the last one taken
    that was never taken (step_2 written after step_3 was taken): steps are taken in order, each once, so it is
    not followed; the line says how to see it on its own."""
    taken = {step: files for step, files in st.taken}
    named = named or (lambda p: p)
    for u in units:
        if u.step not in taken:
            if st.last_step is None or u.step >= st.last_step:
                continue
            for p in u.files:
                if p in st.changed:
                    continue
                try:
                    if os.stat(p).st_mtime_ns < since_ns:
                        continue  # there before this follow started: a step taken before a restart
                except FileNotFoundError:
                    continue
                st.changed.append(p)
                if not quiet:
                    alone = _one_off(command, named(p), words)
                    echo(f"step {u.step}: {named(p)} landed after step {st.last_step} was taken; not followed "
                         f"(steps are taken in order, each once): its rows are in no step above; to see it "
                         f"on its own: {alone}", err=True)
            continue
        for p in u.files:
            if os.path.relpath(p, root) not in taken[u.step] and p not in st.changed:
                st.changed.append(p)
                if not quiet:
                    echo(f"step {u.step}: {named(p)} appeared after the step was taken; not read (its rows are "
                         "not in the step's numbers above)", err=True)
