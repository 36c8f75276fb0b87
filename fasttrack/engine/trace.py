"""Torch profiler traces of an engine's worker: a streaming reader and per-step op counts.

Traces can be hundreds of MB, so :func:`iter_trace_events` decodes the ``traceEvents``
array one event at a time. :func:`analyze_trace` counts ops/kernels per name, per path
marker (:class:`MarkerSet`: optimized and stock path) and per engine step. On a trace with GPU
kernels a marker counts only where it matches a kernel that ran on the device: under CUDA graphs the
host records an op when a graph is captured, and a replay runs the graph's kernels without any host op
(their kernel records, launched by the graph launch, are attributed to the step that launched it). vLLM's worker
wraps every step in a ``record_function`` span named
``execute_context_<n>(<tokens>)_generation_<m>(<tokens>)``; a step with no context
(prefill) request and at least one generation request is a decode step.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from pydantic import Field

from fasttrack.engine.errors import ProfilerError
from fasttrack.modelbase import StrictModel

_TRACE_EVENTS_RE = re.compile(r'"traceEvents"\s*:\s*\[')
TRACE_CHUNK = 1 << 20
"""Bytes read at a time from a trace file."""


def _open_text(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def iter_trace_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the objects of a Chrome trace's ``traceEvents`` array one by one.

    Reads the (optionally gzipped) file in 1 MiB chunks and decodes one event at a
    time, so memory stays bounded by the largest event, not the file.
    """
    path = Path(path)
    decoder = json.JSONDecoder()
    try:
        f = _open_text(path)
    except OSError as exc:
        raise ProfilerError(f"cannot open trace {path}: {exc}") from exc
    with f:
        try:
            yield from _iter_events(f, path, decoder)
        except (EOFError, gzip.BadGzipFile, OSError, UnicodeDecodeError) as exc:
            raise ProfilerError(f"trace {path} could not be read completely: {exc}") from exc


def _iter_events(f: Any, path: Path, decoder: json.JSONDecoder) -> Iterator[dict[str, Any]]:
    buf = ""
    eof = False
    # find the array
    while True:
        m = _TRACE_EVENTS_RE.search(buf)
        if m:
            buf = buf[m.end() :]
            break
        if eof:
            raise ProfilerError(f"trace {path} has no traceEvents array")
        chunk = f.read(TRACE_CHUNK)
        if not chunk:
            eof = True
        buf = buf[-64:] + chunk  # keep a tail in case the key spans two chunks
    pos = 0
    while True:
        # skip separators
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                pos += 1
            if pos < len(buf) or eof:
                break
            chunk = f.read(TRACE_CHUNK)
            if not chunk:
                eof = True
            buf, pos = buf[pos:] + chunk, 0
        if pos >= len(buf):
            raise ProfilerError(f"trace {path} ends inside its traceEvents array (truncated file?)")
        if buf[pos] == "]":
            return
        try:
            obj, end = decoder.raw_decode(buf, pos)
        except json.JSONDecodeError as exc:
            if eof or exc.pos < len(buf) - TRACE_CHUNK:
                raise ProfilerError(f"trace {path} is not valid JSON near offset {exc.pos}: {exc.msg}") from exc
            chunk = f.read(TRACE_CHUNK)
            if not chunk:
                eof = True
            buf, pos = buf[pos:] + chunk, 0
            continue
        pos = end
        if isinstance(obj, dict):
            yield obj


# --------------------------------------------------------------------------------------
# analysis

#: Event categories counted as ops (CPU ops, GPU kernels, user annotations).
OP_CATEGORIES = frozenset({"cpu_op", "kernel", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset"})
_LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "xpu_runtime"})

#: vLLM's per-step annotation (simple and detailed forms).
STEP_RE = re.compile(r"^execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)[^)]*\)$")


@dataclass(frozen=True)
class StepInfo:
    """One engine step parsed from its annotation."""

    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int

    @property
    def kind(self) -> str:
        """`decode`, `prefill`, `mixed` or `empty`."""
        if self.context_requests == 0 and self.generation_requests > 0:
            return "decode"
        if self.context_requests > 0 and self.generation_requests == 0:
            return "prefill"
        if self.context_requests > 0:
            return "mixed"
        return "empty"


def parse_step_name(name: str) -> StepInfo | None:
    """Parse a vLLM step annotation (None when ``name`` is not one)."""
    m = STEP_RE.match(name)
    if not m:
        return None
    a, b, c, d = (int(x) for x in m.groups())
    return StepInfo(a, b, c, d)


class MarkerSet(StrictModel):
    """Regexes (searched in op/kernel names) that prove which path ran."""

    optimized: list[str] = Field(default_factory=list)
    """Markers of the optimized path."""
    stock: list[str] = Field(default_factory=list)
    """Markers of the stock path."""
    device_optimized: str | None = None
    """Prometheus counter the optimized path's kernels increment on the device (read over each window)."""
    device_stock: str | None = None
    """Prometheus counter of the candidate's stock-path steps, counted on the device."""


