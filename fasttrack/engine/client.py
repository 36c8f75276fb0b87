"""Async client for vLLM's OpenAI-compatible API: completions and chat, streamed or not.

Every streamed chunk gets a ``time.perf_counter()`` timestamp when its line arrives
(and every token in it, where a chunk carries several), so TTFT and inter-token
latencies come from the client's own clock. Logprobs are parsed into one
:class:`LogprobPosition` per generated token with its top-k alternatives. Errors
carry the server's own message (:class:`EngineRequestError`); a dropped connection
to an owned engine that has died becomes :class:`EngineCrashed` with the log tail.

Typical use::

    async with engine.client() as c:
        r = await c.complete("Hello", max_tokens=8, temperature=0, stream=True, logprobs=5)
        rs = await c.gather([Request.completion("Hi", max_tokens=8, seed=i) for i in range(4)])
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol, Sequence

import httpx
from pydantic import BaseModel, ConfigDict, Field

from fasttrack.engine.errors import EngineRequestError


class Liveness(Protocol):
    """What the client needs of its engine: a liveness check that raises
    :class:`~fasttrack.engine.errors.EngineCrashed` when the engine died (every
    :class:`~fasttrack.engine.handle.EngineHandle` has one)."""

    def check_alive(self, *, grace: float = 0.0, probe_health: bool = True) -> None: ...


Endpoint = Literal["completion", "chat"]
_PATHS: dict[str, str] = {"completion": "/v1/completions", "chat": "/v1/chat/completions"}


# --------------------------------------------------------------------------------------
# result types


class TopLogprob(BaseModel):
    """One alternative at one position."""

    model_config = ConfigDict(extra="forbid")

    token: str
    """The token as the server rendered it (``token_id:N`` when ids were requested)."""
    token_id: int | None = None
    """The token id, when the server reported it (``tokens_as_ids=True``)."""
    logprob: float
    """Its log-probability."""


class LogprobPosition(BaseModel):
    """The sampled token at one generated position and its top-k alternatives."""

    model_config = ConfigDict(extra="forbid")

    token: str
    """The sampled token as rendered by the server."""
    token_id: int | None = None
    """The sampled token's id (from ``token_ids`` or a ``token_id:N`` rendering)."""
    logprob: float | None = None
    """Log-probability of the sampled token."""
    top: list[TopLogprob] = Field(default_factory=list)
    """Top-k alternatives, most likely first."""

    def top_dict(self, *, by: Literal["token", "id"] = "token") -> dict[Any, float]:
        """Top-k as a dict keyed by token string (or id)."""
        if by == "id":
            return {t.token_id: t.logprob for t in self.top if t.token_id is not None}
        return {t.token: t.logprob for t in self.top}


