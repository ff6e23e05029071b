"""A finished command's report sent to the user's experiment tracker (``--log wandb``,
``--log tensorboard:DIR``), so that advcli's figures lie over the training run's own curves.

What is written, from the report dict of :mod:`advcli.report` (the command's ``--json``), under the
names the JSON uses (verl's metric names: ``critic/advantages/mean`` ...):

- per step: every number of each ``per_step`` entry (``step`` itself excepted) at the step
  ``step + step_offset`` (``--log-step-offset``: advcli's step 0 is the training run's step N); an
  entry per step and domain (ROLL) has its names under ``DOMAIN/``. A step that is not a whole number
  (or no step at all) takes the entry's position instead;
- the summary: the whole-run numbers (``metrics`` under their own names; the other numbers of the report
  under their path, ``timings/seconds``, ``tokens/pearson`` for compare ...) and one
  ``diagnostics/KIND`` count per diagnostic;
- the configuration: what ran (command, flavor, settings given, the resolved canonical configuration,
  inputs, outputs);
- the diagnostics and warnings as text.

wandb: a new run (``wandb.init``) in ``--log-project`` (default ``WANDB_PROJECT``, else ``advcli``)
named ``--log-name``; per-step numbers with ``run.log(step=...)``, the summary in ``run.summary``, the
configuration in ``run.config``. Offline unless the user is logged in: ``WANDB_MODE`` when set, else
online when ``WANDB_API_KEY`` is set or ~/.netrc holds a wandb login, else offline, and the message
says how to ``wandb sync`` the run later.

TensorBoard: event files written with TensorBoard's own writer (``tensorboard`` package:
``EventFileWriter`` and its summary protos; no TensorFlow, no torch), into DIR (DIR/NAME with
``--log-name``): every number a scalar at its step, stored as float64 so the file holds the report's
exact values; the summary numbers as scalars ``summary/NAME`` at the last step; the configuration,
summary, diagnostics and warnings as text (Markdown) at step ``step_offset``.

Neither library is needed by the core install: ``pip install 'advcli[wandb]'`` / ``'advcli[tensorboard]'``;
a target whose library is missing is refused before any work (exit 2, naming the install).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from ..errors import AdvcliError

KINDS = ("wandb", "tensorboard")
# the report fields that are the run's configuration (what ran on what), in this order, when present
CONFIG_FIELDS = ("command", "flavor", "settings", "estimator", "note", "estimator_note", "ran", "from_dump",
                 "config", "config_file", "inputs", "outputs", "logged_column", "logged_per", "tolerance", "a", "b",
                 "advcli_version")
# report fields that are not whole-run numbers (lists, plots, the configuration), left out of the summary
NOT_SUMMARY = {"per_step", "histograms", "by_position", "diagnostics", "warnings", "worst", "search", "findings",
               "matches", "config", "settings", "estimator", "config_file", "filter", "most_different",
               "flip_examples", "per_step_health", "group_mean_reward_histogram", "group_sizes",
               "length_by_outcome", "uniform_zero_advantage", "a", "b", "tolerance"}


@dataclass(frozen=True)
class LogTarget:
    """Where a report goes: ``kind`` (wandb or tensorboard), ``directory`` (TensorBoard's event directory;
    wandb's own directory when given as ``wandb:DIR``), ``project`` and ``name`` (the run's), ``step_offset``."""
    kind: str
    directory: str | None = None
    project: str | None = None
    name: str | None = None
    step_offset: int = 0


def parse_targets(specs: list[str] | None, project: str | None = None, name: str | None = None,
                  step_offset: int = 0) -> list[LogTarget]:
    """The ``--log`` values as targets, checked before any work: a known kind, TensorBoard's directory
    given, the library installed."""
    targets = []
    for spec in specs or []:
        kind, _, directory = spec.partition(":")
        kind = kind.strip().lower()
        if kind not in KINDS:
            from ..errors import did_you_mean

            raise AdvcliError(f"--log {spec!r}: unknown tracker {kind!r}.{did_you_mean(kind, list(KINDS))}",
                              hint="--log wandb (a wandb run, offline unless logged in) or --log tensorboard:DIR "
                                   "(event files in DIR)")
        if kind == "tensorboard" and not directory:
            raise AdvcliError(f"--log {spec!r}: TensorBoard needs the directory of its event files",
                              hint="--log tensorboard:runs/advcli (then: tensorboard --logdir runs)")
        if directory:  # the event files' (or wandb's) directory, checked before any work
            from ..io.remote import is_uri
            from ..io.temps import check_local_destination

            if is_uri(directory):
                raise AdvcliError(f"--log {spec!r}: {kind} writes to a local directory",
                                  hint=f"give a local directory and copy it to {directory} afterwards")
            check_local_destination(f"--log {spec}", directory, create=True)
        require_library(kind)
        targets.append(LogTarget(kind, directory or None, project, name, int(step_offset)))
    if not targets and (project or name or step_offset):
        raise AdvcliError("--log-project, --log-name and --log-step-offset go with --log",
                          hint="add --log wandb or --log tensorboard:DIR")
    return targets


def require_library(kind: str) -> None:
    """Refuse a tracker whose library is not installed, naming the extra that installs it."""
    import importlib.util

    module = {"wandb": "wandb", "tensorboard": "tensorboard"}[kind]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None (a test hiding it) or a broken install
        found = False
    if not found:
        raise AdvcliError(f"--log {kind}: the {module} package is not installed",
                          hint=f"pip install 'advcli[{kind}]'")


# ------------------------------------------------------------------------------------ the content
def _number(v) -> float | None:
    """A report value as a number: numbers and booleans as they are, the strings the report writes for
    non-finite values ("nan", "inf", "-inf") as floats; None for anything else."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    return None


