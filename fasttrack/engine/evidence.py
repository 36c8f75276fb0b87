"""What a profiler window shows about the path an engine took.

Per-worker trace analyses (:mod:`fasttrack.engine.trace`) and the fallback lines of the
engine log are folded into one :class:`WindowEvidence`, convertible to the
:class:`~fasttrack.results.PathEvidence` rows the coverage check judges.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence, cast

from pydantic import Field

from fasttrack import attrs
from fasttrack.engine.logs import scan_log
from fasttrack.engine.trace import MarkerSet, StepRecord, TraceAnalysis, analyze_trace
from fasttrack.modelbase import StrictModel
from fasttrack.results import PathEvidence, Side


class WindowEvidence(StrictModel):
    """What one profiler window shows about the path an engine took."""

    name: str
    """Window name given by the check (e.g. `decode-b4`)."""
    side: str
    """`baseline` or `candidate`."""
    prefix: str
    """Trace file prefix used for this window."""
    duration_s: float
    """Seconds between /start_profile and /stop_profile."""
    markers: MarkerSet
    """Markers matched."""
    trace_files: list[str] = Field(default_factory=list)
    """Worker trace files of the window."""
    trace_bytes: int = 0
    """Total size of those files."""
    events: int = 0
    """Trace events read."""
    kernel_basis: str = "leaf_cpu_ops"
    """What `kernels_per_decode_step` counts (`gpu_kernels` or `leaf_cpu_ops`)."""
    op_counts: dict[str, int] = Field(default_factory=dict)
    """Occurrences of every op/kernel name (summed over workers)."""
    optimized_ops: int = 0
    """Ops matching an optimized-path marker."""
    stock_ops: int = 0
    """Ops matching a stock-path marker."""
    optimized_op_counts: dict[str, int] = Field(default_factory=dict)
    """Optimized-marker hits per op name."""
    stock_op_counts: dict[str, int] = Field(default_factory=dict)
    """Stock-marker hits per op name."""
    step_counts: dict[str, int] = Field(default_factory=dict)
    """Engine steps per kind (`decode`, `prefill`, `mixed`, `empty`), from the first worker."""
    optimized_step_counts: dict[str, int] = Field(default_factory=dict)
    """Steps per kind that contained at least one optimized op."""
    stock_step_counts: dict[str, int] = Field(default_factory=dict)
    """Steps per kind that contained at least one stock-marker op."""
    decode_steps: int = 0
    """Decode-only steps seen."""
    optimized_decode_steps: int = 0
    """Decode-only steps that contained at least one optimized op."""
    decode_batch_sizes: dict[int, int] = Field(default_factory=dict)
    """Decode steps per batch size (generation requests in the step)."""
    optimized_decode_batch_sizes: dict[int, int] = Field(default_factory=dict)
    """Decode steps with optimized ops, per batch size."""
    kernels_per_decode_step: float | None = None
    """Mean ops per decode step on the kernel basis (per worker)."""
    steps: list[StepRecord] = Field(default_factory=list)
    """Every step of the first worker, in order."""
    unassigned_ops: int = 0
    """Ops outside any step span."""
    fallback_pattern: str | None = None
    """Regex used to find fallback lines in the engine log."""
    fallback_lines: list[str] = Field(default_factory=list)
    """Matching log lines written during the window (at most 50 kept)."""
    fallback_events: int = 0
    """Number of matching log lines written during the window."""
    metrics_delta: dict[str, float] = Field(default_factory=dict)
    """Counter changes over the window (only when metrics were scraped)."""
    device_optimized_steps: int | None = None
    """Fast steps the optimized path's kernels counted on the device over the window (None: no device counter)."""
    device_stock_steps: int | None = None
    """Stock-path steps counted on the device over the window (None: not declared or not exported)."""
    device_unconfirmed_steps: int = 0
    """Decode steps whose kernels carry an optimized marker but which the device counter did not confirm."""
    host_marker_ops: int = 0
    """Marker matches on host-side records of a GPU trace (not evidence: see the trace module)."""
    device_counter_missing: bool = False
    """The markers declare a device counter the engine did not export: the window's optimized steps are unconfirmed."""
    notes: list[str] = Field(default_factory=list)
    """What could not be measured and why."""

    @property
    def optimized_decode_fraction(self) -> float | None:
        """Fraction of decode steps on the optimized path (None without decode steps)."""
        if not self.decode_steps:
            return None
        return self.optimized_decode_steps / self.decode_steps

    def batch_size_facts(self) -> dict[str, dict[str, int]]:
        """Decode steps per batch size, all and those on the optimized path (sizes as JSON keys)."""
        return {
            "decode_batch_sizes": {str(k): v for k, v in self.decode_batch_sizes.items()},
            "optimized_decode_batch_sizes": {str(k): v for k, v in self.optimized_decode_batch_sizes.items()},
        }

    def counting_facts(self) -> dict[str, Any]:
        """How the window's steps were counted: the ops on the kernel basis, the device counters, the marker
        matches on host-side records."""
        return {
            "kernels_per_decode_step": self.kernels_per_decode_step,
            "kernel_basis": self.kernel_basis,
            "device_optimized_steps": self.device_optimized_steps,
            "device_stock_steps": self.device_stock_steps,
            "device_unconfirmed_steps": self.device_unconfirmed_steps,
            "host_marker_ops": self.host_marker_ops,
        }

    def to_path_evidence(self, *, check: str, point: str) -> PathEvidence:
        """The row the coverage check judges."""
        return PathEvidence(
            check=check,
            point=point,
            side=cast(Side, self.side),  # a window's side is its engine's; PathEvidence validates it
            window=self.name,
            **attrs(self, "optimized_ops", "stock_ops", "decode_steps", "optimized_decode_steps", "fallback_events"),
            detail={
                "step_counts": self.step_counts,
                "optimized_step_counts": self.optimized_step_counts,
                **self.batch_size_facts(),
                **self.counting_facts(),
                "device_counter_missing": self.device_counter_missing,
                "trace_files": self.trace_files,
                "fallback_lines": self.fallback_lines[:5],
                "notes": self.notes,
            },
        )


