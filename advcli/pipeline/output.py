"""The output's shape: one output path per input, the output schema (full or sidecar) with the
provenance metadata, and the record batch of one chunk.
"""
from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

from ..config.runspec import recorded_config
from ..errors import AdvcliError
from ..io import remote
from ..io.lists import arrow_from_numpy
from ..io.reader import InputSet, expand_inputs, shown_name
from ..version import __version__
from .plan import Plan

SIDECAR_ROW = "row_index"  # sidecar key: the row's position in its input file (0-based)


def _named_like_a_file(output: str, is_dir) -> bool:
    """An output named ``*.parquet`` that is not an existing directory: a file was meant."""
    return output.rstrip("/").lower().endswith(".parquet") and not output.endswith("/") and not is_dir(output)


def _several_inputs_to_a_file(output: str, n: int) -> AdvcliError:
    bare = output.rstrip("/")  # the directory beside the file named, in the same parent (o/m3.parquet: o/m3/)
    stem = bare[: -len(".parquet")] if bare.lower().endswith(".parquet") else bare
    return AdvcliError(f"{output}: several inputs need an output directory ({n} files were given), and this names "
                       "a file",
                       hint=f"give a directory, e.g. --output {stem or 'out'}/ (one output per input, named like "
                            "it), or run each input on its own; for one output of them all, give their directory or "
                            "quote a glob ('DIR/*.jsonl') so that the shell does not expand it into files")


def scratch_output(inputs: list[str], directory: str, name: str) -> str:
    """Where a command's own run of ``inputs`` writes inside ``directory`` (audit's recomputations, compare's
    runs): ``directory/name.parquet``, or the directory ``directory/name/`` when the inputs are several files
    (a list, or a directory or glob of Parquet files), one output per input as :func:`output_paths` makes them."""
    several = len(expand_inputs(list(inputs))) > 1
    return os.path.join(directory, name + os.sep) if several else os.path.join(directory, name + ".parquet")


def output_paths(inputs: InputSet, output: str) -> list[str]:
    """One output per input: OUTPUT itself for one input file, else OUTPUT/<input name>. Several inputs
    and an OUTPUT that is a file, or is named like one (``*.parquet``, not a directory), are refused."""
    if remote.is_uri(output):  # a prefix on object storage: nothing to create
        multi = len(inputs.paths) > 1 or output.endswith("/") or remote.is_dir(output)
        if not multi:
            return [output]
        if _named_like_a_file(output, remote.is_dir):
            raise _several_inputs_to_a_file(output, len(inputs.paths))
        names = [p.rsplit("/", 1)[-1] for p in inputs.paths]
        if len(set(names)) != len(names):
            raise AdvcliError("several inputs share a file name; their outputs would collide in one directory")
        return [f"{output.rstrip('/')}/{n}" for n in names]
    multi = len(inputs.paths) > 1 or output.endswith(os.sep) or os.path.isdir(output)
    if not multi:
        return [output]
    bare = output.rstrip(os.sep) or output
    if bare != output and os.path.lexists(bare) and not os.path.isdir(bare):  # `-o out.parquet/`, a file there
        raise AdvcliError(f"{output}: names a directory (the trailing {os.sep}), but {bare} is a file",
                          hint=f"-o {bare} to replace that file (with --force), or name a directory")
    if os.path.exists(output) and not os.path.isdir(output):
        raise AdvcliError(f"{output}: several inputs need an output directory, but this is a file")
    if _named_like_a_file(output, os.path.isdir):
        raise _several_inputs_to_a_file(output, len(inputs.paths))
    _refuse_a_given_directory(inputs, output)
    os.makedirs(output, exist_ok=True)
    names = [os.path.basename(p) for p in inputs.paths]
    if len(set(names)) != len(names):
        raise AdvcliError("several inputs share a file name; their outputs would collide in one directory")
    return [os.path.join(output, n) for n in names]


def _refuse_a_given_directory(inputs: InputSet, output: str) -> None:
    """An output directory inside a trainer dump's directory given as input (the directory itself, a folder of
    it), or the folder of a dump's file given as a file or glob: the outputs, named after the inputs, would land
    among the dump's files, which a later run on the dump meets as files of its own. (A dump is read through a
    temporary file, so no output path equals an input there; the Ray engine refuses any directory holding an
    input.) An output file named inside the dump is the user's choice and is written."""
    from ..io.reader import given_files

    real = os.path.realpath(output)
    for path in inputs.paths:
        given = [os.path.realpath(g) for g in given_files(path)[1:]]
        tops = [g for g in given if os.path.isdir(g)]
        holders = {os.path.dirname(g) for g in given if os.path.isfile(g)}
        top = next((t for t in tops if real == t or real.startswith(t + os.sep)), None)
        if top is None and real not in holders:
            continue
        stem = os.path.basename((top or real).rstrip(os.sep)) or "out"
        where = "the input dump's directory" if real in tops else (
            f"inside the input dump {stem}" if top else "the folder of the input dump's files")
        raise AdvcliError(f"{output}: is {where}; the outputs would land among the dump's files",
                          hint=f"name a directory outside the dump, or a file: -o {stem}_advantages.parquet")


