"""Real vLLM engines: lifecycle, a streaming client, and path evidence.

* :mod:`fasttrack.engine.server` starts an OpenAI-compatible vLLM server for one side
  (own process group, log file, health wait, crash detection, SIGINT/SIGTERM/SIGKILL
  teardown) or attaches to one that is already running.
* :mod:`fasttrack.engine.client` sends completions and chat requests, streamed with a
  timestamp per chunk, with logprobs, usage and seeds.
* :mod:`fasttrack.engine.probes` reads ``/metrics``, opens profiler windows around
  chosen requests and counts which ops (optimized or stock path) ran per engine step.
"""

from __future__ import annotations

from fasttrack.engine.client import (
    ChoiceResult,
    CompletionResult,
    EngineClient,
    LogprobPosition,
    Request,
    TopLogprob,
    Usage,
)
from fasttrack.engine.environment import DeviceInfo, EngineEnvironment
from fasttrack.engine.errors import (
    EngineCrashed,
    EngineError,
    EngineRequestError,
    EngineStartError,
    EngineUnreachable,
    ProfilerError,
)
from fasttrack.engine.handle import EngineHandle
from fasttrack.engine.probes import (
    MarkerSet,
    MetricsDelta,
    MetricsSnapshot,
    ProfilerWindow,
    StepRecord,
    TraceAnalysis,
    WindowEvidence,
    analyze_trace,
    evidence_from_traces,
    iter_trace_events,
    metrics_diff,
    parse_prometheus,
    per_request_metrics_args,
    profile_window,
    profiler_args,
    profiler_dir_from_args,
    scan_log,
    scan_log_file,
    scrape_metrics,
    scrape_metrics_sync,
)
from fasttrack.engine.server import (
    AttachedEngine,
    EngineBase,
    ManagedEngine,
    StartProgress,
    StopReport,
    attach_engine,
    live_engines,
    start_engine,
    stop_all_engines,
)

__all__ = [
    "AttachedEngine",
    "ChoiceResult",
    "CompletionResult",
    "DeviceInfo",
    "EngineClient",
    "EngineCrashed",
    "EngineEnvironment",
    "EngineBase",
    "EngineError",
    "EngineHandle",
    "EngineRequestError",
    "EngineStartError",
    "EngineUnreachable",
    "LogprobPosition",
    "ManagedEngine",
    "MarkerSet",
    "MetricsDelta",
    "MetricsSnapshot",
    "ProfilerError",
    "ProfilerWindow",
    "Request",
    "StartProgress",
    "StepRecord",
    "StopReport",
    "TopLogprob",
    "TraceAnalysis",
    "Usage",
    "WindowEvidence",
    "analyze_trace",
    "attach_engine",
    "evidence_from_traces",
    "iter_trace_events",
    "live_engines",
    "metrics_diff",
    "parse_prometheus",
    "per_request_metrics_args",
    "profile_window",
    "profiler_args",
    "profiler_dir_from_args",
    "scan_log",
    "scan_log_file",
    "scrape_metrics",
    "scrape_metrics_sync",
    "start_engine",
    "stop_all_engines",
]
