"""Path evidence windows: which path ran while a check's requests ran at one config point.

:class:`EvidenceWindow` wraps a profiler window around a check's requests and appends
one :class:`~fasttrack.results.PathEvidence` row per attributed point to
``ctx.evidence`` (the coverage check judges them); without a profiler it samples
``vllm:num_requests_running`` instead and records that path evidence is unavailable.
:class:`WindowRecord` is what a check keeps of one window.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import Field

from fasttrack.checks.batching import BatchCheck, verify_batch
from fasttrack.engine.tls import tls_context
from fasttrack.modelbase import DocModel
from fasttrack.results import PathEvidence, Side

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.checks.context import RunContext
    from fasttrack.engine import EngineHandle, MarkerSet, WindowEvidence


MARKER_OPS_KEPT = 50
"""Distinct op names per marker kind a window summary keeps (the coverage check matches each marker against them)."""
TOP_OPS_KEPT = 20
"""The most frequent op names a window summary keeps (named when a marker matches none of them)."""


def marker_set(ctx: RunContext) -> "MarkerSet | None":
    from fasttrack.engine import MarkerSet

    pm = ctx.scope.path_markers
    if pm is None:
        return None
    dc = pm.device_counters
    return MarkerSet(
        optimized=list(pm.optimized),
        stock=list(pm.stock),
        device_optimized=dc.optimized if dc else None,
        device_stock=dc.stock if dc else None,
    )


def fallback_regex(ctx: RunContext) -> str | None:
    fb = ctx.scope.fallback
    return fb.log_regex if fb is not None else None


def in_range_fraction(ev: PathEvidence, lo: int, hi: int) -> tuple[int, int]:
    """(decode steps with lo <= batch <= hi, of which on the optimized path), from the evidence detail.

    Falls back to all decode steps when the detail has no per-batch counts."""
    sizes = ev.detail.get("decode_batch_sizes")
    opt = ev.detail.get("optimized_decode_batch_sizes") or {}
    if not sizes:
        return ev.decode_steps, ev.optimized_decode_steps
    n = sum(int(v) for k, v in sizes.items() if lo <= int(k) <= hi)
    o = sum(int(v) for k, v in opt.items() if lo <= int(k) <= hi)
    return n, o


def window_summary(ev: "WindowEvidence") -> dict[str, Any]:
    """The compact, JSON-friendly facts of one window (for result rows and artifacts)."""
    return {
        "window": ev.name,
        "duration_s": ev.duration_s,
        "step_counts": dict(ev.step_counts),
        "optimized_step_counts": dict(ev.optimized_step_counts),
        "stock_step_counts": dict(ev.stock_step_counts),
        "decode_steps": ev.decode_steps,
        "optimized_decode_steps": ev.optimized_decode_steps,
        **ev.batch_size_facts(),
        "optimized_ops": ev.optimized_ops,
        "stock_ops": ev.stock_ops,
        "optimized_op_counts": dict(list(ev.optimized_op_counts.items())[:MARKER_OPS_KEPT]),
        "stock_op_counts": dict(list(ev.stock_op_counts.items())[:MARKER_OPS_KEPT]),
        "top_ops": dict(list(ev.op_counts.items())[:TOP_OPS_KEPT]),
        "fallback_events": ev.fallback_events,
        "fallback_lines": ev.fallback_lines[:3],
        **ev.counting_facts(),
        "trace_bytes": ev.trace_bytes,
        "notes": list(ev.notes),
    }


class WindowRecord(DocModel):
    """What one evidence window observed, as kept by a check."""

    name: str
    """Window name."""
    side: str
    """`baseline` or `candidate`."""
    points: list[str]
    """Config points the window's evidence was attributed to."""
    available: bool
    """Whether path evidence (a profiler trace) exists for this window."""
    unavailable_reason: str | None = None
    """Why not, when it does not."""
    summary: dict[str, Any] = Field(default_factory=dict)
    """:func:`window_summary` of the window (profiler), or the metrics samples."""
    steps: list[dict[str, Any]] = Field(default_factory=list)
    """Per engine step: kind, batch, optimized_ops, stock_ops (profiler only)."""
    running_samples: list[float] = Field(default_factory=list)
    """vllm:num_requests_running samples taken during the window (metrics fallback)."""
    seconds: float = 0.0
    """Wall time of the window's requests."""

    @property
    def decode_batch_sizes(self) -> dict[int, int]:
        return {int(k): int(v) for k, v in (self.summary.get("decode_batch_sizes") or {}).items()}

    @property
    def optimized_decode_steps(self) -> int:
        return int(self.summary.get("optimized_decode_steps") or 0)

    @property
    def decode_steps(self) -> int:
        return int(self.summary.get("decode_steps") or 0)

    def steps_at(self, batch: int) -> tuple[int, int]:
        """(decode steps at this batch size, of which on the optimized path)."""
        opt = self.summary.get("optimized_decode_batch_sizes") or {}
        return self.decode_batch_sizes.get(batch, 0), int(opt.get(str(batch), 0))

    def batch_check(self, target: int) -> BatchCheck:
        return verify_batch(
            target, decode_batch_sizes=self.decode_batch_sizes or None, running_samples=self.running_samples or None
        )


