"""Agent-traffic traces: the JSONL format, the Mooncake import, and the replay.

Format (``fasttrack-trace`` version 1; docs/perf.md has the full description)
----------------------------------------------------------------------------
One JSON object per line. An optional first line is the header::

    {"fasttrack_trace": 1, "name": "agent-sessions", "description": "...", "block_size": 64}

Every other line is one request::

    {"id": "a.t1", "session": "a", "arrival_s": 0.0, "after": [], "pause_s": 0.4,
     "input_tokens": 60, "output_tokens": 48, "prefix": {"id": "system", "tokens": 192},
     "fork": null, "hash_ids": null, "agent": "main"}

* ``session`` groups turns: a turn's prompt is the session's history (every earlier
  prompt and generated output of the session) followed by ``input_tokens`` new
  tokens (the user message or tool result). Turns of one session run in file order.
* ``prefix`` (first turn of a session only): the history starts with a shared
  prefix; the same prefix ``id`` is the same content in every session, so the
  engine's prefix cache can reuse its KV blocks.
* ``fork`` (first turn of a session only): the session starts from the history of
  another request right after it finished (prompt + output): a subagent that
  inherits its parent's context. Implies waiting for that request.
* ``after``: ids of requests that must have finished before this one is sent
  (a parent waiting for its parallel subagents). The previous turn of the session
  is always waited for.
* ``pause_s``: tool time: the request is sent this long after its last dependency
  finished (and never before ``arrival_s``, seconds from the start of the replay).
* ``hash_ids`` (Mooncake style): the prompt is exactly these content blocks of
  ``block_size`` tokens (the last one cut so the prompt is ``input_tokens`` long);
  equal ids are equal content. Such a request ignores history, prefix and fork.

Ids referenced by ``after`` and ``fork`` must appear earlier in the file (so a trace
has no cycles). Outputs have fixed lengths (``ignore_eos``); the generated token ids
are appended to the session history so later turns reuse the real KV cache.

Mooncake traces (``timestamp`` in ms, ``input_length``, ``output_length``,
``hash_ids`` of 512-token blocks) are recognised by their keys and imported as one
single-turn session per line (:func:`import_mooncake`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from fasttrack.errors import FasttrackError
from fasttrack.inputs.jsonl import json_lines
from fasttrack.modelbase import DocModel
from fasttrack.perf.loadgen import GenRequest, PerfClient
from fasttrack.perf.metrics import RequestRecord
from fasttrack.perf.tokens import TokenPool

TRACE_VERSION = 1
MOONCAKE_BLOCK_SIZE = 512


class TraceError(FasttrackError):
    """A trace file is missing or malformed."""


class SharedPrefix(DocModel):
    id: str
    """Name of the prefix; the same name is the same content in every session (KV-cache reuse)."""
    tokens: int = Field(ge=1)
    """Its length in tokens."""


class TraceRequest(DocModel):
    """One request of a trace."""

    id: str
    """Unique id."""
    session: str | None = None
    """Session (conversation) id; default: the request's own id (a single-turn session)."""
    arrival_s: float = Field(default=0.0, ge=0)
    """Earliest send time, seconds after the replay starts."""
    after: list[str] = Field(default_factory=list)
    """Requests that must finish first (besides the previous turn of the session)."""
    pause_s: float = Field(default=0.0, ge=0)
    """Tool pause: seconds between the last dependency finishing and this request being sent."""
    input_tokens: int = Field(ge=1)
    """New tokens this turn adds to the session (with hash_ids: the whole prompt length)."""
    output_tokens: int = Field(ge=1)
    """Tokens to generate (fixed: ignore_eos)."""
    prefix: SharedPrefix | None = None
    """Shared prefix the session starts with (first turn only)."""
    fork: str | None = None
    """Request whose history (prompt + output) the session starts from (first turn only)."""
    hash_ids: list[int] | None = None
    """Mooncake-style content blocks; the prompt is exactly these blocks."""
    agent: str | None = None
    """Free label: main, subagent, ..."""

    @property
    def session_id(self) -> str:
        return self.session or self.id


class TraceHeader(DocModel):
    fasttrack_trace: int
    """Format version (1)."""
    name: str = ""
    description: str = ""
    block_size: int = Field(default=MOONCAKE_BLOCK_SIZE, ge=1)
    """Tokens per hash_ids block."""
    source: str | None = None
    """Where the trace came from (e.g. 'mooncake import of FILE')."""


