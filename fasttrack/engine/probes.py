"""Path evidence: which code path an engine really ran.

Three sources, all read from a live engine:

* ``/metrics`` (Prometheus text): :func:`parse_prometheus`, :func:`scrape_metrics`,
  :func:`metrics_diff`.
* profiler windows (``--profiler-config`` at launch, ``POST /start_profile`` and
  ``/stop_profile`` around chosen requests): :class:`ProfilerWindow`. The worker's
  trace is stream-parsed (traces can be hundreds of MB) into op/kernel counts, matched
  against the path markers of the optimized and the stock path, and split per engine
  step. vLLM's worker wraps every step in a ``record_function`` span named
  ``execute_context_<n>(<tokens>)_generation_<m>(<tokens>)``; a step with no context
  (prefill) request and at least one generation request is a decode step.
* the engine log: :func:`scan_log` finds fallback lines by regex.

The result of a window is a :class:`WindowEvidence`, convertible to the
``PathEvidence`` rows the coverage check judges.
"""

from __future__ import annotations

import asyncio
import bisect
import gzip
import json
import math
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import httpx
from pydantic import BaseModel, ConfigDict, Field

from fasttrack.engine.errors import EngineRequestError, ProfilerError

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine.handle import EngineHandle
    from fasttrack.results import PathEvidence


# ======================================================================================
# Prometheus /metrics

_TYPE_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_gsum", "_gcount", "_info")
_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?\s*$")


def _parse_value(s: str) -> float:
    low = s.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    return float(s)


