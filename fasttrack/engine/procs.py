"""Processes of an owned engine: a free port, the members of its process group, stopping
the group (SIGINT, SIGTERM, SIGKILL), and a parent-death signal so a server does not
outlive a harness that died without cleaning up.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from pydantic import Field

from fasttrack.modelbase import StrictModel


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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


def run_script(
    exe: str, script: str, *, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float
) -> subprocess.CompletedProcess[str] | str:
    """Run the Python ``script`` under the interpreter ``exe`` in a session of its own (``env``: its whole
    environment, default this one's; ``stdin``: its input, else none). Its completed process, or why there is
    none, said to follow a subject: ``could not run under EXE: ...`` or ``timed out after N s under EXE`` (its
    process group is then killed)."""
    try:
        proc = subprocess.Popen(
            [exe, "-c", script],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env if env is not None else dict(os.environ),
            start_new_session=True,
        )
    except OSError as exc:
        return f"could not run under {exe}: {exc}"
    try:
        stdout, stderr = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"timed out after {timeout:.0f} s under {exe}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def parent_death_preexec() -> Callable[[], None] | None:
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


def start_logged(argv: list[str], log_path: Path, env: dict[str, str], header: str) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a process group of its own (SIGTERM when the harness dies), its output appended to
    ``log_path`` after ``header``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(header.encode())
        log.flush()
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=parent_death_preexec(),
            close_fds=True,
        )


class StopReport(StrictModel):
    """How an owned engine (its process group) was stopped."""

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


def _settle(pgid: int, timeout: float) -> None:
    """Give init a moment to reap exited children of the group (zombies keep it visible)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)


def _group_gone(proc: subprocess.Popen[bytes]) -> bool:
    # The leader must be reaped, not merely shown as a zombie: a multi-threaded
    # leader reads "Z" in /proc while its other threads are still exiting, and
    # waitpid() reports it only once they have; until then its exit code is unknown.
    leader_reaped = proc.poll() is not None
    return leader_reaped and not group_members(proc.pid)


def _wait_group_gone(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if _group_gone(proc):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def stop_group(proc: subprocess.Popen[bytes], timeouts: tuple[float, float, float]) -> StopReport:
    """SIGINT, then SIGTERM, then SIGKILL to the process group ``proc`` leads (each followed
    by a wait of up to its timeout) until the leader is reaped and no member is left."""
    t_int, t_term, t_kill = timeouts
    pgid = proc.pid
    report = StopReport(already_exited=proc.poll() is not None)
    t0 = time.monotonic()
    for sig, wait_s in ((signal.SIGINT, t_int), (signal.SIGTERM, t_term), (signal.SIGKILL, t_kill)):
        if _group_gone(proc):
            break
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        except PermissionError:  # pragma: no cover - group reused by someone else
            break
        report.signals_sent.append(signal.Signals(sig).name)
        if _wait_group_gone(proc, wait_s):
            break
    proc.poll()
    report.exit_code = proc.returncode
    report.leftover_pids = [p for p, _ in group_members(pgid)]
    if not report.leftover_pids:
        _settle(pgid, 3.0)
    report.duration_s = round(time.monotonic() - t0, 3)
    return report
