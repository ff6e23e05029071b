"""Discovery: the dump files under a path (a file, or the directory a trainer wrote), their format, and
the files skipped (companions, wandb/TensorBoard folders, framework pickles refused)."""
from __future__ import annotations

import os
import re
from dataclasses import field

from ..errors import AdvcliError
from ..records import record
from ._common import where_in_dump
from .records import first_json_record
from .registry import FORMATS, Format, a_title, load, norm_path

DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".pt", ".pkl", ".dp", ".pth", ".jsonl.zst")
COMPRESSED = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".lz4": "lz4"}  # a data file under them: skipped, said
SKIPPED_DIRS = {"wandb": "wandb run folder", "tensorboard": "TensorBoard folder", "tb_logs": "TensorBoard folder",
                ".git": "git folder", "__pycache__": "Python cache", ".ipynb_checkpoints": "notebook checkpoints"}


@record
class Found:
    """A dump's format and data files, and the files skipped with why."""

    fmt: Format
    files: list[str]
    skipped: list[str]  # "path (why)"
    # the data files among ``skipped`` (empty, compressed, or not named as the format's): a run's summary warns of
    # them, where a companion or a wandb folder is left out as a matter of course
    unread: list[str] = field(default_factory=list)
    # the companions of a folder's dump that another format reads on its own (slime's train_data/ beside its
    # rollout_data/): audit reads them where they log the advantages the chosen format does not
    alone: list[str] = field(default_factory=list)


def _companion(path: str) -> str | None:
    load()
    for fmt in FORMATS.values():
        why = fmt.companion(path)
        if why:
            return why
    base = os.path.basename(norm_path(path))
    if base.startswith("events.out.tfevents"):
        return "TensorBoard event file"
    return None


def data_formats(path: str) -> list[Format]:
    """The formats whose data files are named like ``path`` and that do not write it as a companion: for a file
    another format skips as its companion (slime's ``train_data/{id}.pt`` beside ``rollout_data/``), the format that
    reads it on its own (by its name; its content not looked at)."""
    return [fmt for fmt in _named_by(path) if fmt.companion(path) is None]


def logging_formats(path: str) -> list[Format]:
    """The formats of :func:`data_formats` that log the trainer's advantages (``Format.logged``): what audit reads
    among a folder's companions and beside files."""
    return [fmt for fmt in data_formats(path) if fmt.logged]


def _read_alone(path: str) -> bool:
    """Whether a companion file is another format's data, read where a folder holds nothing else (slime's
    ``train_data/`` beside its ``rollout_data/``: skipped in the ``--dump-details`` folder, read on its own)."""
    return any(_sniff(path, fmt) for fmt in data_formats(path))


def _sniff(path: str, fmt: Format) -> bool:
    try:
        rec = (fmt.first_record or first_json_record)(path)
    except AdvcliError:
        return False
    return rec is not None and bool(fmt.sniff(rec))


def _named_by(path: str) -> list[Format]:
    """The formats that name files like ``path`` (its content not looked at)."""
    load()
    return [f for f in FORMATS.values() if f.matches(path)]


def _classify(path: str, forced: Format | None) -> Format | None:
    """The format of one data file: by name, confirmed by content (name ambiguity settled by content)."""
    cands = _named_by(path)
    if forced is not None:
        return forced
    if not cands:
        return None
    if len(cands) == 1:
        return cands[0]
    for f in cands:
        if _sniff(path, f):
            return f
    # nothing to sniff (an empty file: prime-rl's live chunk just after a roll): the most specific name wins
    p = norm_path(path)
    return max(cands, key=lambda f: len(re.search(f.pattern, p).group(0)))


