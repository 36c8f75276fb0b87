"""Attach mode: an engine someone else runs, reached by URL (``--baseline-url``).

The harness never stops an attached engine and says so (``owned: false``); its log is known
only when the caller names it. Its torch profiler folder (where its traces appear, the path
evidence of the checks) is the one the caller names, or else the one the engine reports on
vLLM's development endpoint ``/server_info`` (served with ``VLLM_SERVER_DEV_MODE=1``, as on
every engine fasttrack starts) when that folder exists on this host.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

import httpx

from fasttrack.engine.base import EngineBase, normalize_base_url
from fasttrack.engine.cmdline import node_reports_dir
from fasttrack.engine.environment import EngineEnvironment, endpoint_environment
from fasttrack.engine.errors import EngineCrashed, EngineUnreachable
from fasttrack.engine.nodes import read_reports, with_node_reports


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
        if self.profiler_dir is None:
            self.profiler_dir = self.reported_profiler_dir()
        return self

    def reported_profiler_dir(self) -> Path | None:
        """The torch profiler folder the engine reports on ``/server_info`` (its ``--profiler-config``), when it
        is a folder on this host; None when the endpoint is not served or names none."""
        try:
            r = httpx.get(self.base_url + "/server_info", params={"config_format": "json"}, timeout=60.0)
            if r.status_code != 200:
                return None
            profiler = (r.json().get("vllm_config") or {}).get("profiler_config") or {}
            folder = profiler.get("torch_profiler_dir") if isinstance(profiler, dict) else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return Path(folder) if isinstance(folder, str) and folder and Path(folder).is_dir() else None

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
        """What the endpoint reports; with the node reports next to its profiler folder (engines started through
        the node script: LeaderWorkerSet pods, ``srun`` tasks), the vLLM build every node served and its devices."""
        if self._environment is None:
            env = endpoint_environment(
                side=self.side,
                base_url=self.base_url,
                served_model=self._served_model,
                served_vllm_version=self.served_version(),
            )
            if self.profiler_dir is not None:
                reports, _ = read_reports(node_reports_dir(self.profiler_dir))
                if reports:
                    env = with_node_reports(env, reports)
            self._environment = env
        return self._environment

    def __repr__(self) -> str:
        return f"<AttachedEngine {self.side} {self.base_url}>"


def attach_engine(*, side: str, url: str, **kwargs: Any) -> AttachedEngine:
    """Attach to an engine that is already running at ``url``."""
    return AttachedEngine(side=side, url=url, **kwargs)