def combine_analyses(
    analyses: Sequence[TraceAnalysis],
    *,
    name: str,
    side: str,
    prefix: str,
    duration_s: float,
    markers: MarkerSet,
) -> WindowEvidence:
    """Fold per-worker trace analyses into one window's evidence.

    Op counts are summed over workers. Steps are counted on the first worker
    (workers of one engine run the same steps in lockstep); kernels per decode step
    is the mean over workers.
    """
    ev = WindowEvidence(name=name, side=side, prefix=prefix, duration_s=round(duration_s, 3), markers=markers)
    if not analyses:
        ev.notes.append("no worker trace file was written for this window")
        return ev
    ops: Counter[str] = Counter()
    opt: Counter[str] = Counter()
    stk: Counter[str] = Counter()
    for a in analyses:
        ev.trace_files.append(a.path)
        ev.trace_bytes += a.bytes
        ev.events += a.events
        ev.unassigned_ops += a.unassigned_ops
        ev.host_marker_ops += a.host_marker_ops
        ops.update(a.op_counts)
        opt.update(a.optimized_op_counts)
        stk.update(a.stock_op_counts)
    ev.op_counts = dict(ops.most_common())
    ev.optimized_op_counts = dict(opt.most_common())
    ev.stock_op_counts = dict(stk.most_common())
    ev.optimized_ops = sum(opt.values())
    ev.stock_ops = sum(stk.values())
    bases = {a.kernel_basis for a in analyses}
    ev.kernel_basis = bases.pop() if len(bases) == 1 else "mixed"

    first = max(analyses, key=lambda a: len(a.steps))
    ev.steps = list(first.steps)
    _count_steps(ev, analyses)
    if not any(a.steps for a in analyses):
        ev.notes.append(
            "the traces contain no engine-step annotations (execute_context_*_generation_*); "
            "decode steps could not be counted"
        )
    return ev


