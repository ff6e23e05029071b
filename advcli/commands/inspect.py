"""``advcli inspect DUMP``: what is in a rollout dump and what it can feed. Never imports torch.

Reads the schema, the small columns (group id, step, rewards) and only the *offsets* of one token
column (its list lengths) plus the mask values; nothing else of the token data.
"""
from __future__ import annotations

import json
import os
import shlex
from typing import TYPE_CHECKING

import typer

from ..errors import AdvcliError
from . import options as opt

if TYPE_CHECKING:  # numpy is imported where it is used: `advcli --help` never loads it
    import numpy as np

EPILOG = """
[bold]Examples[/]

  advcli inspect sample_data/rollouts.parquet
  advcli inspect sample_data/rollouts.parquet --json | python -m json.tool
  advcli inspect dump.parquet --column reward=score --column prompt_id=uid
  advcli inspect 'dumps/*.parquet'

Shows the schema with each column's role, rows and tokens, the distributions of response length and
group size, the steps, the reward, and which estimators the dump can feed (and what the others lack).
Then try: advcli validate DUMP --flavor verl --set algorithm.adv_estimator=grpo
"""


def _dist(x: np.ndarray) -> dict:
    import numpy as np
    if x.size == 0:
        return {"count": 0}
    q = np.quantile(x.astype(np.float64), [0.05, 0.5, 0.95])
    return {"count": int(x.size), "min": float(x.min()), "p05": float(q[0]), "median": float(q[1]),
            "p95": float(q[2]), "max": float(x.max()), "mean": float(x.mean())}


BATCH_ROWS = 8192  # rows decoded at once: the mask's bytes and a few bool arrays of its size (as stats reads)


