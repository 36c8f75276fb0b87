"""What owned and attached engines share: identity, served model, health, log access, a client.

:class:`EngineBase` implements the :class:`~fasttrack.engine.handle.EngineHandle` protocol
over HTTP and the engine's log file; :class:`~fasttrack.engine.server.ManagedEngine` and
:class:`~fasttrack.engine.attached.AttachedEngine` add starting, liveness and stopping.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Sequence

import httpx

from fasttrack.engine.client import EngineClient
from fasttrack.engine.environment import EngineEnvironment
from fasttrack.engine.errors import EngineUnreachable
from fasttrack.engine.logs import read_log_range, read_log_tail
from fasttrack.engine.procs import StopReport


def normalize_base_url(url: str) -> str:
    """``http://h:p/v1/`` -> ``http://h:p`` (the API paths are added by callers)."""
    u = url.strip().rstrip("/")
    if u.endswith("/v1"):
        u = u[: -len("/v1")]
    if "://" not in u:
        u = "http://" + u
    return u


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
        return read_log_range(self.log_path, start, end)

    def client(self, **kwargs: Any) -> EngineClient:
        """An async client bound to this engine (crash-aware: transport errors check liveness)."""
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