def _flatten(prefix: str, value, out: dict) -> None:
    num = _number(value)
    if num is not None:
        out[prefix] = num
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in NOT_SUMMARY:
                _flatten(f"{prefix}/{k}" if prefix else str(k), v, out)


def step_of(entry: dict, position: int) -> int:
    """A per-step entry's step on the tracker's axis (before the offset): its ``step`` when a whole number,
    else its position among the entries."""
    s = entry.get("step")
    if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and float(s).is_integer():
        return int(s)
    return position


def per_step_series(report: dict, step_offset: int = 0) -> list[tuple[int, dict]]:
    """[(tracker step, {name: number})] of the report's ``per_step`` entries, in order (entries of one
    step, one per domain, merged: their names under ``DOMAIN/``)."""
    from ..report.catalog import not_tracked

    hidden = not_tracked()  # the catalog's figures kept out of the trackers
    steps: dict[int, dict] = {}
    for i, entry in enumerate(report.get("per_step") or []):
        flat = {k: v for k, v in entry.items() if k != "metrics"}
        flat.update(entry.get("metrics") or {})
        domain = entry.get("domain")
        values = steps.setdefault(step_of(entry, i) + step_offset, {})
        for k, v in flat.items():
            num = _number(v)
            if k in ("step", "domain") or num is None or k in hidden:
                continue
            values[f"{domain}/{k}" if domain is not None else k] = num
    return sorted(steps.items())


def summary_values(report: dict) -> dict:
    """The whole-run numbers the trackers get: ``metrics`` under their own names, the report's other numbers
    under their path, a count per diagnostic (``diagnostics/KIND``); each read through its catalog entry
    (:mod:`advcli.report.catalog`), left out where the entry leaves out ``tracker``. The group-health
    block's need an entry; another number without one is sent as it is, and fails the catalog's
    completeness test (``tests/reports/test_figure_recipe.py`` runs every command that logs)."""
    from ..report.catalog import lookup

    out: dict = {}
    for k, v in report.items():
        if k in NOT_SUMMARY or k == "metrics":
            continue
        if k == "group_health" and isinstance(v, dict):  # the catalog's group_health/overall/* tracker figures
            for key, x in (v.get("overall") or {}).items():
                fig, num = lookup(f"group_health/overall/{key}"), _number(x)
                if fig is not None and "tracker" in fig.shown and num is not None:
                    out[fig.name] = num
            continue
        flat: dict = {}
        _flatten(k, v, flat)
        for name, num in flat.items():  # the audit's and compare's numbers, the run's totals: by their entries
            fig = lookup(name)
            if fig is None or "tracker" in fig.shown:
                out[name] = num
    from ..report.catalog import not_tracked

    hidden = not_tracked()  # the catalog's figures kept out of the trackers
    for k, v in (report.get("metrics") or {}).items():
        num = _number(v)
        if num is not None and k not in hidden:
            out[k] = num
    for d in report.get("diagnostics") or []:
        if d.get("kind") and _number(d.get("count")) is not None:
            out[f"diagnostics/{d['kind']}"] = d["count"]
    return out


def configuration(report: dict) -> dict:
    """What ran on what: the report's configuration fields (``CONFIG_FIELDS``) that it has."""
    return {k: report[k] for k in CONFIG_FIELDS if report.get(k) is not None}


