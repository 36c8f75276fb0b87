"""Engine lifecycle: start a vLLM OpenAI-compatible server, watch it, stop it, or attach to one.

An owned engine (:class:`ManagedEngine`) is one ``python -m
vllm.entrypoints.launchers.api_server.entry`` process (``vllm.entrypoints.openai.api_server``
before vLLM 0.32) in its own process group (vLLM's engine core and worker processes join that
group), logging into one file; its command line and environment come from
:func:`~fasttrack.engine.cmdline.engine_command`. It is stopped
with SIGINT, then SIGTERM, then SIGKILL to the whole group, on ``stop()``, on leaving
its ``with`` block (also by exception or Ctrl-C), on SIGTERM/SIGHUP to the harness and
at interpreter exit. On Linux the server also gets SIGTERM if the harness dies
without cleaning up (parent-death signal).

An attached engine (:class:`~fasttrack.engine.attached.AttachedEngine`) is an endpoint
someone else runs (``--baseline-url``); the harness never stops it.

Only one owned engine runs at a time unless a caller asks otherwise: on small hosts
an idle engine busy-polls and would disturb the other one's timings, and on GPU hosts
two engines of a large model do not fit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import httpx

from fasttrack import attrs
from fasttrack.engine.base import EngineBase
from fasttrack.engine.cmdline import HARNESS_ENV, LocalExecutor, ServeSpec, engine_command, host_safety_env
from fasttrack.engine.environment import EngineEnvironment, local_environment
from fasttrack.engine.errors import EngineCrashed, EngineError, EngineProcessError, EngineStartError
from fasttrack.engine.logs import free_log_path, read_log_tail
from fasttrack.engine.procs import StopReport, free_port, group_members, start_logged, stop_group
from fasttrack.engine.startup import StartupWatch
from fasttrack.engine.tls import tls_context

#: Default seconds to wait for each stop signal: SIGINT (graceful), SIGTERM, SIGKILL.
DEFAULT_STOP_TIMEOUTS: tuple[float, float, float] = (30.0, 10.0, 10.0)


# --------------------------------------------------------------------------------------
# registry of live engines: stopped at exit and on SIGTERM/SIGHUP

_LIVE: dict[int, "ManagedEngine"] = {}
_REG_LOCK = threading.RLock()
_HOOKS_INSTALLED = False
_SIGNALS_INSTALLED = False
_PREV_HANDLERS: dict[int, Any] = {}


def live_engines() -> list["ManagedEngine"]:
    """Owned engines of this process that have been started and not yet stopped."""
    with _REG_LOCK:
        return list(_LIVE.values())


def stop_all_engines(*, fast: bool = False) -> None:
    """Stop every live owned engine (used at exit and on termination signals)."""
    timeouts = (5.0, 5.0, 5.0) if fast else None
    for eng in live_engines():
        with contextlib.suppress(Exception):
            eng.stop(timeouts=timeouts)


def _on_signal(signum: int, frame: Any) -> None:
    stop_all_engines(fast=True)
    prev = _PREV_HANDLERS.get(signum)
    if callable(prev):
        prev(signum, frame)
        return
    raise SystemExit(128 + signum)


def _install_hooks() -> None:
    """atexit once; SIGTERM/SIGHUP handlers once, from the main thread (signals need it)."""
    global _HOOKS_INSTALLED, _SIGNALS_INSTALLED
    with _REG_LOCK:
        if not _HOOKS_INSTALLED:
            _HOOKS_INSTALLED = True
            atexit.register(stop_all_engines)
        if _SIGNALS_INSTALLED or threading.current_thread() is not threading.main_thread():
            return
        _SIGNALS_INSTALLED = True
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is None:
                continue
            prev = signal.getsignal(sig)
            if prev is signal.SIG_IGN:  # e.g. SIGHUP under nohup: keep ignoring it
                continue
            _PREV_HANDLERS[sig] = prev
            signal.signal(sig, _on_signal)


# --------------------------------------------------------------------------------------
# owned engines


@dataclass(frozen=True)
class StartProgress:
    """Progress of an engine start, handed to the progress callback."""

    side: str
    elapsed_s: float
    last_log_line: str
    """The log's last line, for debugging only: progress shown to people names the phase."""
    log_path: Path
    phase: str = "importing"
    """What the engine is doing (:mod:`fasttrack.engine.startup`): importing, loading weights, compiling, ..."""
    phase_s: float = 0.0
    """Seconds in that phase so far."""

    def line(self) -> str:
        """'compiling (for 12 s)'."""
        return f"{self.phase} (for {self.phase_s:.0f} s)"


