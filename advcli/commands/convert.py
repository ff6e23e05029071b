"""``advcli convert DUMP --output OUT.parquet``: a trainer's dump as advcli's canonical Parquet, nothing
computed (advcli.formats does the reading)."""
from __future__ import annotations

import json
import os

import typer

from ..errors import AdvcliError

EPILOG = """
[bold]Examples[/]

  advcli convert logs/exp_001 --output nemo.parquet                    (NeMo RL train_data_step*.jsonl)
  advcli convert outputs/completions --output trl.parquet              (TRL completions_*.parquet)
  advcli convert rollout_data/12.jsonl --output step12.parquet --from verl-jsonl

One row per response, the dump's fields as columns under role names where a role exists (prompt_id,
reward, step, response_mask, old_log_probs, ...). The format is recognised from file names and keys;
--from forces one. docs/formats.md shows every format.
"""


def convert_cmd(
    path: str = typer.Argument(..., metavar="PATH", help="A trainer dump: a file, or the directory the trainer "
                                                         "wrote (every step under it).", show_default=False),
    output: str = typer.Option(..., "--output", "-o", metavar="PATH", help="The Parquet file to write.",
                               show_default=False),
    from_: str | None = typer.Option(None, "--from", metavar="FORMAT",
                                        help="The dump's format (default: recognised from file names and keys)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
):
    """Write a trainer's rollout dump as advcli's canonical Parquet, computing nothing."""
    from ..formats import convert
    from ..io.modes import missing_directory
    from ..io.reader import refuse_missing_inputs
    from ..io.remote import is_uri
    from ..io.temps import check_local_destination
    from ..io.writer import check_output_name, refuse_special_file

    given = path
    if is_uri(path):  # a trainer's dump on object storage: its files copied down first (advcli.formats.remote_dump)
        from ..formats.input_edge import _remote_dump

        path = _remote_dump(path, from_ if from_ not in (None, "", "auto") else None)
        if path is None:
            raise AdvcliError(f"{given}: no trainer's dump there (a Parquet file of advcli's layout, or nothing)",
                              hint="a Parquet file on object storage needs no conversion: advcli run reads it there")
    refuse_missing_inputs([path])  # a missing input is the first thing to say
    check_output_name(output)
    if is_uri(output):
        raise AdvcliError(f"{output}: convert writes a local Parquet file",
                          hint="give a local path (advcli run reads and writes object storage directly)")
    if os.path.isdir(output):  # before the --force hint, which would not help
        raise AdvcliError(f"{output}: is a directory; convert writes one Parquet file",
                          hint=f"name the file, e.g. -o {os.path.join(output, 'converted.parquet')}")
    refuse_special_file(output)
    if os.path.exists(output) and not force:
        raise AdvcliError(f"{output}: already exists", hint="add --force to replace it")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise missing_directory(output, parent, "the directory")
    check_local_destination(output, parent)
    from ..formats.remote_dump import uri_of

    try:
        info = convert(path, output, from_ if from_ not in (None, "", "auto") else None,  # (never over a dump file)
                       keys_in_schema=True)
    except AdvcliError as e:  # a copied dump's files named as their objects
        e.message, e.hint = uri_of(e.message), uri_of(e.hint) if e.hint else e.hint
        e.args = (e.message,)
        raise
    info.source = given
    info.files = [uri_of(f) for f in info.files]
    info.skipped = [uri_of(x) for x in info.skipped]
    info.notes = [uri_of(x) for x in info.notes]
    if json_out:
        typer.echo(json.dumps(info.as_dict(), default=str))
        return
    if not quiet:
        typer.echo(f"wrote {output}: {info.rows:,} rows from {len(info.files)} {info.title} file(s); "
                   f"{info.groups:,} groups ({info.group_rule})", err=True)
        for s in info.skipped:
            typer.echo(f"skipped {s}", err=True)
        for n in info.notes:
            typer.echo(f"note: {n}", err=True)
