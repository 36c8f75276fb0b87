"""The streaming load generator against an in-process SSE server (a test double for vLLM's API)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from aiohttp import web

from fasttrack.perf.loadgen import GenRequest, PerfClient, run_closed, run_loop, run_open, run_waves, timed


def _dumps(obj: Any, *, spaced: bool = False) -> bytes:
    # vLLM writes compact JSON (pydantic); "spaced" exercises the parsing path for other servers
    return json.dumps(obj, separators=(", ", ": ") if spaced else (",", ":")).encode()


class FakeServer:
    """Streams ``max_tokens`` chunks, ``gap`` seconds apart, then usage and [DONE]; records concurrency."""

    def __init__(self, gap: float = 0.005) -> None:
        self.gap = gap
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.mode = "ok"
        self.spaced = False

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        if self.mode == "http500":
            return web.json_response({"error": {"message": "model exploded"}}, status=500)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            n = int(body["max_tokens"])
            if self.mode == "coalesce":
                # two messages in one write, each carrying two token ids
                msgs = [{"choices": [{"index": 0, "text": "ab", "token_ids": [5, 6]}]} for _ in range(n // 2)]
                payload = b"".join(b"data: " + _dumps(m, spaced=self.spaced) + b"\n\n" for m in msgs)
                await resp.write(payload)
            else:
                for k in range(n):
                    await asyncio.sleep(self.gap)
                    ch: dict[str, Any] = {"index": 0, "text": "x", "finish_reason": None, "token_ids": None}
                    if body.get("return_token_ids"):
                        ch["token_ids"] = [100 + k]
                    msg = {"id": "cmpl-1", "object": "text_completion", "choices": [ch], "usage": None}
                    await resp.write(b"data: " + _dumps(msg, spaced=self.spaced) + b"\n\n")
                    if self.mode == "midstream-error" and k == 1:
                        await resp.write(b'data: {"error": {"message": "engine dead"}}\n\n')
                        await resp.write(b"data: [DONE]\n\n")
                        return resp
            if self.mode != "no-usage":
                usage = {
                    "prompt_tokens": len(body["prompt"]),
                    "completion_tokens": n,
                    "total_tokens": n + 1,
                    "prompt_tokens_details": {"cached_tokens": 3},
                }
                final: dict[str, Any] = {"choices": [], "usage": usage}
                if self.mode == "engine-metrics":
                    # vLLM --enable-per-request-metrics: the engine core's timing rides on the usage message
                    final["metrics"] = {
                        "time_to_first_token_ms": 1.5,
                        "generation_time_ms": 8.0,
                        "queue_time_ms": 0.2,
                        "mean_itl_ms": 8.0 / (n - 1),
                        "tokens_per_second": 400.0,
                        "unknown": "x",
                    }
                await resp.write(b"data: " + _dumps(final, spaced=self.spaced) + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
        finally:
            self.in_flight -= 1
        return resp


async def _serve(fake: FakeServer, fn):
    app = web.Application()
    app.router.add_post("/v1/completions", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr] - set by site.start() above
    try:
        async with PerfClient(f"http://127.0.0.1:{port}", model="m") as client:
            return await fn(client)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("spaced", [False, True])
def test_stream_records_chunk_times_usage_and_payload(spaced: bool) -> None:
    fake = FakeServer(gap=0.01)
    fake.spaced = spaced
    rec = run_loop(_serve(fake, lambda c: c.stream(GenRequest(id="a", prompt=[1, 2, 3], max_tokens=5))))
    assert rec.ok and rec.output_tokens == 5 and rec.prompt_tokens == 3 and rec.cached_tokens == 3
    assert len(rec.chunk_times) == 5 and rec.chunk_tokens == [1] * 5
    assert rec.ttft is not None and rec.ttft >= 0.009
    assert all(0.005 < g < 0.05 for g in rec.itls())
    (body,) = fake.bodies
    assert body["ignore_eos"] is True and body["temperature"] == 0.0 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True} and "return_token_ids" not in body
    assert rec.engine_timing is None and rec.engine_tpot_ms is None


@pytest.mark.parametrize("spaced", [False, True])
def test_engine_per_request_metrics_are_kept(spaced: bool) -> None:
    fake = FakeServer(gap=0.001)
    fake.spaced, fake.mode = spaced, "engine-metrics"
    rec = run_loop(_serve(fake, lambda c: c.stream(GenRequest(id="a", prompt=[1, 2, 3], max_tokens=5))))
    assert rec.ok and rec.engine_timing == {
        "time_to_first_token_ms": 1.5,
        "generation_time_ms": 8.0,
        "queue_time_ms": 0.2,
        "mean_itl_ms": 2.0,
        "tokens_per_second": 400.0,
    }
    assert rec.engine_tpot_ms == 2.0


def test_token_ids_and_coalesced_messages() -> None:
    fake = FakeServer()
    rec = run_loop(_serve(fake, lambda c: c.stream(GenRequest(id="a", prompt=[1], max_tokens=4, want_ids=True))))
    assert rec.token_ids == [100, 101, 102, 103] and fake.bodies[0]["return_token_ids"] is True
    fake.mode = "coalesce"
    rec = run_loop(_serve(fake, lambda c: c.stream(GenRequest(id="b", prompt=[1], max_tokens=8))))
    # four messages in one read: four content chunks with the same arrival time; tokens from usage
    assert rec.ok and len(rec.chunk_times) == 4 and len(set(rec.chunk_times)) == 1 and rec.output_tokens == 8
    assert rec.chunk_tokens == [1] * 4  # content chunks are not parsed unless token ids are wanted
    rec = run_loop(_serve(fake, lambda c: c.stream(GenRequest(id="c", prompt=[1], max_tokens=8, want_ids=True))))
    assert rec.chunk_tokens == [2] * 4 and rec.token_ids == [5, 6] * 4


@pytest.mark.parametrize(
    "mode, needle",
    [("http500", "HTTP 500: model exploded"), ("midstream-error", "engine dead"), ("no-usage", "no usage")],
)
@pytest.mark.parametrize("spaced", [False, True])
def test_failures_are_recorded_not_raised(mode: str, needle: str, spaced: bool) -> None:
    fake = FakeServer()
    fake.mode = mode
    fake.spaced = spaced
    rec = run_loop(_serve(fake, lambda c: c.stream(GenRequest(id="a", prompt=[1], max_tokens=4))))
    assert not rec.ok and needle in (rec.error or "")


def test_connection_refused_is_a_failed_request() -> None:
    async def go():
        async with PerfClient("http://127.0.0.1:9", model="m") as c:
            return await c.stream(GenRequest(id="a", prompt=[1], max_tokens=2))

    rec = run_loop(go())
    assert not rec.ok and rec.error


def test_schedules_control_concurrency() -> None:
    fake = FakeServer(gap=0.004)
    reqs = [GenRequest(id=str(i), prompt=[1], max_tokens=5) for i in range(12)]

    async def waves(c):
        return await run_waves(c, reqs, batch=4)

    recs = run_loop(_serve(fake, waves))
    assert len(recs) == 12 and all(r.ok for r in recs) and fake.max_in_flight == 4
    # waves: every request of a wave is sent before any of the next wave
    sends = [r.t_send for r in recs]
    done = [r.t_done for r in recs]
    assert min(sends[4:8]) >= max(done[:4])

    fake = FakeServer(gap=0.004)
    recs = run_loop(_serve(fake, lambda c: run_closed(c, reqs, concurrency=3)))
    assert all(r.ok for r in recs) and fake.max_in_flight == 3

    fake = FakeServer(gap=0.002)
    arrivals = [0.0, 0.05, 0.1, 0.15]

    async def opened(c):
        t0 = time.perf_counter()
        recs = await run_open(c, reqs[:4], arrivals_s=arrivals, max_concurrency=2)
        return t0, recs

    t0, recs = run_loop(_serve(fake, opened))
    for r, a in zip(recs, arrivals, strict=False):
        assert r.t_send - t0 >= a - 0.005
    with pytest.raises(ValueError):
        run_loop(_serve(fake, lambda c: run_open(c, reqs[:2], arrivals_s=[0.0])))


def test_timed_measures_wall_and_cpu() -> None:
    async def work():
        await asyncio.sleep(0.02)
        return 7

    out, tm = run_loop(timed(work))
    assert out == 7 and tm.t_end - tm.t_start >= 0.019 and tm.cpu_s >= 0


@pytest.mark.parametrize("runner", ["run_loop", "run_loop_default_loop"])
def test_ctrl_c_stops_run_loop_even_when_the_coroutine_swallows_the_cancellation(runner: str) -> None:
    import asyncio
    import os
    import signal

    def default_loop(coro):
        return run_loop(coro, use_uvloop=False)

    run = run_loop if runner == "run_loop" else default_loop

    async def swallowing() -> str:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:  # e.g. a request recorded as failed instead of re-raised
            return "finished anyway"
        return "not interrupted"

    # Python's own Ctrl-C handler, even where this session inherited SIGINT ignored (a background job)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(swallowing())
    finally:
        signal.signal(signal.SIGINT, previous)

    async def quiet() -> str:
        await asyncio.sleep(0)
        return "ok"

    assert run(quiet()) == "ok"  # no interrupt: the result comes back