class Trace(DocModel):
    header: TraceHeader
    requests: list[TraceRequest]

    @model_validator(mode="after")
    def _consistent(self) -> "Trace":
        seen: set[str] = set()
        sessions: set[str] = set()
        for n, r in enumerate(self.requests, 1):
            where = f"request {n} ({r.id!r})"
            if r.id in seen:
                raise ValueError(f"{where}: the id is used twice")
            for dep in [*r.after, *([r.fork] if r.fork else [])]:
                if dep not in seen:
                    raise ValueError(f"{where}: it depends on {dep!r}, which is not an earlier request of the trace")
            first = r.session_id not in sessions
            if not first and (r.prefix is not None or r.fork is not None):
                raise ValueError(f"{where}: 'prefix' and 'fork' are allowed on the first turn of a session only")
            if r.hash_ids is not None and (r.prefix is not None or r.fork is not None):
                raise ValueError(f"{where}: a request with hash_ids carries its whole prompt; drop 'prefix'/'fork'")
            seen.add(r.id)
            sessions.add(r.session_id)
        if not self.requests:
            raise ValueError("the trace has no requests")
        return self

    @property
    def sessions(self) -> list[str]:
        out: list[str] = []
        for r in self.requests:
            if r.session_id not in out:
                out.append(r.session_id)
        return out

    def describe(self) -> dict[str, Any]:
        """Shape of the trace (for result rows)."""
        per_session: dict[str, int] = {}
        for r in self.requests:
            per_session[r.session_id] = per_session.get(r.session_id, 0) + 1
        return {
            "name": self.header.name,
            "requests": len(self.requests),
            "sessions": len(per_session),
            "max_turns": max(per_session.values()),
            "forks": sum(1 for r in self.requests if r.fork),
            "shared_prefixes": sorted({r.prefix.id for r in self.requests if r.prefix}),
            "tool_pauses_s": round(sum(r.pause_s for r in self.requests), 3),
            "output_tokens": sum(r.output_tokens for r in self.requests),
            "span_s": max(r.arrival_s for r in self.requests),
        }

    def head(self, n: int) -> "Trace":
        """The first ``n`` requests, plus nothing that depends on a dropped one."""
        keep: list[TraceRequest] = []
        kept: set[str] = set()
        for r in self.requests[:n]:
            if all(d in kept for d in [*r.after, *([r.fork] if r.fork else [])]):
                keep.append(r)
                kept.add(r.id)
        return Trace(header=self.header, requests=keep)


# ---------------------------------------------------------------------------------- reading


def _is_mooncake(obj: dict[str, Any]) -> bool:
    return "input_length" in obj and "output_length" in obj and "id" not in obj


def import_mooncake(
    rows: Iterable[dict[str, Any]],
    *,
    block_size: int = MOONCAKE_BLOCK_SIZE,
    time_unit_s: float = 1e-3,
    source: str | None = None,
) -> Trace:
    """Mooncake-style rows (timestamp, input_length, output_length, hash_ids) -> a trace.

    Each row becomes a single-turn session; ``timestamp`` (milliseconds by default,
    relative to the first row) becomes ``arrival_s``; ``hash_ids`` are kept as the
    prompt's content blocks, so rows sharing leading ids share a prompt prefix.
    """
    rows = list(rows)
    if not rows:
        raise TraceError("the Mooncake trace has no rows.")
    t0 = min(float(r.get("timestamp", 0) or 0) for r in rows)
    reqs = []
    for i, r in enumerate(rows):
        try:
            reqs.append(
                TraceRequest(
                    id=f"r{i}",
                    arrival_s=(float(r.get("timestamp", 0) or 0) - t0) * time_unit_s,
                    input_tokens=int(r["input_length"]),
                    output_tokens=int(r["output_length"]),
                    hash_ids=[int(h) for h in (r.get("hash_ids") or [])] or None,
                )
            )
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise TraceError(f"Mooncake row {i + 1} is malformed: {_short(exc)}") from None
    reqs.sort(key=lambda q: q.arrival_s)
    header = TraceHeader(
        fasttrack_trace=TRACE_VERSION, name="mooncake import", block_size=block_size, source=source or "mooncake"
    )
    return Trace(header=header, requests=reqs)


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e.get("loc", ()))
        return f"{loc}: {e.get('msg')}" if loc else str(e.get("msg"))
    return str(exc)