def _count_steps(ev: WindowEvidence, analyses: Sequence[TraceAnalysis]) -> None:
    """Step counts by kind and batch size, from ``ev.steps`` (the first worker's); kernels per decode step."""
    kinds: Counter[str] = Counter()
    opt_kinds: Counter[str] = Counter()
    stock_kinds: Counter[str] = Counter()
    batches: Counter[int] = Counter()
    opt_batches: Counter[int] = Counter()
    for s in ev.steps:
        kinds[s.kind] += 1
        if s.optimized_ops:
            opt_kinds[s.kind] += 1
        if s.stock_ops:
            stock_kinds[s.kind] += 1
        if s.kind == "decode":
            batches[s.batch] += 1
            if s.optimized_ops:
                opt_batches[s.batch] += 1
    ev.step_counts = dict(kinds)
    ev.optimized_step_counts = dict(opt_kinds)
    ev.stock_step_counts = dict(stock_kinds)
    ev.decode_steps = kinds.get("decode", 0)
    ev.optimized_decode_steps = opt_kinds.get("decode", 0)
    ev.decode_batch_sizes = dict(sorted(batches.items()))
    ev.optimized_decode_batch_sizes = dict(sorted(opt_batches.items()))
    per_worker = []
    for a in analyses:
        dec = [s.ops for s in a.steps if s.kind == "decode"]
        if dec:
            per_worker.append(sum(dec) / len(dec))
    ev.kernels_per_decode_step = round(sum(per_worker) / len(per_worker), 3) if per_worker else None


def apply_device_counters(
    ev: WindowEvidence, analyses: Sequence[TraceAnalysis], optimized: float | None, stock: float | None
) -> None:
    """Hold the trace's optimized decode steps against the device counter's count over the window.

    A kernel that branches inside (a fast path that falls back on the device) runs under its own name
    whichever branch it takes, so its name alone over-counts. Where the device counted fewer fast steps
    than the trace has optimized decode steps, the excess is not confirmed: per batch size, the same
    share of that size's optimized steps is marked ``device_unconfirmed`` (the counter is one number per
    window, so which steps of a size fell back cannot be told) and no longer counts as optimized."""
    if optimized is None:
        ev.device_counter_missing = True
        ev.notes.append("the scope declares a device counter, but the engine's /metrics did not export it")
        return
    ev.device_optimized_steps = int(optimized)
    ev.device_stock_steps = None if stock is None else int(stock)
    opt_steps = [s for s in ev.steps if s.kind == "decode" and s.optimized_ops]
    excess = len(opt_steps) - int(optimized)
    if excess <= 0:
        return
    keep_share = int(optimized) / len(opt_steps)
    by_batch: dict[int, list[StepRecord]] = {}
    for s in opt_steps:
        by_batch.setdefault(s.batch, []).append(s)
    steps = list(ev.steps)
    index = {id(s): i for i, s in enumerate(steps)}
    # each size keeps its share, rounded so that the kept steps add up to the device's count (largest remainder)
    quota = {b: len(g) * keep_share for b, g in by_batch.items()}
    keep = {b: int(q) for b, q in quota.items()}
    for b in sorted(quota, key=lambda b: (keep[b] - quota[b], b))[: int(optimized) - sum(keep.values())]:
        keep[b] += 1
    for b, group in by_batch.items():
        for s in group[keep[b] :]:
            steps[index[id(s)]] = s.model_copy(
                update={"device_unconfirmed": True, "unconfirmed_optimized_ops": s.optimized_ops, "optimized_ops": 0}
            )
    ev.steps = steps
    ev.device_unconfirmed_steps = sum(1 for s in steps if s.device_unconfirmed)
    _count_steps(ev, analyses)
    ev.notes.append(
        f"the device counted {int(optimized)} fast steps, the trace shows {len(opt_steps)} decode steps with "
        f"optimized kernels: {ev.device_unconfirmed_steps} of them are not confirmed by the device"
    )


def evidence_from_traces(
    paths: Iterable[str | Path],
    *,
    name: str,
    side: str,
    markers: MarkerSet,
    log_text: str | None = None,
    fallback_pattern: str | None = None,
) -> WindowEvidence:
    """Evidence from trace files already on disk (e.g. re-analysing a bundle's raw traces)."""
    files = [Path(p) for p in paths]
    ev = combine_analyses(
        [analyze_trace(p, markers) for p in files], name=name, side=side, prefix="", duration_s=0.0, markers=markers
    )
    if fallback_pattern and log_text is not None:
        lines = scan_log(log_text, fallback_pattern)
        ev.fallback_pattern = fallback_pattern
        ev.fallback_events = len(lines)
        ev.fallback_lines = lines[:50]
    return ev
