"""Batches that really are batches: scheduler holds, and verifying a round's composition.

Checks that need requests decoded together hold the engine's scheduler while a round's
requests arrive (vLLM's ``/pause?mode=keep&clear_cache=false`` and ``/resume``, served in development
mode) and release them into one step; an engine without those endpoints gets a
prefill-only pacer request first. Either way the composition is verified from the
evidence (:func:`verify_batch`: decode steps per batch size in a profiler trace, or
``vllm:num_requests_running`` samples; :func:`verify_completions`: the requests'
completion times), and a round that was not one batch is repeated and recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fasttrack.modelbase import DocModel


class BatchCheck(DocModel):
    """Whether a window's requests were really batched as intended."""

    target: int
    """The batch size the requests were sent at."""
    verified: bool
    """The evidence shows decode steps at the target batch size (and none larger)."""
    source: str
    """`profiler` (decode steps per batch size in the trace), `metrics` (vllm:num_requests_running samples),
    `timing` (completion times) or `none`."""
    steps_at_target: int = 0
    """Decode steps whose batch size equals the target (profiler)."""
    decode_steps: int = 0
    """Decode steps seen (profiler)."""
    above_target: int = 0
    """Decode steps with more requests than the target (other traffic in the window)."""
    max_running: float | None = None
    """Largest vllm:num_requests_running sampled (metrics)."""
    detail: str
    """The evidence in words."""


def verify_batch(
    target: int,
    *,
    decode_batch_sizes: dict[int, int] | None = None,
    running_samples: list[float] | None = None,
    min_fraction: float = 0.5,
) -> BatchCheck:
    """Decide from the evidence whether requests sent ``target`` at a time ran as a decode batch of ``target``.

    Profiler evidence (preferred): at least one decode step at exactly ``target``
    requests, at least ``min_fraction`` of the decode steps at ``target`` and none
    above it. Metrics evidence (fallback): the largest sampled
    ``vllm:num_requests_running`` equals ``target``.
    """
    if decode_batch_sizes:
        sizes = {int(k): int(v) for k, v in decode_batch_sizes.items()}
        total = sum(sizes.values())
        at = sizes.get(target, 0)
        above = sum(v for k, v in sizes.items() if k > target)
        ok = at >= 1 and at / total >= min_fraction and above == 0
        hist = ", ".join(f"{v}x batch {k}" for k, v in sorted(sizes.items()))
        return BatchCheck(
            target=target,
            verified=ok,
            source="profiler",
            steps_at_target=at,
            decode_steps=total,
            above_target=above,
            detail=f"{at} of {total} decode steps ran at batch {target} ({hist})",
        )
    if running_samples:
        mx = max(running_samples)
        ok = int(round(mx)) == target
        return BatchCheck(
            target=target,
            verified=ok,
            source="metrics",
            max_running=mx,
            detail=f"vllm:num_requests_running peaked at {mx:g} over {len(running_samples)} samples",
        )
    return BatchCheck(
        target=target, verified=False, source="none", detail="no decode steps and no metrics samples were observed"
    )


PACER_LEAD_S = 0.01
"""Seconds between sending the pacer request and the round (time for it to reach the engine)."""


async def warm_connections(client: Any, n: int) -> None:
    """Open ``n`` keep-alive connections to the engine before a round of ``n`` concurrent requests.

    A request that has to open a new connection while the server streams to others
    can reach the engine only after they finished, and then it is not batched with them."""
    http = getattr(client, "_http", None)
    if http is None or n <= 1:
        return
    await asyncio.gather(*(http.get("/health") for _ in range(n)), return_exceptions=True)