def _parse_labels(s: str) -> dict[str, str]:
    """Parse ``{a="x",b="y\\"z"}`` (with Prometheus escapes) into a dict."""
    labels: dict[str, str] = {}
    i, n = 1, len(s) - 1  # inside the braces
    while i < n:
        while i < n and s[i] in " ,":
            i += 1
        if i >= n:
            break
        eq = s.index("=", i)
        key = s[i:eq].strip()
        i = eq + 1
        while s[i] == " ":
            i += 1
        if s[i] != '"':
            raise ValueError(f"label value of {key!r} is not quoted: {s!r}")
        i += 1
        buf: list[str] = []
        while True:
            c = s[i]
            if c == "\\":
                nxt = s[i + 1]
                buf.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                i += 2
                continue
            if c == '"':
                i += 1
                break
            buf.append(c)
            i += 1
        labels[key] = "".join(buf)
    return labels


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def metric_key(name: str, labels: dict[str, str] | None = None) -> str:
    """Canonical key of one sample: ``name{a="x",b="y"}`` with labels sorted (or bare ``name``)."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def split_metric_key(key: str) -> tuple[str, dict[str, str]]:
    """Inverse of :func:`metric_key`."""
    brace = key.find("{")
    if brace < 0:
        return key, {}
    return key[:brace], _parse_labels(key[brace:])


class MetricsSnapshot(BaseModel):
    """One scrape of ``/metrics``: every sample, keyed by name and sorted labels."""

    model_config = ConfigDict(extra="forbid")

    samples: dict[str, float] = Field(default_factory=dict)
    """Sample value per :func:`metric_key` (histogram buckets, sums and counts are separate samples)."""
    types: dict[str, str] = Field(default_factory=dict)
    """Declared type per metric family (counter, gauge, histogram, summary, untyped)."""
    scraped_at: float | None = None
    """Wall-clock time of the scrape (time.time())."""

    def type_of(self, sample_name: str) -> str:
        """The declared type of the family a sample name belongs to."""
        if sample_name in self.types:
            return self.types[sample_name]
        for suf in _TYPE_SUFFIXES:
            if sample_name.endswith(suf) and sample_name[: -len(suf)] in self.types:
                return self.types[sample_name[: -len(suf)]]
        return "untyped"

    def select(self, name: str, **labels: str) -> dict[str, float]:
        """Samples named ``name`` whose labels include ``labels``."""
        out: dict[str, float] = {}
        for key, v in self.samples.items():
            n, lab = split_metric_key(key)
            if n == name and all(lab.get(k) == val for k, val in labels.items()):
                out[key] = v
        return out

    def get(self, name: str, **labels: str) -> float | None:
        """The value of exactly one sample (None when absent; error when ambiguous)."""
        sel = self.select(name, **labels)
        if not sel:
            return None
        if len(sel) > 1:
            raise KeyError(f"{name} with {labels} matches {len(sel)} samples: {sorted(sel)[:5]}")
        return next(iter(sel.values()))

    def total(self, name: str, **labels: str) -> float:
        """Sum of all samples named ``name`` whose labels include ``labels`` (0 when none)."""
        return float(sum(self.select(name, **labels).values()))

    def histogram(self, family: str, **labels: str) -> dict[float, float]:
        """Cumulative bucket counts of one histogram family: upper bound -> count."""
        out: dict[float, float] = defaultdict(float)
        for key, v in self.select(family + "_bucket", **labels).items():
            _, lab = split_metric_key(key)
            out[_parse_value(lab["le"])] += v
        return dict(sorted(out.items()))


def parse_prometheus(text: str, *, scraped_at: float | None = None) -> MetricsSnapshot:
    """Parse Prometheus text exposition format into a :class:`MetricsSnapshot`."""
    samples: dict[str, float] = {}
    types: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise ValueError(f"line {lineno} of the metrics text is not a sample: {raw!r}")
        name, lab, val = m.group(1), m.group(2), m.group(3)
        labels = _parse_labels(lab) if lab else {}
        samples[metric_key(name, labels)] = _parse_value(val)
    return MetricsSnapshot(samples=samples, types=types, scraped_at=scraped_at)


class MetricsDelta(BaseModel):
    """The change between two scrapes."""

    model_config = ConfigDict(extra="forbid")

    deltas: dict[str, float] = Field(default_factory=dict)
    """after - before for counters, histograms and summaries (absent before = 0)."""
    gauges: dict[str, tuple[float, float]] = Field(default_factory=dict)
    """(before, after) for gauges (a difference of gauges means little)."""
    seconds: float | None = None
    """Time between the scrapes."""

    def delta(self, name: str, **labels: str) -> float:
        """Sum of the deltas of samples named ``name`` whose labels include ``labels``."""
        tot = 0.0
        for key, v in self.deltas.items():
            n, lab = split_metric_key(key)
            if n == name and all(lab.get(k) == val for k, val in labels.items()):
                tot += v
        return tot


def metrics_diff(before: MetricsSnapshot, after: MetricsSnapshot) -> MetricsDelta:
    """Per-sample change from ``before`` to ``after``."""
    deltas: dict[str, float] = {}
    gauges: dict[str, tuple[float, float]] = {}
    for key, v in after.samples.items():
        name, _ = split_metric_key(key)
        kind = after.type_of(name)
        prev = before.samples.get(key)
        if kind == "gauge":
            gauges[key] = (math.nan if prev is None else prev, v)
        else:
            deltas[key] = v - (prev or 0.0)
    secs = None
    if before.scraped_at is not None and after.scraped_at is not None:
        secs = after.scraped_at - before.scraped_at
    return MetricsDelta(deltas=deltas, gauges=gauges, seconds=secs)


def _metrics_url(target: "EngineHandle | str") -> str:
    base = target if isinstance(target, str) else target.base_url
    return base.rstrip("/") + "/metrics"


async def scrape_metrics(target: "EngineHandle | str", *, timeout: float = 10.0) -> MetricsSnapshot:
    """GET /metrics of an engine (handle or base URL) and parse it."""
    url = _metrics_url(target)
    async with httpx.AsyncClient(timeout=timeout) as http:
        r = await http.get(url)
    if r.status_code != 200:
        raise EngineRequestError(r.text[:500], status_code=r.status_code, body=r.text, url=url)
    return parse_prometheus(r.text, scraped_at=time.time())


def scrape_metrics_sync(target: "EngineHandle | str", *, timeout: float = 10.0) -> MetricsSnapshot:
    """Synchronous :func:`scrape_metrics`."""
    url = _metrics_url(target)
    r = httpx.get(url, timeout=timeout)
    if r.status_code != 200:
        raise EngineRequestError(r.text[:500], status_code=r.status_code, body=r.text, url=url)
    return parse_prometheus(r.text, scraped_at=time.time())


# ======================================================================================
# profiler configuration


def profiler_args(
    profiler_dir: str | Path,
    *,
    with_stack: bool = False,
    ignore_frontend: bool = True,
    use_gzip: bool = True,
    record_shapes: bool = False,
    extra: dict[str, Any] | None = None,
) -> list[str]:
    """Engine arguments that enable the torch profiler endpoints, writing traces to ``profiler_dir``.

    Stacks are off by default (they make traces ~10x larger); the API-server
    (frontend) profile is off by default since the model's ops run in the worker.
    """
    cfg: dict[str, Any] = {
        "profiler": "torch",
        "torch_profiler_dir": str(Path(profiler_dir).resolve()),
        "torch_profiler_with_stack": with_stack,
        "torch_profiler_use_gzip": use_gzip,
        "torch_profiler_record_shapes": record_shapes,
        "ignore_frontend": ignore_frontend,
    }
    cfg.update(extra or {})
    return ["--profiler-config", json.dumps(cfg, sort_keys=True)]


PER_REQUEST_METRICS_FLAG = "--enable-per-request-metrics"


def vllm_supports_per_request_metrics() -> bool:
    """Whether the installed vLLM's API server has ``--enable-per-request-metrics`` (per-request timing
    from the engine core's timestamps in each response's ``metrics``). Read from vLLM's source, without
    importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(next(iter(spec.submodule_search_locations)))
    for rel in ("entrypoints/launchers/cli_args.py", "entrypoints/openai/cli_args.py"):
        f = root / rel
        if f.is_file() and "enable_per_request_metrics" in f.read_text(encoding="utf-8", errors="replace"):
            return True
    return False


