"""advcli's version: recorded in every output's metadata and report, printed by ``advcli --version``.
Its own module, at the bottom, so that what records it need not import the package's ``__init__``
(which imports the run's orchestration)."""
__version__ = "0.1.0"


def stamp(report: dict, command: str) -> dict:
    """The fields every advcli report starts with."""
    import datetime as dt

    return {"report": "advcli/1", "command": command, "advcli_version": __version__,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **report}