def parse_trace(text: str, *, source: str = "<trace>") -> Trace:
    """Parse a trace in the fasttrack format, or import a Mooncake-style one (recognised by its keys)."""
    objs: list[tuple[int, dict[str, Any]]] = []
    for n, obj in json_lines(text, lambda n, exc: TraceError(f"{source}:{n}: not valid JSON ({exc}).")):
        if not isinstance(obj, dict):
            raise TraceError(f"{source}:{n}: each line must be a JSON object.")
        objs.append((n, obj))
    if not objs:
        raise TraceError(f"{source} is empty.", hint="A trace needs at least one request line (docs/perf.md).")
    header_obj: dict[str, Any] | None = None
    if "fasttrack_trace" in objs[0][1]:
        header_obj = objs.pop(0)[1]
    if objs and header_obj is None and _is_mooncake(objs[0][1]):
        return import_mooncake([o for _, o in objs], source=f"mooncake import of {source}")
    try:
        header = TraceHeader.model_validate(header_obj or {"fasttrack_trace": TRACE_VERSION})
    except ValidationError as exc:
        raise TraceError(f"{source}:1: the header is malformed: {_short(exc)}") from None
    if header.fasttrack_trace != TRACE_VERSION:
        raise TraceError(
            f"{source}: trace format version {header.fasttrack_trace} is not supported "
            f"(this is version {TRACE_VERSION})."
        )
    reqs = []
    for n, obj in objs:
        try:
            reqs.append(TraceRequest.model_validate(obj))
        except ValidationError as exc:
            raise TraceError(
                f"{source}:{n}: {_short(exc)}",
                hint="Each request line needs id, input_tokens and output_tokens (docs/perf.md, trace format).",
            ) from None
    try:
        return Trace(header=header, requests=reqs)
    except ValidationError as exc:
        raise TraceError(f"{source}: {_short(exc)}") from None


def load_trace(path: Path) -> Trace:
    if not path.is_file():
        raise TraceError(
            f"the trace file {path} does not exist.",
            hint="Point the workload's 'trace' at a JSONL file relative to the scope file (docs/perf.md).",
        )
    return parse_trace(path.read_text(encoding="utf-8"), source=str(path))


