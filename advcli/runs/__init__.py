"""One run resolved and carried out, as `advcli run` and advcli.run do it; what explain, compare and stats
compute. A package, not a module: advcli.run, advcli.compare are the library's functions."""
