"""What a check may use of a live engine: the engine-handle protocol.

Checks, probes and the load generator are written against :class:`EngineHandle`, not
against the classes that start or attach engines (:class:`~fasttrack.engine.server.ManagedEngine`,
:class:`~fasttrack.engine.attached.AttachedEngine`), so the engine modules need not import
each other and a test can hand a check any object with these members.

Starting and stopping an engine is the pipeline's business and is not part of the handle.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine.client import EngineClient
    from fasttrack.engine.environment import EngineEnvironment


class EngineHandle(Protocol):
    """One live engine (owned or attached), as checks see it."""

    # -- identity

    @property
    def side(self) -> str:
        """``baseline`` (stock path) or ``candidate`` (optimized path)."""
        ...

    @property
    def base_url(self) -> str:
        """``http://host:port`` without ``/v1``."""
        ...

    @property
    def api_url(self) -> str:
        """The OpenAI API root (``base_url + '/v1'``)."""
        ...

    @property
    def model(self) -> str:
        """The served model name (what requests name in ``model``)."""
        ...

    @property
    def owned(self) -> bool:
        """Whether fasttrack started this engine (False: attached by URL)."""
        ...

    @property
    def args(self) -> list[str]:
        """The server arguments the engine was started with (empty when attached)."""
        ...

    # -- liveness and provenance

    def health(self, *, timeout: float = 5.0) -> int | None:
        """HTTP status of GET /health (None when nothing answers)."""
        ...

    def check_alive(self, *, grace: float = 0.0, probe_health: bool = True) -> None:
        """Raise :class:`~fasttrack.engine.errors.EngineCrashed` (with the log tail) when the engine is dead."""
        ...

    def served_version(self) -> str | None:
        """What GET /version reports (None when the endpoint does not answer)."""
        ...

    def environment(self) -> EngineEnvironment:
        """Versions, devices and settings of the engine's host, as recorded in bundles."""
        ...

    def describe(self) -> dict[str, Any]:
        """What results record about this engine."""
        ...

    # -- requests

    def client(self, **kwargs: Any) -> EngineClient:
        """An async client bound to this engine (transport errors check liveness)."""
        ...

    # -- profiler and log

    @property
    def profiler_dir(self) -> Path | None:
        """Where the torch profiler writes traces (None: started without a profiler)."""
        ...

    @property
    def log_path(self) -> Path | None:
        """The engine's log file (None when it is not available on this host)."""
        ...

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of the engine log ('' when the log is not available)."""
        ...

    def log_offset(self) -> int:
        """Current size of the engine log in bytes (0 without a log): a bookmark for windows."""
        ...

    def read_log(self, start: int = 0, end: int | None = None) -> str:
        """The log text between two byte offsets (see :meth:`log_offset`)."""
        ...
