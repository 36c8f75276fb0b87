"""Profiler windows: the torch profiler opened on a live engine around chosen requests.

The engine must have been started with :func:`fasttrack.engine.flags.profiler_args`
(vLLM's ``--profiler-config``). :class:`ProfilerWindow` posts ``/start_profile`` and
``/stop_profile`` around its body, waits for the worker's trace files, and reads them
into :class:`~fasttrack.engine.evidence.WindowEvidence` (with the fallback lines the log
gained and, optionally, the metrics' change over the window; with a device counter declared in the
markers, always, and the trace's optimized steps are held against it).
"""

from __future__ import annotations

import asyncio
import gzip
import re
import time
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from fasttrack.engine.errors import ProfilerError
from fasttrack.engine.evidence import WindowEvidence, apply_device_counters, combine_analyses
from fasttrack.engine.logs import scan_log
from fasttrack.engine.metrics import MetricsSnapshot, metrics_diff, scrape_metrics_sync
from fasttrack.engine.tls import tls_context
from fasttrack.engine.trace import TRACE_CHUNK, MarkerSet, analyze_trace

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine.handle import EngineHandle


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
                while f.read(TRACE_CHUNK):
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
        self.scrape = scrape_metrics or bool(self.markers.device_optimized and engine.side == "candidate")
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
        with httpx.Client(timeout=self.request_timeout, verify=tls_context()) as http:
            self._post(http, "/start_profile", {"profile_prefix": self.prefix})
        self._t0 = time.monotonic()

    def _close(self) -> float:
        with httpx.Client(timeout=self.request_timeout, verify=tls_context()) as http:
            self._post(http, "/stop_profile", None)
        return time.monotonic() - self._t0

    def _new_traces(self) -> list[Path]:
        """The worker trace files written since the window opened: those named with this window's prefix, or,
        where vLLM ignores the prefix (0.26's ``/start_profile`` takes no body and names files
        ``rank<N>.<timestamp>.pt.trace.json.gz``), every new worker trace file of the engine's profiler folder
        (an engine profiles one window at a time, so they are this window's)."""
        fresh = [p for p in self._existing() - self._before if _is_worker_trace(p)]
        named = [p for p in fresh if p.name.startswith(self.prefix)]
        return sorted(named or fresh)

    def _wait_files(self) -> list[Path]:
        deadline = time.monotonic() + self.file_timeout
        last_sizes: dict[Path, int] | None = None
        while True:
            new = self._new_traces()
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
            if self.markers.device_optimized and self.engine.side == "candidate":  # a stock build exports none
                apply_device_counters(
                    ev,
                    analyses,
                    _counter_delta(self._metrics_before, after, d, self.markers.device_optimized),
                    _counter_delta(self._metrics_before, after, d, self.markers.device_stock),
                )
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


def _counter_delta(before: MetricsSnapshot, after: MetricsSnapshot, d: Any, name: str | None) -> float | None:
    """The change of counter ``name`` over the window; None when the engine does not export it."""
    if not name or not after.select(name):
        return None
    return float(d.delta(name))


def profile_window(engine: "EngineHandle", name: str, **kwargs: Any) -> ProfilerWindow:
    """Shorthand for :class:`ProfilerWindow` (usable with ``with`` and ``async with``)."""
    return ProfilerWindow(engine, name, **kwargs)
