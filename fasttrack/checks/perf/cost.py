"""What the perf check's work costs (its ``cost`` declaration; units in :mod:`fasttrack.planning.cost`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fasttrack.planning.cost import CheckCost, ConfigPoint, GroupWork, Work

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.scope import WorkloadSpec


def _perf_points(kind: str, pts: Sequence[ConfigPoint]) -> list[ConfigPoint]:
    """The points a workload kind measures (fasttrack/perf/workloads.py)."""
    if kind == "pure_decode":
        return list(pts)
    if kind == "context_sweep":
        b = min((p.batch for p in pts), default=1)
        return [p for p in pts if p.batch == b]
    if kind in ("mixed", "prompts"):
        by: dict[int, ConfigPoint] = {}
        for p in sorted(pts, key=lambda p: (p.full_context, p.context)):
            by.setdefault(p.batch, p)
        return list(by.values())
    return list(pts[:1])  # trace_replay: one row per group


def _point_runs(wl: WorkloadSpec, pts: Sequence[ConfigPoint], max_len: int) -> list[tuple[int, int, int]]:
    """(batch, requests per run, prompt tokens per run) of each point a workload measures."""
    out = []
    for p in _perf_points(wl.kind, pts):
        n = wl.requests_per_run or 4 * p.batch
        ctx = (max_len - wl.output_len - 1) if p.full_context else (wl.input_len or p.context)
        out.append((p.batch, n, ctx + 16 * n if wl.kind == "pure_decode" else n * ctx))  # decode: prefix cached
    return out


def _sweep_runs(wl: WorkloadSpec, pts: Sequence[ConfigPoint], max_len: int) -> list[tuple[int, int, int]]:
    """The same for a ``concurrency_sweep``: one per level, its prompts of ``input_len`` or the group's shortest
    context (the smallest batch's, as fasttrack/perf/workloads.py picks it)."""
    first = min(pts, key=lambda p: (p.batch, p.full_context, p.context), default=None)
    ctx = max(1, min(wl.input_len or (first.context if first else 1), max_len - wl.output_len - 1))
    out = []
    for level in wl.concurrencies or []:
        n = wl.requests_per_run or 4 * level
        out.append((level, n, n * ctx))
    return out


def _per_group(w: Work, on: GroupWork) -> None:
    """Per workload, point the workload measures, and lifetime: ``(min_runs + max_runs) / 2`` runs per side (the
    adaptive schedule stops a decided point early) and a warm-up; interleaved runs hold both sides' engines."""
    gate, m = w.scope.gates.perf, w.model
    wanted = w.tier.workloads
    runs = (gate.min_runs + gate.max_runs) / 2  # adaptive: a decided point stops at min_runs, an open one at max
    both = 2 if gate.interleave else 1
    max_len = w.scope.envelope.context.max_model_len if w.scope.envelope else 0
    pts = on.points
    for wl in w.scope.workloads:
        if wanted is not None and wl.name not in wanted:
            continue
        items = _sweep_runs(wl, pts, max_len) if wl.kind == "concurrency_sweep" else _point_runs(wl, pts, max_len)
        for batch, n, prompt in items:
            one = m.decode(n, batch, wl.output_len) + m.prefill(prompt)
            warm = m.decode(batch, batch, 16)
            for _lt in range(on.group.lifetimes_per_side):
                secs = 2 * (runs * one + warm)  # both sides' runs, one after another (interleaved or not)
                w.add(
                    secs, devices=w.devices * both, nodes=w.nodes * both,
                    requests=int(2 * runs * n), tokens=int(2 * runs * n * wl.output_len),
                )  # fmt: skip


COST = CheckCost(per_group=_per_group)