class StepRecord(StrictModel):
    """What ran in one engine step (one worker)."""

    kind: str
    """`decode`, `prefill`, `mixed` or `empty`."""
    annotation: str
    """The step's annotation as it appears in the trace."""
    batch: int
    """Generation requests in the step (the decode batch size)."""
    ops: int
    """Ops counted in the step on the kernel basis of the trace (see `kernel_basis`)."""
    optimized_ops: int
    """Ops matching an optimized-path marker."""
    stock_ops: int
    """Ops matching a stock-path marker."""
    duration_us: float
    """Wall time of the step in the trace (microseconds)."""
    device_unconfirmed: bool = False
    """The step's kernels include an optimized marker, but the window's device counter counted fewer fast
    steps than the trace shows: this step is one the device did not confirm (its marker counts moved to
    ``unconfirmed_optimized_ops``, see :func:`fasttrack.engine.evidence.apply_device_counters`)."""
    unconfirmed_optimized_ops: int = 0
    """Optimized-marker kernels of a step the device counter did not confirm."""


class TraceAnalysis(StrictModel):
    """Counts from one worker trace file."""

    path: str
    """The trace file."""
    bytes: int
    """Size on disk."""
    events: int
    """Events read."""
    kernel_basis: str
    """What `ops` per step counts: `gpu_kernels` when the trace has GPU kernels, else `leaf_cpu_ops`."""
    op_counts: dict[str, int] = Field(default_factory=dict)
    """Occurrences of every op/kernel name in the trace (step annotations excluded)."""
    optimized_op_counts: dict[str, int] = Field(default_factory=dict)
    """Occurrences of op names matching an optimized marker."""
    stock_op_counts: dict[str, int] = Field(default_factory=dict)
    """Occurrences of op names matching a stock marker."""
    steps: list[StepRecord] = Field(default_factory=list)
    """Every engine step seen, in time order."""
    unassigned_ops: int = 0
    """Ops outside any step span (e.g. sampling between steps, or kernels without a launch record)."""
    host_marker_ops: int = 0
    """Marker matches on host-side records (CPU ops, annotations) of a trace with GPU kernels: not evidence
    there, since a CUDA graph's replay runs its kernels without them (they are recorded when it is captured)."""


def _matcher(patterns: Sequence[str]) -> re.Pattern[str] | None:
    pats = [p for p in patterns if p]
    if not pats:
        return None
    for p in pats:
        try:
            re.compile(p)
        except re.error as exc:
            raise ProfilerError(f"path marker {p!r} is not a valid regular expression: {exc}") from exc
    return re.compile("|".join(f"(?:{p})" for p in pats))


_Op = tuple[str, str, Any, Any, float, float, Any]
"""One op of a trace: name, category, pid, tid, start, duration, launch correlation id (or None)."""
_Span = tuple[float, float, str, StepInfo]
"""One engine step: start, end, its annotation's name, what the name says."""


@dataclass
class _Events:
    """What :func:`analyze_trace` keeps of a trace's events. pid and tid are whatever the trace writer put there
    (ints, or strings for GPU streams)."""

    steps: dict[Any, list[_Span]]
    """pid -> its engine steps, in start order."""
    ops: list[_Op]
    launches: dict[Any, tuple[Any, float]]
    """correlation id -> (pid, start) of the host call that launched GPU work."""
    n_events: int


def _read_events(path: Path) -> _Events:
    """Stream the trace once, keeping the step spans, the ops and the launches."""
    intern = sys.intern
    steps: dict[Any, list[_Span]] = defaultdict(list)
    ops: list[_Op] = []
    launches: dict[Any, tuple[Any, float]] = {}
    n_events = 0
    for ev in iter_trace_events(path):
        n_events += 1
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        name = ev.get("name")
        if not isinstance(name, str):
            continue
        try:
            ts = float(ev.get("ts", 0.0))
            dur = float(ev.get("dur", 0.0))
        except (TypeError, ValueError):
            continue
        pid = ev.get("pid")
        if cat == "user_annotation":
            info = parse_step_name(name)
            if info is not None:
                steps[pid].append((ts, ts + dur, intern(name), info))
                continue
        if cat in _LAUNCH_CATEGORIES:
            corr = (ev.get("args") or {}).get("correlation")
            if corr is not None:
                launches[corr] = (pid, ts)
            continue
        if cat in OP_CATEGORIES:
            corr = (ev.get("args") or {}).get("correlation") if cat != "cpu_op" else None
            ops.append((intern(name), intern(cat), pid, ev.get("tid"), ts, dur, corr))
    ordered = {pid: sorted(spans, key=lambda x: x[0]) for pid, spans in steps.items()}
    return _Events(steps=ordered, ops=ops, launches=launches, n_events=n_events)


