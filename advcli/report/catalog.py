"""The catalog of report figures: each figure is one :class:`Figure` — its name, unit, definition, how
it is computed and where it is shown — registered here, and every place that shows figures asks the
catalog instead of keeping its own list:

- ``summary``: the key figures of the terminal summary (``advcli run``, ``advcli stats``, ``--follow``'s
  reports), the Markdown report's "Key figures" and a result's one-line ``repr``;
- ``card``: a card of the HTML page (the figure large, the figures of its family named ``min``/``max``
  beside it);
- ``step_plot``: a curve by step on the HTML page (a per-step figure), its value axis titled with the unit;
- ``follow``: ``--follow``'s per-step line, under the figure's ``label`` (the figures of one family
  together: ``advantages mean 0.1 min -1 max 1``);
- ``tracker``: sent to ``--log wandb`` / ``tensorboard`` (summary and per step).

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
(:mod:`advcli.figures.verl_metrics`, :meth:`FigureCollector.finish`) or by the run's rollout
correction (:mod:`advcli.correction.plan`).

``needs``: ``"advantages"`` — read from the advantages, left out of ``advcli stats`` on a dump without
them. A figure that counts tokens is named under one of the prefixes of
``advcli.formats.response_level.TOKEN_FIGURES`` (``response_length/`` ...), which a dump without token
data leaves out.

This module imports nothing heavy (the report renderings read it without numpy); :mod:`advcli.figures`
imports it, never the other way.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SHOWN_IN = ("summary", "card", "step_plot", "follow", "tracker")
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
    label: str | None = None  # its label on --follow's per-step line
    needs: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """The name's prefix (``critic/advantages`` for ``critic/advantages/min``)."""
        return self.name.rpartition("/")[0]

    @property
    def axis(self) -> str:
        """The title of a value axis showing it: its unit, else its name."""
        return self.unit or self.name


FIGURES: dict[str, Figure] = {}


def register(fig: Figure) -> Figure:
    """Add ``fig`` to the catalog (a name registered twice is an error: each figure is declared once)."""
    bad = [w for w in fig.shown if w not in SHOWN_IN]
    if bad:
        raise ValueError(f"figure {fig.name!r}: unknown place(s) {bad}; one of {SHOWN_IN}")
    if fig.name in FIGURES:
        raise ValueError(f"figure {fig.name!r} is registered twice")
    FIGURES[fig.name] = fig
    return fig


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
        "non-aborted rows", ("mean", "max", "min", "std", *_Q), shown={"mean": (*_CARD, "step_plot")},
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
        "nonfinite"), shown={"mean": (*_CARD, "step_plot")}, per_step=("mean", "max", "min"), needs=("advantages",))
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
for _name, _doc in (("kl", "mean KL(π_rollout ‖ π_old) per token"), ("chi2_token", "χ² divergence per token"),
                    ("rollout_is_mean", "mean importance weight of the valid tokens"),
                    ("rollout_rs_masked_fraction", "share of tokens rejection sampling masked")):
    register(Figure(f"rollout_corr/{_name}", "", f"verl's rollout correction: {_doc}", per_step=True,
                    shown=("summary", "tracker")))

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