def mask_shape(offsets: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """Of one chunk of a response-mask column (offsets [R+1] from 0, flat values): each row's length and
    number of mask=1 tokens, and how many rows end with a 0, start with a 0, or have a mask=0 span between
    two 1s (a 0 -> 1 rise after the row's first token). Over bool arrays, a byte a token (no int64 copy)."""
    import numpy as np

    on = mask if mask.dtype == np.bool_ else mask != 0
    lengths = np.diff(offsets)
    nonempty = lengths > 0
    firsts = offsets[:-1][nonempty]  # strictly increasing: segment i of reduceat is exactly row i
    valid = np.zeros(lengths.size, np.int64)
    ends = starts = spans = 0
    if firsts.size:
        valid[nonempty] = np.add.reduceat(on, firsts, dtype=np.int64)
        ends = int((~on[offsets[1:][nonempty] - 1]).sum())
        starts = int((~on[firsts]).sum())
        rise = np.zeros(on.size, dtype=bool)
        np.greater(on[1:], on[:-1], out=rise[1:])  # 0 -> 1
        rise[firsts] = False
        spans = int(np.logical_or.reduceat(rise, firsts).sum())
    return lengths, valid, ends, starts, spans


def inspect_data(inputs: list[str], column_overrides: dict[str, str]) -> dict:
    """Everything ``advcli inspect`` shows, as a JSON-able dict."""
    import numpy as np
    import pyarrow as pa

    from ..config.column_roles import ROLE_INFO
    from ..config.columns import resolve_columns
    from ..io.arrays import keys_codes, list_parts, numeric, provenance
    from ..io.reader import InputSet

    ins = InputSet.open(inputs)
    file0 = ins.paths[0]
    cmap = resolve_columns(ins.schema, column_overrides, file0)
    role_of = {col: role for role, col in cmap.names.items()}
    prov = provenance(ins.schema)
    schema = []
    for f in ins.schema:
        role = role_of.get(f.name)
        if role is None and f.name in ("advantages", "returns", "token_level_rewards"):
            info = "advcli output"
        elif role is None:
            info = ""
        else:
            info = ROLE_INFO[role][2]
        schema.append({"column": f.name, "type": str(f.type), "role": role, "meaning": info})
    data: dict = {"inputs": ins.paths, "files": len(ins.paths), "rows": ins.num_rows,
                  "row_groups": sum(md.num_row_groups for md in ins.metadata),
                  "bytes": sum(_size(p) for p in ins.paths), "schema": schema,
                  "roles": dict(cmap.names), "advcli_output": prov is not None}
    if prov is not None:
        data["produced_by"] = {k: prov.get(k) for k in ("advcli_version", "flavor", "release", "flavor_config",
                                                        "inputs")}

    small = [cmap[r] for r in ("prompt_id", "step", "reward", "domain") if cmap.has(r)]
    if "is_padding" in ins.schema.names:  # verl's synthetic padding rows: out of the rows, groups and rewards
        small.append("is_padding")
    mask_col = cmap.names.get("response_mask")
    cols = list(dict.fromkeys(small + ([mask_col] if mask_col else [])))
    parts: dict[str, list] = {c: [] for c in cols}
    lengths, valid, interior, ends_masked, starts_masked = [], [], 0, 0, 0
    for _, _, batch in ins.iter_batches(cols, BATCH_ROWS) if cols else []:
        for c in small:
            parts[c].append(batch.column(c))
        if mask_col:
            ln, v, ends, starts, spans = mask_shape(*list_parts(batch.column(mask_col)))
            lengths.append(ln)
            valid.append(v)
            ends_masked += ends
            starts_masked += starts
            interior += spans
    if mask_col:
        L = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        V = np.concatenate(valid) if valid else np.zeros(0, np.int64)
        data["tokens"] = int(L.sum())
        data["valid_tokens"] = int(V.sum())
        data["length"] = _dist(L)
        data["valid_length"] = _dist(V)
        data["mask"] = {"rows_with_interior_masked_spans": interior, "rows_ending_masked": ends_masked,
                        "rows_starting_masked": starts_masked, "rows_all_masked": int(((V == 0) & (L > 0)).sum()),
                        "empty_rows": int((L == 0).sum())}
        if L.size:
            lo, hi = int(L.min()), int(L.max()) + 1
            edges = np.unique(np.linspace(lo, hi, 11).round().astype(np.int64))  # equal widths, [a, b)
            if edges.size >= 2:
                counts, e = np.histogram(L, bins=edges)
                data["length_histogram"] = {"edges": e.tolist(), "counts": counts.tolist()}
    keep = slice(None)
    if "is_padding" in parts and parts["is_padding"]:
        pad = np.asarray(pa.chunked_array(parts["is_padding"]).fill_null(False).to_numpy(zero_copy_only=False), bool)
        if pad.any():
            keep = ~pad
            data["rows"] = int(keep.sum())
            data["padding_rows"] = int(pad.sum())
    step_codes = None
    if cmap.has("step"):
        st = numeric(pa.chunked_array(parts[cmap["step"]]), cmap["step"], file0)[keep] if parts[cmap["step"]] else \
            np.zeros(0, np.int64)
        vals_, counts_ = np.unique(st, return_counts=True)
        data["steps"] = {"count": int(vals_.size),
                         "rows_per_step": {str(int(v)): int(c) for v, c in zip(vals_[:50], counts_[:50])}}
        step_codes = st
    if cmap.has("prompt_id") and parts[cmap["prompt_id"]]:
        from ..ops.grouprule import contiguous_block_size, id_groups, scope_codes, size_counts

        codes, uniq = keys_codes(pa.chunked_array(parts[cmap["prompt_id"]]))
        codes = codes[keep]
        key, _ = id_groups(scope_codes(step_codes)[0] if step_codes is not None else None, codes)
        sizes = np.bincount(key)
        n_blocks = contiguous_block_size(codes, step_codes)
        data["groups"] = {"count": int(sizes.size), "size_counts": {str(s): c for s, c in size_counts(key).items()},
                          "singletons": int((sizes == 1).sum()),
                          "contiguous_blocks_of": n_blocks,
                          "layout": "contiguous equal blocks" if n_blocks else "scattered or unequal"}
    if cmap.has("reward") and parts[cmap["reward"]]:
        r = numeric(pa.chunked_array(parts[cmap["reward"]]), cmap["reward"], file0).astype(np.float64)[keep]
        fin = np.isfinite(r)
        d = _dist(r[fin])
        d["nonfinite"] = int((~fin).sum())
        d["distinct"] = int(np.unique(r[fin]).size)
        d["share_positive"] = float((r[fin] > 0).mean()) if fin.any() else None
        data["reward"] = d
        if "groups" in data and fin.all():
            codes_ = key
            gmin = np.full(sizes.size, np.inf)
            gmax = np.full(sizes.size, -np.inf)
            np.minimum.at(gmin, codes_, r)
            np.maximum.at(gmax, codes_, r)
            data["groups"]["all_equal_reward"] = int(((gmin == gmax) & (sizes > 1)).sum())
    data["estimators"] = feeds(cmap, ins.schema.names, data,
                                _reward_functions(ins.metadata[0] if ins.metadata else None, ins.schema.names))
    data["kl_in_reward"] = cmap.has("old_log_probs") and cmap.has("ref_log_probs")
    return data


def _reward_functions(file_metadata, names: list[str]) -> list[str]:
    """The reward-function columns a converted dump's reader named (TRL's ``reward_funcs``, one column each,
    :data:`advcli.formats.conversion.SHOWN_KEY` in the converted file's footer): reward components a run may be
    told of by name."""
    import json

    from ..formats.conversion import SHOWN_KEY

    raw = ((file_metadata.metadata if file_metadata is not None else None) or {}).get(SHOWN_KEY.encode())
    try:
        funcs = json.loads(raw).get("reward_funcs") if raw else None
    except (ValueError, AttributeError):
        return []
    return [f for f in funcs if isinstance(f, str) and f in names] if isinstance(funcs, list) else []


def feeds(cmap, names: list[str], data: dict, reward_functions: list[str] = ()) -> dict[str, dict]:
    """For each estimator: can this dump feed it, and if not, what is missing. ``reward_functions``: the
    dump's reward-function columns (TRL's), offered as components to name."""
    from ..estimators import all_specs

    out = {}
    has_reward = cmap.has("reward") or cmap.has("token_level_scores")
    components = [c for c in names if c.startswith("reward/")]  # the run's reward components by default
    # components the run is told of by name
    named = list(dict.fromkeys([c for c in ("acc", "fmt") if c in names] + list(reward_functions)))
    for name, spec in sorted(all_specs().items()):
        missing = ([] if cmap.has("response_mask") else ["response_mask"]) + [r for r in spec.needs
                                                                             if not cmap.has(r)]
        if not has_reward and not spec.reward_from_components:
            missing.append("reward")
        note = ""
        if spec.uses_groups and not cmap.has("prompt_id"):
            note = "no prompt_id: needs positional groups (grouping.by=position, grouping.size=N)"
        if spec.reward_from_components:
            comps = components or named
            note = (f"reward components: {', '.join(comps)}" if comps else
                    "needs reward component columns (algorithm.gdpo_reward_keys=[...])")
            if not comps and not has_reward:
                missing.append("reward components")
        if spec.min_components:  # NeMo's GDPO (estimators/loo.py gdpo_loo_row) refuses fewer than two
            if len(components) < spec.min_components and len(named) < spec.min_components:  # (else: named, below)
                missing.append(f"{spec.min_components} or more reward components (reward/<name> columns, or "
                               f"columns named with --set 'reward.components=[a,b]'; found {len(components)})")
        refused = False
        if spec.build is not None:  # estimators.mix: no formula of its own, the weighted sum of others
            missing = ['needs its terms, a weighted sum of the others: --set advcli.mix="0.7*grpo+0.3*rloo"']
            refused = True
        elif not [m for m in missing if m != "response_mask"]:  # (response level: suggest() drops the mask)
            # the run's own check under the canonical defaults: a setting it cannot run without
            needs = _needs_a_setting(spec, cmap, components, named)
            if needs:
                missing, refused = [needs], True
        out[name] = {"ok": not missing, "missing": missing, "note": note, "level": spec.level, "refused": refused}
    return out


def _needs_a_setting(spec, cmap, components: list[str], named: list[str]) -> str:
    """What ``run`` (:meth:`EstimatorSpec.check`, under the canonical defaults) refuses of an estimator this dump's
    columns can feed: a parameter with no usable default (hierarchical_grpo's ``estimator.episode_agents``), reward
    components not named (gdpo): the reason, with the setting that makes it run; empty when it runs as it is.
    ``components``: the dump's reward/<name> columns; ``named``: the columns a run may be told of by name."""
    from ..estimators import resolve_params

    try:
        spec.check(resolve_params(spec, {}), cmap, components)
    except AdvcliError as e:
        if "reward components" in e.message and named and not components:
            return f"needs its reward components named: --set 'reward.components=[{','.join(named)}]'"
        return f"needs a setting: {e.message}" + (f" ({e.hint})" if e.hint else "")
    return ""


def estimator_support(inputs: list[str], columns: list[str]) -> dict[str, dict]:
    """name -> {ok, missing} of every registered estimator on these imported inputs: what ``run`` says of
    it under the canonical defaults (``--flavor advcli --set estimator.name=NAME``), asked of the same
    check ``run`` makes (:func:`.response_level.refusal`), so the two never disagree."""
    from ..estimators import all_specs
    from ..flavors import resolve
    from ..formats import refusal

    out = {}
    for name, spec in sorted(all_specs().items()):
        cfg, _ = resolve("advcli", [("estimator.name", name)])
        refused = refusal(inputs, cfg)
        missing = [refused[0].removeprefix(f"estimator {name} ")] if refused else []
        if spec.uses_groups and "prompt_id" not in columns:
            missing.append("prompt_id")
        out[name] = {"ok": not missing, "missing": missing}
    return out


# what `advcli inspect` suggests when the format's own command is refused: advcli's default choice
# (no --flavor), then verl's GRPO (grouping by the dump's prompt_id)
FALLBACK_FLAGS = (["--output", "out.parquet"],
                  ["--output", "out.parquet", "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"])


def run_command(info, sources: list[str], inputs: list[str],
                column: list[str] | None = None) -> tuple[str | None, str | None]:
    """(the ``advcli run`` command that reads this dump, None) or (None, why none is offered): the
    format's example with the paths the user typed and the dump's own group size (``{n}``), else a
    fallback; each checked with the configuration ``run`` would resolve from it (the same check), with the
    ``--column`` maps the user gave inspect (kept in the command)."""
    from ..formats import FORMATS
    from .resolve import resolve_cli_config

    fmt = FORMATS.get(info.format)
    sizes = list(info.group_sizes)
    n = sizes[0] if len(sizes) == 1 else None
    candidates = []
    if fmt is not None:
        words = shlex.split(fmt.example)[3:]  # after `advcli run PATH`
        if n is not None or not any("{n}" in w for w in words):
            candidates.append([w.replace("{n}", str(n)) for w in words])
            kl_off = _kl_off(candidates[-1])
            if kl_off:  # the trainer's own flavor without its KL in the reward (AReaL's without the trial's config)
                candidates.append(candidates[-1] + kl_off)
    candidates += [list(f) for f in FALLBACK_FLAGS]
    column = list(column or ())
    if info.format == "table":  # a table's group and reward columns under other names (uid, score, rew)
        from ..config import parse_column_maps
        from ..config.columns import resolve_columns
        from ..io.reader import open_parquet

        f = open_parquet(inputs[0])
        try:
            cmap = resolve_columns(f.schema_arrow, parse_column_maps(column), inputs[0])
        finally:
            f.close(force=True)
        for role in ("prompt_id", "reward"):
            like = None if cmap.has(role) else cmap.candidate(role)
            if like is not None:
                column.append(f"{role}={like}")
            elif not cmap.has(role):  # nothing to run the groups on: say which column to name
                return None, (f"no {role} column, nor one under a usual other name: name it with --column "
                              f"{role}=NAME")
    given = [w for c in column for w in ("--column", c)]
    candidates = [[*flags, *given] for flags in candidates]
    why = None
    for flags in candidates:
        flavor = flags[flags.index("--flavor") + 1] if "--flavor" in flags else None
        sets = [flags[i + 1] for i, w in enumerate(flags) if w == "--set"]
        try:
            resolve_cli_config(inputs, flavor, sets, None, column, None)
        except AdvcliError as e:
            why = why or e.message
            continue
        return "advcli run " + " ".join(shlex.quote(w) for w in [*sources, *flags]), None
    return None, why


def _kl_off(flags: list[str]) -> list[str]:
    """The flags that turn the KL in the reward off for the flavor ``flags`` name (``Flavor.kl_off``), [] if none."""
    from ..flavors import get

    if "--flavor" not in flags or flags.index("--flavor") + 1 >= len(flags):
        return []
    try:
        text = get(flags[flags.index("--flavor") + 1]).kl_off or ""
        words = shlex.split(text.split(",")[0])  # "--set actor.kl_ctl=0, or --config ...": the first setting
    except (AdvcliError, ValueError):
        return []
    return words if len(words) == 2 and words[0] == "--set" else []


def release_choice(command: str | None) -> dict | None:
    """{flavor, title, default, others} where the suggested command's flavor has other releases to pick
    (``--flavor nemo@post-4158``): the release it runs and the ``NAME@RELEASE`` of the others, newest first."""
    from ..flavors import get, known_releases, release_label, release_of

    words = shlex.split(command or "")
    if "--flavor" not in words or words.index("--flavor") + 1 >= len(words):
        return None
    spec = words[words.index("--flavor") + 1]
    flavor = get(spec)
    releases = known_releases(flavor)
    if len(releases) < 2 or "@" in spec:
        return None
    default = release_of(flavor, None)
    return {"flavor": spec, "title": flavor.title, "default": release_label(spec),
            "others": [f"{flavor.name}@{r.name}" for r in reversed(releases) if r is not default]}


def suggest(data: dict, inputs: list[str], column: list[str] | None = None) -> dict:
    """An imported dump's ``advcli inspect`` data completed with the command that reads it and, at
    response level, the estimators ``run`` accepts on it (asked of ``run``'s own check); ``column``: the
    user's ``--column`` maps."""
    from ..formats import info_for, row_constant_note

    infos = [i for i in map(info_for, inputs) if i is not None]
    if not infos or "dump" not in data:
        return data
    info = infos[0]
    data["dump"]["example"], data["dump"]["no_example"] = run_command(info, data["inputs"], inputs, column)
    releases = release_choice(data["dump"]["example"])
    if releases:
        data["dump"]["releases"] = releases
    if info.level == "response":
        cols = [c["role"] or c["column"] for c in data.get("schema", [])]  # (a role's column, --column: its role)
        for name, e in estimator_support(inputs, cols).items():
            if name in data.get("estimators", {}):
                # run's refusal, else what the columns lack beyond the token data (gdpo's components)
                base = data["estimators"][name]
                missing = e["missing"] or [m for m in base["missing"] if m != "response_mask"]
                data["estimators"][name].update(ok=not missing, missing=missing,
                                                refused=bool(e["missing"]) or base["refused"])
                note = row_constant_note(name)
                if note and not missing:
                    data["estimators"][name]["note"] = note
    return data


def _print(data: dict) -> None:
    from rich.markup import escape as esc  # user text (paths, column names, values) is never markup
    from rich.table import Table

    from ..report import fmt_num
    from ..report.terminal import stdout_console

    con = stdout_console(highlight=False, soft_wrap=False)
    mb = data["bytes"] / 2**20
    pads = f" (+ {data['padding_rows']:,} padding rows set aside)" if data.get("padding_rows") else ""
    if data.get("dump"):  # a trainer's dump: its files are counted above; the Parquet read is advcli's own copy
        if data["dump"]["format"] == "table":  # a table of one value a row: its own columns, one token a row
            con.print(f"[bold]{esc(', '.join(data['inputs']))}[/]  {data['rows']:,} rows{pads}, one token a row "
                      "(its columns below)")
        else:
            how = "written by advcli convert in" if data["dump"].get("converted") else "converted to"
            con.print(f"[bold]{esc(', '.join(data['inputs']))}[/]  {data['rows']:,} rows{pads}, {how} advcli's "
                      "Parquet layout (the columns below)")
    else:
        con.print(f"[bold]{esc(', '.join(data['inputs']))}[/]  {data['files']} file(s), {data['rows']:,} rows{pads}, "
                  f"{data['row_groups']} row group(s), {mb:.1f} MiB")
    if data.get("advcli_output"):
        p = data.get("produced_by") or {}
        release = (p.get("release") or {}).get("label")
        con.print(f"advcli output (advcli {p.get('advcli_version')}, flavor {p.get('flavor')}"
                  + (f", {esc(release)}" if release else "") + f", {esc(json.dumps(p.get('flavor_config') or {}))})")
    t = Table(title="columns", title_justify="left", show_edge=False)
    for h in ("column", "type", "role", "meaning"):
        t.add_column(h)
    for c in data["schema"]:
        t.add_row(esc(c["column"]), esc(c["type"]), esc(c["role"] or ""), esc(c["meaning"]))
    con.print(t)
    if "tokens" in data:
        con.print(f"tokens  {data['tokens']:,}  ({data['valid_tokens']:,} with mask=1)")
        for label, key in (("length L_i", "length"), ("mask=1 per row", "valid_length")):
            d = data[key]
            if d.get("count"):
                con.print(f"{label:<15} min {fmt_num(d['min'])}  p5 {fmt_num(d['p05'])}  median "
                          f"{fmt_num(d['median'])}  p95 {fmt_num(d['p95'])}  max {fmt_num(d['max'])}  "
                          f"mean {d['mean']:.1f}")
        m = data["mask"]
        con.print(f"mask            {m['rows_with_interior_masked_spans']:,} rows with interior masked spans, "
                  f"{m['rows_ending_masked']:,} ending in mask=0, {m['rows_all_masked']:,} all masked, "
                  f"{m['empty_rows']:,} empty")
        h = data.get("length_histogram")
        if h:
            top = max(h["counts"]) or 1
            ht = Table(title="length distribution", title_justify="left", show_edge=False)
            ht.add_column("L_i")
            ht.add_column("rows", justify="right")
            ht.add_column("")
            for i, c in enumerate(h["counts"]):
                ht.add_row(f"{h['edges'][i]}–{h['edges'][i + 1] - 1}", f"{c:,}", "█" * round(30 * c / top))
            con.print(ht)
    if "steps" in data:
        s = data["steps"]
        con.print(f"steps           {s['count']}: " + ", ".join(f"{esc(str(k))}: {v:,} rows"
                                                               for k, v in list(s["rows_per_step"].items())[:12]))
    g = data.get("groups")
    if g:
        sizes = ", ".join(f"{c:,}×{s}" for s, c in list(g["size_counts"].items())[:12])
        con.print(f"groups          {g['count']:,} (sizes: {sizes}); {g['singletons']:,} of one; layout: "
                  f"{esc(str(g['layout']))}" + (f" (n={g['contiguous_blocks_of']}: usable by roll/openrlhf/trl)"
                                      if g.get("contiguous_blocks_of") else ""))
        if "all_equal_reward" in g:
            con.print(f"                {g['all_equal_reward']:,} groups where every reward is equal "
                      "(zero advantage under GRPO/RLOO)")
    r = data.get("reward")
    if r and r.get("count"):
        con.print(f"reward          mean {fmt_num(r['mean'])}  min {fmt_num(r['min'])}  max {fmt_num(r['max'])}  "
                  f"{r['distinct']:,} distinct values, {100 * (r['share_positive'] or 0):.1f}% > 0"
                  + (f", [red]{r['nonfinite']} not finite[/]" if r["nonfinite"] else ""))
    kl = ("possible (old_log_probs and ref_log_probs present)" if data["kl_in_reward"]
          else "not possible (needs old_log_probs and ref_log_probs)")
    con.print(f"KL in reward    {kl}")
    ok = [n for n, e in data["estimators"].items() if e["ok"]]
    no = {n: e for n, e in data["estimators"].items() if not e["ok"]}
    con.print(f"[green]can feed[/]        {esc(', '.join(ok)) or '–'}")
    for n, e in no.items():
        con.print(f"[red]cannot feed[/]     {esc(n)}: " + esc("; ".join(e["missing"]) if e.get("refused") else
                                                              f"missing {', '.join(e['missing'])}"))
    notes = {e["note"] for n, e in data["estimators"].items() if e["note"] and e["ok"]}
    for note in sorted(notes):
        con.print(f"note            {esc(note)}")


def inspect_cmd(
    inputs: list[str] = opt.INPUTS,
    column: list[str] | None = opt.COLUMN,
    json_out: bool = opt.json_out("everything"),
    from_: str | None = opt.FROM,
):
    # the docstring is `advcli -h`'s one-line entry (that list keeps its line breaks): one string, in two pieces
    ("Show a dump's schema, column roles, rows, tokens, length and group-size distributions, and the estimators "
     "it can feed.")
    from ..config import parse_column_maps
    from ..formats import open_inputs
    from ..formats.describe import describe, print_dump

    inputs = open_inputs(inputs, from_, synth_mask=False, read_ahead=False)  # trainer dumps -> canonical Parquet
    data = suggest(describe(inspect_data(inputs, parse_column_maps(column)), inputs), inputs, column)
    if data.get("dump"):  # the files the user gave, not the one canonical Parquet read in their place
        data["files"] = len(data["dump"]["files"])
    if not json_out:
        print_dump(data)
    if json_out:
        typer.echo(json.dumps(data, default=str))
    else:
        _print(data)


__all__ = ["inspect_cmd", "inspect_data", "EPILOG", "AdvcliError"]


def _size(path: str) -> int:
    from ..io import remote

    return remote.size(path) if remote.is_uri(path) else os.path.getsize(path)