def per_request_metrics_args(args: Sequence[str]) -> list[str]:
    """``--enable-per-request-metrics`` when the installed vLLM has it and ``args`` neither set it nor
    turn engine statistics off (``--disable-log-stats``, which the flag requires)."""
    if any(a.split("=", 1)[0] in (PER_REQUEST_METRICS_FLAG, "--disable-log-stats") for a in args):
        return []
    return [PER_REQUEST_METRICS_FLAG] if vllm_supports_per_request_metrics() else []


def profiler_dir_from_args(args: Sequence[str]) -> Path | None:
    """The torch profiler directory named in engine arguments (None when profiling is off)."""
    args = list(args)
    for i, a in enumerate(args):
        val: str | None = None
        if a == "--profiler-config" and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith("--profiler-config="):
            val = a.split("=", 1)[1]
        if val is not None:
            try:
                cfg = json.loads(val)
            except ValueError:
                continue
            if isinstance(cfg, dict) and cfg.get("torch_profiler_dir"):
                return Path(cfg["torch_profiler_dir"])
        for flag in ("--profiler-config.torch_profiler_dir", "--profiler_config.torch_profiler_dir"):
            if a == flag and i + 1 < len(args):
                return Path(args[i + 1])
            if a.startswith(flag + "="):
                return Path(a.split("=", 1)[1])
    return None


# ======================================================================================
# streaming trace reader