_E = TypeVar("_E", bound=EngineProcessError)


@dataclass(frozen=True)
class _Exited:
    """A process of an engine that exited, and its evidence."""

    side: str
    who: str
    code: int
    log_path: str | None
    node: int | None
    """Its node rank in a multi-node engine (None: a single-node engine)."""
    tail: str
    """The last lines of its log."""
    stopped_by_us: bool

    def error(self, kind: type[_E], message: str, *, hint: str | None = None) -> _E:
        """A ``kind`` error saying ``message``, with this exit's evidence."""
        return kind(
            message,
            **attrs(self, "side", "log_path", "node"),
            log_tail=self.tail,
            process_exit_code=self.code,
            hint=hint,
        )


class ManagedEngine(EngineBase):
    """A vLLM server the harness starts and owns."""

    owned = True

    def __init__(
        self,
        *,
        side: str,
        model: str | os.PathLike[str],
        args: Sequence[str] = (),
        env: dict[str, str | None] | None = None,
        log_dir: str | os.PathLike[str],
        log_name: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        python: str | None = None,
        startup_timeout: float = 600.0,
        progress: Callable[[StartProgress], None] | None = None,
        progress_interval: float = 10.0,
        stop_timeouts: Sequence[float] = DEFAULT_STOP_TIMEOUTS,
        exclusive: bool = True,
    ) -> None:
        self.side = side
        self.model_path = str(model)
        self.spec = ServeSpec(
            side=side,
            model=self.model_path,
            args=tuple(str(a) for a in args),
            env={str(k): None if v is None else str(v) for k, v in (env or {}).items()},
        )
        self.args = list(self.spec.args)
        self.env_overrides = {k: v for k, v in self.spec.env.items() if v is not None}
        self.env_unset = sorted(k for k, v in self.spec.env.items() if v is None)
        self.log_dir = Path(log_dir)
        self.log_name = log_name or f"{side}-engine"
        self.host = host
        self._requested_port = port
        self.port: int | None = None
        self.python = python or sys.executable
        self.startup_timeout = startup_timeout
        self.progress = progress
        self.progress_interval = progress_interval
        self.stop_timeouts = tuple(stop_timeouts)
        self.exclusive = exclusive
        self.profiler_dir = self.spec.profiler_dir
        self.log_path: Path | None = None
        self.argv: list[str] = []
        self.base_url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop_lock = threading.RLock()
        self._stop_report: StopReport | None = None
        self._stop_requested = False
        self._environment: EngineEnvironment | None = None
        self._full_env: dict[str, str] = {}
        self.started_at: float | None = None
        self.startup_s: float | None = None

    # -- introspection

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def pgid(self) -> int | None:
        """Process group of the server (its own pid: it leads a new session)."""
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._stop_report is None and self._proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return self._proc.poll() if self._proc else None

    @property
    def stop_report(self) -> StopReport | None:
        return self._stop_report

    def group_pids(self) -> list[int]:
        """Live processes of the engine's group (server, engine core, workers)."""
        return [p for p, _ in group_members(self.pgid)] if self.pgid else []

    # -- start

    def start(self) -> "ManagedEngine":
        """Launch the server and wait until /health answers 200; returns ``self``."""
        if self._proc is not None:
            raise EngineError(f"the {self.side} engine was already started (pid {self._proc.pid})")
        if self.exclusive:
            others = [e for e in live_engines() if e is not self]
            for dead in [e for e in others if not e.running]:
                dead._reap()  # crashed and never stopped: clean its group up, it does not count
            others = [e for e in others if e.running]
            if others:
                desc = ", ".join(f"{e.side} (pid {e.pid})" for e in others)
                raise EngineError(
                    f"cannot start the {self.side} engine while another engine is running: {desc}",
                    hint="Stop it first; fasttrack keeps one engine up at a time so timings are not disturbed.",
                )
        _install_hooks()
        attempts = 1 if self._requested_port else 3
        for attempt in range(attempts):
            try:
                self._launch()
                self._wait_healthy()
                break
            except EngineStartError as exc:
                retry = attempt + 1 < attempts and "address already in use" in exc.log_tail.lower()
                if not retry:
                    raise
                self._proc = None
                self._stop_report = None
                self._stop_requested = False
            except BaseException:
                self.stop(timeouts=(5.0, 5.0, 5.0))
                raise
        return self

    def _launch(self) -> None:
        self.port = self._requested_port or free_port(self.host)
        self.base_url = f"http://{self.host}:{self.port}"
        cmd = engine_command(
            self.spec,
            executor=LocalExecutor(),
            python=self.python,
            host_env=dict(os.environ),
            api_port=self.port,
            api_host=self.host,
        )
        self.argv, self._full_env = cmd.argv, cmd.env
        self.log_path = free_log_path(self.log_dir, self.log_name)
        if self.profiler_dir is not None:
            self.profiler_dir.mkdir(parents=True, exist_ok=True)
        header = (
            f"# fasttrack: {self.side} engine\n# argv: {subprocess.list2cmdline(self.argv)}\n"
            f"# env overrides: {self.env_overrides} unset: {self.env_unset} harness: {HARNESS_ENV} "
            f"host safety: {host_safety_env(os.environ)}\n"
        )
        with _REG_LOCK:
            self._proc = start_logged(self.argv, self.log_path, cmd.env, header)
            self._stop_report = None
            _LIVE[self._proc.pid] = self
        self.started_at = time.time()

    def _exit_status(self) -> tuple[str, int, str | None, int | None] | None:
        """``(who, exit code, log, node rank)`` when a process of the engine has exited, else None. One
        server process here (node None); a multi-node engine names the node that exited."""
        assert self._proc is not None
        code = self._proc.poll()
        if code is None:
            return None
        return f"the {self.side} engine", code, str(self.log_path) if self.log_path else None, None

    def _exited(self) -> _Exited | None:
        """A process of the engine that exited, with the last lines of its log (the engine's processes are then
        reaped), else None."""
        exited = self._exit_status()
        if exited is None:
            return None
        who, code, log_path, node = exited
        tail = read_log_tail(Path(log_path) if log_path else None, 60)
        stopped_by_us = self._stop_requested
        self._reap()
        return _Exited(self.side, who, code, log_path, node, tail, stopped_by_us)

    def _wait_healthy(self) -> None:
        assert self._proc is not None and self.log_path is not None
        t0 = time.monotonic()
        next_progress = t0 + self.progress_interval
        watch = StartupWatch(Path(self.log_path), started=t0)
        with httpx.Client(timeout=httpx.Timeout(5.0, connect=2.0), verify=tls_context()) as http:
            while True:
                exited = self._exited()
                if exited is not None:
                    raise exited.error(
                        EngineStartError,
                        f"{exited.who} exited with code {exited.code} before it became healthy "
                        f"(log: {exited.log_path})",
                        hint="Read the log lines above: a wrong model path, an unsupported argument "
                        "or an out-of-memory error are the usual causes.",
                    )
                try:
                    if http.get(self.base_url + "/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                now = time.monotonic()
                if now - t0 > self.startup_timeout:
                    tail = self.log_tail(60)
                    self.stop(timeouts=(10.0, 5.0, 5.0))
                    raise EngineStartError(
                        f"the {self.side} engine did not answer /health within {self.startup_timeout:.0f} s "
                        f"(log: {self.log_path}); it was stopped",
                        side=self.side,
                        log_path=str(self.log_path),
                        log_tail=tail,
                        hint="Raise the startup timeout if the model is large, or read the log for a hang.",
                    )
                if self.progress is not None and now >= next_progress:
                    next_progress = now + self.progress_interval
                    last = read_log_tail(self.log_path, 1)
                    phase = watch.poll(now)
                    with contextlib.suppress(Exception):
                        self.progress(
                            StartProgress(
                                self.side, now - t0, last, self.log_path, phase=phase, phase_s=now - watch.since
                            )
                        )
                time.sleep(0.25)
        self.startup_s = time.monotonic() - t0
        self._served_model = self._fetch_served_model()

    def _reap(self) -> None:
        """Collect an exited server and make sure nothing of its group is left."""
        if self._proc is None:
            return
        self._proc.poll()
        if group_members(self._proc.pid):
            self._terminate((5.0, 5.0, 5.0))
        else:
            with _REG_LOCK:
                _LIVE.pop(self._proc.pid, None)

    # -- liveness

    def check_alive(self, *, grace: float = 0.0, probe_health: bool = True) -> None:
        if self._proc is None:
            raise EngineError(f"the {self.side} engine was never started")
        deadline = time.monotonic() + grace
        while True:
            exited = self._exited()
            if exited is not None:
                reason = (
                    "was stopped"
                    if exited.stopped_by_us
                    else f"exited with code {exited.code} while checks were running"
                )
                raise exited.error(EngineCrashed, f"{exited.who} {reason} (log: {exited.log_path})")
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if probe_health:
            status = self.health()
            if status != 200:
                # give a dying server a moment to exit, then report what we saw
                time.sleep(1.0)
                then = self._proc.poll()
                raise EngineCrashed(
                    f"the {self.side} engine's /health answered "
                    f"{'nothing' if status is None else status} while checks were running"
                    + (f"; the server then exited with code {then}" if then is not None else "")
                    + f" (log: {self.log_path})",
                    side=self.side,
                    process_exit_code=then,
                    log_path=str(self.log_path),
                    log_tail=self.log_tail(60),
                )

    # -- stop

    def stop(self, *, timeouts: Sequence[float] | None = None) -> StopReport | None:
        """SIGINT, then SIGTERM, then SIGKILL to the whole group; waits for it to be gone."""
        self._stop_requested = True
        return self._terminate(timeouts)

    def _terminate(self, timeouts: Sequence[float] | None) -> StopReport | None:
        with self._stop_lock:
            if self._proc is None:
                return None
            if self._stop_report is not None:
                return self._stop_report
            t_int, t_term, t_kill = tuple(timeouts or self.stop_timeouts)
            report = stop_group(self._proc, (t_int, t_term, t_kill))
            pgid = self._proc.pid
            self._stop_report = report
            with _REG_LOCK:
                _LIVE.pop(pgid, None)
            if report.leftover_pids:
                with contextlib.suppress(OSError), open(self.log_path or os.devnull, "a") as log:
                    log.write(f"# fasttrack: processes left after SIGKILL: {report.leftover_pids}\n")
            return report

    # -- environment

    def environment(self) -> EngineEnvironment:
        if self._environment is None:
            if self._proc is None:
                raise EngineError(f"the {self.side} engine was never started; its environment is unknown")
            self._environment = local_environment(
                **attrs(self, "side", "base_url", "argv", "env_overrides", "python"),
                served_model=self._served_model,
                full_env=self._full_env,
                served_vllm_version=self.served_version() if self.running else None,
            )
        return self._environment

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update(
            {
                "argv": list(self.argv),
                "env_overrides": dict(self.env_overrides),
                "env_unset": list(self.env_unset),
                "pid": self.pid,
                "startup_s": self.startup_s,
                "stop": self._stop_report.model_dump() if self._stop_report else None,
            }
        )
        return d

    def __repr__(self) -> str:
        state = "running" if self.running else ("stopped" if self._stop_report else "not started")
        return f"<ManagedEngine {self.side} {self.base_url or '-'} pid={self.pid} {state}>"