# framework pickles: loading them runs the framework's classes; refused with how to export them
PICKLES = (
    (r"(^|/)gen_batch\.dp$|\.dp$", "a verl RolloutSkip cache (pickle of verl's DataProto)",
     "in an environment with verl installed: b = pickle.load(open(P, 'rb')); write b.batch's tensors and "
     "b.non_tensor_batch to Parquet (one row per response: response_mask, rewards, ...), or rerun with "
     "trainer.rollout_data_dir=DIR to get {step}.jsonl files advcli reads (--from verl-jsonl)"),
    # verl's v1 RolloutSkip cache for the transfer queue (skip.rollout_tq.enable): torch.save of a TensorDict
    (r"(^|/)tq_batch\.pt$", "a verl RolloutSkip cache (torch.save of the transfer queue's TensorDict batch)",
     "in an environment with verl and tensordict installed: b = torch.load(P, weights_only=False); write its "
     "tensors (response_mask, rm_scores, ...) and uid to Parquet, one row per response, or rerun with "
     "trainer.rollout_data_dir=DIR to get {step}.jsonl files advcli reads (--from verl-jsonl)"),
    (r"(^|/)dumped_data/global_step_\d+_training_input\.pkl$", "a SkyRL training batch (pickle of "
     "TrainingInputBatch; it holds no rewards)", "in an environment with skyrl installed, load it and write its "
     "tensors to Parquet; for rewards use the eval dumps (dumped_evals/, --from skyrl-evals)"),
    (r"(^|/)step_\d+\.pkl$", "a ROLL rollout-mock dump (pickle of ROLL's DataProto)",
     "in an environment with roll installed, load it and write response_mask / scores to Parquet, or set "
     "rollout_dump_dir=/abs/path to get rollout_dump_data.step_N.jsonl files (--from roll-dump)"),
    (r"\.pkl$", "a Python pickle", "advcli never unpickles arbitrary classes; export the data to Parquet or "
     "JSON Lines where the producing framework is installed"),
)


# dumps whose writer is not merged upstream: no settled layout to read, refused with the plain dump to use
UNSETTLED = (
    # AReaL #1407 (open as of areal-project/AReaL @ cbff54d6): TrajectoryDebugConfig.dump_rollout_data writes
    # torch.save(batch) as {path}/step_{step:06d}.pt (single controller) or step_{step:06d}_dp_{rank}.pt (SPMD)
    (r"(^|/)step_\d{6}(_dp_\d+)?\.pt$", "an AReaL trajectory replay dump (trajectory_debug.dump_rollout_data, "
     "AReaL pull request #1407, not merged upstream: its batch layout is not settled)",
     "advcli reads AReaL's rollout JSONL instead: rerun with rollout.dump_to_file=true (rollout/{version}/"
     "{task_id}.jsonl, --from areal-jsonl), or write the batch's rewards and masks to Parquet"),
)


def _pickle_refusal(path: str) -> AdvcliError | None:
    p = norm_path(path)
    for pat, what, how in UNSETTLED:
        if re.search(pat, p):
            return AdvcliError(f"{path}: {what}; advcli does not read it", hint=how)
    for pat, what, how in PICKLES:
        if re.search(pat, p):
            return AdvcliError(f"{path}: {what}; loading it would run the framework's own classes, which advcli "
                               "never does", hint=f"export it: {how}")
    return None


def glob_files(spec: str) -> list[str]:
    """The files a pattern matches (sorted; directories among the matches are left out)."""
    import glob

    return sorted(p for p in glob.glob(spec) if not os.path.isdir(p))