def _leaf_cpu_ops(ops: list[_Op]) -> set[int]:
    """The indexes of the leaf CPU ops: no other cpu_op nested inside them on the same thread."""
    leaf: set[int] = set()
    by_thread: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for i, o in enumerate(ops):
        if o[1] == "cpu_op":
            by_thread[(o[2], o[3])].append(i)
    for idxs in by_thread.values():
        idxs.sort(key=lambda i: (ops[i][4], -ops[i][5]))
        stack: list[tuple[float, int]] = []  # (end, index)
        for i in idxs:
            ts, end = ops[i][4], ops[i][4] + ops[i][5]
            while stack and stack[-1][0] <= ts:
                stack.pop()
            if stack:
                leaf.discard(stack[-1][1])
            leaf.add(i)
            stack.append((end, i))
    return leaf


@dataclass
class _Counts:
    """Ops counted by name and by marker, and per step ``(pid, step index) -> [ops on basis, optimized,
    stock]``."""

    ops: Counter[str]
    optimized: Counter[str]
    stock: Counter[str]
    per_step: dict[tuple[Any, int], list[int]]
    unassigned: int = 0
    host_hits: int = 0


def _count_ops(events: _Events, markers: MarkerSet, *, has_kernels: bool) -> _Counts:
    """Count every op by name and marker, and on its engine step (GPU work: the step its launch was issued in).
    On a GPU trace only a kernel that ran on the device is evidence of a path; the ops counted per step are
    the kernels there, the leaf CPU ops otherwise."""
    opt_re, stock_re = _matcher(markers.optimized), _matcher(markers.stock)
    leaf = set() if has_kernels else _leaf_cpu_ops(events.ops)
    step_lists, launches = events.steps, events.launches
    step_starts = {pid: [s[0] for s in lst] for pid, lst in step_lists.items()}
    counts = _Counts(Counter(), Counter(), Counter(), defaultdict(lambda: [0, 0, 0]))
    match_cache: dict[str, tuple[bool, bool]] = {}
    for i, (name, cat, pid, _tid, ts, _dur, corr) in enumerate(events.ops):
        counts.ops[name] += 1
        hit = match_cache.get(name)
        if hit is None:
            hit = (bool(opt_re and opt_re.search(name)), bool(stock_re and stock_re.search(name)))
            match_cache[name] = hit
        if has_kernels and cat != "kernel" and (hit[0] or hit[1]):
            counts.host_hits += 1  # reported as host_marker_ops, never as evidence
            hit = (False, False)
        if hit[0]:
            counts.optimized[name] += 1
        if hit[1]:
            counts.stock[name] += 1
        # where (pid, ts) was this op issued? GPU work: at its launch on the CPU side
        apid, ats = pid, ts
        if cat != "cpu_op" and cat != "user_annotation":
            if corr is not None and corr in launches:
                apid, ats = launches[corr]
            else:
                apid = None
        starts = step_starts.get(apid) if apid is not None else None
        k = -1
        if starts:
            j = bisect.bisect_right(starts, ats) - 1
            if j >= 0 and ats <= step_lists[apid][j][1]:
                k = j
        if k < 0:
            counts.unassigned += 1
            continue
        c = counts.per_step[(apid, k)]
        on_basis = (cat == "kernel") if has_kernels else (i in leaf)
        if on_basis:
            c[0] += 1
        if hit[0]:
            c[1] += 1
        if hit[1]:
            c[2] += 1
    return counts


def _step_records(events: _Events, counts: _Counts) -> list[StepRecord]:
    """Every engine step with its counts, in start order."""
    records: list[tuple[float, StepRecord]] = []
    for pid, lst in events.steps.items():
        for k, (t0, t1, name, info) in enumerate(lst):
            c = counts.per_step.get((pid, k), [0, 0, 0])
            record = StepRecord(
                kind=info.kind,
                annotation=name,
                batch=info.generation_requests,
                ops=c[0],
                optimized_ops=c[1],
                stock_ops=c[2],
                duration_us=round(t1 - t0, 3),
            )
            records.append((t0, record))
    records.sort(key=lambda r: r[0])
    return [r for _, r in records]


def analyze_trace(path: str | Path, markers: MarkerSet) -> TraceAnalysis:
    """Stream-parse one trace and count ops per name, per marker and per engine step."""
    path = Path(path)
    events = _read_events(path)
    has_kernels = any(o[1] == "kernel" for o in events.ops)
    counts = _count_ops(events, markers, has_kernels=has_kernels)
    return TraceAnalysis(
        path=str(path),
        bytes=path.stat().st_size,
        events=events.n_events,
        kernel_basis="gpu_kernels" if has_kernels else "leaf_cpu_ops",
        op_counts=dict(counts.ops.most_common()),
        optimized_op_counts=dict(counts.optimized.most_common()),
        stock_op_counts=dict(counts.stock.most_common()),
        steps=_step_records(events, counts),
        unassigned_ops=counts.unassigned,
        host_marker_ops=counts.host_hits,
    )
