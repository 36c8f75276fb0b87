"""An in-process stand-in for a vLLM OpenAI-compatible server, for the checks' collect plumbing.

It is not a model: the next-token distribution is a fixed function of the last
three token ids (a peaked softmax over 24 word tokens), so greedy outputs, raw
logprobs, seeded sampling at a temperature, ``n`` choices (seed + i), stop
strings, ``max_tokens`` and ``response_format`` behave like vLLM's API and can be
checked exactly. ``mode`` plants a defect: ``ignore-temperature`` samples at
T/2, ``broken-json`` returns unfinished JSON, ``numerics`` shifts every request's
logits. ``/metrics`` reports ``vllm:num_requests_running`` (requests in flight).
There is no profiler, so path evidence is unavailable. ``serve(..., pause=True)`` also
serves vLLM's development endpoints ``/pause`` and ``/resume``: no step runs while
paused, so a round of requests held that way starts (and finishes) in one step.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

WORDS = [
    " the",
    " river",
    " flows",
    " north",
    " and",
    " south",
    ",",
    ".",
    " a",
    " city",
    " of",
    " light",
    " in",
    " winter",
    " bees",
    " make",
    " honey",
    " trains",
    " run",
    " fast",
    " slow",
    " rain",
    " falls",
    " today",
]
WORD0 = 1000
STEP_S = 0.005

"""Seconds per generated position (one 'engine step', whatever n is)."""
BOS = 1


def _char_id(c: str) -> int:
    return 10 + (ord(c) if ord(c) < 900 else 63)


def tok_text(t: int) -> str:
    if t >= WORD0:
        return WORDS[t - WORD0]
    if t == BOS:
        return ""
    return chr(t - 10)


class FakeModel:
    def __init__(self, mode: str = "") -> None:
        self.mode = mode

    def logits(self, ctx: list[int]) -> np.ndarray:
        key = zlib.crc32(json.dumps(ctx[-3:]).encode())
        return np.random.default_rng(key).normal(size=len(WORDS)) * 2.5

    def step(
        self,
        ctx: list[int],
        *,
        temperature: float,
        rng: np.random.Generator | None,
        top_k: int | None,
        top_p: float | None,
    ) -> tuple[int, np.ndarray]:
        lg = self.logits(ctx)
        raw = lg - np.log(np.exp(lg - lg.max()).sum()) - lg.max()
        if temperature == 0 or rng is None:
            return int(np.argmax(lg)) + WORD0, raw
        t = temperature / (2.0 if self.mode == "ignore-temperature" else 1.0)
        x = lg / t
        order = np.argsort(-x)
        keep = np.ones_like(x, dtype=bool)
        if top_k:
            keep[:] = False
            keep[order[:top_k]] = True
        p = np.exp(x - x.max()) * keep
        p /= p.sum()
        if top_p is not None:
            ranked = np.argsort(-p)
            above = np.concatenate([[0.0], np.cumsum(p[ranked])[:-1]])
            mask = np.zeros_like(keep)
            mask[ranked[above < top_p]] = True
            p = p * mask
            p /= p.sum()
        return int(rng.choice(len(WORDS), p=p)) + WORD0, raw


class _State:
    """The fake engine: outputs are computed on arrival, then released one position per engine step; every
    request that is waiting when a step starts is in that step (as in vLLM's scheduler), so
    ``vllm:num_requests_running`` is the size of the last step's batch."""

    def __init__(self, mode: str) -> None:
        self.model = FakeModel(mode)
        self.mode = mode
        self.generated = 0
        self.last_batch = 0
        self.lock = threading.Lock()
        self.active: list[list[Any]] = []  # [remaining steps, threading.Event]
        self.stopped = threading.Event()
        self.paused = False
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while not self.stopped.is_set():
            time.sleep(STEP_S)
            with self.lock:
                if self.paused:
                    continue
                batch = [r for r in self.active if r[0] > 0]
                self.last_batch = len(batch)
                for r in batch:
                    r[0] -= 1
                    if r[0] == 0:
                        r[1].set()
                self.active = [r for r in self.active if r[0] > 0]

    def wait_steps(self, steps: int) -> None:
        ev = threading.Event()
        with self.lock:
            self.active.append([max(1, steps), ev])
        ev.wait()


def _tokenize(text: str, special: bool = True) -> list[int]:
    return ([BOS] if special else []) + [_char_id(c) for c in text]


def _example(schema: dict[str, Any]) -> Any:
    """A minimal instance of a (simple) JSON schema."""
    if "enum" in schema:
        return schema["enum"][0]
    t = schema.get("type")
    if t == "object":
        return {k: _example(v) for k, v in schema.get("properties", {}).items() if k in schema.get("required", [])}
    if t == "array":
        return [_example(schema.get("items", {}))] * max(1, schema.get("minItems", 1))
    if t == "integer":
        return int(schema.get("minimum", 0))
    if t == "boolean":
        return True
    return "x"


def _generate(state: _State, body: dict[str, Any], prompt_ids: list[int]) -> dict[str, Any]:
    n = int(body.get("n") or 1)
    max_tokens = int(body.get("max_tokens") or 16)
    temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
    seed = body.get("seed")
    k = (
        body.get("logprobs")
        if isinstance(body.get("logprobs"), int) and not isinstance(body.get("logprobs"), bool)
        else None
    )
    if body.get("top_logprobs"):
        k = int(body["top_logprobs"])
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    stops = body.get("stop") or []
    stops = [stops] if isinstance(stops, str) else list(stops)
    rf = body.get("response_format")
    choices = []
    for i in range(n):
        rng = None
        if temperature > 0:
            rng = np.random.default_rng([int(seed) + i, 7] if seed is not None else None)
        ctx = list(prompt_ids)
        shift = state.mode == "numerics"
        toks, lps, tops = [], [], []
        if rf and rf.get("type") == "json_schema":
            max_tokens = min(max_tokens, 12)  # the canned JSON below replaces the text anyway
        for _pos in range(max_tokens):
            t, raw = state.model.step(
                ctx, temperature=temperature, rng=rng, top_k=body.get("top_k"), top_p=body.get("top_p")
            )
            if shift:
                t = WORD0 + (t - WORD0 + 1) % len(WORDS)
            toks.append(t)
            lps.append(float(raw[t - WORD0]))
            order = np.argsort(-raw)[: (k or 0)]
            tops.append({int(j) + WORD0: float(raw[j]) for j in order})
            ctx.append(t)
        text = "".join(tok_text(t) for t in toks)
        finish, stop_reason = "length", None
        if rf and rf.get("type") == "json_schema":
            schema = rf["json_schema"]["schema"]
            text = "{\n\n\n\n   " if state.mode == "broken-json" else json.dumps(_example(schema))
            finish = "length" if state.mode == "broken-json" else "stop"
        for s in stops:
            if s in text:
                text, finish, stop_reason = text[: text.index(s)], "stop", s
                break
        ch: dict[str, Any] = {
            "index": i,
            "text": text,
            "finish_reason": finish,
            "stop_reason": stop_reason,
            "token_ids": toks,
        }
        if k is not None:
            render = (lambda t: f"token_id:{t}") if as_ids else tok_text
            ch["logprobs"] = {
                "tokens": [render(t) for t in toks],
                "token_logprobs": lps,
                "top_logprobs": [{render(t): v for t, v in tp.items()} for tp in tops],
            }
        choices.append(ch)
    with state.lock:
        state.generated += sum(len(c["token_ids"]) for c in choices)
    return {
        "id": "cmpl-fake",
        "model": "fake",
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": sum(len(c["token_ids"]) for c in choices),
            "total_tokens": len(prompt_ids) + sum(len(c["token_ids"]) for c in choices),
        },
    }


