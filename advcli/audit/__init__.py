"""Auditing logged advantages (``advcli audit``): :mod:`.recompute` recomputes them and drives the
passes, :mod:`.checks` holds the chunk math (agreement, hypotheses, findings)."""
