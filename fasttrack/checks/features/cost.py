"""What the features check's work costs (its ``cost`` declaration; units in :mod:`fasttrack.planning.cost`)."""

from __future__ import annotations

from fasttrack.checks.features.spec import synthetic_features
from fasttrack.checks.features.table import feature
from fasttrack.planning.cost import CheckCost, GroupWork, Work

WINDOWS_PER_FEATURE = 2
"""Profiler windows per feature and group (its evidence probes)."""


def _per_group(w: Work, on: GroupWork) -> None:
    """Per side: the decode steps each of the tier's features declares for the group (at batch 1), and two
    profiler windows per feature that runs there; a synthetic-acceptance group runs only the features judged
    there."""
    names = [f for f in w.scope.features if w.tier.features is None or f in w.tier.features]
    if on.group.synthetic_acceptance:  # outputs differ by design: only the features judged there run
        names = [f for f in names if f in synthetic_features()]
    steps = {f: feature(f).decode_steps_on(on.group) for f in names}
    ran = [f for f, n in steps.items() if n > 0]
    secs = sum(steps.values()) * w.model.step_s(1) + len(ran) * WINDOWS_PER_FEATURE * w.est.profile_window_s
    for _side in ("baseline", "candidate"):
        w.add(secs, tokens=sum(steps.values()))


COST = CheckCost(per_group=_per_group)