def serve(mode: str = "", *, pause: bool = False) -> tuple[ThreadingHTTPServer, str]:
    """Start the fake engine on a free port; returns (server, base_url). Stop with ``server.shutdown()``.
    ``pause``: serve ``/pause`` and ``/resume`` (as vLLM does with ``VLLM_SERVER_DEV_MODE=1``)."""
    state = _State(mode)

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, out: dict[str, Any], *, chat: bool) -> None:
            """Server-sent events, one position per engine step (completions format; chat: content deltas)."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            n = max(len(c["token_ids"]) for c in out["choices"])
            for pos in range(n):
                state.wait_steps(1)
                chunk_choices = []
                for c in out["choices"]:
                    if pos >= len(c["token_ids"]):
                        continue
                    t = c["token_ids"][pos]
                    last = pos == len(c["token_ids"]) - 1
                    ch: dict[str, Any] = {
                        "index": c["index"],
                        "token_ids": [t],
                        "finish_reason": c["finish_reason"] if last else None,
                        "stop_reason": c["stop_reason"] if last else None,
                    }
                    piece = tok_text(t)
                    if chat:
                        ch["delta"] = {"content": piece}
                    else:
                        ch["text"] = piece
                    if "logprobs" in c:
                        lp = c["logprobs"]
                        ch["logprobs"] = {
                            "tokens": [lp["tokens"][pos]],
                            "token_logprobs": [lp["token_logprobs"][pos]],
                            "top_logprobs": [lp["top_logprobs"][pos]],
                        }
                    chunk_choices.append(ch)
                self.wfile.write(f"data: {json.dumps({'id': 'cmpl-fake', 'choices': chunk_choices})}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(
                f"data: {json.dumps({'id': 'cmpl-fake', 'choices': [], 'usage': out['usage']})}\n\n".encode()
            )
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models":
                self._send(200, {"data": [{"id": "fake"}]})
            elif self.path == "/metrics":
                txt = (
                    "# TYPE vllm:num_requests_running gauge\n"
                    f'vllm:num_requests_running{{model_name="fake"}} {state.last_batch}\n'
                    "# TYPE vllm:generation_tokens_total counter\n"
                    f'vllm:generation_tokens_total{{model_name="fake"}} {state.generated}\n'
                )
                self._send(200, txt, "text/plain")
            else:
                self._send(404, {"error": {"message": "no route"}})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/tokenize":
                self._send(200, {"tokens": _tokenize(body["prompt"], body.get("add_special_tokens", True))})
                return
            if pause and self.path.split("?")[0] in ("/pause", "/resume"):
                with state.lock:
                    state.paused = self.path.startswith("/pause")
                self._send(200, {})
                return
            if self.path == "/detokenize":
                self._send(200, {"prompt": "".join(tok_text(t) for t in body["tokens"])})
                return
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self._send(404, {"error": {"message": "no route"}})
                return
            if self.path == "/v1/completions":
                p = body["prompt"]
                ids = list(p) if isinstance(p, list) else _tokenize(p)
            else:
                ids = _tokenize("".join(m["content"] for m in body["messages"]))
            out = _generate(state, body, ids)
            if body.get("stream"):
                self._stream(out, chat=self.path == "/v1/chat/completions")
                return
            state.wait_steps(max(len(c["token_ids"]) for c in out["choices"]))
            if self.path == "/v1/chat/completions":
                for c in out["choices"]:
                    c["message"] = {"role": "assistant", "content": c.pop("text")}
            self._send(200, out)

    class Server(ThreadingHTTPServer):
        request_queue_size = 128
        daemon_threads = True

    srv = Server(("127.0.0.1", 0), H)
    srv.fake_state = state  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
