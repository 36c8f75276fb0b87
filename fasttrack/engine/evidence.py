"""What a profiler window shows about the path an engine took.

Per-worker trace analyses (:mod:`fasttrack.engine.trace`) and the fallback lines of the
engine log are folded into one :class:`WindowEvidence`, convertible to the
:class:`~fasttrack.results.PathEvidence` rows the coverage check judges.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence, cast

from pydantic import BaseModel, ConfigDict, Field

from fasttrack.engine.logs import scan_log
from fasttrack.engine.trace import MarkerSet, StepRecord, TraceAnalysis, analyze_trace
from fasttrack.results import PathEvidence, Side


class WindowEvidence(BaseModel):
    """What one profiler window shows about the path an engine took."""

    model_config = ConfigDict(extra="forbid")

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
    notes: list[str] = Field(default_factory=list)
    """What could not be measured and why."""

    @property
    def optimized_decode_fraction(self) -> float | None:
        """Fraction of decode steps on the optimized path (None without decode steps)."""
        if not self.decode_steps:
            return None
        return self.optimized_decode_steps / self.decode_steps

    def to_path_evidence(self, *, check: str, point: str) -> PathEvidence:
        """The row the coverage check judges."""
        return PathEvidence(
            check=check,
            point=point,
            side=cast(Side, self.side),  # a window's side is its engine's; PathEvidence validates it
            window=self.name,
            optimized_ops=self.optimized_ops,
            stock_ops=self.stock_ops,
            decode_steps=self.decode_steps,
            optimized_decode_steps=self.optimized_decode_steps,
            fallback_events=self.fallback_events,
            detail={
                "step_counts": self.step_counts,
                "optimized_step_counts": self.optimized_step_counts,
                "decode_batch_sizes": {str(k): v for k, v in self.decode_batch_sizes.items()},
                "optimized_decode_batch_sizes": {str(k): v for k, v in self.optimized_decode_batch_sizes.items()},
                "kernels_per_decode_step": self.kernels_per_decode_step,
                "kernel_basis": self.kernel_basis,
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
    kinds: Counter[str] = Counter()
    opt_kinds: Counter[str] = Counter()
    stock_kinds: Counter[str] = Counter()
    batches: Counter[int] = Counter()
    opt_batches: Counter[int] = Counter()
    for s in first.steps:
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
    if not any(a.steps for a in analyses):
        ev.notes.append(
            "the traces contain no engine-step annotations (execute_context_*_generation_*); "
            "decode steps could not be counted"
        )
    return ev


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
