"""A lean async streaming load generator for vLLM's ``/v1/completions``.

The harness shares two CPU cores with the engine on the demo hosts, so the client's
own cost per streamed token shows in the measurement. This path keeps the hot loop
small: aiohttp (the client vLLM's own benchmark uses), one ``perf_counter()`` per
network read, a byte-level SSE split, and no JSON parsing of ordinary content chunks
(recognised by their bytes: a non-empty ``choices`` and no usage or error); only the
usage message, errors, and chunks whose token ids are needed are parsed. Timestamps
are taken when a network read returns, before any parsing.

Every request is greedy (``temperature 0``), has a fixed output length
(``max_tokens`` with ``ignore_eos``) and asks for usage in the stream, so tokens are
counted from the server's ``usage`` and never by re-tokenising text. When the engine
was started with ``--enable-per-request-metrics`` (the harness does this for the
engines it owns), the usage message also carries the engine core's own timing of the
request (``metrics``), which is kept beside the client's timestamps.

Schedules (one *run* = one call; warm-up is the caller's job):

* :func:`run_waves`: ``batch`` requests at a time, the next wave when the whole
  wave has finished (every decode step runs exactly ``batch`` requests: pure decode);
* :func:`run_closed`: at most ``concurrency`` in flight, a new request as soon as
  one finishes (vLLM's ``--max-concurrency`` with ``--request-rate inf``);
* :func:`run_open`: requests sent at given arrival times (e.g. seeded Poisson),
  optionally capped at ``max_concurrency`` in flight (mixed prefill + decode).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from fasttrack.perf.metrics import ENGINE_TIMING_KEYS, RequestRecord

T = TypeVar("T")


@dataclass(slots=True)
class GenRequest:
    """One request to send."""

    id: str
    prompt: list[int] | str
    """Token ids (preferred: both sides get identical input) or text."""
    max_tokens: int
    want_ids: bool = False
    """Ask for the generated token ids (``return_token_ids``); needed to extend a session's history."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Merged into the request body."""


@dataclass
class RunTiming:
    """Wall and CPU time of one run."""

    t_start: float
    t_end: float
    cpu_s: float
    wall_start: float | None = None
    """Unix time at the start (``time.time()``), to place runs of two engines in time."""


