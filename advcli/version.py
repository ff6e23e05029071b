"""advcli's version: recorded in every output's metadata and report, printed by ``advcli --version``.
Its own module, at the bottom, so that what records it need not import the package's ``__init__``
(which imports the run's orchestration)."""
__version__ = "0.1.0"
