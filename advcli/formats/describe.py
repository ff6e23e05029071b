"""``advcli inspect``'s view of an imported dump: the format seen, the files read and skipped, the
grouping."""
from __future__ import annotations

from .input_edge import IMPORTED


def describe(data: dict, inputs: list[str]) -> dict:
    """``advcli inspect``'s data for an imported dump: which format was seen, the files read and skipped,
    and how the rows were grouped (``advcli inspect`` adds the command that reads it)."""
    infos = [IMPORTED[p] for p in inputs if p in IMPORTED]
    if not infos:
        return data
    info = infos[0]
    data["dump"] = info.as_dict()
    data["inputs"] = [i.source for i in infos] + [p for p in inputs if p not in IMPORTED]
    return data


def row_constant_note(name: str) -> str | None:
    """What an estimator that ``run`` accepts on a response-level dump means there (None: nothing to add):
    a token-level estimator that runs there only in the settings its spec names (``response_level_ok``)."""
    from ..estimators import get

    if get(name).response_level_ok is None:
        return None
    return ("at response level: only as one value per response (γ = 1, reward on the last token; "
            "token_rewards: reward.placement=all; areal_gae: γλ = 1, adv_norm weighted by response_length), "
            "without KL or whitening")


def print_dump(data: dict) -> None:
    d = data.get("dump")
    if not d:
        return
    import typer

    sizes = ", ".join(f"{c}×{n}" for n, c in d["group_sizes"].items())
    if d["format"] == "table":  # a plain Parquet table of one value a row (input_edge.TABLE)
        typer.echo(f"format          {d['title']}: one value a row in every column, no token data; it runs as a "
                   "trainer's response-level dump does (one-token rows, scalar advantages)")
    else:
        typer.echo(f"format          {d['format']} ({d['title']}), {len(d['files'])} file(s), {d['rows']:,} rows, "
                   f"{'token-level' if d['level'] == 'token' else 'response-level (no token data)'}")
    if d["group_rule"]:
        typer.echo(f"grouped by      {d['group_rule']}")
    if d["groups"]:  # (a converted file read back: inspect's own group figures follow)
        typer.echo(f"groups          {d['groups']:,} (sizes: {sizes})")
    if len(d["group_sizes"]) == 1:
        n = next(iter(d["group_sizes"]))
        typer.echo(f"group size      {n} in every group: for a flavor that groups by position give it, e.g. "
                   f"--flavor trl --set num_generations={n}, --flavor roll --set "
                   f"actor_infer.generating_args.num_return_sequences={n}")
    if d.get("example"):
        typer.echo(f"read it with    {d['example']}")
    elif d.get("no_example"):
        typer.echo(f"read it with    – ({d['no_example']})")
    if d.get("releases"):  # the flavor of that command has other releases to pick (advcli.flavors)
        r = d["releases"]
        typer.echo(f"release         --flavor {r['flavor']} runs {r['default']}; a run made with another "
                   f"{r['title']}: {', '.join('--flavor ' + n for n in r['others'])} (`advcli explain --flavor "
                   f"{r['flavor']} --history`; `advcli audit` names the one that matches)")
    if d.get("logged"):
        typer.echo(f"trainer's own   {d['logged']} (the advantages the trainer computed, kept for comparison)")
    for s in d["skipped"]:
        typer.echo(f"skipped         {s}")
    for n in d["notes"]:
        typer.echo(f"note            {n}")
