"""From the command-line options that ``run``, ``validate`` (and the commands to come) share to the
configuration a run uses: the flavor, the canonical configuration, the native settings given, the
column overrides, and which estimator was picked when none was named."""
from __future__ import annotations


def resolve_cli_config(inputs: list[str], flavor: str | None, set_: list[str] | None, config: str | None,
                       column: list[str] | None, padded: bool | None, notes: list[str] | None = None,
                       file_keys: list | None = None, estimator: str | None = None):
    """(flavor, canonical config, native settings given, column overrides, auto note) from the options that
    `run`, `validate` and `compare` share. What a trainer dump tells the flavor (its group size, AReaL's
    example settings) is taken for the keys not given, one line each appended to ``notes``
    (:mod:`advcli.resolution`); ``file_keys`` receives what the --config file gave
    (:class:`advcli.flavors.ConfigFileKeys`); ``estimator`` (--estimator) is ``advcli.estimator``."""
    from .. import resolution
    from ..config import parse_column_maps, parse_set
    from ..resolution import default_settings

    settings = parse_set(set_) + ([("advcli.estimator", estimator)] if estimator else [])
    columns = parse_column_maps(column)
    if config:  # a --config file may name the flavor (flavor: nemo@7ea279a); --flavor wins
        from ..flavors import config_file_flavor

        flavor = config_file_flavor(config, flavor)
    if flavor is None and config:  # a --config file that names the default flavor's estimator: none picked for it
        from ..config import load_config_file
        from ..flavors import DEFAULT, get

        if get(DEFAULT).estimator_key in load_config_file(config):
            flavor = DEFAULT
    flavor, settings, auto_note = default_settings(flavor, inputs, settings)
    cfg, native, lines = resolution.resolve_for_inputs(flavor, inputs, settings, config, file_keys)
    if notes is not None:
        notes.extend(lines)
    if padded is not None:
        cfg["padded"] = padded
    return flavor, cfg, native, columns, auto_note