def _diagnostic_lines(report: dict) -> list[str]:
    lines = []
    for d in report.get("diagnostics") or []:
        unit = f" {d['unit']}" if d.get("unit") else ""
        sev = f" [{d['severity']}]" if d.get("severity") else ""
        lines.append(f"{d.get('kind')}: {d.get('count')}{unit}{sev}: {d.get('meaning') or d.get('explanation') or ''}")
    return lines


# -------------------------------------------------------------------------------------- writing
def log_report(report: dict, targets: list[LogTarget]) -> list[str]:
    """Write ``report`` to each target; one line each saying where it went (and how to sync an offline
    wandb run)."""
    return [(_to_wandb if t.kind == "wandb" else _to_tensorboard)(report, t) for t in targets]


def wandb_mode() -> str:
    """``WANDB_MODE`` when set; else online when a wandb API key is set or ~/.netrc holds a wandb login,
    else offline (nothing leaves the machine until ``wandb sync``)."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return mode
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    try:
        return "online" if netrc.netrc(os.environ.get("NETRC")).authenticators(host) else "offline"
    except (OSError, netrc.NetrcParseError):
        return "offline"


def _wandb_run(t: LogTarget, command: str, config: dict):
    """(a wandb run for target ``t``, its mode): one run per command (job type ``advcli-COMMAND``) holding
    ``config``; wandb's own errors (no login, a bad project) become one line."""
    import wandb

    mode = wandb_mode()
    if t.directory:
        os.makedirs(t.directory, exist_ok=True)
    settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False, disable_git=True)
    try:
        run = wandb.init(project=t.project or os.environ.get("WANDB_PROJECT") or "advcli", name=t.name,
                         dir=t.directory, mode=mode, job_type=f"advcli-{command}", config=config, settings=settings,
                         reinit="create_new")
    except Exception as e:  # noqa: BLE001 - wandb's own errors as one line
        raise AdvcliError(f"--log wandb: wandb could not start a run: {e}",
                          hint="WANDB_MODE=offline writes the run locally; `wandb sync` uploads it later") from None
    return run, mode


def _tensorboard_writer(t: LogTarget):
    """(the log directory, an event-file writer there) for target ``t`` (DIR/NAME with --log-name)."""
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir = os.path.join(t.directory, t.name) if t.name else t.directory
    try:
        os.makedirs(logdir, exist_ok=True)
        return logdir, EventFileWriter(logdir)
    except OSError as e:
        raise AdvcliError(f"--log tensorboard:{t.directory}: cannot write there ({e.strerror or e})") from None


def _to_wandb(report: dict, t: LogTarget) -> str:

    series = per_step_series(report, t.step_offset)
    if series and series[0][0] < 0:
        raise AdvcliError(f"--log-step-offset {t.step_offset}: the first step would be logged at {series[0][0]}; "
                          "wandb takes steps from 0", hint="choose an offset that puts the first step at 0 or after")
    run, mode = _wandb_run(t, report.get("command") or "report", configuration(report))
    try:
        for step, values in series:
            run.log(values, step=step, commit=True)  # written now: the whole-run summary below comes after
        run.summary.update(summary_values(report))
        diags = {d["kind"]: {k: d.get(k) for k in ("count", "unit", "severity", "meaning")}
                 for d in report.get("diagnostics") or [] if d.get("kind")}
        if diags:
            run.summary["diagnostics"] = diags
        if report.get("warnings"):
            run.summary["warnings"] = list(report["warnings"])
        where = run.dir
        url = run.url if mode != "offline" else None  # an offline run has none (wandb warns when asked)
    finally:
        run.finish()
    run_dir = os.path.dirname(where)
    if mode == "disabled":
        return "wandb: WANDB_MODE=disabled: nothing was logged"
    if mode == "offline":
        return f"wandb: offline run in {run_dir}; upload it with `wandb sync {run_dir}`"
    return f"wandb: {url or run_dir}"


