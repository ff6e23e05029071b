"""The commands that look at data rather than compute it: inspect, validate, stats, compare, convert.

Each lives in its own module and is registered on the typer app by :func:`register` (called from
advcli.cli). Modules import only typer at import time; heavy imports happen inside the commands, so
``advcli --help`` and ``advcli inspect`` never import torch.
"""
from __future__ import annotations


def register(app) -> None:
    from .compare import EPILOG as COMPARE_EPILOG, RawArgsCommand, compare_cmd
    from .inspect import EPILOG as INSPECT_EPILOG, inspect_cmd
    from .stats import EPILOG as STATS_EPILOG, stats_cmd
    from .validate import EPILOG as VALIDATE_EPILOG, validate_cmd
    from .convert import EPILOG as CONVERT_EPILOG, convert_cmd

    app.command("inspect", epilog=INSPECT_EPILOG)(inspect_cmd)
    app.command("validate", epilog=VALIDATE_EPILOG)(validate_cmd)
    app.command("stats", epilog=STATS_EPILOG)(stats_cmd)
    app.command("compare", epilog=COMPARE_EPILOG, cls=RawArgsCommand)(compare_cmd)
    app.command("convert", epilog=CONVERT_EPILOG)(convert_cmd)
