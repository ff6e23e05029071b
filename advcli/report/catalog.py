"""The catalog of report figures: each figure is one :class:`Figure` — its name, unit, definition, how
it is computed and where it is shown — registered here, and every place that shows figures asks the
catalog instead of keeping its own list:

- ``summary``: the key figures of the terminal summary (``advcli run``, ``advcli stats``, ``--follow``'s
  reports), the Markdown report's "Key figures" and a result's one-line ``repr``;
- ``card``: a card of the HTML page (the figure large, the figures of its family named ``min``/``max``
  beside it);
- ``step_plot``: a curve by step on the HTML page (a per-step figure), its value axis titled with the unit;
- ``follow``: ``--follow``'s per-step line: the figures a command's line leads with, in its own words
  (``advcli.commands.follow.LEAD``: the rows; stats' score, solved share and uniform groups; the audit's
  verdict, largest difference and rows that disagree), then the others under the figure's ``label`` (the
  figures of one family together: ``advantages mean 0.1 min -1 max 1``);
- ``tracker``: sent to ``--log wandb`` / ``tensorboard`` (summary and per step), by every command that logs
  (run, stats, audit, compare): a report's number whose entry leaves ``tracker`` out is not sent;
- ``group_table``: a column of the group-health table (the terminal's, the Markdown's and the page's "Per step
  and data source"), headed by the figure's ``label``, in the catalog's order;
- ``histogram``: a histogram of the report (the page's plot, its x axis titled with the unit; the Markdown's
  table);
- ``position_plot``: a curve by token position (``report["by_position"]``, with ``--report``), its value axis
  titled with the unit.

Where a figure's value is: ``metrics[name]`` (and each ``per_step`` entry's ``name``), unless ``at`` names
another path of the report dict (``("group_health", "overall", "uniform_share")``, ``("histograms",
"advantages")``). A name may hold a placeholder (``rollout_corr/rollout_rs_{option}_mean``: one figure per
rejection-sampling option, ``{option}`` one of :data:`PLACEHOLDERS`'s); :func:`lookup` finds the entry of
any name a report holds, and ``tests/reports/test_figure_recipe.py`` checks that every figure a run prints
(JSON, reports, trackers) has one.

Every figure of ``metrics`` and ``per_step`` is also in ``--json`` and in the page's and the Markdown's
tables of all metrics.

How a figure is computed: ``compute(st, rows, scope)`` reads the fed
:class:`~advcli.figures.collector.FigureCollector` ``st`` (its per-row table, [R] numpy arrays:
``raw_score`` the sequence score, ``seq_reward`` Σ token_level_rewards, ``resp_len`` the response length,
``valid`` Σ mask, ``adv_sum`` Σ of the valid advantages, ``adv_finite``, ``adv_zero``; ``st.groups`` and
``st.scopes`` as :class:`~advcli.figures.arrays.Codes`; the per-scope token sums ``st.adv``, ``st.ret``)
over the rows ``rows`` ([R] bool) and the scope ``scope`` (a step's index; None: the whole run) and returns
a number (NaN/inf become None) or None. It is called for the whole run, and per step when ``per_step``;
``advcli run`` (both engines) and ``advcli stats`` feed the same collector, so the figure is in both.
A figure registered without ``compute`` is made by the collector's own blocks
(:mod:`advcli.figures.verl_metrics`, :meth:`FigureCollector.finish`: the verl metric block, the group
figures, the histograms), by the group-health block (:mod:`advcli.figures.group_health`) or by the run's
rollout correction (:func:`advcli.correction.weights.step_metrics`, one sum per figure over the
step's tokens, so that the Ray engine's partial sums add to the same bits).

``needs``: ``"advantages"`` / ``"returns"`` — read from that column, left out of ``advcli stats`` on a file
without it (a histogram too: ``histograms/advantages``). A figure that counts tokens is named under one of
the prefixes of ``advcli.formats.response_level.TOKEN_FIGURES`` (``response_length/`` ...), which a dump
without token data leaves out.

This module imports nothing heavy (the report renderings read it without numpy); :mod:`advcli.figures`
imports it, never the other way.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SHOWN_IN = ("summary", "card", "step_plot", "follow", "tracker", "group_table", "histogram", "position_plot")
# what a name's placeholder stands for: {option} a rejection-sampling option of verl's rollout correction
# (advcli.correction.weights.RS_OPTIONS, rollout_corr_helper.py L77-89; a test checks they agree: this module
# imports no torch); {kind} a diagnostic's kind
# (advcli.pipeline.diagnostics.MEANINGS, a lower-case identifier); {hypothesis} one of the audit's explanations
# of a disagreement (advcli.audit.checks.HYPOTHESES)
PLACEHOLDERS = {"option": ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
                           "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3"),
                "kind": r"[a-z][a-z0-9_]*",
                "hypothesis": ("clip", "float32", "sign", "scale", "shift", "group_scale", "group_shift")}
# the quantiles of the row and token figures (critic/score/p1 ...), numpy's linear interpolation
QUANTILES = (1, 5, 25, 50, 75, 95, 99)


@dataclass(frozen=True)
class Figure:
    """One report figure (see the module's docstring)."""

    name: str  # its key in ``metrics`` and the per-step entries (verl's name where verl logs it)
    unit: str  # what its value is in ("reward", "tokens", "share of groups", ...); "" for a bare number
    doc: str  # its definition, one sentence
    compute: Callable[[Any, Any, int | None], Any] | None = None
    per_step: bool = False  # computed (or given) for each step too
    shown: tuple[str, ...] = ("tracker",)
    label: str | None = None  # its label on --follow's per-step line, its group-health table column's header
    needs: tuple[str, ...] = ()
    at: tuple[str, ...] | None = None  # its path in the report dict when not metrics[name]
    whole: bool = False  # a histogram over whole numbers (integer ticks on its x axis)

    @property
    def pattern(self) -> re.Pattern | None:
        """The names the figure stands for when its name holds a placeholder (None: just its name)."""
        if "{" not in self.name:
            return None
        parts = re.split(r"\{(\w+)\}", self.name)
        rx = "".join(re.escape(p) if i % 2 == 0 else "(?:" + _values(PLACEHOLDERS[p]) + ")"
                     for i, p in enumerate(parts))
        return re.compile(rx + r"\Z")

    @property
    def family(self) -> str:
        """The name's prefix (``critic/advantages`` for ``critic/advantages/min``)."""
        return self.name.rpartition("/")[0]

    @property
    def axis(self) -> str:
        """The title of a value axis showing it: its unit, else its name."""
        return self.unit or self.name


FIGURES: dict[str, Figure] = {}


def _values(v: tuple[str, ...] | str) -> str:
    """A placeholder's values as a regular expression (a tuple: those names; a string: that expression)."""
    return v if isinstance(v, str) else "|".join(map(re.escape, v))


def register(fig: Figure) -> Figure:
    """Add ``fig`` to the catalog (a name registered twice is an error: each figure is declared once)."""
    bad = [w for w in fig.shown if w not in SHOWN_IN]
    bad += [p for p in re.findall(r"\{(\w+)\}", fig.name) if p not in PLACEHOLDERS]
    if bad:
        raise ValueError(f"figure {fig.name!r}: unknown place(s) or placeholder(s) {bad}; one of {SHOWN_IN}, "
                         f"{{{'}, {'.join(PLACEHOLDERS)}}}")
    if fig.name in FIGURES:
        raise ValueError(f"figure {fig.name!r} is registered twice")
    FIGURES[fig.name] = fig
    return fig


def lookup(name: str) -> Figure | None:
    """The catalog's entry of ``name`` (a report's key, ``rollout_corr/rollout_rs_token_k1_mean`` found
    under its placeholder name), else None."""
    fig = FIGURES.get(name)
    if fig is not None:
        return fig
    for f in FIGURES.values():
        p = f.pattern
        if p is not None and p.match(name):
            return f
    return None


def at_path(path: tuple[str, ...]) -> list[Figure]:
    """The figures whose value is under ``path`` of the report (``("group_health", "overall")``), in the
    catalog's order."""
    n = len(path)
    return [f for f in FIGURES.values() if f.at is not None and f.at[:n] == tuple(path) and len(f.at) == n + 1]


def value(report: dict, name: str) -> Any:
    """The value of figure ``name`` in ``report``: under its entry's ``at`` path, else ``metrics[name]`` (None
    where the report lacks it). A name the catalog has no entry for is an error (KeyError): every figure a
    line prints is registered."""
    fig = lookup(name)
    if fig is None:
        raise KeyError(f"figure {name!r} has no entry in advcli/report/catalog.py")
    node: Any = report
    for part in fig.at or ("metrics", name):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def unregister(name: str) -> None:
    """Remove a figure (tests that register one of their own)."""
    FIGURES.pop(name, None)


def shown_in(where: str) -> list[Figure]:
    """The figures shown in ``where`` (one of :data:`SHOWN_IN`), in the catalog's order."""
    return [f for f in FIGURES.values() if where in f.shown]


def computed() -> list[Figure]:
    """The figures with a ``compute``, in the catalog's order."""
    return [f for f in FIGURES.values() if f.compute is not None]


def needing(what: str) -> list[str]:
    """The names of the figures that need ``what`` (``"advantages"``)."""
    return [f.name for f in FIGURES.values() if what in f.needs]


def not_tracked() -> set[str]:
    """The names of the figures kept out of the trackers."""
    return {f.name for f in FIGURES.values() if "tracker" not in f.shown}


def compute_figures(st, rows, scope: int | None) -> dict[str, Any]:
    """``{name: value}`` of the computed figures over ``rows`` of scope ``scope`` (None: the whole run,
    every computed figure; a step: those with ``per_step``)."""
    out: dict[str, Any] = {}
    for f in computed():
        if scope is not None and not f.per_step:
            continue
        v = f.compute(st, rows, scope)
        if v is not None and not isinstance(v, (bool, int)):
            v = float(v)  # as advcli.figures.json_values.figure: NaN/inf are None
            v = v if math.isfinite(v) else None
        out[f.name] = v
    return out


# ------------------------------------------------------------------------------------------ the catalog
T = ("tracker",)


def _family(prefix: str, unit: str, what: str, stats: tuple[str, ...], *, shown: dict | None = None,
            per_step: tuple[str, ...] = (), label: str | None = None, needs: tuple[str, ...] = ()) -> None:
    """Register ``prefix/STAT`` for each STAT: ``what``'s mean, max, min, std (population), count, the
    quantiles pN; ``shown``: {STAT: extra places}; ``per_step``: the STATs given per step too."""
    words = {"mean": "mean", "max": "maximum", "min": "minimum", "std": "standard deviation (population)",
             "count": "number of values", "nonfinite": "number of NaN/±inf values"}
    for s in stats:
        word = words.get(s) or (f"{s[1:]}th percentile (linear interpolation)" if s.startswith("p") else s)
        places = (shown or {}).get(s, ())
        register(Figure(f"{prefix}/{s}", unit, f"{word} of {what}", per_step=s in per_step,
                        shown=tuple(places) + T, label=label if "follow" in places else None, needs=needs))


_Q = tuple(f"p{q}" for q in QUANTILES)
_KEY, _CARD = ("summary",), ("summary", "card")

_family("critic/score", "reward", "the sequence score Σ_t token_level_scores (before normalisation and KL), "
        "non-aborted rows", ("mean", "max", "min", "std", *_Q), shown={"mean": (*_CARD, "step_plot", "follow")},
        per_step=("mean", "max", "min"))
_family("critic/rewards", "reward", "the sequence reward Σ_t token_level_rewards (after normalisation, placement "
        "and KL), non-aborted rows", ("mean", "max", "min", "std", *_Q), shown={"mean": (*_CARD, "step_plot")},
        per_step=("mean", "max", "min"))
_family("critic/advantages", "advantage", "the finite advantages of the mask=1 tokens",
        ("mean", "min", "max", "std", "count", "nonfinite", *_Q),
        shown={"mean": (*_CARD, "step_plot", "follow"), "min": (*_KEY, "follow"), "max": (*_KEY, "follow")},
        per_step=("mean", "max", "min"), label="advantages", needs=("advantages",))
register(Figure("critic/advantages/quantiles_exact", "", "whether the advantage quantiles are exact (else from a "
                "fixed stratified sample of the valid tokens)", needs=("advantages",)))
_family("critic/returns", "return", "the finite returns of the mask=1 tokens", ("mean", "max", "min", "count",
        "nonfinite"), shown={"mean": (*_CARD, "step_plot")}, per_step=("mean", "max", "min"),
        needs=("advantages", "returns"))
_family("critic/values", "value", "the values of the mask=1 tokens (an estimator with a critic)",
        ("mean", "max", "min"), shown={"mean": (*_CARD, "step_plot")}, per_step=("mean", "max", "min"),
        needs=("advantages",))
register(Figure("critic/vf_explained_var", "", "verl's 1 − var(G − V)/(var(G) + 1e-5) over the mask=1 tokens",
                per_step=True, needs=("advantages",)))
_family("response_length", "tokens", "the response length (the list length; padded: last mask=1 position + 1), "
        "all rows", ("mean", "max", "min"), shown={"mean": (*_CARD, "step_plot")}, per_step=("mean", "max", "min"))
_family("response_length_non_aborted", "tokens", "the response length of the rows with one", ("mean", "max", "min"))
register(Figure("response/aborted_ratio", "share of rows", "share of rows with response length 0"))
register(Figure("actor/reward_kl_penalty", "", "verl's mean over rows of Σ_t kld·m / (Σ_t m + 1e-8), KL in the reward",
                per_step=True, shown=("summary", "step_plot", "tracker")))
register(Figure("actor/reward_kl_penalty_coeff", "", "the KL coefficient β used (before the step's update)",
                per_step=True, shown=("summary", "step_plot", "tracker")))
register(Figure("kl_coef", "", "a step's KL coefficient (per-step entries only)", per_step=True,
                shown=("step_plot", "tracker")))
register(Figure("kl", "", "a step's mean KL (per-step entries only)", per_step=True, shown=("step_plot", "tracker")))
# verl's rollout correction (advcli.correction.weights.step_metrics; rollout_corr_helper.py @1dda039b:
# compute_offpolicy_metrics, compute_is_metrics, compute_rs_metrics), per step;
# overall the step's own for one step, else the row-weighted mean over the steps (advcli.correction.plan)
_RC = "verl's rollout correction: "
_TOK, _ROWS = "share of tokens", "share of rows"
for _name, _unit, _doc, _where in (
        ("kl", "", "mean KL(π_rollout ‖ π_old) per token, Σ(rollout − old)·m / Σm", ("summary",)),
        ("k3_kl", "", "mean k3 estimator e^lr − lr − 1 per token", ()),
        ("training_ppl", "perplexity", "mean over rows of exp(−row mean old log-prob)", ()),
        ("training_log_ppl", "", "mean over rows of −row mean old log-prob", ()),
        ("rollout_ppl", "perplexity", "mean over rows of exp(−row mean rollout log-prob)", ()),
        ("rollout_log_ppl", "", "mean over rows of −row mean rollout log-prob", ()),
        ("log_ppl_diff", "", "mean over rows of d = row mean rollout − row mean old log-prob", ()),
        ("log_ppl_abs_diff", "", "mean over rows of |d|", ()),
        ("log_ppl_diff_max", "", "largest d over rows", ()),
        ("log_ppl_diff_min", "", "smallest d over rows", ()),
        ("ppl_ratio", "", "mean over rows of e^d", ()),
        ("chi2_token", "", "χ² divergence per token, mean e^(2·lr) − 1", ("summary",)),
        ("chi2_seq", "", "χ² divergence per row, mean e^(2·Σ lr) − 1", ()),
        ("rollout_is_mean", "IS weight", "mean importance weight of the valid tokens", ("summary",)),
        ("rollout_is_max", "IS weight", "largest importance weight", ()),
        ("rollout_is_min", "IS weight", "smallest importance weight", ()),
        ("rollout_is_ratio_fraction_high", _TOK, "share of weights above the upper threshold (sequence: of rows)", ()),
        ("rollout_is_ratio_fraction_low", _TOK, "share of weights below the lower threshold (sequence: of rows)", ()),
        ("rollout_is_std", "IS weight", "standard deviation of the truncated weights", ()),
        ("rollout_is_eff_sample_size", "", "effective sample size 1/mean((w/mean w)²) of the truncated weights", ()),
        ("rollout_is_seq_mean", "IS weight", "mean over rows of the row's mean weight", ()),
        ("rollout_is_seq_std", "IS weight", "standard deviation (unbiased) over rows of the row's mean weight", ()),
        ("rollout_is_seq_max", "IS weight", "largest row mean weight", ()),
        ("rollout_is_seq_min", "IS weight", "smallest row mean weight", ()),
        ("rollout_is_seq_max_deviation", "IS weight", "largest |row mean weight − 1|", ()),
        ("rollout_is_seq_fraction_high", _ROWS, "share of rows whose mean raw weight is above the upper threshold", ()),
        ("rollout_is_seq_fraction_low", _ROWS, "share of rows whose mean raw weight is below the lower threshold", ()),
        ("rollout_is_oob_ratio", _TOK, "IcePop: share of weights outside [lower, upper]", ()),
        ("rollout_is_batch_norm_factor", "", "the step's batch-normalisation factor μ (1.0 when not applied)", ()),
        ("rollout_rs_{option}_mean", "", "mean of the rejection option's statistic over the valid tokens", ()),
        ("rollout_rs_{option}_max", "", "largest value of the option's statistic", ()),
        ("rollout_rs_{option}_min", "", "smallest value of the option's statistic", ()),
        ("rollout_rs_{option}_fraction_high", _TOK, "share above the option's upper bound (sequence option: of "
         "valid rows)", ()),
        ("rollout_rs_{option}_fraction_low", _TOK, "share below the option's lower bound (k1 only, else 0)", ()),
        ("rollout_rs_{option}_std", "", "standard deviation of the option's statistic clamped to its bounds", ()),
        ("rollout_rs_{option}_seq_mean", "", "mean over valid rows of the row's statistic", ()),
        ("rollout_rs_{option}_seq_std", "", "standard deviation (unbiased) over valid rows of the row's statistic",
         ()),
        ("rollout_rs_{option}_seq_max", "", "largest row statistic", ()),
        ("rollout_rs_{option}_seq_min", "", "smallest row statistic", ()),
        ("rollout_rs_{option}_seq_max_deviation", "", "largest |row statistic − 1|", ()),
        ("rollout_rs_{option}_seq_fraction_high", _ROWS, "share of valid rows above the upper bound", ()),
        ("rollout_rs_{option}_seq_fraction_low", _ROWS, "share of valid rows below the lower bound (k1 only)", ()),
        ("rollout_rs_{option}_masked_fraction", _TOK, "share of valid tokens the option rejected", ()),
        ("rollout_rs_{option}_seq_masked_fraction", _ROWS, "share of valid rows with a token the option rejected",
         ()),
        ("rollout_rs_masked_fraction", _TOK, "share of tokens rejection sampling masked", ("summary",)),
        ("rollout_rs_seq_masked_fraction", _ROWS, "share of rows with a token rejection sampling masked", ())):
    register(Figure(f"rollout_corr/{_name}", _unit, _RC + _doc, per_step=True, shown=(*_where, "tracker")))
# verl 0.6.0 (mismatch_helper.py @v0.6.0 L357-367, under its mismatch/ prefix): quantiles of the IS weights before
# truncation at the step's mask=1 tokens, torch.quantile (advcli.correction.weights.WeightQuantiles); later
# releases dropped them
for _q in (25, 50, 75, 95, 99):
    register(Figure(f"mismatch/rollout_is_p{_q}", "IS weight", f"verl 0.6.0's rollout IS: {_q}th percentile (linear "
                    "interpolation, exact) of the weights before truncation over the step's valid tokens",
                    per_step=True, shown=("tracker",)))
# OpenRLHF's gated IS coefficient, under the names its PolicyLoss logs (ppo_actor.py L314-316)
register(Figure("vllm_kl", "", "OpenRLHF's IS correction: mean rollout − old log-prob over the step's valid tokens",
                per_step=True))
register(Figure("is_filter_ratio", "", "OpenRLHF's IS correction: share of valid tokens (seq level: rows) the gate "
                "filtered", per_step=True))

_G = "share of groups"
for _name, _unit, _doc in (
        ("groups/count", "groups", "number of groups"),
        ("groups/size/mean", "rows", "mean rows per group"), ("groups/size/min", "rows", "fewest rows in a group"),
        ("groups/size/max", "rows", "most rows in a group"),
        ("groups/singleton_share", _G, "share of groups of one row"),
        ("groups/all_equal_share", "share of groups of ≥ 2 rows", "share of groups whose estimator row scores are "
         "all equal"),
        ("groups/solved_share", "share of rows", "share of rows with score > 0 among the rows with a score"),
        ("groups/solved_all_share", _G, "share of groups where every row with a score has score > 0"),
        ("groups/solved_none_share", _G, "share of groups where no row with a score has score > 0"),
        ("groups/solved_some_share", _G, "share of groups where some but not all rows have score > 0")):
    register(Figure(_name, _unit, _doc))
for _name, _doc in (("mixed", "rows of both signs"), ("only_pos", "only positive rows (and zero)"),
                    ("only_neg", "only negative rows (and zero)"), ("all_zero", "every row's mean advantage 0")):
    register(Figure(f"groups/adv_sign/{_name}_share", _G, f"share of groups with {_doc} (sign of each row's mean "
                    "valid advantage)", needs=("advantages",)))
register(Figure("groups/adv_sign/balance_mean", "", "mean over groups of (#positive − #negative rows)/size",
                needs=("advantages",)))

# the group-health block's whole-run figures (advcli.figures.group_health, report["group_health"]["overall"]):
# the columns of the group-health table (headed by the label, in this order) and the trackers'
# group_health/overall/* summary numbers
_GH = ("group_health", "overall")
for _name, _unit, _label, _doc, _table in (
        ("groups", "groups", "groups", "number of groups", True),
        ("rows", "rows", "rows", "number of rows", True),
        ("uniform_share", _G, "uniform", "share of groups whose rewards are all equal (groups of one included)",
         True),
        ("zero_adv_token_share", "share of valid tokens", "zero-adv tokens", "share of the valid tokens whose "
         "advantage is exactly 0 (with advantages)", True),
        ("group_mean_reward", "reward", "mean group reward", "mean over groups of the group's mean reward (rows "
         "without a reward left out)", True),
        ("solved_share", "share of rows", "solved rows", "share of rows with reward > 0 among the rows with a "
         "reward", True),
        ("singleton_groups", "groups", "singletons", "number of groups of one row", True),
        ("partial_groups", "groups", "partial", "number of groups with fewer rows than the usual size", True),
        ("uniform_groups", "groups", "uniform groups", "number of groups whose rewards are all equal", False),
        ("solved_all_share", _G, None, "share of groups whose rows with a reward all have reward > 0", False),
        ("solved_none_share", _G, None, "share of groups where no row with a reward has reward > 0", False)):
    _follow = ("follow",) if _name in ("groups", "solved_share", "uniform_groups") else ()  # stats' line
    register(Figure(f"group_health/overall/{_name}", _unit, _doc, label=_label, at=(*_GH, _name),
                    shown=(("group_table", "tracker") if _table else ("tracker",)) + _follow))

# the report's histograms (report["histograms"][NAME]: edges, counts): the page's plots (x axis titled with
# the unit) and the Markdown's tables; made by the figure collector (advantages, score, rewards, group_size)
# and the rollout correction (rollout_is_weights)
for _name, _unit, _doc in (
        ("score", "score", "the sequence scores of the non-aborted rows"),
        ("rewards", "reward", "the sequence rewards Σ token_level_rewards of the non-aborted rows"),
        ("advantages", "advantage", "the finite advantages of the mask=1 tokens"),
        ("group_size", "rows per group", "groups per size"),
        ("rollout_is_weights", "IS weight", "verl's rollout correction: the IS weights of the mask=1 tokens")):
    register(Figure(f"histograms/{_name}", _unit, _doc, shown=("histogram",), at=("histograms", _name),
                    whole=_name == "group_size", needs=("advantages",) if _name == "advantages" else ()))

# by token position (advcli.figures.positions, report["by_position"]: positions, mean, std, count, the band)
register(Figure("by_position/mean", "advantage", "the mean of the valid advantages at each token position (with "
                "its band)", at=("by_position", "mean"), shown=("position_plot",)))
register(Figure("by_position/count", "tokens", "the number of valid tokens at each token position",
                at=("by_position", "count"), shown=("position_plot",)))

# the run's own numbers beside its figures: the whole run's under the report's top-level keys (and each step's
# row count), the speed, which release ran, and one count per diagnostic — sent to the trackers
for _name, _unit, _doc, _per_step in (
        ("rows", "rows", "number of rows (per step: the step's)", True),
        ("tokens", "tokens", "number of response tokens", False),
        ("valid_tokens", "tokens", "number of mask=1 tokens", False),
        ("seconds", "s", "the run's wall-clock time", False),
        ("timings/seconds", "s", "the run's wall-clock time", False),
        ("timings/rows_per_s", "rows/s", "rows per second", False),
        ("timings/tokens_per_s", "tokens/s", "tokens per second", False),
        ("release/newest", "", "whether the flavor's newest verified release ran (1) or an older one (0)", False),
        ("diagnostics/{kind}", "", "the diagnostic's count (its unit in the report: rows, groups, tokens, steps)",
         False)):
    register(Figure(_name, _unit, _doc, per_step=_per_step, at=tuple(_name.split("/"))
                    if not _name.startswith("diagnostics") else ("diagnostics",),
                    shown=("tracker", "follow") if _name == "rows" else ("tracker",)))

# `advcli audit`'s numbers (advcli.audit.recompute, its report's top-level keys; the figures --follow's audit
# line leads with) and `advcli compare`'s of two outputs or two configurations (advcli.runs.compare:
# tokens/*, row_level/*, groups/*), sent to the trackers (`rows`, `valid_tokens` and `seconds` above)
_LOG, _REC = "the logged advantage", "the recomputed one"
for _name, _unit, _doc, _where in (
        ("agree", "", f"whether every mask=1 token's {_LOG} agrees with {_REC} within the tolerance (1) or not (0)",
         ("follow",)),
        ("max_abs_diff", "advantage", f"largest |{_LOG} − {_REC}| over the mask=1 tokens", ("follow",)),
        ("rows_disagreeing", "rows", "rows with a mask=1 token that disagrees", ("follow",)),
        ("tokens_disagreeing", "tokens", "mask=1 tokens that disagree", ()),
        ("masked_tokens_disagreeing", "tokens", "mask=0 tokens whose logged value disagrees", ()),
        ("nonfinite_logged", "tokens", "mask=1 tokens whose logged value is NaN or ±inf", ()),
        ("rows_without_logged_value", "rows", "rows whose logged value (one per row) is missing (not checked)",
         ("follow",)),
        ("rows_of_torn_groups", "rows", "--follow: disagreeing rows of a group whose torn last line the step was "
         "taken without (recomputed without that row: not checked)", ("follow",)),
        ("groups", "groups", "number of groups of the recomputation", ()),
        ("groups_disagreeing", "groups", "groups holding a row that disagrees", ()),
        ("rows_matching_another_row", "rows", "disagreeing rows whose logged values are another row's of the "
         "step recomputed (rows swapped)", ()),
        ("fitted/scale", "", f"the least-squares factor c of {_LOG} ≈ c · {_REC} (disagreeing runs)", ()),
        ("fitted/shift", "advantage", f"the mean difference d of {_LOG} ≈ {_REC} + d (disagreeing runs)", ()),
        ("hypotheses/{hypothesis}/tokens_left", "tokens", "mask=1 tokens that still disagree under the explanation "
         "(a clamp, float32 arithmetic, a flipped sign, a scale, a shift, per group)", ()),
        ("first_stage/row", "row", "the row of the first value of the first stage that differs", ()),
        ("first_stage/position", "token", "its token position", ()),
        ("first_stage/expected", "", "that stage's value recomputed there", ()),
        ("first_stage/actual", "", "that stage's value logged there", ()),
        ("tokens/pearson", "", "Pearson correlation of A and B over the mask=1 tokens", ()),
        ("tokens/sign_agreement", "share of tokens", "share of mask=1 tokens where A and B have the same sign", ()),
        ("tokens/sign_changes", "tokens", "mask=1 tokens where the sign of A and B differ", ()),
        ("tokens/sign_change_share", "share of tokens", "share of mask=1 tokens where the signs differ", ()),
        ("tokens/mean_abs_diff", "advantage", "mean |A − B| over the mask=1 tokens", ()),
        ("tokens/max_abs_diff", "advantage", "largest |A − B| over the mask=1 tokens", ()),
        ("tokens/rmse", "advantage", "root mean square of A − B over the mask=1 tokens", ()),
        ("tokens/mean_a", "advantage", "mean of A over the mask=1 tokens", ()),
        ("tokens/mean_b", "advantage", "mean of B over the mask=1 tokens", ()),
        ("tokens/std_a", "advantage", "standard deviation (population) of A over the mask=1 tokens", ()),
        ("tokens/std_b", "advantage", "standard deviation (population) of B over the mask=1 tokens", ()),
        ("tokens/returns_pearson", "", "Pearson correlation of the two returns columns over the mask=1 tokens", ()),
        ("tokens/nonfinite", "tokens", "mask=1 tokens where A or B is NaN or infinite: left out of every figure", ()),
        ("tokens/nonfinite_in_one", "tokens", "of those, the tokens where only one of A and B is NaN or infinite", ()),
        ("row_level/rows_with_valid_tokens", "rows", "rows with a mask=1 token", ()),
        ("row_level/pearson", "", "Pearson correlation of the rows' mean advantages", ()),
        ("row_level/spearman", "", "Spearman rank correlation of the rows' mean advantages", ()),
        ("row_level/sign_agreement", "share of rows", "share of rows whose mean advantages have the same sign", ()),
        ("row_level/sign_flips", "rows", "rows whose mean advantages have opposite signs", ()),
        ("groups/with_sign_flip", "groups", "groups where a row's sign differs between A and B", ()),
        ("groups/mean_abs_diff", "advantage", "mean over groups of the group's mean |A − B| of row advantages", ()),
        ("groups/flat_in_a_not_b", "groups", "groups whose row advantages are all equal in A but not in B", ()),
        ("groups/flat_in_b_not_a", "groups", "groups whose row advantages are all equal in B but not in A", ())):
    register(Figure(_name, _unit, _doc, shown=("tracker", *_where), at=tuple(_name.split("/"))))