class Usage(BaseModel):
    """Token counts reported by the server."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    """Tokens in the prompt(s)."""
    completion_tokens: int = 0
    """Tokens generated (all choices)."""
    total_tokens: int = 0
    """Their sum."""
    details: dict[str, Any] = Field(default_factory=dict)
    """Other usage fields the server sent (cached tokens, ...)."""


class ChoiceResult(BaseModel):
    """One generated sequence."""

    model_config = ConfigDict(extra="forbid")

    index: int = 0
    """Choice index (0..n-1)."""
    text: str = ""
    """Generated text (chat: the assistant message content)."""
    token_ids: list[int] | None = None
    """Generated token ids (when the server returned them)."""
    logprobs: list[LogprobPosition] | None = None
    """Per-position logprobs (when requested)."""
    finish_reason: str | None = None
    """Why generation stopped (`stop`, `length`, ...)."""
    stop_reason: int | str | None = None
    """The stop string or token id that ended generation, if any."""
    chunk_times: list[float] = Field(default_factory=list)
    """perf_counter() at the arrival of each streamed chunk that carried output for this choice."""
    token_times: list[float] = Field(default_factory=list)
    """perf_counter() per generated token (a chunk's time repeated for each token it carries)."""
    reasoning: str | None = None
    """Reasoning content (chat, when the server separates it)."""
    tool_calls: list[dict[str, Any]] | None = None
    """Tool calls (chat)."""


class CompletionResult(BaseModel):
    """The outcome of one request."""

    model_config = ConfigDict(extra="forbid")

    endpoint: Endpoint
    """`completion` or `chat`."""
    stream: bool
    """Whether the response was streamed."""
    payload: dict[str, Any]
    """The request body sent."""
    id: str | None = None
    """Response id."""
    model: str | None = None
    """Model that answered."""
    choices: list[ChoiceResult] = Field(default_factory=list)
    """One entry per generated sequence, by index."""
    usage: Usage | None = None
    """Server-reported token counts."""
    prompt_token_ids: list[int] | None = None
    """Prompt token ids (when the server returned them)."""
    t_start: float
    """perf_counter() just before the request was sent."""
    t_first_token: float | None = None
    """perf_counter() when the first chunk with output arrived (streaming only)."""
    t_end: float
    """perf_counter() when the response was complete."""
    chunks: int = 0
    """Streamed data chunks received."""

    # convenience views of choice 0
    @property
    def choice(self) -> ChoiceResult:
        return self.choices[0] if self.choices else ChoiceResult()

    @property
    def text(self) -> str:
        return self.choice.text

    @property
    def token_ids(self) -> list[int] | None:
        return self.choice.token_ids

    @property
    def logprobs(self) -> list[LogprobPosition] | None:
        return self.choice.logprobs

    @property
    def finish_reason(self) -> str | None:
        return self.choice.finish_reason

    @property
    def ttft_s(self) -> float | None:
        """Time to first token in seconds (streaming only)."""
        return None if self.t_first_token is None else self.t_first_token - self.t_start

    @property
    def latency_s(self) -> float:
        """End-to-end request latency in seconds."""
        return self.t_end - self.t_start

    def inter_token_s(self, index: int = 0) -> list[float]:
        """Gaps between consecutive token arrivals of one choice (seconds)."""
        ts = self.choices[index].token_times if index < len(self.choices) else []
        return [b - a for a, b in zip(ts, ts[1:], strict=False)]


# --------------------------------------------------------------------------------------
# requests


@dataclass
class Request:
    """One request for :meth:`EngineClient.gather`."""

    endpoint: Endpoint
    prompt: str | list[int] | None = None
    messages: list[dict[str, Any]] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of :meth:`EngineClient.complete` / :meth:`EngineClient.chat`."""

    @classmethod
    def completion(cls, prompt: str | list[int], **params: Any) -> "Request":
        return cls("completion", prompt=prompt, params=params)

    @classmethod
    def chat(cls, messages: list[dict[str, Any]], **params: Any) -> "Request":
        return cls("chat", messages=messages, params=params)


def _parse_token_id(token: str) -> int | None:
    if token.startswith("token_id:"):
        try:
            return int(token[len("token_id:") :])
        except ValueError:
            return None
    return None


def _completion_logprobs(lp: dict[str, Any]) -> list[LogprobPosition]:
    tokens = lp.get("tokens") or []
    token_lps = lp.get("token_logprobs") or []
    tops = lp.get("top_logprobs") or []
    out: list[LogprobPosition] = []
    for i, tok in enumerate(tokens):
        top_raw = tops[i] if i < len(tops) and tops[i] else {}
        top = [
            TopLogprob(token=t, token_id=_parse_token_id(t), logprob=float(v))
            for t, v in sorted(top_raw.items(), key=lambda kv: -kv[1])
        ]
        val = token_lps[i] if i < len(token_lps) else None
        out.append(
            LogprobPosition(
                token=tok, token_id=_parse_token_id(tok), logprob=None if val is None else float(val), top=top
            )
        )
    return out


def _chat_logprobs(lp: dict[str, Any]) -> list[LogprobPosition]:
    out: list[LogprobPosition] = []
    for item in lp.get("content") or []:
        tok = str(item.get("token", ""))
        top = [
            TopLogprob(
                token=str(t.get("token", "")),
                token_id=_parse_token_id(str(t.get("token", ""))),
                logprob=float(t["logprob"]),
            )
            for t in (item.get("top_logprobs") or [])
        ]
        top.sort(key=lambda t: -t.logprob)
        val = item.get("logprob")
        out.append(
            LogprobPosition(
                token=tok, token_id=_parse_token_id(tok), logprob=None if val is None else float(val), top=top
            )
        )
    return out


def _usage(u: dict[str, Any] | None) -> Usage | None:
    if not u:
        return None
    known = {"prompt_tokens", "completion_tokens", "total_tokens"}
    return Usage(
        prompt_tokens=int(u.get("prompt_tokens") or 0),
        completion_tokens=int(u.get("completion_tokens") or 0),
        total_tokens=int(u.get("total_tokens") or 0),
        details={k: v for k, v in u.items() if k not in known and v is not None},
    )


def _error_message(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:2000] or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if data.get("message"):
            return str(data["message"])
        if data.get("detail"):
            return str(data["detail"])
    return body.strip()[:2000]


def _fill_ids_from_positions(choice: ChoiceResult) -> None:
    """Align token ids and logprob positions (either may have come without the other)."""
    if choice.logprobs is None:
        return
    if choice.token_ids is not None and len(choice.token_ids) == len(choice.logprobs):
        for pos, tid in zip(choice.logprobs, choice.token_ids, strict=False):
            if pos.token_id is None:
                pos.token_id = tid
    elif choice.token_ids is None and choice.logprobs and all(p.token_id is not None for p in choice.logprobs):
        choice.token_ids = [int(p.token_id) for p in choice.logprobs]  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# the client


KEEPALIVE_EXPIRY_S = 2.0
"""Seconds an idle pooled connection is kept. Well below vLLM's server-side keep-alive
timeout (``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, 5 s by default): with equal timeouts the
server can close a connection at the moment the client reuses it, and the request
then fails with "Server disconnected without sending a response"."""


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
        stream: bool,
        max_tokens: int | None,
        temperature: float | None,
        top_p: float | None,
        top_k: int | None,
        min_tokens: int | None,
        seed: int | None,
        stop: str | list[str] | None,
        n: int | None,
        ignore_eos: bool | None,
        response_format: dict[str, Any] | None,
        logprobs: int | None,
        tokens_as_ids: bool,
        return_token_ids: bool,
        extra: dict[str, Any] | None,
    ) -> dict[str, Any]:
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
        on_chunk: Callable[[int], Any] | None = None,
    ) -> CompletionResult:
        """POST /v1/completions. ``logprobs=k`` asks for the top-k per position;
        ``tokens_as_ids`` makes the server render tokens as ``token_id:N`` so alternatives
        are identified by id; ``extra`` is merged into the body verbatim. ``on_chunk``
        (streaming only) is called with the number of chunks received after each one."""
        payload = self._payload(
            "completion",
            stream=stream,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_tokens=min_tokens,
            seed=seed,
            stop=stop,
            n=n,
            ignore_eos=ignore_eos,
            response_format=response_format,
            logprobs=logprobs,
            tokens_as_ids=tokens_as_ids,
            return_token_ids=return_token_ids,
            extra=extra,
        )
        payload["prompt"] = prompt
        return await self.send("completion", payload, on_chunk=on_chunk)

    async def chat(
        self,
        messages: list[dict[str, Any]],
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
    ) -> CompletionResult:
        """POST /v1/chat/completions (same options as :meth:`complete`)."""
        payload = self._payload(
            "chat",
            stream=stream,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_tokens=min_tokens,
            seed=seed,
            stop=stop,
            n=n,
            ignore_eos=ignore_eos,
            response_format=response_format,
            logprobs=logprobs,
            tokens_as_ids=tokens_as_ids,
            return_token_ids=return_token_ids,
            extra=extra,
        )
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
        new ones queue until :meth:`resume_scheduler` (vLLM's ``POST /pause?mode=keep``).

        The endpoint is served only when the server runs with ``VLLM_SERVER_DEV_MODE=1``
        (engines fasttrack starts do); returns ``False`` where it is not served, so callers
        can fall back to sending requests unheld."""
        if self._pause_supported is False:
            return False
        r = await self._control("/pause", params={"mode": "keep"})
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
        return EngineRequestError(_error_message(body), status_code=status, body=body, url=url)

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
                return self._parse_full(endpoint, payload, r.json(), t_start, t_end)
            async with self._http.stream("POST", path, json=payload) as r:
                if r.status_code != 200:
                    body = (await r.aread()).decode("utf-8", errors="replace")
                    raise await self._http_failed(r.status_code, body, url)
                return await self._parse_stream(endpoint, payload, r, t_start, url, on_chunk=on_chunk)
        except httpx.TransportError as exc:
            raise await self._transport_failed(exc, url) from exc

    # -- parsing

    def _parse_full(
        self, endpoint: Endpoint, payload: dict[str, Any], data: dict[str, Any], t_start: float, t_end: float
    ) -> CompletionResult:
        choices: list[ChoiceResult] = []
        prompt_ids = data.get("prompt_token_ids")
        for ch in data.get("choices") or []:
            c = ChoiceResult(
                index=int(ch.get("index", 0)),
                finish_reason=ch.get("finish_reason"),
                stop_reason=ch.get("stop_reason"),
                token_ids=ch.get("token_ids"),
            )
            if endpoint == "chat":
                msg = ch.get("message") or {}
                c.text = msg.get("content") or ""
                c.reasoning = msg.get("reasoning_content") or msg.get("reasoning")
                c.tool_calls = msg.get("tool_calls") or None
                if ch.get("logprobs"):
                    c.logprobs = _chat_logprobs(ch["logprobs"])
            else:
                c.text = ch.get("text") or ""
                if ch.get("logprobs"):
                    c.logprobs = _completion_logprobs(ch["logprobs"])
                prompt_ids = prompt_ids or ch.get("prompt_token_ids")
            _fill_ids_from_positions(c)
            choices.append(c)
        choices.sort(key=lambda c: c.index)
        return CompletionResult(
            endpoint=endpoint,
            stream=False,
            payload=payload,
            id=data.get("id"),
            model=data.get("model"),
            choices=choices,
            usage=_usage(data.get("usage")),
            prompt_token_ids=prompt_ids,
            t_start=t_start,
            t_end=t_end,
        )

    async def _parse_stream(
        self,
        endpoint: Endpoint,
        payload: dict[str, Any],
        r: httpx.Response,
        t_start: float,
        url: str,
        *,
        on_chunk: Callable[[int], Any] | None = None,
    ) -> CompletionResult:
        by_index: dict[int, ChoiceResult] = {}
        texts: dict[int, list[str]] = {}
        usage = None
        rid = model = None
        prompt_ids: list[int] | None = None
        first: float | None = None
        n_chunks = 0
        async for line in r.aiter_lines():
            now = time.perf_counter()
            if not line.startswith("data:"):
                continue
            data_s = line[5:].strip()
            if data_s == "[DONE]":
                break
            try:
                data = json.loads(data_s)
            except ValueError as exc:
                raise EngineRequestError(
                    f"malformed stream chunk: {data_s[:300]!r}", status_code=r.status_code, url=url
                ) from exc
            if "error" in data and not data.get("choices"):
                err = data["error"] if isinstance(data["error"], dict) else {"message": data["error"]}
                code = err.get("code")
                raise EngineRequestError(
                    str(err.get("message") or data_s[:500]),
                    status_code=int(code) if isinstance(code, int) else r.status_code,
                    body=data_s,
                    url=url,
                )
            n_chunks += 1
            if on_chunk is not None:
                on_chunk(n_chunks)
            rid = rid or data.get("id")
            model = model or data.get("model")
            if data.get("usage"):
                usage = _usage(data["usage"])
            if data.get("prompt_token_ids") and prompt_ids is None:
                prompt_ids = data["prompt_token_ids"]
            for ch in data.get("choices") or []:
                idx = int(ch.get("index", 0))
                c = by_index.get(idx)
                if c is None:
                    c = by_index[idx] = ChoiceResult(index=idx)
                    texts[idx] = []
                if ch.get("prompt_token_ids") and prompt_ids is None:
                    prompt_ids = ch["prompt_token_ids"]
                if endpoint == "chat":
                    delta = ch.get("delta") or {}
                    piece = delta.get("content") or ""
                    rpiece = delta.get("reasoning_content") or delta.get("reasoning") or ""
                    if rpiece:
                        c.reasoning = (c.reasoning or "") + rpiece
                    if delta.get("tool_calls"):
                        c.tool_calls = (c.tool_calls or []) + list(delta["tool_calls"])
                    positions = _chat_logprobs(ch["logprobs"]) if ch.get("logprobs") else []
                else:
                    piece = ch.get("text") or ""
                    rpiece = ""
                    positions = _completion_logprobs(ch["logprobs"]) if ch.get("logprobs") else []
                ids = ch.get("token_ids")
                if piece:
                    texts[idx].append(piece)
                if ids is not None:
                    c.token_ids = (c.token_ids or []) + list(ids)
                if positions:
                    c.logprobs = (c.logprobs or []) + positions
                n_tokens = (
                    len(ids) if ids is not None else (len(positions) if positions else (1 if piece or rpiece else 0))
                )
                if n_tokens:
                    c.chunk_times.append(now)
                    c.token_times.extend([now] * n_tokens)
                    if first is None:
                        first = now
                if ch.get("finish_reason") is not None:
                    c.finish_reason = ch["finish_reason"]
                    c.stop_reason = ch.get("stop_reason")
        t_end = time.perf_counter()
        choices = []
        for idx in sorted(by_index):
            c = by_index[idx]
            c.text = "".join(texts[idx])
            _fill_ids_from_positions(c)
            choices.append(c)
        return CompletionResult(
            endpoint=endpoint,
            stream=True,
            payload=payload,
            id=rid,
            model=model,
            choices=choices,
            usage=usage,
            prompt_token_ids=prompt_ids,
            t_start=t_start,
            t_first_token=first,
            t_end=t_end,
            chunks=n_chunks,
        )