async def _sample_running(engine: "EngineHandle", out: list[float], stop: asyncio.Event, interval: float) -> None:
    from fasttrack.engine import parse_prometheus

    async with httpx.AsyncClient(timeout=5.0, verify=tls_context()) as http:
        while not stop.is_set():
            try:
                r = await http.get(engine.base_url + "/metrics")
                if r.status_code == 200:
                    snap = parse_prometheus(r.text)
                    out.append(snap.total("vllm:num_requests_running"))
            except (httpx.HTTPError, ValueError):
                pass
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except asyncio.TimeoutError:
                pass


class MetricsSampler:
    """Samples ``vllm:num_requests_running`` every ``interval`` seconds while its block runs.

    The gauge is what the engine reports as running (scheduled) requests; its peak
    during a round of ``b`` concurrent requests is ``b`` when the engine batched them."""

    def __init__(self, engine: "EngineHandle", *, interval: float = 0.02) -> None:
        self.engine = engine
        self.interval = interval
        self.samples: list[float] = []
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "MetricsSampler":
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(_sample_running(self.engine, self.samples, self._stop, self.interval))
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self._stop is not None and self._task is not None
        self._stop.set()
        try:
            await self._task
        except Exception:  # noqa: BLE001 - sampling is best effort
            pass

    def check(self, target: int) -> BatchCheck:
        return verify_batch(target, running_samples=self.samples or None)