def verify_completions(
    target: int, results: list[Any], *, max_spread: float = 0.25, since: float | None = None
) -> BatchCheck:
    """Decide from request timings whether ``target`` concurrent requests ran as one decode batch.

    The requests of a round have the same ``max_tokens`` (and ``ignore_eos``). vLLM's
    engine runs one step at a time and puts every running request in each step, so
    requests that decoded together finish in the same step; a request that reached
    the engine late (and decoded partly or wholly alone) finishes correspondingly
    later. The check passes when the spread of completion times is at most
    ``max_spread`` of the median request duration. (Completion times are robust where
    streamed chunk times are not: a busy server coalesces stream chunks.) ``since``: when
    the round was released from a scheduler hold (``time.perf_counter``); durations count
    from then, so the hold does not dilute the spread.
    """
    done = [r for r in results if not isinstance(r, BaseException) and getattr(r, "t_end", None) is not None]
    if len(done) < target:
        return BatchCheck(
            target=target, verified=False, source="timing", detail=f"only {len(done)} of {target} requests completed"
        )
    if target == 1:
        return BatchCheck(target=1, verified=True, source="timing", detail="a single request")
    ends = [r.t_end for r in done]
    durations = sorted(r.t_end - max(r.t_start, since if since is not None else r.t_start) for r in done)
    med = durations[len(durations) // 2] or 1e-9
    spread = (max(ends) - min(ends)) / med
    return BatchCheck(
        target=target,
        verified=spread <= max_spread,
        source="timing",
        detail=(
            f"the {target} requests finished within {(max(ends) - min(ends)) * 1000:.0f} ms of each other "
            f"({spread:.0%} of the median request time {med * 1000:.0f} ms; limit {max_spread:.0%})"
        ),
    )


HOLD_S = 0.3
"""Seconds the scheduler is held for a round (plus ``HOLD_PER_REQUEST_S`` per request; doubled on each retry)."""
HOLD_PER_REQUEST_S = 0.05


async def hold_scheduler(client: Any) -> bool:
    """Freeze the engine's scheduler (see ``EngineClient.pause_scheduler``); ``False`` where it cannot be held."""
    pause = getattr(client, "pause_scheduler", None)
    if pause is None:
        return False
    return bool(await pause())


async def release_after(client: Any, seconds: float, tasks: Sequence[asyncio.Future[Any]]) -> float:
    """Let held requests (``tasks``) arrive for ``seconds``, then release the scheduler
    (also when interrupted); returns the release time (``time.perf_counter``). If the
    release fails, the tasks are cancelled (they would wait on a frozen scheduler)."""
    try:
        await asyncio.sleep(seconds)
    finally:
        released_at = time.perf_counter()
        try:
            await client.resume_scheduler()
        except BaseException:
            for t in tasks:
                t.cancel()
            raise
    return released_at


async def run_batched(
    make: Callable[[], list[Coroutine[Any, Any, Any]]],
    *,
    client: Any,
    target: int,
    attempts: int = 3,
    pacer: Callable[[], Coroutine[Any, Any, Any]] | None = None,
) -> tuple[list[Any], BatchCheck]:
    """Send one round of ``target`` concurrent requests until its timing shows one batch (at most ``attempts``).

    ``make`` builds the round's request coroutines afresh for each attempt. Outputs are the
    same on every attempt (greedy), so repeating selects the batch composition, not the
    outputs; the attempt count is recorded in the check's detail.

    Where the engine serves vLLM's ``/pause`` (engines fasttrack starts run in vLLM's
    development mode), the scheduler is held while the round's requests arrive and then
    released, so the engine starts them all in one step however slowly a busy API server
    admits them. Otherwise ``pacer`` (optional) builds a prefill-only request with a long,
    uncached prompt that is sent just before the round: the round's requests then reach an
    engine that is busy with that prefill, so the scheduler starts them in the same step.
    Without either, the first request to arrive at an idle engine is often prefilled alone
    and stays one step ahead, so the round's last step runs with one request fewer. The
    composition is verified from the requests' timing either way."""
    from fasttrack.engine import EngineCrashed

    for attempt in range(1, attempts + 1):
        await warm_connections(client, target + (1 if pacer else 0))
        held = target > 1 and await hold_scheduler(client)
        released_at: float | None = None
        if held:
            tasks = [asyncio.ensure_future(c) for c in make()]
            released_at = await release_after(
                client, (HOLD_S + HOLD_PER_REQUEST_S * target) * 2 ** (attempt - 1), tasks
            )
            results = list(await asyncio.gather(*tasks, return_exceptions=True))
        else:
            pace = asyncio.ensure_future(pacer()) if pacer is not None and target > 1 else None
            if pace is not None:
                await asyncio.sleep(PACER_LEAD_S)
            results = list(await asyncio.gather(*make(), return_exceptions=True))
            if pace is not None:
                try:
                    await pace
                except Exception:  # noqa: BLE001 - the pacer's own outcome does not matter
                    pass
        for r in results:
            if isinstance(r, EngineCrashed) or (isinstance(r, BaseException) and not isinstance(r, Exception)):
                raise r
        bc = verify_completions(target, results, since=released_at)
        if held:
            bc.detail += " (scheduler held while the round arrived)"
        if bc.verified or attempt == attempts:
            break
    if attempt > 1:
        bc.detail += f" (attempt {attempt} of {attempts})"
    return results, bc
