"""Client request building and response parsing, against recorded-shape responses (no engine)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from fasttrack.engine import EngineClient, EngineCrashed, EngineRequestError, Request


def _sse(*chunks: dict[str, Any] | str) -> bytes:
    out = []
    for c in chunks:
        out.append("data: " + (c if isinstance(c, str) else json.dumps(c)) + "\n\n")
    return "".join(out).encode()


class Recorder:
    def __init__(self, respond) -> None:
        self.requests: list[dict[str, Any]] = []
        self.respond = respond

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        self.requests.append({"path": request.url.path, "body": body})
        return self.respond(request, body)


def _client(respond, **kw) -> tuple[EngineClient, Recorder]:
    rec = Recorder(respond)
    return EngineClient("http://engine", model="demo", transport=httpx.MockTransport(rec), **kw), rec


def run(coro):
    return asyncio.run(coro)


def test_completion_payload_and_logprobs() -> None:
    def respond(req, body):
        return httpx.Response(
            200,
            json={
                "id": "cmpl-1",
                "model": "demo",
                "choices": [
                    {
                        "index": 0,
                        "text": " the fox",
                        "finish_reason": "length",
                        "token_ids": [11, 12],
                        "prompt_token_ids": [1, 2, 3],
                        "logprobs": {
                            "tokens": ["token_id:11", "token_id:12"],
                            "token_logprobs": [-0.1, -0.5],
                            "top_logprobs": [
                                {"token_id:11": -0.1, "token_id:40": -2.5},
                                {"token_id:99": -1.0, "token_id:12": -0.5},
                            ],
                            "text_offset": [0, 4],
                        },
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "prompt_tokens_details": None},
            },
        )

    async def go():
        c, rec = _client(respond)
        async with c:
            r = await c.complete(
                "Hello",
                max_tokens=2,
                temperature=0.0,
                seed=7,
                logprobs=2,
                tokens_as_ids=True,
                top_k=5,
                top_p=0.9,
                min_tokens=1,
                ignore_eos=True,
                stop=["\n"],
                n=1,
                response_format={"type": "json_object"},
                extra={"repetition_penalty": 1.0},
            )
        return r, rec

    r, rec = run(go())
    body = rec.requests[0]["body"]
    assert rec.requests[0]["path"] == "/v1/completions"
    assert body == {
        "model": "demo",
        "stream": False,
        "prompt": "Hello",
        "max_tokens": 2,
        "temperature": 0.0,
        "seed": 7,
        "logprobs": 2,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
        "top_k": 5,
        "top_p": 0.9,
        "min_tokens": 1,
        "ignore_eos": True,
        "stop": ["\n"],
        "n": 1,
        "response_format": {"type": "json_object"},
        "repetition_penalty": 1.0,
    }
    assert r.text == " the fox" and r.finish_reason == "length" and r.token_ids == [11, 12]
    assert r.prompt_token_ids == [1, 2, 3]
    assert r.usage is not None and (r.usage.prompt_tokens, r.usage.completion_tokens) == (3, 2)
    assert r.logprobs is not None and [p.token_id for p in r.logprobs] == [11, 12]
    assert r.logprobs[1].top[0].token_id == 12  # sorted most likely first
    assert r.logprobs[1].top_dict(by="id") == {12: -0.5, 99: -1.0}
    assert r.ttft_s is None and r.latency_s >= 0 and not r.stream


def test_streaming_completion_timestamps_ids_and_usage() -> None:
    chunks = _sse(
        {
            "id": "c",
            "model": "demo",
            "choices": [{"index": 0, "text": "", "prompt_token_ids": [1, 2], "token_ids": []}],
        },
        {
            "id": "c",
            "model": "demo",
            "choices": [
                {
                    "index": 0,
                    "text": "A",
                    "token_ids": [5],
                    "logprobs": {"tokens": ["A"], "token_logprobs": [-0.2], "top_logprobs": [{"A": -0.2, "B": -1.9}]},
                }
            ],
        },
        {
            "id": "c",
            "model": "demo",
            "choices": [
                {
                    "index": 0,
                    "text": "BC",
                    "token_ids": [6, 7],
                    "logprobs": {
                        "tokens": ["B", "C"],
                        "token_logprobs": [-0.3, -0.4],
                        "top_logprobs": [{"B": -0.3}, {"C": -0.4}],
                    },
                }
            ],
        },
        {
            "id": "c",
            "model": "demo",
            "choices": [{"index": 0, "text": "", "token_ids": [], "finish_reason": "length", "stop_reason": None}],
        },
        {
            "id": "c",
            "model": "demo",
            "choices": [],
            "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
        },
        "[DONE]",
    )

    def respond(req, body):
        return httpx.Response(200, content=chunks, headers={"content-type": "text/event-stream"})

    counts: list[int] = []

    async def go():
        c, rec = _client(respond)
        async with c:
            return await c.complete("x", stream=True, max_tokens=3, logprobs=2, on_chunk=counts.append), rec

    r, rec = run(go())
    assert counts == [1, 2, 3, 4, 5]  # called after every data chunk, not for [DONE]
    assert rec.requests[0]["body"]["stream_options"] == {"include_usage": True}
    assert r.stream and r.text == "ABC" and r.token_ids == [5, 6, 7]
    assert r.prompt_token_ids == [1, 2]
    assert r.finish_reason == "length"
    assert r.usage is not None and r.usage.completion_tokens == 3
    ch = r.choice
    assert len(ch.chunk_times) == 2 and len(ch.token_times) == 3  # the 2-token chunk counts twice
    assert ch.token_times == sorted(ch.token_times)
    assert r.t_start <= r.t_first_token <= ch.token_times[-1] <= r.t_end  # type: ignore[operator]  # streamed: t_first_token is set
    assert r.ttft_s is not None and r.ttft_s >= 0
    assert [p.token_id for p in r.logprobs or []] == [5, 6, 7]
    assert len(r.inter_token_s()) == 2
    assert r.chunks == 5


def test_streaming_chat_role_chunk_is_not_the_first_token() -> None:
    chunks = _sse(
        {"id": "x", "model": "demo", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {
            "id": "x",
            "model": "demo",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "Hi"},
                    "token_ids": [9],
                    "logprobs": {
                        "content": [
                            {
                                "token": "Hi",
                                "logprob": -0.1,
                                "top_logprobs": [{"token": "Yo", "logprob": -3.0}, {"token": "Hi", "logprob": -0.1}],
                            }
                        ]
                    },
                }
            ],
        },
        {"id": "x", "model": "demo", "choices": [{"index": 1, "delta": {"content": "Yo"}, "token_ids": [8]}]},
        {
            "id": "x",
            "model": "demo",
            "choices": [
                {"index": 0, "delta": {}, "finish_reason": "stop"},
                {"index": 1, "delta": {}, "finish_reason": "length"},
            ],
        },
        "[DONE]",
    )

    def respond(req, body):
        return httpx.Response(200, content=chunks)

    async def go():
        c, rec = _client(respond)
        async with c:
            return await c.chat([{"role": "user", "content": "hello"}], stream=True, n=2, logprobs=2), rec

    r, rec = run(go())
    body = rec.requests[0]["body"]
    assert rec.requests[0]["path"] == "/v1/chat/completions"
    assert body["logprobs"] is True and body["top_logprobs"] == 2 and body["n"] == 2
    assert [c.text for c in r.choices] == ["Hi", "Yo"]
    assert [c.finish_reason for c in r.choices] == ["stop", "length"]
    assert r.choices[0].chunk_times and r.t_first_token == r.choices[0].chunk_times[0]
    assert r.logprobs is not None and r.logprobs[0].top[0].token == "Hi"
    assert r.logprobs[0].token_id == 9


def test_http_error_carries_the_server_message() -> None:
    def respond(req, body):
        return httpx.Response(
            400,
            json={"error": {"message": "max_tokens is too large: 99999", "type": "BadRequestError", "code": 400}},
        )

    async def go():
        c, _ = _client(respond)
        async with c:
            await c.complete("x", max_tokens=99999)

    with pytest.raises(EngineRequestError) as ei:
        run(go())
    assert ei.value.status_code == 400
    assert ei.value.server_message == "max_tokens is too large: 99999"
    assert "HTTP 400" in str(ei.value) and "too large" in str(ei.value)


def test_streamed_error_chunk_raises() -> None:
    chunks = _sse({"error": {"message": "Internal server error", "type": "InternalServerError", "code": 500}}, "[DONE]")

    async def go():
        c, _ = _client(lambda req, body: httpx.Response(200, content=chunks))
        async with c:
            await c.complete("x", stream=True)

    with pytest.raises(EngineRequestError, match="Internal server error") as ei:
        run(go())
    assert ei.value.status_code == 500


class _DeadEngine:
    side = "baseline"

    def __init__(self) -> None:
        self.calls = 0

    def check_alive(self, *, grace: float = 0.0, probe_health: bool = True) -> None:
        self.calls += 1
        raise EngineCrashed(
            "the baseline engine exited with code -9", side="baseline", process_exit_code=-9, log_tail="killed"
        )


class _LiveEngine(_DeadEngine):
    def check_alive(self, *, grace: float = 0.0, probe_health: bool = True) -> None:
        self.calls += 1


def _refuse(req, body):
    raise httpx.ConnectError("connection refused", request=req)


@pytest.mark.parametrize("stream", [False, True])
def test_transport_error_on_dead_engine_becomes_crash(stream: bool) -> None:
    dead = _DeadEngine()

    async def go():
        c, _ = _client(_refuse, engine=dead)
        async with c:
            await c.complete("x", stream=stream)

    with pytest.raises(EngineCrashed, match="exited with code -9") as ei:
        run(go())
    assert dead.calls == 1 and ei.value.log_tail == "killed"


def test_transport_error_on_live_engine_is_a_request_error() -> None:
    live = _LiveEngine()

    async def go():
        c, _ = _client(_refuse, engine=live)
        async with c:
            await c.complete("x")

    with pytest.raises(EngineRequestError, match="ConnectError") as ei:
        run(go())
    assert ei.value.status_code is None and live.calls == 1


def test_gather_sends_all_requests_and_keeps_order() -> None:
    in_flight = {"now": 0, "max": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        in_flight["now"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
        await asyncio.sleep(0.05)
        in_flight["now"] -= 1
        out = f"seed={body.get('seed')}"
        if request.url.path.endswith("/chat/completions"):
            return httpx.Response(
                200, json={"choices": [{"index": 0, "message": {"role": "assistant", "content": out}}]}
            )
        return httpx.Response(200, json={"choices": [{"index": 0, "text": out}]})

    async def go():
        c = EngineClient("http://engine", model="demo", transport=httpx.MockTransport(handler))
        async with c:
            reqs = [Request.completion("p", seed=i, max_tokens=4) for i in range(6)]
            reqs.append(Request.chat([{"role": "user", "content": "q"}], seed=99))
            return await c.gather(reqs)

    results = run(go())
    assert [r.text for r in results] == [f"seed={i}" for i in range(6)] + ["seed=99"]
    assert [r.endpoint for r in results] == ["completion"] * 6 + ["chat"]
    assert in_flight["max"] == 7


# -- scheduler hold (vLLM's /pause?mode=keep&clear_cache=false and /resume)


def test_pause_scheduler_asks_to_keep_running_requests_and_resume_releases() -> None:
    """The hold keeps running requests where they are: vLLM's default clear_cache=true would reset the caches and
    preempt them (their recomputation is a prefill, so no mixed prefill-decode step forms after the release)."""
    seen: list[str] = []

    def respond(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        seen.append(f"{request.url.path}?{request.url.query.decode()}")
        return httpx.Response(200, json={"status": "ok"})

    c, _ = _client(respond)
    assert run(c.pause_scheduler()) is True
    run(c.resume_scheduler())
    assert seen == ["/pause?mode=keep&clear_cache=false", "/resume?"]


def test_pause_scheduler_without_dev_endpoints_is_false_and_not_asked_again() -> None:
    c, rec = _client(lambda request, body: httpx.Response(404, json={"detail": "Not Found"}))
    assert run(c.pause_scheduler()) is False
    assert run(c.pause_scheduler()) is False
    assert len(rec.requests) == 1


def test_pause_scheduler_server_error_raises() -> None:
    c, _ = _client(lambda request, body: httpx.Response(400, json={"error": "Invalid pause mode"}))
    with pytest.raises(EngineRequestError, match="Invalid pause mode"):
        run(c.pause_scheduler())


def test_control_request_is_asked_again_when_a_pooled_connection_was_closed_unanswered() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return httpx.Response(200, json={"status": "ok"})

    c = EngineClient("http://engine", model="demo", transport=httpx.MockTransport(handler))
    assert run(c.pause_scheduler()) is True
    assert calls == ["/pause", "/pause"]


def test_control_request_that_fails_twice_raises_with_the_cause() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)

    c = EngineClient("http://engine", model="demo", transport=httpx.MockTransport(handler))
    with pytest.raises(EngineRequestError, match="Server disconnected"):
        run(c.resume_scheduler())


def test_idle_connections_expire_before_vllms_server_side_keep_alive_timeout() -> None:
    from fasttrack.engine.client import KEEPALIVE_EXPIRY_S

    vllm_default_keep_alive_s = 5  # VLLM_HTTP_TIMEOUT_KEEP_ALIVE
    assert KEEPALIVE_EXPIRY_S <= vllm_default_keep_alive_s / 2
    c = EngineClient("http://engine", model="demo")
    pool = c._http._transport._pool  # httpx's default transport
    assert pool._keepalive_expiry == KEEPALIVE_EXPIRY_S
    run(c.aclose())
