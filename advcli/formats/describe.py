"""``advcli inspect``'s view of an imported dump: the format seen, the files read and skipped, the
grouping, and which estimators a response-level dump can feed."""
from __future__ import annotations

from .conversion import ImportInfo
from .input_edge import IMPORTED
from .registry import FORMATS
from .response_level import LENGTH_ESTIMATORS, ROW_CONSTANT


def estimator_support(info: ImportInfo, columns: list[str]) -> dict[str, dict]:
    """name -> {ok, missing} of every registered estimator, for a dump of this kind (what inspect says)."""
    from ..estimators import estimator_requirements

    out = {}
    for name, req in estimator_requirements().items():
        missing = []
        if info.level == "response":
            if req["level"] == "token" and name not in ROW_CONSTANT:
                missing.append("token data (" + ", ".join(["response_mask", *req["needs"]]) + ")")
            elif name in LENGTH_ESTIMATORS:
                missing.append("response lengths")
        else:
            missing += [r for r in req["needs"] if r not in columns]
        if req.get("uses_groups") and "prompt_id" not in columns:
            missing.append("prompt_id")
        out[name] = {"ok": not missing, "missing": missing}
    return out


def describe(data: dict, inputs: list[str]) -> dict:
    """``advcli inspect``'s data for an imported dump: which format was seen, the files read and skipped,
    how the rows were grouped, and (response-level dumps) which estimators the data can feed."""
    infos = [IMPORTED[p] for p in inputs if p in IMPORTED]
    if not infos:
        return data
    info = infos[0]
    data["dump"] = info.as_dict()
    data["dump"]["example"] = FORMATS[info.format].example if info.format in FORMATS else None
    data["inputs"] = [i.source for i in infos] + [p for p in inputs if p not in IMPORTED]
    if info.level == "response":
        cols = [c["column"] for c in data.get("schema", [])]
        for name, e in estimator_support(info, cols).items():
            if name in data.get("estimators", {}):
                data["estimators"][name].update(ok=e["ok"], missing=e["missing"])
                if name in ROW_CONSTANT:
                    data["estimators"][name]["note"] = ("at response level: only as one value per response "
                                                        "(γ = 1, reward on the last token; token_rewards: "
                                                        "reward.placement=all; areal_gae: γλ = 1, adv_norm "
                                                        "weighted by response_length), without KL or whitening")
    return data


def print_dump(data: dict) -> None:
    d = data.get("dump")
    if not d:
        return
    import typer

    sizes = ", ".join(f"{c}×{n}" for n, c in d["group_sizes"].items())
    typer.echo(f"format          {d['format']} ({d['title']}), {len(d['files'])} file(s), {d['rows']:,} rows, "
               f"{'token-level' if d['level'] == 'token' else 'response-level (no token data)'}")
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
    if d.get("logged"):
        typer.echo(f"trainer's own   {d['logged']} (the advantages the trainer computed, kept for comparison)")
    for s in d["skipped"]:
        typer.echo(f"skipped         {s}")
    for n in d["notes"]:
        typer.echo(f"note            {n}")