def discover(spec: str, forced: Format | None = None) -> Found:
    """The dump files under ``spec`` (a file, a directory, walked recursively, or a pattern matching the
    files, sorted by step, then by path with numbers in numeric order), their format, and the files
    skipped (companions, wandb/TensorBoard folders) with the reason."""
    from ..io.reader import is_glob, not_a_regular_file

    load()
    if is_glob(spec):  # one dump whose files the pattern names, as a directory holding them would be
        candidates = glob_files(spec)
        if not candidates:
            raise AdvcliError(f"{spec}: no file matches this pattern")
        return _found(spec, candidates, [], [], forced)
    if not os.path.exists(spec):
        if os.path.islink(spec):
            raise not_a_regular_file(spec)
        raise AdvcliError(f"{spec}: no such file or directory")
    skipped: list[str] = []
    unread: list[str] = []  # the data files among them (Found.unread)
    if os.path.isdir(spec):
        candidates = []
        alone: list[tuple[str, str]] = []  # companions another format reads: the candidates if nothing else is
        for root, dirs, files in os.walk(spec):
            keep = []
            for d in sorted(dirs):
                why = SKIPPED_DIRS.get(d)
                if why:
                    skipped.append(f"{os.path.join(root, d)}/ ({why})")
                else:
                    keep.append(d)
            dirs[:] = keep
            for fname in sorted(files):
                p = os.path.join(root, fname)
                why = _companion(p)
                if why:
                    skipped.append(f"{p} ({why})")
                    if fname.endswith(DATA_SUFFIXES):
                        alone.append((p, skipped[-1]))
                elif fname.endswith(DATA_SUFFIXES):
                    candidates.append(p)
                elif fname.endswith(tuple(COMPRESSED)) and fname[:fname.rindex(".")].endswith(DATA_SUFFIXES):
                    tool = COMPRESSED[fname[fname.rindex("."):]]
                    unread.append(f"{p} (compressed with {tool}: advcli reads the uncompressed files, and zstd only "
                                  f"in prime-rl's trace stream; {tool} -dk {fname} gives the file to read)")
                    skipped.append(unread[-1])
        if not candidates:
            for p, entry in alone:
                if _read_alone(p):
                    candidates.append(p)
                    skipped.remove(entry)
            alone = []
        if not candidates:
            raise AdvcliError(f"{spec}: no dump files found (looked for {', '.join(DATA_SUFFIXES)} files)"
                              + (f"; skipped {len(skipped)}" if skipped else ""))
    else:
        candidates, alone = [spec], []
    found = _found(spec, candidates, skipped, unread, forced)
    found.alone = [p for p, _ in alone] + found.alone
    return found


