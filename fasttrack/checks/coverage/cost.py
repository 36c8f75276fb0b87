"""What the coverage check's work costs (its ``cost`` declaration; units in :mod:`fasttrack.planning.cost`)."""

from __future__ import annotations

from collections.abc import Sequence

from fasttrack.planning.cost import PROBE_STEPS, CheckCost, EngineGroup, GroupWork, Work

WINDOWS_PER_GROUP = 4
"""Profiler windows per engine group: the in-range decode probe and three out-of-scope situations."""


def _per_group(w: Work, on: GroupWork) -> None:
    """Per side: a short probe at each of the group's batches and one above the envelope, four windows."""
    batches = sorted({p.batch for p in on.points})
    env = w.scope.envelope
    above = (env.batch.max + 1) if env is not None else 1
    steps = sum(PROBE_STEPS * w.model.step_s(b) for b in batches) + PROBE_STEPS * w.model.step_s(above)
    secs = steps + WINDOWS_PER_GROUP * w.est.profile_window_s
    for _side in ("baseline", "candidate"):
        w.add(secs, requests=len(batches) + above + 2)


def _per_plan(w: Work, groups: Sequence[EngineGroup]) -> None:
    """The start of a deployment outside the envelope (``unsupported_deployment``), once, with the first group."""
    fb, first = w.scope.fallback, (groups[0] if groups else None)
    if first is not None and fb is not None and "unsupported_deployment" in fb.stock_path_for:
        if fb.unsupported_deployment_args:
            w.add_start(w.est.engine_start_s, devices=max(first.gpus, 1), nodes=max(first.nodes, 1))


COST = CheckCost(per_group=_per_group, per_plan=_per_plan)
