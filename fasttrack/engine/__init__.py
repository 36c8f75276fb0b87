"""Real vLLM engines: lifecycle, a streaming client, and path evidence.

* :mod:`~fasttrack.engine.handle`: :class:`EngineHandle`, what a check may use of a live engine.
* :mod:`~fasttrack.engine.server` starts an OpenAI-compatible vLLM server for one side
  (own process group, log file, health wait, crash detection, SIGINT/SIGTERM/SIGKILL
  teardown); :mod:`~fasttrack.engine.multinode` one that spans several nodes, whose
  processes a launcher starts (:mod:`~fasttrack.engine.launchers`: local, slurm; the node
  entry script :mod:`~fasttrack.engine.node_main`); :mod:`~fasttrack.engine.start` picks
  between them; :mod:`~fasttrack.engine.attached` attaches to one that is already running.
* :mod:`~fasttrack.engine.cmdline`: every engine's command line and environment, wherever its
  processes run (an :class:`~fasttrack.engine.cmdline.Executor`: this host, ``srun`` tasks, pods),
  the host's GPU safety settings included.
* :mod:`~fasttrack.engine.argcheck` checks engine arguments against the installed vLLM's parser.
* :mod:`~fasttrack.engine.client` sends completions and chat requests, streamed with a
  timestamp per chunk, with logprobs, usage and seeds (:mod:`~fasttrack.engine.responses`).
* :mod:`~fasttrack.engine.metrics` reads ``/metrics``; :mod:`~fasttrack.engine.profiler`
  opens profiler windows around chosen requests, and :mod:`~fasttrack.engine.trace` with
  :mod:`~fasttrack.engine.evidence` counts which ops (optimized or stock path) ran per
  engine step; :mod:`~fasttrack.engine.logs` finds fallback lines in the engine log.
"""

from __future__ import annotations

from fasttrack.engine.attached import AttachedEngine, attach_engine
from fasttrack.engine.base import EngineBase
from fasttrack.engine.client import EngineClient
from fasttrack.engine.environment import DeviceInfo, EngineEnvironment
from fasttrack.engine.errors import (
    EngineCrashed,
    EngineError,
    EngineRequestError,
    EngineStartError,
    EngineUnreachable,
    ProfilerError,
)
from fasttrack.engine.evidence import WindowEvidence, evidence_from_traces
from fasttrack.engine.flags import per_request_metrics_args, profiler_args, profiler_dir_from_args
from fasttrack.engine.handle import EngineHandle
from fasttrack.engine.launchers import Launcher, LocalLauncher, SlurmLauncher, get_launcher
from fasttrack.engine.logs import scan_log, scan_log_file
from fasttrack.engine.metrics import (
    MetricsDelta,
    MetricsSnapshot,
    metrics_diff,
    parse_prometheus,
    scrape_metrics,
    scrape_metrics_sync,
)
from fasttrack.engine.multinode import MultiNodeEngine
from fasttrack.engine.procs import StopReport
from fasttrack.engine.profiler import ProfilerWindow, profile_window
from fasttrack.engine.responses import (
    ChoiceResult,
    CompletionResult,
    LogprobPosition,
    Request,
    TopLogprob,
    Usage,
)
from fasttrack.engine.server import (
    ManagedEngine,
    StartProgress,
    live_engines,
    stop_all_engines,
)
from fasttrack.engine.start import start_engine
from fasttrack.engine.trace import MarkerSet, StepRecord, TraceAnalysis, analyze_trace, iter_trace_events

__all__ = [
    "AttachedEngine",
    "ChoiceResult",
    "CompletionResult",
    "DeviceInfo",
    "EngineBase",
    "EngineClient",
    "EngineCrashed",
    "EngineEnvironment",
    "EngineError",
    "EngineHandle",
    "EngineRequestError",
    "EngineStartError",
    "EngineUnreachable",
    "LogprobPosition",
    "Launcher",
    "LocalLauncher",
    "ManagedEngine",
    "MarkerSet",
    "MetricsDelta",
    "MetricsSnapshot",
    "MultiNodeEngine",
    "ProfilerError",
    "ProfilerWindow",
    "Request",
    "SlurmLauncher",
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
    "get_launcher",
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
