"""What vLLM's OpenAI-compatible API answers, parsed: results, logprobs, usage, errors.

:func:`parse_full` reads a whole response body and :func:`parse_stream` a streamed one
(server-sent events), giving every chunk, and every token in it, the
``time.perf_counter()`` time its line arrived. Logprobs become one
:class:`LogprobPosition` per generated token with its top-k alternatives.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import httpx
from pydantic import Field

from fasttrack.engine.errors import EngineRequestError
from fasttrack.modelbase import StrictModel

Endpoint = Literal["completion", "chat"]


class _Token(StrictModel):
    """A token of a logprobs entry as the server sent it."""

    token: str
    """The token as the server rendered it (``token_id:N`` when ids were requested)."""
    token_id: int | None = None
    """The token id, when the server reported it (``token_ids``, ``tokens_as_ids=True`` or a ``token_id:N``
    rendering)."""


class TopLogprob(_Token):
    """One alternative at one position."""

    logprob: float
    """Its log-probability."""


class LogprobPosition(_Token):
    """The sampled token at one generated position and its top-k alternatives."""

    logprob: float | None = None
    """Log-probability of the sampled token."""
    top: list[TopLogprob] = Field(default_factory=list)
    """Top-k alternatives, most likely first."""

    def top_dict(self, *, by: Literal["token", "id"] = "token") -> dict[Any, float]:
        """Top-k as a dict keyed by token string (or id)."""
        if by == "id":
            return {t.token_id: t.logprob for t in self.top if t.token_id is not None}
        return {t.token: t.logprob for t in self.top}


class Usage(StrictModel):
    """Token counts reported by the server."""

    prompt_tokens: int = 0
    """Tokens in the prompt(s)."""
    completion_tokens: int = 0
    """Tokens generated (all choices)."""
    total_tokens: int = 0
    """Their sum."""
    details: dict[str, Any] = Field(default_factory=dict)
    """Other usage fields the server sent (cached tokens, ...)."""


class ChoiceResult(StrictModel):
    """One generated sequence."""

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


class CompletionResult(StrictModel):
    """The outcome of one request."""

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


def error_message(body: str) -> str:
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
    elif choice.token_ids is None and choice.logprobs:
        ids = [p.token_id for p in choice.logprobs if p.token_id is not None]
        if len(ids) == len(choice.logprobs):
            choice.token_ids = ids


# --------------------------------------------------------------------------------------
# parsing whole and streamed responses


def parse_full(
    endpoint: Endpoint, payload: dict[str, Any], data: dict[str, Any], t_start: float, t_end: float
) -> CompletionResult:
    """A non-streamed response body as a :class:`CompletionResult`."""
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


_DONE: dict[str, Any] = {}
"""What :func:`_event` returns for the stream's last line."""


def _event(line: str, status_code: int, url: str) -> dict[str, Any] | None:
    """The JSON of one server-sent ``data:`` line (None for other lines, :data:`_DONE` for ``[DONE]``); an
    error event or a malformed one raises :class:`EngineRequestError`."""
    if not line.startswith("data:"):
        return None
    data_s = line[5:].strip()
    if data_s == "[DONE]":
        return _DONE
    try:
        data = json.loads(data_s)
    except ValueError as exc:
        raise EngineRequestError(f"malformed stream chunk: {data_s[:300]!r}", status_code=status_code, url=url) from exc
    if "error" in data and not data.get("choices"):
        err = data["error"] if isinstance(data["error"], dict) else {"message": data["error"]}
        code = err.get("code")
        raise EngineRequestError(
            str(err.get("message") or data_s[:500]),
            status_code=int(code) if isinstance(code, int) else status_code,
            body=data_s,
            url=url,
        )
    return data


@dataclass
class _Stream:
    """What the chunks of one streamed response said so far."""

    endpoint: Endpoint
    by_index: dict[int, ChoiceResult] = field(default_factory=dict)
    texts: dict[int, list[str]] = field(default_factory=dict)
    usage: Usage | None = None
    rid: str | None = None
    model: str | None = None
    prompt_ids: list[int] | None = None
    first: float | None = None
    """When the first token arrived."""
    n_chunks: int = 0

    def add(self, data: dict[str, Any], now: float) -> None:
        """One chunk, its line received at ``now``."""
        self.rid = self.rid or data.get("id")
        self.model = self.model or data.get("model")
        if data.get("usage"):
            self.usage = _usage(data["usage"])
        if data.get("prompt_token_ids") and self.prompt_ids is None:
            self.prompt_ids = data["prompt_token_ids"]
        for ch in data.get("choices") or []:
            self._add_choice(ch, now)

    def _add_choice(self, ch: dict[str, Any], now: float) -> None:
        idx = int(ch.get("index", 0))
        c = self.by_index.get(idx)
        if c is None:
            c = self.by_index[idx] = ChoiceResult(index=idx)
            self.texts[idx] = []
        if ch.get("prompt_token_ids") and self.prompt_ids is None:
            self.prompt_ids = ch["prompt_token_ids"]
        if self.endpoint == "chat":
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
            self.texts[idx].append(piece)
        if ids is not None:
            c.token_ids = (c.token_ids or []) + list(ids)
        if positions:
            c.logprobs = (c.logprobs or []) + positions
        n_tokens = len(ids) if ids is not None else (len(positions) if positions else (1 if piece or rpiece else 0))
        if n_tokens:
            c.chunk_times.append(now)
            c.token_times.extend([now] * n_tokens)
            if self.first is None:
                self.first = now
        if ch.get("finish_reason") is not None:
            c.finish_reason = ch["finish_reason"]
            c.stop_reason = ch.get("stop_reason")

    def choices(self) -> list[ChoiceResult]:
        """The choices in index order, their texts joined."""
        out = []
        for idx in sorted(self.by_index):
            c = self.by_index[idx]
            c.text = "".join(self.texts[idx])
            _fill_ids_from_positions(c)
            out.append(c)
        return out


async def parse_stream(
    endpoint: Endpoint,
    payload: dict[str, Any],
    r: httpx.Response,
    t_start: float,
    url: str,
    *,
    on_chunk: Callable[[int], Any] | None = None,
) -> CompletionResult:
    """Read a streamed response (server-sent events) into a :class:`CompletionResult`, with a
    ``perf_counter()`` timestamp per chunk and per token."""
    stream = _Stream(endpoint)
    async for line in r.aiter_lines():
        now = time.perf_counter()
        data = _event(line, r.status_code, url)
        if data is None:
            continue
        if data is _DONE:
            break
        stream.n_chunks += 1
        if on_chunk is not None:
            on_chunk(stream.n_chunks)
        stream.add(data, now)
    t_end = time.perf_counter()
    return CompletionResult(
        endpoint=endpoint,
        stream=True,
        payload=payload,
        id=stream.rid,
        model=stream.model,
        choices=stream.choices(),
        usage=stream.usage,
        prompt_token_ids=stream.prompt_ids,
        t_start=t_start,
        t_first_token=stream.first,
        t_end=t_end,
        chunks=stream.n_chunks,
    )
