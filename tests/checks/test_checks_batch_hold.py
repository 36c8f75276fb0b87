"""``run_batched``: holding the scheduler while a round arrives, and the timing-based composition check."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest

from fasttrack.checks import batching
from fasttrack.checks.batching import run_batched, verify_completions


@dataclass
class Done:
    t_start: float
    t_end: float


class HoldingClient:
    """Records the order of pause, request arrivals, resume; requests finish only after the release."""

    def __init__(self, *, can_pause: bool = True, resume_fails: bool = False) -> None:
        self.can_pause = can_pause
        self.resume_fails = resume_fails
        self.events: list[str] = []
        self.released = asyncio.Event()
        self.cancelled = 0

    async def pause_scheduler(self) -> bool:
        self.events.append("pause")
        return self.can_pause

    async def resume_scheduler(self) -> None:
        self.events.append("resume")
        if self.resume_fails:
            raise RuntimeError("engine gone")
        self.released.set()

    async def request(self, i: int) -> Done:
        t0 = time.perf_counter()
        self.events.append(f"req{i}")
        try:
            if self.can_pause:
                await self.released.wait()
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return Done(t0, time.perf_counter())


@pytest.fixture(autouse=True)
def _short_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "HOLD_S", 0.05)
    monkeypatch.setattr(batching, "HOLD_PER_REQUEST_S", 0.0)


def test_round_is_held_until_every_request_was_sent_then_released() -> None:
    c = HoldingClient()

    async def go():
        return await run_batched(lambda: [c.request(i) for i in range(4)], client=c, target=4, attempts=1)

    results, bc = asyncio.run(go())
    assert c.events[0] == "pause" and c.events[-1] == "resume"
    assert sorted(c.events[1:-1]) == ["req0", "req1", "req2", "req3"]
    assert bc.verified and "scheduler held" in bc.detail
    assert len(results) == 4


def test_without_the_pause_endpoint_requests_go_unheld() -> None:
    c = HoldingClient(can_pause=False)

    async def go():
        return await run_batched(lambda: [c.request(i) for i in range(3)], client=c, target=3, attempts=1)

    _, bc = asyncio.run(go())
    assert "resume" not in c.events and "scheduler held" not in bc.detail
    assert bc.verified


def test_a_failed_release_cancels_the_round_and_raises() -> None:
    c = HoldingClient(resume_fails=True)

    async def go():
        return await run_batched(lambda: [c.request(i) for i in range(2)], client=c, target=2, attempts=1)

    with pytest.raises(RuntimeError, match="engine gone"):
        asyncio.run(go())
    assert c.cancelled == 2


def test_a_single_request_is_not_held() -> None:
    c = HoldingClient()

    async def go():
        c.released.set()
        return await run_batched(lambda: [c.request(0)], client=c, target=1, attempts=1)

    asyncio.run(go())
    assert c.events == ["req0"]


def test_spread_counts_from_the_release_not_from_the_hold() -> None:
    # two requests held 10 s, released at t=10: one finishes at 10.1, the other at 10.3
    held = [Done(0.0, 10.1), Done(0.0, 10.3)]
    # measured from t_start, the 0.2 s spread is 2% of a ~10 s request: looks batched
    assert verify_completions(2, held).verified
    # measured from the release, it is most of the request's time: not batched
    bc = verify_completions(2, held, since=10.0)
    assert not bc.verified, bc.detail