class PerfClient:
    """Streams completions from one engine (``base_url`` without ``/v1``)."""

    def __init__(self, base_url: str, *, model: str, max_connections: int = 512, timeout_s: float = 900.0) -> None:
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.model = model
        self._max_connections = max_connections
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=30.0)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "PerfClient":
        conn = aiohttp.TCPConnector(limit=self._max_connections, ttl_dns_cache=300, force_close=False)
        self._session = aiohttp.ClientSession(
            connector=conn, timeout=self._timeout, auto_decompress=False, read_bufsize=1 << 16
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def payload(self, req: GenRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": req.prompt,
            "max_tokens": req.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if req.want_ids:
            body["return_token_ids"] = True
        body.update(req.extra)
        return body

    async def stream(self, req: GenRequest) -> RequestRecord:
        """Send one request and record its chunk arrival times and usage; never raises for server errors."""
        assert self._session is not None, "use 'async with PerfClient(...)'"
        body = self.payload(req)
        perf_counter = time.perf_counter
        rec = RequestRecord(id=req.id, t_send=0.0)
        ids: list[int] | None = [] if req.want_ids else None
        rec.t_send = perf_counter()
        try:
            async with self._session.post(self.url, json=body) as resp:
                if resp.status != 200:
                    text = (await resp.read()).decode("utf-8", errors="replace")
                    rec.error = f"HTTP {resp.status}: {_error_message(text)}"
                    rec.t_done = perf_counter()
                    return rec
                await _read_events(resp, rec, ids)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            rec.error = f"{type(exc).__name__}: {exc}"[:500]
        rec.t_done = perf_counter()
        if ids is not None:
            rec.token_ids = ids
        if rec.error is None and rec.output_tokens is None and rec.chunk_times:
            rec.error = "the stream carried no usage (stream_options.include_usage was ignored)"
        return rec


async def _read_events(resp: aiohttp.ClientResponse, rec: RequestRecord, ids: list[int] | None) -> None:
    """Record the SSE messages of one streamed response into ``rec`` (the hot loop: one ``perf_counter()`` per
    network read; an ordinary content chunk is recognised by its bytes and not parsed unless ``ids`` wants its
    token ids). Raises ``ValueError`` for a message that is not JSON."""
    perf_counter = time.perf_counter
    loads = json.loads
    times = rec.chunk_times
    ntok = rec.chunk_tokens
    fast = ids is None
    buf = b""
    async for data in resp.content.iter_any():
        now = perf_counter()
        buf += data
        while True:
            cut = buf.find(b"\n\n")
            if cut < 0:
                break
            msg = buf[:cut]
            buf = buf[cut + 2 :]
            if not msg.startswith(b"data:"):
                continue
            payload = msg[5:].strip()
            if payload == b"[DONE]":
                continue
            if fast and b'"choices":[{' in payload and b'"error"' not in payload and b'"usage":{' not in payload:
                # a content chunk: its arrival time is all we need (tokens come from usage)
                times.append(now)
                ntok.append(1)
                continue
            _record_message(rec, loads(payload), now, ids)


def _record_message(rec: RequestRecord, obj: dict[str, Any], now: float, ids: list[int] | None) -> None:
    """A parsed SSE message: its content chunk (arrival time, tokens, token ids), usage and engine timing, or
    error."""
    choices = obj.get("choices")
    if choices:
        ch = choices[0]
        tids = ch.get("token_ids")
        if tids:
            rec.chunk_tokens.append(len(tids))
            if ids is not None:
                ids.extend(tids)
        else:
            rec.chunk_tokens.append(1)
        rec.chunk_times.append(now)
    usage = obj.get("usage")
    if usage:
        rec.output_tokens = usage.get("completion_tokens")
        rec.prompt_tokens = usage.get("prompt_tokens")
        details = usage.get("prompt_tokens_details") or {}
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            rec.cached_tokens = int(details["cached_tokens"])
        timing = obj.get("metrics")
        if isinstance(timing, dict):
            rec.engine_timing = {
                k: float(v) for k, v in timing.items() if k in ENGINE_TIMING_KEYS and isinstance(v, (int, float))
            }
    if not choices and obj.get("error"):
        err = obj["error"]
        rec.error = str(err.get("message") if isinstance(err, dict) else err)[:500]


def _error_message(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:300] or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        if data.get("message"):
            return str(data["message"])[:300]
    return body.strip()[:300]


async def timed(coro_fn: Callable[[], Awaitable[T]]) -> tuple[T, RunTiming]:
    """Run ``coro_fn()`` and measure its wall time and this process's CPU time."""
    w0, c0, t0 = time.time(), time.process_time(), time.perf_counter()
    out = await coro_fn()
    t1, c1 = time.perf_counter(), time.process_time()
    return out, RunTiming(t_start=t0, t_end=t1, cpu_s=c1 - c0, wall_start=w0)


async def run_waves(client: PerfClient, requests: Sequence[GenRequest], *, batch: int) -> list[RequestRecord]:
    """``batch`` requests at once; the next wave starts when the whole wave has finished."""
    if batch < 1:
        raise ValueError("batch must be >= 1")
    out: list[RequestRecord] = []
    for i in range(0, len(requests), batch):
        wave = requests[i : i + batch]
        out.extend(await asyncio.gather(*(client.stream(r) for r in wave)))
    return out


async def run_closed(client: PerfClient, requests: Sequence[GenRequest], *, concurrency: int) -> list[RequestRecord]:
    """At most ``concurrency`` requests in flight; each finished one is replaced by the next."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    sem = asyncio.Semaphore(concurrency)

    async def one(r: GenRequest) -> RequestRecord:
        async with sem:
            return await client.stream(r)

    return list(await asyncio.gather(*(one(r) for r in requests)))


async def run_open(
    client: PerfClient,
    requests: Sequence[GenRequest],
    *,
    arrivals_s: Sequence[float],
    max_concurrency: int | None = None,
) -> list[RequestRecord]:
    """Send request ``i`` at ``arrivals_s[i]`` seconds after the start (waiting for a slot when capped)."""
    if len(arrivals_s) != len(requests):
        raise ValueError("one arrival time per request is needed")
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    t0 = time.perf_counter()

    async def one(r: GenRequest, at: float) -> RequestRecord:
        delay = t0 + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if sem is None:
            return await client.stream(r)
        async with sem:
            return await client.stream(r)

    return list(await asyncio.gather(*(one(r, a) for r, a in zip(requests, arrivals_s, strict=False))))


def run_loop(coro: Coroutine[Any, Any, T], *, use_uvloop: bool = True) -> T:
    """Run a coroutine on a fresh event loop (uvloop when installed and ``use_uvloop``), from
    synchronous code. Ctrl-C raises ``KeyboardInterrupt`` here even where the coroutine
    swallowed the cancellation it causes."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("run_loop was called inside a running event loop; await the coroutine instead")
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if use_uvloop:
        try:
            import uvloop

            factory = uvloop.new_event_loop
        except ImportError:  # pragma: no cover - uvloop ships with vLLM
            pass
    with asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(coro)
        # Ctrl-C cancels the main task; if a layer below turned that cancellation into an
        # ordinary result (a request recorded as failed), the run still has to stop here.
        if getattr(runner, "_interrupt_count", 0):
            raise KeyboardInterrupt
        return result
