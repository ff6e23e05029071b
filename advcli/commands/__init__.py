"""The commands besides run/explain/sample: inspect, validate, stats, compare (look at data), audit
(recompute and check logged advantages), filter (curate whole groups), convert (a trainer's dump to
canonical Parquet) and server (keep torch imported in a background process: advcli.server).

Each lives in its own module and is registered on the typer app by :func:`register` (called from
advcli.cli). Modules import only typer at import time; heavy imports happen inside the commands, so
``advcli --help`` and ``advcli inspect`` never import torch.

What the commands and advcli.cli share lives here too, below both (advcli.cli imports this package,
never the reverse): :mod:`.options` (the options declared once), :mod:`.resolve` (options to
configuration), :mod:`.progress` (progress bars) and :mod:`.helpstyle` (how ``--help`` renders).
"""
from __future__ import annotations


def register(app) -> None:
    from .audit import EPILOG as AUDIT_EPILOG
    from .audit import audit_cmd
    from .compare import EPILOG as COMPARE_EPILOG
    from .compare import RawArgsCommand, compare_cmd
    from .convert import EPILOG as CONVERT_EPILOG
    from .convert import convert_cmd
    from .filter import EPILOG as FILTER_EPILOG
    from .filter import filter_cmd
    from .helpstyle import Command
    from .inspect import EPILOG as INSPECT_EPILOG
    from .inspect import inspect_cmd
    from .server import app as server_app
    from .stats import EPILOG as STATS_EPILOG
    from .stats import stats_cmd
    from .validate import EPILOG as VALIDATE_EPILOG
    from .validate import validate_cmd

    app.command("inspect", epilog=INSPECT_EPILOG, cls=Command)(inspect_cmd)
    app.command("validate", epilog=VALIDATE_EPILOG, cls=Command)(validate_cmd)
    app.command("stats", epilog=STATS_EPILOG, cls=Command)(stats_cmd)
    app.command("compare", epilog=COMPARE_EPILOG, cls=RawArgsCommand)(compare_cmd)
    app.command("audit", epilog=AUDIT_EPILOG, cls=Command)(audit_cmd)
    app.command("filter", epilog=FILTER_EPILOG, cls=Command)(filter_cmd)
    app.command("convert", epilog=CONVERT_EPILOG, cls=Command)(convert_cmd)
    app.add_typer(server_app, name="server")
