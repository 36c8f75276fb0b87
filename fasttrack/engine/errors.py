"""Typed errors of the engine layer; each one says what failed and carries the evidence."""

from __future__ import annotations

from fasttrack.errors import FasttrackError


class EngineError(FasttrackError):
    """Something went wrong with a vLLM engine (start, crash, request, probe)."""


def _with_tail(message: str, log_tail: str) -> str:
    tail = log_tail.rstrip()
    if not tail:
        return message
    return f"{message}\nLast engine log lines:\n{tail}"


class EngineProcessError(EngineError):
    """An engine's process failed; the error carries its evidence."""

    def __init__(
        self,
        message: str,
        *,
        side: str,
        log_path: str | None = None,
        log_tail: str = "",
        process_exit_code: int | None = None,
        hint: str | None = None,
        node: int | None = None,
    ) -> None:
        self.side = side
        self.node = node
        """The node rank of a multi-node engine that failed (None: a single-node engine)."""
        self.log_path = log_path
        self.log_tail = log_tail
        self.process_exit_code = process_exit_code
        """The server process's exit code (None: it had not exited, or unknown). Not ``exit_code``: that is the
        CLI's exit status of every :class:`~fasttrack.errors.FasttrackError`."""
        super().__init__(_with_tail(message, log_tail), hint=hint)


class EngineStartError(EngineProcessError):
    """The engine did not become healthy (it exited, or the health wait timed out)."""


class EngineCrashed(EngineProcessError):
    """A running engine died (or stopped answering) while checks were using it."""


class EngineUnreachable(EngineError):
    """An engine given by URL (attach mode) does not answer."""


class EngineRequestError(EngineError):
    """The engine answered a request with an error; carries the server's own message."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None,
        body: str = "",
        url: str = "",
    ) -> None:
        self.status_code = status_code
        self.body = body
        self.url = url
        self.server_message = message
        where = f" from {url}" if url else ""
        code = f"HTTP {status_code}" if status_code is not None else "no HTTP status"
        super().__init__(f"engine request failed{where} ({code}): {message}")


class ProfilerError(EngineError):
    """A profiler window could not be opened, closed or read."""
