"""What a run returns: :class:`RunResult` (torch-free: ``advcli stats`` describes a file with one too).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunResult:
    inputs: list[str]
    outputs: list[str]
    rows: int
    tokens: int
    valid_tokens: int
    seconds: float
    config: dict
    metrics: dict[str, Any] = field(default_factory=dict)
    per_step: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    histograms: dict[str, Any] = field(default_factory=dict)  # advcli.figures (module docstring)
    diagnostics: list[dict] = field(default_factory=list)  # advcli.diagnostics (module docstring)
    group_health: dict | None = None  # advcli.figures.group_health (runs with groups)
    by_position: dict | None = None  # advcli.figures.positions: the advantage per token position, when asked for
    from_dump: list[str] = field(default_factory=list)  # settings a trainer dump implied (advcli.resolution)
    release: dict | None = None  # the flavor's upstream release that ran (advcli.flavors.release_dict)