_TRACE_EVENTS_RE = re.compile(r'"traceEvents"\s*:\s*\[')
_CHUNK = 1 << 20


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
        chunk = f.read(_CHUNK)
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
            chunk = f.read(_CHUNK)
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
            if eof or exc.pos < len(buf) - _CHUNK:
                raise ProfilerError(f"trace {path} is not valid JSON near offset {exc.pos}: {exc.msg}") from exc
            chunk = f.read(_CHUNK)
            if not chunk:
                eof = True
            buf, pos = buf[pos:] + chunk, 0
            continue
        pos = end
        if isinstance(obj, dict):
            yield obj


# ======================================================================================
# trace analysis

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


class MarkerSet(BaseModel):
    """Regexes (searched in op/kernel names) that prove which path ran."""

    model_config = ConfigDict(extra="forbid")

    optimized: list[str] = Field(default_factory=list)
    """Markers of the optimized path."""
    stock: list[str] = Field(default_factory=list)
    """Markers of the stock path."""


class StepRecord(BaseModel):
    """What ran in one engine step (one worker)."""

    model_config = ConfigDict(extra="forbid")

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


class TraceAnalysis(BaseModel):
    """Counts from one worker trace file."""

    model_config = ConfigDict(extra="forbid")

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


def analyze_trace(path: str | Path, markers: MarkerSet) -> TraceAnalysis:
    """Stream-parse one trace and count ops per name, per marker and per engine step."""
    path = Path(path)
    opt_re = _matcher(markers.optimized)
    stock_re = _matcher(markers.stock)
    intern = sys.intern

    steps: dict[int, list[tuple[float, float, str, StepInfo]]] = defaultdict(list)  # pid -> spans
    ops: list[tuple[str, str, int, int, float, float, Any]] = []  # name, cat, pid, tid, ts, dur, correlation
    launches: dict[Any, tuple[int, float]] = {}
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

    has_kernels = any(o[1] == "kernel" for o in ops)
    kernel_basis = "gpu_kernels" if has_kernels else "leaf_cpu_ops"

    # leaf CPU ops: no other cpu_op nested inside them on the same thread
    leaf: set[int] = set()
    if not has_kernels:
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

    step_lists = {pid: sorted(s, key=lambda x: x[0]) for pid, s in steps.items()}
    step_starts = {pid: [s[0] for s in lst] for pid, lst in step_lists.items()}
    # per step: [ops on basis, optimized, stock]
    step_counts: dict[tuple[Any, int], list[int]] = defaultdict(lambda: [0, 0, 0])

    op_counts: Counter[str] = Counter()
    opt_counts: Counter[str] = Counter()
    stock_counts: Counter[str] = Counter()
    unassigned = 0
    match_cache: dict[str, tuple[bool, bool]] = {}
    for i, (name, cat, pid, _tid, ts, _dur, corr) in enumerate(ops):
        op_counts[name] += 1
        hit = match_cache.get(name)
        if hit is None:
            hit = (bool(opt_re and opt_re.search(name)), bool(stock_re and stock_re.search(name)))
            match_cache[name] = hit
        if hit[0]:
            opt_counts[name] += 1
        if hit[1]:
            stock_counts[name] += 1
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
            unassigned += 1
            continue
        c = step_counts[(apid, k)]
        on_basis = (cat == "kernel") if has_kernels else (i in leaf)
        if on_basis:
            c[0] += 1
        if hit[0]:
            c[1] += 1
        if hit[1]:
            c[2] += 1

    records: list[tuple[float, StepRecord]] = []
    for pid, lst in step_lists.items():
        for k, (t0, t1, name, info) in enumerate(lst):
            c = step_counts.get((pid, k), [0, 0, 0])
            records.append(
                (
                    t0,
                    StepRecord(
                        kind=info.kind,
                        annotation=name,
                        batch=info.generation_requests,
                        ops=c[0],
                        optimized_ops=c[1],
                        stock_ops=c[2],
                        duration_us=round(t1 - t0, 3),
                    ),
                )
            )
    records.sort(key=lambda r: r[0])
    return TraceAnalysis(
        path=str(path),
        bytes=path.stat().st_size,
        events=n_events,
        kernel_basis=kernel_basis,
        op_counts=dict(op_counts.most_common()),
        optimized_op_counts=dict(opt_counts.most_common()),
        stock_op_counts=dict(stock_counts.most_common()),
        steps=[r for _, r in records],
        unassigned_ops=unassigned,
    )


