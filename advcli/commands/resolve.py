"""From the command-line options that ``run``, ``validate`` (and the commands to come) share to the
configuration a run uses: the flavor, the canonical configuration, the native settings given, the
column overrides, and which estimator was picked when none was named."""
from __future__ import annotations


def resolve_cli_config(inputs: list[str], flavor: str | None, set_: list[str] | None, config: str | None,
                       column: list[str] | None, padded: bool | None, notes: list[str] | None = None,
                       file_keys: list | None = None, estimator: str | None = None, dump_notes: list | None = None,
                       precision: str | None = None):
    """(flavor, canonical config, native settings given, column overrides, auto note) from the options that
    `run`, `validate` and `compare` share. What a trainer dump tells the flavor (its group size, AReaL's
    example settings) is taken for the keys not given, one line each appended to ``notes``
    (:mod:`advcli.runs.resolution`); ``file_keys`` receives what the --config file gave
    (:class:`advcli.flavors.ConfigFileKeys`); ``dump_notes`` receives why the dump's trainer chose the flavor,
    where it did (:attr:`advcli.runs.resolution.RunChoice.dump_note`); ``estimator`` (--estimator) is
    ``advcli.estimator``. The
    library's own :func:`advcli.runs.resolution.resolve_run` does the work: the command line only parses."""
    from ..config import parse_column_maps, parse_set
    from ..runs.resolution import resolve_run

    columns = parse_column_maps(column)
    choice = resolve_run(inputs, flavor, parse_set(set_), estimator=estimator, config=config, padded=padded,
                         precision=precision, columns=columns)
    if notes is not None:
        notes.extend(choice.from_dump)
    if file_keys is not None and choice.config_file is not None:
        file_keys.append(choice.config_file)
    if dump_notes is not None and choice.dump_note is not None:
        dump_notes.append(choice.dump_note)
    return choice.flavor, choice.cfg, choice.native, columns, choice.chosen


