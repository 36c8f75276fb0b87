"""What the perf check keeps between engine lifetimes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fasttrack.perf.analysis import ItemState
from fasttrack.perf.schedule import LookSchedule
from fasttrack.perf.trace import Trace

CHECK = "perf"


@dataclass
class PerfState:
    """The planned items with their runs, the look schedules, and what happened per lifetime."""

    prepared: bool = False
    items: dict[str, ItemState] = field(default_factory=dict)
    """By item key, in measurement order."""
    schedules: dict[str, LookSchedule] = field(default_factory=dict)
    """By engine group id."""
    traces: dict[str, Trace] = field(default_factory=dict)
    """By workload name."""
    prompt_set: str | None = None
    notes: list[str] = field(default_factory=list)
    lifetimes: list[dict[str, Any]] = field(default_factory=list)
    """One record per engine lifetime measured: side, group, lifetime, seconds, runs, items skipped."""
    errors: list[str] = field(default_factory=list)
    """Harness-side failures that ended a lifetime's measurements early."""
    calibration_summary: dict[str, Any] | None = None
    """The scope's calibration record as this run used it (path, sha256, signers, host class, applied or why not);
    None when the scope names none."""
