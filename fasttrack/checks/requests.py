"""Async helpers the engine checks share: concurrent requests that stop on a dead engine, blocking work."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def reraise_fatal(results: Iterable[Any]) -> None:
    """Re-raise an engine crash or a cancellation (Ctrl-C) found among ``gather(..., return_exceptions=True)``
    results; other exceptions are the caller's to record as failed requests."""
    from fasttrack.engine import EngineCrashed

    for r in results:
        if isinstance(r, EngineCrashed) or (isinstance(r, BaseException) and not isinstance(r, Exception)):
            raise r


async def gather_requests(coros: Iterable[Awaitable[Any]]) -> list[Any]:
    """Send requests concurrently; failed requests come back as exceptions, a crash or Ctrl-C is raised."""
    res = list(await asyncio.gather(*coros, return_exceptions=True))
    reraise_fatal(res)
    return res


async def in_thread(fn: Callable[[], T], *, name: str) -> T:
    """Run blocking ``fn`` (e.g. lm-eval, which runs its own event loop) in a daemon thread and await it.

    Unlike ``asyncio.to_thread``, a run cancelled by Ctrl-C does not wait for the thread when the
    event loop shuts down: the pipeline stops the engine the thread talks to, which ends it."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def work() -> None:
        try:
            out: Any = (True, fn())
        except BaseException as exc:  # noqa: B036 - handed to the awaiting task, whatever it is
            out = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *out)
        except RuntimeError:  # the loop is closed: nobody waits for the result any more
            pass

    threading.Thread(target=work, name=name, daemon=True).start()
    return await fut
