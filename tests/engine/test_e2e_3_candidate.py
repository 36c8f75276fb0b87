"""Path evidence from a real candidate engine (the demo plugin's optimized decode path).

Decode windows must show the optimized ops on every in-range decode step; a
prefill-only window and out-of-range batches must show the stock path and the logged
fallback.
"""

from __future__ import annotations

import asyncio

import pytest

from fasttrack.checks.batching import HOLD_PER_REQUEST_S, HOLD_S, release_after
from fasttrack.engine import ProfilerWindow, Request, WindowEvidence

pytestmark = pytest.mark.e2e

MAX_BATCH = 8  # the demo plugin's declared decode batch range is 1..8


def _fallback_log_interval() -> float:
    """The plugin logs at most one fallback line per reason per this many seconds."""
    from fasttrack_demo_plugin import dispatch

    return float(dispatch.LOG_INTERVAL_S)


def _window(engine, markers, name: str, requests: list[Request], *, hold: bool = False) -> WindowEvidence:
    """Profile one round of ``requests``. ``hold``: the scheduler is held while they arrive,
    so they start in one engine step (a busy API server admits concurrent requests slowly)."""

    async def go():
        async with engine.client() as c:
            await c.complete("warm up", max_tokens=2, temperature=0.0)
            # let the warm-up's own (rate-limited) fallback lines age out, so the
            # window's fallbacks are logged inside the window
            await asyncio.sleep(_fallback_log_interval() + 0.2)
            async with ProfilerWindow(
                engine, name, markers=markers.marker_set(), fallback_pattern=markers.fallback_pattern
            ) as win:
                if hold:
                    assert await c.pause_scheduler(), "engines the harness starts serve /pause"
                    tasks = [asyncio.ensure_future(c.run(r)) for r in requests]
                    await release_after(c, HOLD_S + HOLD_PER_REQUEST_S * len(requests), tasks)
                    results = await asyncio.gather(*tasks)
                else:
                    results = await c.gather(requests)
        assert all(r.usage is not None for r in results)
        return win.evidence

    ev = asyncio.run(go())
    assert ev is not None
    return ev


def _decode_requests(n: int, max_tokens: int = 16) -> list[Request]:
    return [
        Request.completion(f"Story {i}: once upon a time", max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        for i in range(n)
    ]


@pytest.mark.parametrize("batch", [1, 4])
def test_candidate_decode_window_runs_the_optimized_ops(candidate_engine, demo_path_markers, batch: int) -> None:
    # The composition is verified, not assumed: on a busy host one request can finish before the
    # others arrive, so the window is repeated (up to three times) until all decoded together.
    for attempt in range(3):
        ev = _window(
            candidate_engine,
            demo_path_markers,
            f"candidate-decode-b{batch}-{attempt}",
            _decode_requests(batch, max_tokens=32),
        )
        if max(ev.decode_batch_sizes) == batch:
            break
    assert ev.decode_steps >= 14
    assert ev.optimized_ops > 0
    assert ev.optimized_decode_steps == ev.decode_steps, (
        f"decode steps without optimized ops: {ev.decode_batch_sizes} vs {ev.optimized_decode_batch_sizes}"
    )
    assert ev.optimized_decode_fraction == 1.0
    assert max(ev.decode_batch_sizes) == batch
    assert ev.kernels_per_decode_step and ev.kernels_per_decode_step > 0
    # fast decode steps run no stock op; the prompts' prefill steps ran on the stock path
    assert ev.stock_step_counts.get("decode", 0) == 0, ev.stock_op_counts
    prefill_like = ev.step_counts.get("prefill", 0) + ev.step_counts.get("mixed", 0)
    assert prefill_like >= 1
    assert ev.stock_step_counts.get("prefill", 0) + ev.stock_step_counts.get("mixed", 0) == prefill_like
    assert ev.optimized_step_counts.get("prefill", 0) == 0 and ev.optimized_step_counts.get("mixed", 0) == 0
    pe = ev.to_path_evidence(check="coverage", point=f"b{batch}")
    assert pe.side == "candidate" and pe.optimized_decode_steps == pe.decode_steps


def test_candidate_prefill_only_window_shows_stock_path_and_fallback(candidate_engine, demo_path_markers) -> None:
    reqs = [Request.completion(f"Only a prefill {i}", max_tokens=1, temperature=0.0) for i in range(2)]
    ev = _window(candidate_engine, demo_path_markers, "candidate-prefill", reqs)
    assert ev.step_counts.get("prefill", 0) >= 1
    assert ev.decode_steps == 0
    assert ev.optimized_ops == 0, f"optimized ops in a prefill-only window: {ev.optimized_op_counts}"
    assert ev.stock_ops > 0 and ev.stock_step_counts.get("prefill") == ev.step_counts["prefill"]
    assert ev.stock_op_counts.get("fasttrack_demo::stock_step", 0) > 0
    assert ev.fallback_events >= 1
    assert any("reason=prefill" in line for line in ev.fallback_lines), ev.fallback_lines


def test_candidate_out_of_range_batches_fall_back(candidate_engine, demo_path_markers) -> None:
    n = MAX_BATCH + 4
    ev = _window(
        candidate_engine, demo_path_markers, "candidate-decode-b12", _decode_requests(n, max_tokens=24), hold=True
    )
    big = {b: k for b, k in ev.decode_batch_sizes.items() if b > MAX_BATCH}
    assert big, f"no decode step above the batch range: {ev.decode_batch_sizes}"
    assert all(b <= MAX_BATCH for b in ev.optimized_decode_batch_sizes), ev.optimized_decode_batch_sizes
    assert ev.optimized_decode_steps < ev.decode_steps
    for step in ev.steps:
        if step.kind == "decode" and step.batch > MAX_BATCH:
            assert step.optimized_ops == 0 and step.stock_ops > 0, step
    assert any("reason=batch_out_of_range" in line for line in ev.fallback_lines), ev.fallback_lines