# ======================================================================================
# log scanning


def scan_log(text: str, pattern: str | re.Pattern[str]) -> list[str]:
    """Lines of ``text`` in which ``pattern`` (a regex) is found."""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    return [line for line in text.splitlines() if rx.search(line)]


def scan_log_file(
    path: str | Path, pattern: str | re.Pattern[str], *, start: int = 0, end: int | None = None
) -> list[str]:
    """Matching lines of a log file between two byte offsets."""
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read() if end is None else f.read(max(0, end - start))
    return scan_log(data.decode("utf-8", errors="replace"), pattern)


# ======================================================================================
# window evidence


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

    def to_path_evidence(self, *, check: str, point: str) -> "PathEvidence":
        """The row the coverage check judges."""
        from fasttrack.results import PathEvidence

        return PathEvidence(
            check=check,
            point=point,
            side=self.side,  # type: ignore[arg-type]
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


# ======================================================================================
# profiler windows

_PREFIX_BAD = re.compile(r"[^A-Za-z0-9._-]")
_window_ids = count(1)


def _safe_prefix(name: str) -> str:
    body = _PREFIX_BAD.sub("_", name)[:80] or "w"
    return f"ft{next(_window_ids):03d}-{body}-{int(time.time() * 1000) % 10**8}"


def _is_worker_trace(p: Path) -> bool:
    return ".pt.trace.json" in p.name and ".async_llm" not in p.name


def _trace_complete(p: Path) -> bool:
    if p.name.endswith(".gz"):
        try:
            with gzip.open(p, "rb") as f:
                while f.read(_CHUNK):
                    pass
        except (EOFError, OSError):
            return False
    return True


class ProfilerWindow:
    """Open a profiler window on an engine, run requests, close it and read the traces.

    Use as ``async with`` (or plain ``with`` for synchronous callers)::

        async with ProfilerWindow(engine, "decode-b4", markers=m, fallback_pattern=r"fallback") as win:
            await client.gather([...])
        win.evidence.optimized_decode_steps

    When the body raises, the profiler is still stopped and the error propagates
    (no evidence is produced).
    """

    def __init__(
        self,
        engine: "EngineHandle",
        name: str,
        *,
        markers: MarkerSet | None = None,
        fallback_pattern: str | None = None,
        scrape_metrics: bool = False,
        file_timeout: float = 60.0,
        request_timeout: float = 120.0,
    ) -> None:
        if engine.profiler_dir is None:
            raise ProfilerError(
                f"the {engine.side} engine has no profiler directory, so no profiler window can be opened",
                hint="Start it with fasttrack.engine.profiler_args(DIR) (vLLM's --profiler-config), "
                "or pass profiler_dir= when attaching to an engine on this host.",
            )
        self.engine = engine
        self.name = name
        self.markers = markers or MarkerSet()
        self.fallback_pattern = fallback_pattern
        self.scrape = scrape_metrics
        self.file_timeout = file_timeout
        self.request_timeout = request_timeout
        self.prefix = _safe_prefix(name)
        self.evidence: WindowEvidence | None = None
        self._before: set[Path] = set()
        self._log_start = 0
        self._t0 = 0.0
        self._metrics_before: MetricsSnapshot | None = None

    # -- shared steps

    def _existing(self) -> set[Path]:
        d = self.engine.profiler_dir
        assert d is not None
        return set(d.glob("*.pt.trace.json*")) if d.exists() else set()

    def _post(self, http: httpx.Client, path: str, body: dict[str, Any] | None) -> None:
        url = self.engine.base_url + path
        try:
            r = http.post(url, json=body) if body is not None else http.post(url)
        except httpx.HTTPError as exc:
            self.engine.check_alive(grace=2.0)
            raise ProfilerError(f"{path} on the {self.engine.side} engine failed: {exc}") from exc
        if r.status_code == 404:
            raise ProfilerError(
                f"the {self.engine.side} engine has no {path} endpoint: it was started without a profiler",
                hint="Add fasttrack.engine.profiler_args(DIR) to its arguments.",
            )
        if r.status_code != 200:
            raise ProfilerError(f"{path} on the {self.engine.side} engine answered {r.status_code}: {r.text[:500]}")

    def _open(self) -> None:
        self._before = self._existing()
        self._log_start = self.engine.log_offset()
        if self.scrape:
            self._metrics_before = scrape_metrics_sync(self.engine)
        with httpx.Client(timeout=self.request_timeout) as http:
            self._post(http, "/start_profile", {"profile_prefix": self.prefix})
        self._t0 = time.monotonic()

    def _close(self) -> float:
        with httpx.Client(timeout=self.request_timeout) as http:
            self._post(http, "/stop_profile", None)
        return time.monotonic() - self._t0

    def _wait_files(self) -> list[Path]:
        deadline = time.monotonic() + self.file_timeout
        last_sizes: dict[Path, int] | None = None
        while True:
            new = sorted(
                p for p in self._existing() - self._before if p.name.startswith(self.prefix) and _is_worker_trace(p)
            )
            sizes = {p: p.stat().st_size for p in new}
            if new and sizes == last_sizes and all(_trace_complete(p) for p in new):
                return new
            last_sizes = sizes
            if time.monotonic() > deadline:
                if new:
                    raise ProfilerError(f"trace files of window {self.name!r} never became complete: {new}")
                return []
            time.sleep(0.5)

    def _collect(self, duration: float) -> WindowEvidence:
        files = self._wait_files()
        analyses = [analyze_trace(p, self.markers) for p in files]
        ev = combine_analyses(
            analyses,
            name=self.name,
            side=self.engine.side,
            prefix=self.prefix,
            duration_s=duration,
            markers=self.markers,
        )
        if not files:
            ev.notes.append(f"no trace file with prefix {self.prefix} appeared in {self.engine.profiler_dir}")
        if self.fallback_pattern:
            ev.fallback_pattern = self.fallback_pattern
            if self.engine.log_path is None:
                ev.notes.append("the engine log is not available, so fallback lines were not counted")
            else:
                lines = scan_log(self.engine.read_log(self._log_start), self.fallback_pattern)
                ev.fallback_events = len(lines)
                ev.fallback_lines = lines[:50]
        if self._metrics_before is not None:
            after = scrape_metrics_sync(self.engine)
            d = metrics_diff(self._metrics_before, after)
            ev.metrics_delta = {k: v for k, v in d.deltas.items() if v}
        return ev

    # -- sync protocol

    def __enter__(self) -> "ProfilerWindow":
        self._open()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            try:
                self._close()
            except Exception:  # noqa: BLE001 - the body's error is the one to report
                pass
            return
        self.evidence = self._collect(self._close())

    # -- async protocol

    async def __aenter__(self) -> "ProfilerWindow":
        await asyncio.to_thread(self._open)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            try:
                await asyncio.to_thread(self._close)
            except Exception:  # noqa: BLE001 - the body's error is the one to report
                pass
            return
        duration = await asyncio.to_thread(self._close)
        self.evidence = await asyncio.to_thread(self._collect, duration)


def profile_window(engine: "EngineHandle", name: str, **kwargs: Any) -> ProfilerWindow:
    """Shorthand for :class:`ProfilerWindow` (usable with ``with`` and ``async with``)."""
    return ProfilerWindow(engine, name, **kwargs)


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