def _to_tensorboard(report: dict, t: LogTarget) -> str:
    import time

    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.types_pb2 import DT_DOUBLE, DT_STRING
    from tensorboard.plugins.scalar import metadata as scalar_metadata
    from tensorboard.plugins.text import metadata as text_metadata

    logdir, writer = _tensorboard_writer(t)
    scalar_md = scalar_metadata.create_summary_metadata(display_name="", description="")
    text_md = text_metadata.create_summary_metadata(display_name="", description="")
    now = time.time()

    def scalars(step: int, values: dict) -> None:
        summary = Summary(value=[Summary.Value(tag=k, metadata=scalar_md,
                                               tensor=TensorProto(dtype=DT_DOUBLE, double_val=[float(v)]))
                                 for k, v in values.items()])
        writer.add_event(Event(wall_time=now, step=step, summary=summary))

    def text(tag: str, markdown: str) -> None:
        value = Summary.Value(tag=tag, metadata=text_md,
                              tensor=TensorProto(dtype=DT_STRING, string_val=[markdown.encode("utf-8")]))
        writer.add_event(Event(wall_time=now, step=t.step_offset, summary=Summary(value=[value])))

    series = per_step_series(report, t.step_offset)
    for step, values in series:
        scalars(step, values)
    summary = summary_values(report)
    last = series[-1][0] if series else t.step_offset
    scalars(last, {f"summary/{k}": v for k, v in summary.items()})
    text("config", "```json\n" + json.dumps(configuration(report), indent=2, default=str) + "\n```")
    text("summary", "\n".join(f"- `{k}`: {v!r}" for k, v in summary.items()))
    if report.get("diagnostics"):
        text("diagnostics", "\n".join(f"- {line}" for line in _diagnostic_lines(report)))
    if report.get("warnings"):
        text("warnings", "\n".join(f"- {w}" for w in report["warnings"]))
    writer.close()
    return f"tensorboard: event files in {logdir}; view them with `tensorboard --logdir {t.directory}`"


# ------------------------------------------------------------------------- a followed run, step by step
class StepLogger:
    """The targets of a followed run (``--follow --log ...``): opened once, one call per step as it is
    taken (``log(step, values)``: the numbers at the training run's step + ``--log-step-offset``, written
    and flushed at once, so the curves grow while the run goes), closed with the summary at the end.
    wandb: one run for the whole follow; TensorBoard: one event file (a restarted follower adds another
    in the same directory, which TensorBoard reads as one run)."""

    def __init__(self, targets: list[LogTarget], config: dict):
        self.targets, self.config = targets, config
        self.runs: list = []
        self.lines: list[str] = []
        for t in targets:
            self.runs.append(self._open_wandb(t) if t.kind == "wandb" else self._open_tensorboard(t))

    def _open_wandb(self, t: LogTarget):
        run, mode = _wandb_run(t, self.config.get("command") or "follow", self.config)
        return ("wandb", run, mode)

    def _open_tensorboard(self, t: LogTarget):
        logdir, writer = _tensorboard_writer(t)
        return ("tensorboard", writer, logdir)

    def log(self, step: int, values: dict) -> None:
        """One step's numbers (name -> number; non-numbers left out) at ``step`` + each target's offset."""
        nums = {k: n for k, n in ((k, _number(v)) for k, v in values.items()) if n is not None}
        for t, (kind, handle, _) in zip(self.targets, self.runs):
            at = step + t.step_offset
            if kind == "wandb":
                if at < 0:
                    raise AdvcliError(f"--log-step-offset {t.step_offset}: step {step} would be logged at {at}; "
                                      "wandb takes steps from 0")
                handle.log(nums, step=at, commit=True)
            else:
                _tb_scalars(handle, at, nums)
                handle.flush()

    def close(self, summary: dict) -> list[str]:
        """Write the summary (its numbers) and close every target; one line each saying where it went."""
        lines = []
        nums = {k: n for k, n in ((k, _number(v)) for k, v in summary.items()) if n is not None}
        for t, (kind, handle, where) in zip(self.targets, self.runs):
            if kind == "wandb":
                handle.summary.update(nums)
                run_dir = os.path.dirname(handle.dir)
                url = handle.url if where != "offline" else None
                handle.finish()
                lines.append(f"wandb: offline run in {run_dir}; upload it with `wandb sync {run_dir}`"
                             if where == "offline" else f"wandb: {url or run_dir}")
            else:
                _tb_scalars(handle, t.step_offset, {f"summary/{k}": v for k, v in nums.items()})
                handle.close()
                lines.append(f"tensorboard: event files in {where}; view them with `tensorboard --logdir "
                             f"{t.directory}`")
        self.runs = []
        return lines


def _tb_scalars(writer, step: int, values: dict) -> None:
    import time

    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.types_pb2 import DT_DOUBLE
    from tensorboard.plugins.scalar import metadata as scalar_metadata

    md = scalar_metadata.create_summary_metadata(display_name="", description="")
    summary = Summary(value=[Summary.Value(tag=k, metadata=md,
                                           tensor=TensorProto(dtype=DT_DOUBLE, double_val=[float(v)]))
                             for k, v in values.items()])
    writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))