def dump_trace(trace: Trace) -> str:
    """The trace as JSONL text (header first)."""
    lines = [json.dumps(trace.header.model_dump(exclude_none=True), sort_keys=True)]
    for r in trace.requests:
        lines.append(
            json.dumps(
                r.model_dump(exclude_none=True, exclude_defaults=True)
                | {"id": r.id, "input_tokens": r.input_tokens, "output_tokens": r.output_tokens},
                sort_keys=True,
            )
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- replay


@dataclass
class ReplayStats:
    """What the replay had to adapt."""

    clipped: int = 0
    """Requests whose prompt was cut to fit max_model_len."""
    clipped_tokens: int = 0
    failed_dependencies: int = 0
    """Requests sent although a dependency failed (its history is then shorter)."""
    notes: list[str] = field(default_factory=list)


def build_prompt(
    req: TraceRequest,
    *,
    pool: TokenPool,
    tag: str,
    history: list[int] | None,
    block_size: int,
    max_prompt: int,
    stats: ReplayStats,
) -> list[int]:
    """The token ids of one request's prompt (see the module docstring)."""
    if req.hash_ids is not None:
        ids = list(pool.bos)
        for h in req.hash_ids:
            if len(ids) >= req.input_tokens:
                break
            ids.extend(pool.tokens(f"{tag}|block|{h}", block_size))
        if len(ids) < req.input_tokens:
            ids.extend(pool.tokens(f"{tag}|tail|{req.id}", req.input_tokens - len(ids)))
        ids = ids[: req.input_tokens]
    else:
        base = list(history) if history is not None else list(pool.bos)
        if history is None and req.prefix is not None:
            base.extend(pool.tokens(f"{tag}|prefix|{req.prefix.id}", req.prefix.tokens))
        ids = base + pool.tokens(f"{tag}|input|{req.id}", req.input_tokens)
    if len(ids) > max_prompt:
        stats.clipped += 1
        stats.clipped_tokens += len(ids) - max_prompt
        if req.hash_ids is not None:
            ids = ids[:max_prompt]
        else:
            # keep the start (shared prefix, reusable KV) and the newest tokens
            head = max_prompt // 2
            ids = ids[:head] + ids[len(ids) - (max_prompt - head) :]
    return ids


async def replay(
    client: PerfClient,
    trace: Trace,
    *,
    pool: TokenPool,
    tag: str,
    max_model_len: int,
) -> tuple[list[RequestRecord], ReplayStats]:
    """Replay a trace against one engine; returns one record per request (in trace order)."""
    stats = ReplayStats()
    done: dict[str, asyncio.Event] = {r.id: asyncio.Event() for r in trace.requests}
    finished_at: dict[str, float] = {}
    failed: set[str] = set()
    history_after: dict[str, list[int]] = {}
    session_history: dict[str, list[int]] = {}
    prev_in_session: dict[str, str] = {}
    deps: dict[str, list[str]] = {}
    needs_history: set[str] = {r.fork for r in trace.requests if r.fork}
    for r in trace.requests:
        d = list(r.after)
        if r.fork:
            d.append(r.fork)
        p = prev_in_session.get(r.session_id)
        if p:
            d.append(p)
        deps[r.id] = d
        prev_in_session[r.session_id] = r.id
    records: dict[str, RequestRecord] = {}
    t0 = time.perf_counter()

    async def one(r: TraceRequest) -> None:
        try:
            for d in deps[r.id]:
                await done[d].wait()
            ready = max([finished_at.get(d, t0) for d in deps[r.id]] or [t0])
            at = max(t0 + r.arrival_s, ready + r.pause_s)
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if any(d in failed for d in deps[r.id]):
                stats.failed_dependencies += 1
            hist = session_history.get(r.session_id)
            if hist is None and r.fork:
                hist = list(history_after.get(r.fork, []))
            max_prompt = max(1, max_model_len - r.output_tokens - 1)
            prompt = build_prompt(
                r,
                pool=pool,
                tag=tag,
                history=hist,
                block_size=trace.header.block_size,
                max_prompt=max_prompt,
                stats=stats,
            )
            rec = await client.stream(
                GenRequest(id=r.id, prompt=prompt, max_tokens=r.output_tokens, want_ids=r.hash_ids is None)
            )
            records[r.id] = rec
            if not rec.ok:
                failed.add(r.id)
            if r.hash_ids is None:
                new_hist = prompt + list(rec.token_ids or [])
                session_history[r.session_id] = new_hist
                if r.id in needs_history:
                    history_after[r.id] = new_hist
        finally:
            finished_at[r.id] = time.perf_counter()
            done[r.id].set()

    await asyncio.gather(*(one(r) for r in trace.requests))
    return [records[r.id] for r in trace.requests if r.id in records], stats


# ---------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """``python -m fasttrack.perf.trace import-mooncake IN.jsonl OUT.jsonl [--block-size N]``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fasttrack.perf.trace", description="Trace tools.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    imp = sub.add_parser("import-mooncake", help="convert a Mooncake-style trace into the fasttrack format")
    imp.add_argument("src", type=Path)
    imp.add_argument("dst", type=Path)
    imp.add_argument("--block-size", type=int, default=MOONCAKE_BLOCK_SIZE)
    imp.add_argument("--limit", type=int, default=None, help="keep the first N requests")
    show = sub.add_parser("describe", help="print the shape of a trace")
    show.add_argument("src", type=Path)
    ns = ap.parse_args(argv)
    try:
        if ns.cmd == "import-mooncake":
            rows = [json.loads(line) for line in ns.src.read_text(encoding="utf-8").splitlines() if line.strip()]
            tr = import_mooncake(rows, block_size=ns.block_size, source=f"mooncake import of {ns.src.name}")
            if ns.limit:
                tr = tr.head(ns.limit)
            ns.dst.write_text(dump_trace(tr), encoding="utf-8")
            print(json.dumps(tr.describe(), indent=1))
        else:
            print(json.dumps(load_trace(ns.src).describe(), indent=1))
    except (FasttrackError, OSError, ValueError) as exc:
        print(f"error: {getattr(exc, 'message', exc)}")
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