def _starts_as_parquet(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"PAR1"
    except OSError:
        return False


def _found(spec: str, candidates: list[str], skipped: list[str], unread: list[str], forced: Format | None) -> Found:
    from ..io.reader import not_a_regular_file

    def leave_out(entry: str) -> None:  # a data file not read: skipped, and in Found.unread
        unread.append(entry)
        skipped.append(entry)

    for p in list(candidates):  # before any is opened: a broken link raised FileNotFoundError, a FIFO hung the read
        refused = not_a_regular_file(p)
        if refused is not None and forced is None and not _named_by(p) and _pickle_refusal(p) is None:
            leave_out(f"{p} (not a regular file, and not a dump file name)")  # as a note file is skipped
            candidates.remove(p)
            continue
        refused = refused or _pickle_refusal(p)
        if refused is not None:
            raise refused
    if not candidates:
        raise AdvcliError(f"{spec}: no dump files found (looked for {', '.join(DATA_SUFFIXES)} files)"
                          + (f"; skipped {len(skipped)}" if skipped else ""))
    by_file = [(p, _classify(p, forced)) for p in candidates]
    chosen = forced
    if chosen is None:
        known = [f for _, f in by_file if f is not None]
        if not known:
            p = candidates[0]
            raise AdvcliError(f"{p}: not a dump format advcli recognises by its name",
                              hint=f"force one with --from FORMAT ({', '.join(FORMATS)}); "
                                   "docs/formats.md shows each format's file names")
        # the format the others were written beside (Format.beside_formats), else the most files' format
        hosts = [f for f in set(known) if all(g is f or g.name in f.beside_formats for g in known)]
        chosen = hosts[0] if len(hosts) == 1 else max(
            set(known), key=lambda f: (sum(1 for g in known if g is f), -list(FORMATS).index(f.name)))
    files, beside = [], []
    for p, f in by_file:
        if f is None and forced is None:  # a file no format names (notes, configs): not read, reported
            if p.endswith(".zst"):  # a step file compressed by hand: only prime-rl's stream is read compressed
                leave_out(f"{p} (compressed with zstd: {chosen.title} is read uncompressed; zstd -dk "
                          f"{os.path.basename(p)} gives the file to read)")
            else:
                leave_out(f"{p} (not {a_title(chosen.title)} file name)")
            continue
        if f is not None and f is not chosen and forced is None and f.name in chosen.beside_formats:
            skipped.append(f"{p} ({f.title}, written beside {chosen.title} files: read on its own, as a file or a "
                           "glob of its kind)")
            beside.append(p)
            continue
        if f is not None and f is not chosen:
            raise AdvcliError(f"{p}: {a_title(f.title)} file among the {chosen.name} dumps of {spec}",
                              hint="one run reads one format: move it out, or point advcli at one dump directory")
        if os.path.getsize(p) == 0:  # (before a format's own reader: a 0-byte slime .pt is empty, not truncated)
            leave_out(f"{p} (empty)")
            continue
        if chosen.refuse is not None:
            why = chosen.refuse(p)
            if why:
                raise AdvcliError(f"{p}: {why}")
        first = (chosen.first_record or first_json_record)(p)
        if first is None:
            if forced is not None and not forced.pattern.endswith(r"\.parquet$") and _is_parquet(p):
                from ..io.reader import SHOWN_AS

                if SHOWN_AS.get(p, "").startswith("<"):  # a table in memory (advcli.run(df, source=...))
                    raise AdvcliError(f"{p}: a table in memory is not {a_title(forced.title)} file (--from "
                                      f"{forced.name})", hint="give the dump's own files (their folder) as the trainer "
                                                              "wrote them, or the table without source= (advcli's "
                                                              "own layout)")
                raise AdvcliError(f"{p}: a Parquet file, not {a_title(forced.title)} file (--from {forced.name})",
                                  hint="without --from, a Parquet file is read as advcli's own layout (or as TRL's "
                                       "completions file, by its name)")
            if p.endswith(".parquet"):  # a Parquet dump (TRL's): said as any unreadable Parquet file is
                from ..io.reader import unreadable_hint
                raise AdvcliError(f"{p}: not a readable Parquet file", hint=unreadable_hint(p))
            hint = None  # --from given: the user chose the format
            if _starts_as_parquet(p):  # a Parquet file under a JSON name (a conversion saved as .jsonl)
                hint = ("it holds Parquet under a JSON Lines name: rename it *.parquet and give it alone (advcli's "
                        "own layout, or a converted dump), or give the dump's original JSONL")
            elif forced is None and chosen.matches(p):  # named as the format's files: --from would choose it again
                hint = (f"its name is {a_title(chosen.title)} file's, its content is not: a damaged file, or one "
                        "written by something else"
                        + ("; `zstd -t` tests a compressed one" if p.endswith(".zst") else ""))
            elif forced is None:
                hint = "force the format with --from FORMAT"
            raise AdvcliError(f"{where_in_dump(p, 1)}: not {a_title(chosen.title)} file (its first record does not "
                              "parse)", hint=hint)
        if not chosen.sniff(first):
            missing = [f for f in chosen.required if f not in first]
            hint = "a file of another format among the dumps? force the format with --from"
            if forced is not None:  # the user chose the format: the dump is likely of another
                hint = (f"--from {forced.name} reads {a_title(chosen.title)} dump; leave --from out to have the "
                        "format recognised, or `advcli inspect PATH` to see which it is")
            elif chosen.matches(p) and missing:  # its name is right: its fields are not
                hint = (f"its name is {a_title(chosen.title)} file's, but it lacks {', '.join(missing)}: written by "
                        "another tool or version of it? docs/formats.md lists the fields each format needs")
            raise AdvcliError(f"{where_in_dump(p, 0 if p.endswith('.parquet') else 1)}: not "
                              f"{a_title(chosen.title)} record"
                              + (f": expected the fields {', '.join(chosen.required)}" if chosen.required else "")
                              + f" (fields present: {', '.join(list(first)[:12])})", hint=hint)
        files.append(p)
    if not files:
        raise AdvcliError(f"{spec}: every dump file is empty",
                          hint="a trainer still writing its first step? run again once a step file has records")
    key = chosen.key or chosen.step_of
    seen: dict = {}
    for p in files:
        k = key(p)
        if k is None:
            continue
        if k in seen:
            raise AdvcliError(f"{p}: duplicate step file: {seen[k]} holds the same step ({k})",
                              hint="two runs (or a rerun) share this directory; point advcli at one of them")
        seen[k] = p
    files.sort(key=lambda p: (chosen.step_of(p) if chosen.step_of(p) is not None else -1, natural_key(p)))
    return Found(chosen, files, skipped, unread, alone=beside)


def _is_parquet(path: str) -> bool:
    """Whether ``path`` is a whole Parquet file: its magic bytes at both ends."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            fh.seek(-4, os.SEEK_END)
            return head == b"PAR1" and fh.read(4) == b"PAR1"
    except OSError:
        return False


def natural_key(path: str) -> tuple:
    """A path's sort key with its numbers compared as numbers: ``rollout/1/2.jsonl`` before
    ``rollout/1/10.jsonl`` (AReaL's task files, step-numbered names), as a trainer numbered them."""
    parts = re.split(r"(\d+)", norm_path(path))
    return tuple(int(x) if i % 2 else x for i, x in enumerate(parts))


def named_but_lacking(path: str, names: list[str]) -> AdvcliError | None:
    """For a file read as advcli's own Parquet that lacks its columns: the error to give when its name is a
    trainer dump's and its columns hold some, not all, of what that format's reader needs (a TRL
    ``completions_3.parquet`` without its ``prompt``), saying why it was not read as that dump; else None."""
    fmt = next((f for f in _named_by(path) if f.required), None)
    if fmt is None:
        return None
    missing = [k for k in fmt.required if k not in names]
    if not missing or len(missing) == len(fmt.required):
        return None
    present = [k for k in fmt.required if k in names]
    return AdvcliError(f"{path}: its name is that of {a_title(fmt.title)} dump and it has "
                       f"{', '.join(map(repr, present))}, "
                       f"but not {', '.join(map(repr, missing))}, which that dump's reader needs (its groups: "
                       f"{fmt.group_key}), so it was read as advcli's own Parquet. Columns present: {', '.join(names)}",
                       hint="add the missing column back (the trainer writes it), or give advcli's own columns "
                            "(response_mask and a group id; docs/formats.md)")


def is_dump(spec: str) -> bool:
    """Whether ``spec`` is a trainer dump rather than advcli's own Parquet: a file whose name or suffix
    says so (a Parquet file only when a format's name and columns match), or a directory holding one
    (walked until the first hit). Anything else goes to the Parquet reader and its own messages."""
    from ..io.reader import is_glob, not_a_regular_file

    load()
    if is_glob(spec):  # a pattern: a dump when a file it matches is one (the first found decides, as in a directory)
        return any(is_dump(p) for p in glob_files(spec))
    if os.path.isfile(spec):
        if spec.endswith(".parquet"):
            fmt = _classify(spec, None)
            return fmt is not None and _sniff(spec, fmt)
        return spec.endswith(DATA_SUFFIXES) or _classify(spec, None) is not None
    if os.path.isdir(spec):
        for root, dirs, files in os.walk(spec):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            for fname in files:
                p = os.path.join(root, fname)
                if not_a_regular_file(p) is not None:  # never opened here (a FIFO would hang the sniff)
                    if _named_by(p):  # a dump's name: discovery refuses it, naming it
                        return True
                elif fname.endswith(".parquet"):
                    fmt = _classify(p, None)
                    if fmt is not None and _sniff(p, fmt):
                        return True
                elif fname.endswith(DATA_SUFFIXES) and (_classify(p, None) is not None
                                                        or _pickle_refusal(p) is not None):
                    return True
    return False
