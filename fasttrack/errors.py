"""User-facing errors: each carries one paragraph that says what is wrong and how to fix it.

The CLI prints the message (no traceback) and exits with ``exit_code``.
"""

from __future__ import annotations


class FasttrackError(Exception):
    """An error caused by the user's input or environment (exit code 2)."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if not hint else f"{message}\n{hint}")


class ScopeError(FasttrackError):
    """A scope file is malformed or inconsistent."""


class PlanError(FasttrackError):
    """A plan request (tier, shard) cannot be honoured."""


class IsolationError(FasttrackError):
    """The repository or refs for the isolation check are unusable."""


class HardwareMismatch(FasttrackError):
    """The host does not match the scope's hardware requirement."""

    exit_code = 3