@contextmanager
def undone_on_failure(output: str | None, *, always: bool = False):
    """Around a command that may create ``output`` as a directory (:func:`output_paths` for several inputs or
    ``-o DIR/``): when the command fails (or ``always``: ``advcli validate``, which writes nothing), the
    directories it created, DIR and its new parents, are removed again while empty, so a refused or failed
    run leaves nothing behind; outputs it finished stay, each whole."""
    made = []  # the directories output_paths may create, leaf first, up to the first that exists
    if output is not None and not remote.is_uri(output):
        d = os.path.abspath(output)
        while not os.path.lexists(d) and os.path.dirname(d) != d:
            made.append(d)
            d = os.path.dirname(d)

    def undo():
        for d in made:
            try:
                os.rmdir(d)  # only when empty
            except OSError:  # not made, or someone else's file in it: leave it and its parents
                break

    try:
        yield
    except BaseException:
        undo()
        raise
    if always:
        undo()


def file_fingerprint(paths: list[str]) -> str:
    """sha256 over each input's name as recorded (:func:`advcli.io.reader.shown_name`: a trainer dump's, or the
    user's input for run --drop-uniform's kept rows, never a temporary file's PID-named path), size and Parquet
    footer (cheap, changes with the content)."""
    from ..io.reader import shown_name

    h = hashlib.sha256()
    for p in paths:
        h.update(shown_name(p).encode())
        if remote.is_uri(p):  # the same bytes, by a ranged read of the object's tail
            size = remote.size(p)
            h.update(str(size).encode())
            with remote.open_input(p) as fh:
                h.update(fh.read_at(min(size, 65536), max(0, size - 65536)))
            continue
        st = os.stat(p)
        h.update(str(st.st_size).encode())
        with open(p, "rb") as fh:
            fh.seek(max(0, st.st_size - 65536))
            h.update(fh.read())
    return h.hexdigest()


def provenance_metadata(plan: Plan, inputs: InputSet, flavor, native: dict | None) -> dict[bytes, bytes]:
    """``flavor``: the flavor at its release (:class:`advcli.flavors.FlavorAt`, or ``NAME[@RELEASE]``)."""
    from ..flavors import at, estimator_origin

    fa = at(flavor) if flavor else None
    prov = {"advcli_version": __version__, "flavor": fa.spec if fa else flavor, "flavor_config": native or {},
            "release": fa.as_dict() if fa else None,
            "config": recorded_config(plan.run, plan.params), "inputs": [shown_name(p) for p in inputs.paths],
            "input_fingerprint": file_fingerprint(inputs.paths), "output_columns": list(plan.output_columns),
            # what the estimator that ran is: the framework function it matches, or advcli's / the user's own
            "estimator_source": estimator_origin(fa, native, getattr(plan.spec, "source", None)) if fa
            else getattr(plan.spec, "source", None)}
    return {b"advcli": json.dumps(prov, sort_keys=True, default=str).encode()}


def output_schema(plan: Plan, inputs: InputSet, flavor: str, native: dict | None, mode: str = "full"):
    """(input fields kept, output schema); provenance in the metadata.

    ``full``: every input column (an input column named like a new one is replaced), then
    the new columns (``plan.output_columns``: advantages, returns [, token_level_rewards]).
    ``sidecar``: ``row_index`` (int64, the row's position in its input file), the input's group id and
    step columns where it has them, then the new columns — a file that joins back to its input on
    ``row_index`` (or simply side by side: it holds the same rows in the same order)."""
    schema = inputs.schema
    new_fields = [pa.field(name, pa.list_(pa.float32())) for name in plan.output_columns]
    meta = provenance_metadata(plan, inputs, flavor, native)
    if mode == "sidecar":
        keys = [plan.cmap[r] for r in ("prompt_id", "step") if plan.cmap.has(r)]
        skip = {SIDECAR_ROW} | {f.name for f in new_fields}
        base_fields = [schema.field(k) for k in dict.fromkeys(keys) if k not in skip]
        meta[b"advcli_sidecar"] = json.dumps({"join_on": SIDECAR_ROW, "keys": [f.name for f in base_fields],
                                              "columns": [f.name for f in new_fields]}).encode()
        return base_fields, pa.schema([pa.field(SIDECAR_ROW, pa.int64())] + base_fields + new_fields,
                                      metadata=meta)
    clash = [f.name for f in new_fields if f.name in schema.names]
    base_fields = [f for f in schema if f.name not in clash]
    out_schema = pa.schema(base_fields + new_fields, metadata={**(schema.metadata or {}), **meta})
    return base_fields, out_schema


def output_batch(plan: Plan, batch, base_fields, out_schema, adv, ret, tlr, offsets,
                 row_base: int | None = None, extra: dict | None = None) -> pa.RecordBatch:
    """One output record batch: the input batch's kept columns plus the new list columns (which
    share one offsets buffer). A sidecar schema (:func:`output_schema`) starts with ``row_index``:
    ``row_base`` is then the batch's first row in its input file."""
    arrays = []
    if out_schema.names[0] == SIDECAR_ROW and (not base_fields or base_fields[0].name != SIDECAR_ROW):
        arrays.append(arrow_from_numpy(np.arange(row_base, row_base + batch.num_rows, dtype=np.int64)))
    arrays += [batch.column(f.name) for f in base_fields]
    from ..io.arrow_torch import offsets_array, tensor_to_list_array  # (torch: planning and checking need none)

    offs = offsets_array(offsets)
    values = {"advantages": adv, "returns": ret, "token_level_rewards": tlr, **(extra or {})}
    arrays += [tensor_to_list_array(values[name], offs) for name in plan.output_columns]
    return pa.RecordBatch.from_arrays(arrays, schema=out_schema)
