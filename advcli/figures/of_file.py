"""The figures ``advcli stats`` (:mod:`advcli.runs.stats`) adds to a file's own columns: the reward KL of a
KL-in-reward run replayed from its log-prob columns, and the group-health block by data source and reward
component. numpy until there is math to do (the KL replay imports torch through :mod:`advcli.ops.kl`).
"""
from __future__ import annotations


def reward_kl(ins, run, column_overrides: dict, scope_codes, num_scopes: int, chunk_rows: int,
              flat_inputs=None) -> dict | None:
    """The KL figures of an advcli output whose run put the KL in the reward (``run``: the spec of its
    provenance ``config``), as that run computed them, for :meth:`FigureCollector.set_rows`: ``kl_row``, each
    row's verl ``masked_mean(kld, m)``, recomputed from the log-prob columns the output kept with the run's
    estimator, clamps, mask rule and precision; ``betas``/``kls``, each step's β and current_kl, from the
    run's controller replayed over the steps in order (an adaptive β depends on every earlier step's KL).
    None when the run had no KL in the reward, its batches were not the file's steps (``grouping.scope``
    ``step_domain``, or ``all`` over several steps), or a log-prob column it read is not in the file (dropped
    from the output afterwards): those figures are then left out, never guessed. ``flat_inputs``: (each row's
    reward in float64, its Σ mask, its group code) or None, for a run that left the KL out of flat groups
    (``kl.skip_flat_groups``; without them, the figures are left out)."""
    import numpy as np

    from ..config.columns import bypass_columns, resolve_columns

    c = run.kl
    if not c.in_reward or run.grouping.scope not in ("step", "all"):
        return None  # (before torch is imported: stats of any other output stays torch-free)
    if run.grouping.scope == "all":
        if num_scopes > 1:
            return None
        scope_codes = np.zeros(len(scope_codes), np.int64)
    # the run's column names (its `columns` section), then what this command was told
    cmap = bypass_columns(resolve_columns(ins.schema, {**dict(run.columns), **column_overrides}, ins.paths[0]),
                          run.correction.bypass)
    roles = [r for r in (c.policy, "ref_log_probs") if cmap.has(r)]
    if not cmap.has("response_mask") or (c.missing != "zeros" and len(roles) < 2):
        return None
    from ..io.arrays import list_parts
    from ..ops.kl import replay_reward_kl  # the math (torch), once there is some to do

    cols = list(dict.fromkeys([cmap["response_mask"]] + [cmap[r] for r in roles]))
    chunks = ((*list_parts(batch.column(cols[0])), {r: list_parts(batch.column(cmap[r]))[1] for r in roles})
              for _, _, batch in ins.iter_batches(cols, chunk_rows))  # one chunk in memory at a time
    flat = None
    if c.skip_flat_groups != "off" and run.reward.source != "token_level_scores":
        if flat_inputs is None:
            return None
        flat = tuple(np.asarray(x) for x in flat_inputs)
    kl_row, betas, kls = replay_reward_kl(c, run.precision, chunks, scope_codes, num_scopes, flat)
    return {"kl_on": True, "kl_row": kl_row, "betas": betas, "kls": kls}


def health_columns(schema, cmap, prov) -> dict:
    """The columns group health splits by: the data source (advcli.figures.curate.SOURCE_COLUMNS, or the
    ``domain`` role) and the reward components (the run's ``reward.components`` for an advcli output,
    and ``reward/*`` columns)."""
    import pyarrow as pa

    from .curate import find_source_column

    names = schema.names
    src = find_source_column(names) or (cmap.names.get("domain") if cmap.has("domain") else None)
    comps = list(((((prov or {}).get("config") or {}).get("reward") or {}).get("components")) or [])
    comps += [c for c in names if c.startswith("reward/")]
    numeric = lambda c: c in names and (pa.types.is_floating(schema.field(c).type)  # noqa: E731
                                        or pa.types.is_integer(schema.field(c).type))
    return {"source": [src] if src else [], "components": [c for c in dict.fromkeys(comps) if numeric(c)]}


def file_group_health(rs, parts: dict, schema, cols: dict) -> dict | None:
    """advcli.figures.group_health of the collector, split by data source and reward component."""
    import numpy as np
    import pyarrow as pa

    from .group_health import of_collector

    def col(c):
        arr = pa.chunked_array(parts[c], type=schema.field(c).type)
        if pa.types.is_dictionary(arr.type):
            arr = arr.cast(arr.type.value_type)
        return arr.to_numpy(zero_copy_only=False)

    keep = rs.keep if rs.keep is not None else slice(None)  # padding rows left out, as in the collector's figures
    rs = rs.kept()
    source = names = None
    if cols["source"]:
        import pandas as pd

        codes, uniq = pd.factorize(col(cols["source"][0]), sort=False, use_na_sentinel=False)
        source, names = codes.astype(np.int64)[keep], [str(u) for u in uniq]
    comps = {c: np.asarray(col(c), np.float64)[keep] for c in cols["components"]}
    return of_collector(rs, source=source, source_names=names, components=comps or None)
