"""Async client for vLLM's OpenAI-compatible API: completions and chat, streamed or not.

Every streamed chunk gets a ``time.perf_counter()`` timestamp when its line arrives
(and every token in it, where a chunk carries several), so TTFT and inter-token
latencies come from the client's own clock; responses are parsed by
:mod:`fasttrack.engine.responses` (results, logprobs, usage). Errors
carry the server's own message (:class:`EngineRequestError`); a dropped connection
to an owned engine that has died becomes :class:`EngineCrashed` with the log tail.

Typical use::

    async with engine.client() as c:
        r = await c.complete("Hello", max_tokens=8, temperature=0, stream=True, logprobs=5)
        rs = await c.gather([Request.completion("Hi", max_tokens=8, seed=i) for i in range(4)])
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Protocol, Sequence, TypedDict, Unpack

import httpx

from fasttrack.engine.errors import EngineRequestError
from fasttrack.engine.responses import CompletionResult, Endpoint, Request, error_message, parse_full, parse_stream
from fasttrack.engine.tls import tls_context

_PATHS: dict[str, str] = {"completion": "/v1/completions", "chat": "/v1/chat/completions"}


class Liveness(Protocol):
    """What the client needs of its engine: a liveness check that raises
    :class:`~fasttrack.engine.errors.EngineCrashed` when the engine died (every
    :class:`~fasttrack.engine.handle.EngineHandle` has one)."""

    def check_alive(self, *, grace: float = 0.0, probe_health: bool = True) -> None: ...


# --------------------------------------------------------------------------------------
# the client


KEEPALIVE_EXPIRY_S = 2.0
"""Seconds an idle pooled connection is kept. Well below vLLM's server-side keep-alive
timeout (``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, 5 s by default): with equal timeouts the
server can close a connection at the moment the client reuses it, and the request
then fails with "Server disconnected without sending a response"."""


class RequestOptions(TypedDict, total=False):
    """The options of one request, for :meth:`EngineClient.complete` and :meth:`EngineClient.chat`
    (their defaults are those of :meth:`EngineClient._payload`). ``logprobs=k`` asks for the top-k
    per position; ``tokens_as_ids`` makes the server render tokens as ``token_id:N`` so alternatives
    are identified by id; ``extra`` is merged into the body verbatim."""

    stream: bool
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_tokens: int | None
    seed: int | None
    stop: str | list[str] | None
    n: int | None
    ignore_eos: bool | None
    response_format: dict[str, Any] | None
    logprobs: int | None
    tokens_as_ids: bool
    return_token_ids: bool
    extra: dict[str, Any] | None


class EngineClient:
    """Async HTTP client for one engine (``base_url`` without ``/v1``)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        engine: Liveness | None = None,
        timeout: float = 600.0,
        max_connections: int = 256,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.engine = engine
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout, connect=10.0),
            verify=tls_context(),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=KEEPALIVE_EXPIRY_S,
            ),
            headers=headers,
            transport=transport,
        )
        self._pause_supported: bool | None = None
        """Whether the server serves ``/pause`` (unknown until first asked)."""

    async def __aenter__(self) -> "EngineClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- payloads

    def _payload(
        self,
        endpoint: Endpoint,
        *,
        stream: bool = False,
        max_tokens: int | None = 16,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        min_tokens: int | None = None,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        n: int | None = None,
        ignore_eos: bool | None = None,
        response_format: dict[str, Any] | None = None,
        logprobs: int | None = None,
        tokens_as_ids: bool = False,
        return_token_ids: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The request body for ``endpoint`` (the defaults of every :class:`RequestOptions` key are here)."""
        p: dict[str, Any] = {"model": self.model, "stream": stream}
        opts = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k,
            "min_tokens": min_tokens,
            "seed": seed,
            "stop": stop,
            "n": n,
            "ignore_eos": ignore_eos,
            "response_format": response_format,
        }
        p.update({k: v for k, v in opts.items() if v is not None})
        if logprobs is not None:
            if endpoint == "chat":
                p["logprobs"] = True
                p["top_logprobs"] = logprobs
            else:
                p["logprobs"] = logprobs
        if tokens_as_ids:
            p["return_tokens_as_token_ids"] = True
        if return_token_ids:
            p["return_token_ids"] = True
        if stream:
            p["stream_options"] = {"include_usage": True}
        p.update(extra or {})
        return p

    async def complete(
        self,
        prompt: str | list[int] | list[str],
        *,
        on_chunk: Callable[[int], Any] | None = None,
        **opts: Unpack[RequestOptions],
    ) -> CompletionResult:
        """POST /v1/completions with the :class:`RequestOptions` ``opts``. ``on_chunk``
        (streaming only) is called with the number of chunks received after each one."""
        payload = self._payload("completion", **opts)
        payload["prompt"] = prompt
        return await self.send("completion", payload, on_chunk=on_chunk)

    async def chat(self, messages: list[dict[str, Any]], **opts: Unpack[RequestOptions]) -> CompletionResult:
        """POST /v1/chat/completions (same options as :meth:`complete`)."""
        payload = self._payload("chat", **opts)
        payload["messages"] = messages
        return await self.send("chat", payload)

    async def run(self, request: Request) -> CompletionResult:
        """Send one :class:`Request`."""
        if request.endpoint == "chat":
            return await self.chat(request.messages or [], **request.params)
        if request.prompt is None:
            raise ValueError("a completion request needs a prompt")
        return await self.complete(request.prompt, **request.params)

    async def gather(
        self, requests: Sequence[Request], *, return_exceptions: bool = False
    ) -> list[CompletionResult | BaseException]:
        """Send all requests at once (so the engine batches them); results in request order."""
        return list(await asyncio.gather(*(self.run(r) for r in requests), return_exceptions=return_exceptions))

    # -- scheduler hold (vLLM's development endpoints)

    async def pause_scheduler(self) -> bool:
        """Freeze the engine's scheduler: requests already running stay where they are and
        new ones queue until :meth:`resume_scheduler` (vLLM's ``POST /pause?mode=keep&clear_cache=false``: the
        default ``clear_cache=true`` would reset the prefix cache and preempt the running requests).

        The endpoint is served only when the server runs with ``VLLM_SERVER_DEV_MODE=1``
        (engines fasttrack starts do); returns ``False`` where it is not served, so callers
        can fall back to sending requests unheld."""
        if self._pause_supported is False:
            return False
        # clear_cache=false: vLLM's /pause clears the caches by default, which preempts running requests (they
        # come back recomputing their whole sequence as a prefill: on the H200 run the coverage probe's step
        # after the release held no decode, so it never formed a mixed prefill-decode step)
        r = await self._control("/pause", params={"mode": "keep", "clear_cache": "false"})
        url = self.base_url + "/pause"
        if r.status_code in (404, 405):
            self._pause_supported = False
            return False
        if r.status_code != 200:
            raise await self._http_failed(r.status_code, r.text, url)
        self._pause_supported = True
        return True

    async def resume_scheduler(self) -> None:
        """Release a :meth:`pause_scheduler` hold (``POST /resume``)."""
        r = await self._control("/resume")
        if r.status_code != 200:
            raise await self._http_failed(r.status_code, r.text, self.base_url + "/resume")

    async def _control(self, path: str, **kw: Any) -> httpx.Response:
        """POST to an idempotent control endpoint, once more on a fresh connection when
        the server closed a pooled one without answering (a keep-alive close that crossed
        the request; nothing was done, so asking again is safe)."""
        url = self.base_url + path
        for attempt in (1, 2):
            try:
                return await self._http.post(path, **kw)
            except httpx.RemoteProtocolError as exc:
                if attempt == 2:
                    raise await self._transport_failed(exc, url) from exc
            except httpx.TransportError as exc:
                raise await self._transport_failed(exc, url) from exc
        raise AssertionError("unreachable")

    # -- transport

    async def _transport_failed(self, exc: Exception, url: str) -> EngineRequestError:
        if self.engine is not None:
            # raises EngineCrashed (with the log tail) when the engine died
            await asyncio.to_thread(self.engine.check_alive, grace=3.0)
        return EngineRequestError(f"{type(exc).__name__}: {exc}", status_code=None, url=url)

    async def _http_failed(self, status: int, body: str, url: str) -> EngineRequestError:
        if status >= 500 and self.engine is not None:
            # a server error may mean the engine behind the API server died
            await asyncio.to_thread(self.engine.check_alive, grace=2.0)
        return EngineRequestError(error_message(body), status_code=status, body=body, url=url)

    async def send(
        self, endpoint: Endpoint, payload: dict[str, Any], *, on_chunk: Callable[[int], Any] | None = None
    ) -> CompletionResult:
        """POST a prepared body to the endpoint; streams when ``payload['stream']`` is true."""
        path = _PATHS[endpoint]
        url = self.base_url + path
        stream = bool(payload.get("stream"))
        t_start = time.perf_counter()
        try:
            if not stream:
                r = await self._http.post(path, json=payload)
                t_end = time.perf_counter()
                if r.status_code != 200:
                    raise await self._http_failed(r.status_code, r.text, url)
                return parse_full(endpoint, payload, r.json(), t_start, t_end)
            async with self._http.stream("POST", path, json=payload) as r:
                if r.status_code != 200:
                    body = (await r.aread()).decode("utf-8", errors="replace")
                    raise await self._http_failed(r.status_code, body, url)
                return await parse_stream(endpoint, payload, r, t_start, url, on_chunk=on_chunk)
        except httpx.TransportError as exc:
            raise await self._transport_failed(exc, url) from exc

    # -- parsing
