"""An owned engine that spans several nodes (vLLM's multiprocessing backend across hosts).

Node 0 serves the API; the other nodes run headless workers (see
:mod:`fasttrack.engine.launchers` for how their processes start). The engine is healthy
when the leader's ``/health`` answers. Every node is watched: when any node process
exits while the engine is in use, a watchdog tears every node down at once (so no node
waits forever for a peer that is gone), and the next liveness check raises
:class:`~fasttrack.engine.errors.EngineCrashed` naming that node and carrying its log.
Stopping (success, error, Ctrl-C, harness exit) stops every node's process group.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from fasttrack import attrs
from fasttrack.engine.errors import EngineCrashed
from fasttrack.engine.launchers import Launcher, LaunchRequest, LocalLauncher, NodeProcess
from fasttrack.engine.procs import StopReport, free_port, group_members, stop_group
from fasttrack.engine.server import _LIVE, _REG_LOCK, ManagedEngine

WATCH_INTERVAL_S = 1.0


class MultiNodeEngine(ManagedEngine):
    """A vLLM server whose tensor-parallel ranks span ``nodes`` hosts (see the module docstring)."""

    def __init__(
        self,
        *,
        nodes: int,
        launcher: Launcher | None = None,
        gpus_per_node: int | None = None,
        master_port: int | None = None,
        **kwargs: Any,
    ) -> None:
        if nodes < 2:
            raise ValueError("a multi-node engine has at least 2 nodes")
        super().__init__(**kwargs)
        self.nodes = nodes
        self.launcher = launcher or LocalLauncher()
        self.gpus_per_node = gpus_per_node
        self._master_port = master_port
        self.master_port: int | None = None
        self.node_procs: list[NodeProcess] = []
        self._failure: tuple[str, int, str | None, int] | None = None
        """The first node that exited on its own: (who, exit code, log, rank)."""
        self._watch_stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._node_reports: list[dict[str, Any]] = []

    # -- introspection

    @property
    def node_logs(self) -> dict[int, Path]:
        """The log of every node rank."""
        out: dict[int, Path] = {}
        for np in self.node_procs:
            out.update(np.node_logs)
        return dict(sorted(out.items()))

    @property
    def failed_node(self) -> int | None:
        """The rank of the node that exited first on its own (None: none did)."""
        return self._failure[3] if self._failure else None

    def group_pids(self) -> list[int]:
        return [p for np in self.node_procs for p, _ in group_members(np.proc.pid)]

    # -- start

    def _launch(self) -> None:
        self.port = self._requested_port or free_port("127.0.0.1")
        self.master_port = self._master_port or free_port("127.0.0.1")
        hosts = self.launcher.hosts(self.nodes)
        self.host = self.launcher.address(hosts[0])
        self.base_url = f"http://{self.host}:{self.port}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.profiler_dir is not None:
            self.profiler_dir.mkdir(parents=True, exist_ok=True)
        req = LaunchRequest(
            **attrs(self, "python", "spec", "master_port", "log_dir", "log_name", "gpus_per_node"),
            nnodes=self.nodes,
            api_port=self.port,
            host_env=dict(os.environ),
        )
        self._failure = None
        self._watch_stop.clear()
        with _REG_LOCK:
            self.node_procs = self.launcher.launch(req)
            lead = self.node_procs[0]
            self._proc = lead.proc
            self.argv = lead.argv
            self._full_env = lead.env
            self.log_path = lead.node_logs.get(0, lead.log_path)
            self._stop_report = None
            _LIVE[lead.proc.pid] = self
        self.started_at = time.time()
        self._watcher = threading.Thread(target=self._watch, name=f"fasttrack-{self.side}-nodes", daemon=True)
        self._watcher.start()

    # -- watching

    def _exited_node(self) -> tuple[str, int, str | None, int] | None:
        for np in self.node_procs:
            code = np.proc.poll()
            if code is not None:
                rank = self._failed_rank(np)
                log = np.node_logs.get(rank, np.log_path)
                who = f"node {rank} of {self.nodes} ({np.host}) of the {self.side} engine"
                return who, code, str(log), rank
        return None

    def _failed_rank(self, np: NodeProcess) -> int:
        """Which rank of a process that runs several (srun) failed, from srun's own messages."""
        if len(np.ranks) == 1:
            return np.ranks[0]
        import re

        text = ""
        with contextlib.suppress(OSError):
            text = np.log_path.read_text(errors="replace")
        m = re.search(r"task (\d+): (?:Exited|Killed|Terminated)", text)
        return int(m.group(1)) if m else np.ranks[0]

    def _watch(self) -> None:
        while not self._watch_stop.wait(WATCH_INTERVAL_S):
            if self._stop_requested or self._stop_report is not None:
                return
            found = self._exited_node()
            if found is not None:
                self._failure = found
                with contextlib.suppress(Exception):
                    self._terminate((5.0, 5.0, 5.0))  # every other node goes too
                return

    def _exit_status(self) -> tuple[str, int, str | None, int | None] | None:
        if self._failure is not None:
            return self._failure
        found = self._exited_node()
        if found is not None:
            self._failure = found
            return found
        return None

    def check_alive(self, *, grace: float = 0.0, probe_health: bool = True) -> None:
        if self._failure is not None:
            # a node died and the watchdog tore the engine down: report that node, not the teardown
            self._stop_requested = False
        try:
            super().check_alive(grace=grace, probe_health=probe_health)
        except EngineCrashed:
            if self._failure is None and self._exited_node() is None:
                raise
            # the leader stopped answering because a node is gone: name the node
            super().check_alive(grace=0.0, probe_health=False)
            raise

    # -- stop

    def _reap(self) -> None:
        if not self.node_procs:
            return
        for np in self.node_procs:
            np.proc.poll()
        if any(group_members(np.proc.pid) for np in self.node_procs):
            self._terminate((5.0, 5.0, 5.0))
        else:
            with _REG_LOCK:
                _LIVE.pop(self.node_procs[0].proc.pid, None)

    def _terminate(self, timeouts: Sequence[float] | None) -> StopReport | None:
        with self._stop_lock:
            if not self.node_procs:
                return None
            if self._stop_report is not None:
                return self._stop_report
            self._watch_stop.set()
            t = tuple(timeouts or self.stop_timeouts)
            t3: tuple[float, float, float] = (t[0], t[1], t[2])
            with ThreadPoolExecutor(max_workers=len(self.node_procs)) as pool:
                reports = list(pool.map(lambda np: stop_group(np.proc, t3), self.node_procs))
            lead = reports[0]
            report = StopReport(
                signals_sent=lead.signals_sent,
                exit_code=lead.exit_code,
                duration_s=max(r.duration_s for r in reports),
                leftover_pids=sorted({p for r in reports for p in r.leftover_pids}),
                already_exited=lead.already_exited,
            )
            self._node_reports = [
                {
                    "ranks": np.ranks,
                    "host": np.host,
                    "exit_code": r.exit_code,
                    "signals_sent": r.signals_sent,
                    "leftover_pids": r.leftover_pids,
                    "already_exited": r.already_exited,
                }
                for np, r in zip(self.node_procs, reports, strict=True)
            ]
            self._stop_report = report
            with _REG_LOCK:
                _LIVE.pop(self.node_procs[0].proc.pid, None)
            if report.leftover_pids:
                with contextlib.suppress(OSError), open(self.log_path or os.devnull, "a") as log:
                    log.write(f"# fasttrack: processes left after SIGKILL: {report.leftover_pids}\n")
            return report

    # -- records

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["nodes"] = [
            {
                "ranks": np.ranks,
                "host": np.host,
                "argv": np.argv,
                "logs": {str(r): str(p) for r, p in np.node_logs.items()},
                "pid": np.proc.pid,
            }
            for np in self.node_procs
        ]
        d["launcher"] = self.launcher.name
        d["failed_node"] = self.failed_node
        d["node_stops"] = list(self._node_reports)
        return d

    def __repr__(self) -> str:
        state = "running" if self.running else ("stopped" if self._stop_report else "not started")
        return f"<MultiNodeEngine {self.side} {self.nodes} nodes ({self.launcher.name}) {self.base_url or '-'} {state}>"