class EvidenceWindow:
    """A profiler window (or, without a profiler, a metrics-sampling window) around a check's requests.

    Profiler traces are costly to write on small hosts (tens of ms per engine step),
    so checks profile a representative slice of their work and sample
    ``vllm:num_requests_running`` for the rest (``profile=False``, ``points={}``).
    On a clean exit it appends one :class:`PathEvidence` per attributed point to
    ``ctx.evidence`` and keeps a :class:`WindowRecord` in ``record``. ``points``
    maps a point id to its batch size: ``None`` attributes every decode step of the
    window to the point; with numbers (one window that probes several batch sizes)
    each point gets the decode steps with batch sizes above the next smaller probed
    batch size, up to its own.
    """

    def __init__(
        self,
        ctx: RunContext,
        engine: "EngineHandle",
        *,
        check: str,
        name: str,
        points: dict[str, int | None],
        side: Side,
        sample_interval: float = 0.02,
        scrape_metrics: bool = False,
        profile: bool = True,
        sample_metrics: bool = False,
    ) -> None:
        self.ctx = ctx
        self.engine = engine
        self.check = check
        self.name = name
        self.points = points
        self.side = side
        self.sample_interval = sample_interval
        self.scrape_metrics = scrape_metrics
        self.record: WindowRecord | None = None
        self.evidence: "WindowEvidence | None" = None
        self._pw: Any = None
        self._samples: list[float] = []
        self._sampler: MetricsSampler | None = None
        self.sample_metrics = sample_metrics
        self._t0 = 0.0
        self._unavailable: str | None = None
        self.profile = profile

    async def __aenter__(self) -> "EvidenceWindow":
        from fasttrack.engine import ProfilerWindow

        markers = marker_set(self.ctx)
        if not self.profile:
            self._unavailable = "this window was not profiled (metrics samples only)"
        elif self.engine.profiler_dir is None:
            self._unavailable = f"the {self.side} engine has no profiler (no --profiler-config), so no trace was taken"
        elif markers is None:
            self._unavailable = "the scope declares no path_markers"
        if self._unavailable is None:
            self._pw = ProfilerWindow(
                self.engine,
                self.name,
                markers=markers,
                fallback_pattern=fallback_regex(self.ctx),
                scrape_metrics=self.scrape_metrics,
            )
            await self._pw.__aenter__()
        if self._unavailable is not None or self.sample_metrics:
            self._sampler = MetricsSampler(self.engine, interval=self.sample_interval)
            await self._sampler.__aenter__()
        self._t0 = time.perf_counter()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        seconds = time.perf_counter() - self._t0
        if self._sampler is not None:
            await self._sampler.__aexit__(exc_type, exc, tb)
            self._samples = self._sampler.samples
        if self._pw is not None:
            await self._pw.__aexit__(exc_type, exc, tb)
        if exc_type is not None:
            return
        if self._pw is not None and self._pw.evidence is not None:
            ev = self._pw.evidence
            self.evidence = ev
            self.record = WindowRecord(
                name=self.name,
                side=self.side,
                points=list(self.points),
                available=True,
                summary=window_summary(ev),
                steps=[
                    {"kind": s.kind, "batch": s.batch, "optimized_ops": s.optimized_ops, "stock_ops": s.stock_ops}
                    for s in ev.steps
                ],
                running_samples=self._samples,
                seconds=round(seconds, 3),
            )
            sizes = sorted({b for b in self.points.values() if b is not None})
            for pid, batch in self.points.items():
                lo = max((b for b in sizes if batch is not None and b < batch), default=0)
                self.ctx.evidence.append(
                    _point_evidence(ev, check=self.check, point=pid, batches=None if batch is None else (lo + 1, batch))
                )
        else:
            reason = self._unavailable or "the profiler produced no evidence"
            self.record = WindowRecord(
                name=self.name,
                side=self.side,
                points=list(self.points),
                available=False,
                unavailable_reason=reason,
                summary={"max_running": max(self._samples) if self._samples else None},
                running_samples=self._samples,
                seconds=round(seconds, 3),
            )
            for pid in self.points:
                self.ctx.evidence.append(
                    PathEvidence(
                        check=self.check,
                        point=pid,
                        side=self.side,
                        window=self.name,
                        optimized_ops=0,
                        stock_ops=0,
                        decode_steps=0,
                        optimized_decode_steps=0,
                        detail={"unavailable": reason},
                    )
                )


def _point_evidence(ev: "WindowEvidence", *, check: str, point: str, batches: tuple[int, int] | None) -> PathEvidence:
    """The window's evidence for one point: every decode step, or (``batches=(lo, hi)``) the decode steps whose batch
    size lies in [lo, hi]. A window that probes several batch sizes gives each point the steps from just above the
    next smaller probed batch size up to its own, so the partial batches of a round that formed late (a request
    that arrived a step after the others) still count for the round's point."""
    pe = ev.to_path_evidence(check=check, point=point)
    if batches is None:
        return pe
    lo, hi = batches
    steps = [s for s in ev.steps if s.kind == "decode" and lo <= s.batch <= hi]
    sizes: dict[str, int] = {}
    opt: dict[str, int] = {}
    for s in steps:
        sizes[str(s.batch)] = sizes.get(str(s.batch), 0) + 1
        if s.optimized_ops:
            opt[str(s.batch)] = opt.get(str(s.batch), 0) + 1
    pe.decode_steps = len(steps)
    pe.optimized_decode_steps = sum(1 for s in steps if s.optimized_ops)
    pe.optimized_ops = sum(s.optimized_ops for s in steps)
    pe.stock_ops = sum(s.stock_ops for s in steps)
    pe.detail = dict(pe.detail)
    pe.detail["decode_batch_sizes"] = dict(sorted(sizes.items(), key=lambda kv: int(kv[0])))
    pe.detail["optimized_decode_batch_sizes"] = dict(sorted(opt.items(), key=lambda kv: int(kv[0])))
    pe.detail["batch_filter"] = [lo, hi]
    return pe
