"""Workloads: which config points each workload kind measures, and the requests of one run.

=============  ===============================================================  =====================
kind           what one run sends                                               points it measures
=============  ===============================================================  =====================
pure_decode    waves of ``batch`` requests (next wave when all finished), each  every point of the
               prompt exactly the point's context (a prefix shared by the       engine group
               context's requests + 16 tokens unique to the request, so prefill
               hits the prefix cache and decode dominates), ``output_len``
               tokens
context_sweep  waves of ``batch`` requests with prompts of exactly the point's  every context at the
               context, unique per request (every request pays its full        smallest batch
               prefill: TTFT at long context)
mixed          ``requests_per_run`` requests arriving as a seeded Poisson       per batch size, its
               process (``arrival_rate``/s), at most ``batch`` in flight, so    shortest-context
               prefills land during other requests' decode; prompts of          point
               ``input_len`` tokens (default: the point's context)
prompts        waves of ``batch`` requests with the shipped real prompts        per batch size, its
               (token ids from the engine's tokenizer), cycled                  shortest-context point
trace_replay   the whole trace (sessions, tool pauses, shared prefixes,         one row per engine
               parallel subagents) at its own timing                            group (``<group>-trace``)
concurrency_   ``requests_per_run`` requests (default 4 per user) kept         one row per level and
sweep          ``concurrency`` in flight, each finished one replaced by the     engine group
               next (closed loop); prompts of ``input_len`` tokens (default:    (``<group>-c<N>``)
               the group's shortest context), unique per request
=============  ===============================================================  =====================

Full-context points send ``max_model_len - output_len - 1`` prompt tokens (the
longest prompt that still leaves room for the output). Every request is greedy
with a fixed output length (``ignore_eos``). Content is deterministic per (workload,
point, run, request) and identical on both sides; apart from pure_decode's shared
prefix it is distinct between requests and runs, so runs of one lifetime do not
reuse each other's KV cache.

Before the runs of a point on each engine lifetime, one warm-up wave (``batch``
requests, at most 16 output tokens) is sent and discarded; for pure_decode one
request goes first so the shared prefix is computed once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fasttrack import attrs
from fasttrack.perf.loadgen import GenRequest, PerfClient, run_closed, run_open, run_waves
from fasttrack.perf.metrics import RequestRecord
from fasttrack.perf.tokens import TokenPool

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.perf.trace import ReplayStats, Trace
    from fasttrack.planning.plan import ConfigPoint, EngineGroup, Plan
    from fasttrack.scope import WorkloadSpec

Mode = Literal["waves", "open", "trace", "closed"]

WARMUP_TOKENS = 16
UNIQUE_TAIL = 16
"""pure_decode prompts: tokens at the end of each prompt that are unique to the request (the rest is shared)."""
DEFAULT_WAVES = 4
"""Waves per run when ``requests_per_run`` is not given."""


@dataclass
class WorkItem:
    """One (workload, point) cell the perf check measures and gates."""

    key: str
    """``<workload>@<point>``."""
    workload: str
    kind: str
    point: str
    """Config point id, or ``<group>-trace`` for trace replay."""
    group: str
    batch: int | None
    """Concurrency (None for trace replay: the trace decides)."""
    context: int | None
    """The point's context (prompt length for pure_decode/context_sweep)."""
    full_context: bool
    prompt_len: int | None
    """Tokens per prompt (None: real prompts or the trace decide)."""
    output_len: int | None
    requests_per_run: int
    mode: Mode
    arrival_rate: float | None = None
    point_dims: dict[str, Any] = field(default_factory=dict)
    """tp, dcp, spec, draft_length, batch, context, full_context (for claims matching)."""
    notes: list[str] = field(default_factory=list)

    def identity(self) -> dict[str, Any]:
        """The fields that say which measurement a table row is of (the start of every perf row)."""
        return {
            "workload": self.workload,
            "kind": self.kind,
            "point": self.point,
            "group": self.group,
            "batch": self.batch,
            "context": self.context,
        }

    def describe(self) -> dict[str, Any]:
        return {
            **self.identity(),
            "full_context": self.full_context,
            "prompt_len": self.prompt_len,
            "output_len": self.output_len,
            "requests_per_run": self.requests_per_run,
            "mode": self.mode,
            "arrival_rate": self.arrival_rate,
        }


def _dims(p: "ConfigPoint") -> dict[str, Any]:
    return {
        "tp": p.tp,
        "dcp": p.dcp,
        "spec": p.spec,
        "draft_length": p.draft_length,
        "acceptance_length": p.acceptance_length,
        "batch": p.batch,
        "context": p.context,
        "full_context": p.full_context,
    }


def _prompt_len(p: "ConfigPoint", output_len: int, max_model_len: int) -> tuple[int, list[str]]:
    room = max_model_len - output_len - 1
    if room < 1:
        return 1, [f"output_len {output_len} leaves no room for a prompt under max_model_len {max_model_len}"]
    if p.full_context:
        return room, []
    if p.context > room:
        return room, [
            f"context {p.context} + output {output_len} exceeds max_model_len {max_model_len}: "
            f"prompts cut to {room} tokens"
        ]
    return p.context, []


def _waves_requests(spec: "WorkloadSpec", batch: int) -> tuple[int, list[str]]:
    want = spec.requests_per_run or DEFAULT_WAVES * batch
    n = math.ceil(want / batch) * batch
    notes = [] if n == want else [f"requests_per_run {want} rounded up to {n} (whole waves of {batch})"]
    return n, notes


def plan_items(
    plan: "Plan",
    group: "EngineGroup",
    workloads: Sequence["WorkloadSpec"],
    *,
    max_model_len: int,
) -> list[WorkItem]:
    """The work items of one engine group, in measurement order (workload, then batch, then context)."""
    pts = sorted(plan.group_points(group), key=lambda p: (p.batch, p.full_context, p.context))
    if not pts:
        return []
    items: list[WorkItem] = []
    batches = sorted({p.batch for p in pts})

    def short(b: int) -> "ConfigPoint":
        cand = [p for p in pts if p.batch == b and not p.full_context] or [p for p in pts if p.batch == b]
        return min(cand, key=lambda p: p.context)

    for w in workloads:
        base_notes = []
        if w.kind in ("pure_decode", "context_sweep") and w.input_len is not None:
            base_notes.append(
                f"input_len {w.input_len} is not used by {w.kind}: the prompt length is each point's context"
            )
        if w.kind == "pure_decode":
            sel = pts
        elif w.kind == "context_sweep":
            sel = [p for p in pts if p.batch == batches[0]]
        elif w.kind in ("mixed", "prompts"):
            sel = [short(b) for b in batches]
        elif w.kind == "concurrency_sweep":
            items.extend(_sweep_items(w, group, short(batches[0]), max_model_len=max_model_len, notes=base_notes))
            continue
        elif w.kind == "trace_replay":
            items.append(_trace_item(w, group, base_notes))
            continue
        else:  # pragma: no cover - the scope's Literal forbids it
            continue
        for p in sel:
            notes = list(base_notes)
            if w.kind == "mixed" and w.input_len is not None:
                room = max_model_len - w.output_len - 1
                plen = min(w.input_len, room)
                if plen < w.input_len:
                    notes.append(f"input_len {w.input_len} cut to {plen} to fit max_model_len {max_model_len}")
            elif w.kind == "prompts":
                plen = None
            else:
                plen, n2 = _prompt_len(p, w.output_len, max_model_len)
                notes += n2
            if w.kind == "mixed":
                n_req = w.requests_per_run or DEFAULT_WAVES * p.batch
                mode: Mode = "open"
            else:
                n_req, n3 = _waves_requests(w, p.batch)
                notes += n3
                mode = "waves"
            items.append(
                _item(
                    w,
                    group,
                    p.id,
                    **attrs(p, "batch", "context", "full_context"),
                    prompt_len=plen,
                    output_len=w.output_len,
                    requests_per_run=n_req,
                    mode=mode,
                    arrival_rate=w.arrival_rate if w.kind == "mixed" else None,
                    point_dims=_dims(p),
                    notes=notes,
                )
            )
    return items


def _item(w: "WorkloadSpec", group: "EngineGroup", point: str, **fields: Any) -> WorkItem:
    """The work item of workload ``w`` at ``point`` of ``group``, keyed ``workload@point``; ``fields``: the rest
    of the item."""
    return WorkItem(key=f"{w.name}@{point}", workload=w.name, kind=w.kind, point=point, group=group.id, **fields)


def _trace_item(w: "WorkloadSpec", group: "EngineGroup", notes: list[str]) -> WorkItem:
    """The one item of a ``trace_replay`` workload on ``group``: the trace fixes each request's prompt and output
    length, so the item has none."""
    unused = ["output_len is not used by trace_replay: each request has its own"]
    return _item(
        w,
        group,
        f"{group.id}-trace",
        batch=None,
        context=None,
        full_context=False,
        prompt_len=None,
        output_len=None,
        requests_per_run=w.requests_per_run or 0,
        mode="trace",
        point_dims={"tp": group.tp, "dcp": group.dcp, "spec": group.spec, "draft_length": group.draft_length},
        notes=notes + (unused if "output_len" in w.model_fields_set else []),
    )


def _sweep_items(
    w: "WorkloadSpec", group: "EngineGroup", p: "ConfigPoint", *, max_model_len: int, notes: list[str]
) -> list[WorkItem]:
    """One item per concurrency level of a ``concurrency_sweep`` (prompts: ``input_len``, else the group's
    shortest context)."""
    out = []
    room = max_model_len - w.output_len - 1
    want = w.input_len or p.context
    plen = max(1, min(want, room))
    extra = [f"prompts cut to {plen} tokens to fit max_model_len {max_model_len}"] if plen < want else []
    for level in w.concurrencies or []:
        dims = {**_dims(p), "batch": level, "concurrency": level}
        out.append(
            _item(
                w,
                group,
                f"{group.id}-c{level}",
                batch=level,
                context=plen,
                full_context=False,
                prompt_len=plen,
                output_len=w.output_len,
                requests_per_run=w.requests_per_run or DEFAULT_WAVES * level,
                mode="closed",
                point_dims=dims,
                notes=list(notes) + extra,
            )
        )
    return out


# ---------------------------------------------------------------------------------- arrivals


def poisson_arrivals(n: int, rate: float, *, seed: int) -> list[float]:
    """Arrival times (s) of a Poisson process: cumulative exponential gaps of mean 1/rate, first at 0.

    Deterministic: ``numpy.random.default_rng(seed).exponential(1/rate, n)``, shifted so
    the first request arrives at t = 0.
    """
    if n < 1:
        return []
    if not rate > 0:
        raise ValueError("arrival rate must be positive")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    gaps[0] = 0.0
    return [float(x) for x in np.cumsum(gaps)]


def arrival_seed(item_key: str, run: int) -> int:
    """The seed of run ``run`` of an item: the same on both sides, different between runs."""
    import zlib

    return (zlib.crc32(item_key.encode("utf-8")) * 1000003 + run) % (2**31 - 1)


# ---------------------------------------------------------------------------------- one run


@dataclass
class RunInputs:
    """What a run needs besides the item: token content and the real prompts."""

    pool: TokenPool
    real_prompts: list[list[int]] = field(default_factory=list)
    """Token ids of the shipped prompt set (``prompts`` workloads)."""
    trace: "Trace | None" = None
    max_model_len: int = 0


def run_requests(item: WorkItem, run: int, inputs: RunInputs, *, warmup: bool = False) -> list[GenRequest]:
    """The requests of one run (or of the warm-up wave) of a waves/open item."""
    assert item.batch is not None and item.output_len is not None
    n = item.batch if warmup else item.requests_per_run
    out_len = min(WARMUP_TOKENS, item.output_len) if warmup else item.output_len
    tag = f"{item.key}|{'warmup' if warmup else f'run{run}'}"
    reqs = []
    for i in range(n):
        if item.kind == "prompts":
            if not inputs.real_prompts:
                raise ValueError("the prompts workload needs the prompt set's token ids")
            k = (run * item.requests_per_run + i) % len(inputs.real_prompts)
            prompt = inputs.real_prompts[k]
            room = inputs.max_model_len - out_len - 1
            if inputs.max_model_len and len(prompt) > room:
                prompt = prompt[-room:]
        elif item.kind == "pure_decode":
            assert item.prompt_len is not None
            prompt = shared_prefix_prompt(
                inputs.pool, f"{item.workload}|{item.prompt_len}", f"{tag}|{i}", item.prompt_len
            )
        else:
            assert item.prompt_len is not None
            prompt = inputs.pool.prompt(f"{tag}|{i}", item.prompt_len)
        reqs.append(GenRequest(id=f"{tag}|{i}", prompt=prompt, max_tokens=out_len))
    return reqs


def shared_prefix_prompt(pool: TokenPool, shared_key: str, key: str, n: int) -> list[int]:
    """``n`` tokens: BOS, a prefix shared by every request of this length (all batch sizes of one context),
    then UNIQUE_TAIL tokens of the request."""
    body = n - len(pool.bos[:n])
    tail = min(UNIQUE_TAIL, body)
    return pool.bos[:n] + pool.tokens(f"{shared_key}|shared", body - tail) + pool.tokens(key, tail)


async def execute(
    client: PerfClient, item: WorkItem, run: int, inputs: RunInputs
) -> tuple[list[RequestRecord], dict[str, Any]]:
    """Send one run of ``item``; returns the records and workload facts for the run's ``extra``."""
    if item.mode == "trace":
        from fasttrack.perf.trace import replay

        assert inputs.trace is not None
        tr = inputs.trace
        recs, st = await replay(
            client, tr, pool=inputs.pool, tag=f"{item.key}|run{run}", max_model_len=inputs.max_model_len
        )
        return recs, _replay_extra(st)
    reqs = run_requests(item, run, inputs)
    if item.mode == "waves":
        assert item.batch is not None
        return await run_waves(client, reqs, batch=item.batch), {}
    if item.mode == "closed":
        assert item.batch is not None
        return await run_closed(client, reqs, concurrency=item.batch), {"concurrency": item.batch}
    assert item.arrival_rate is not None
    seed = arrival_seed(item.key, run)
    arrivals = poisson_arrivals(len(reqs), item.arrival_rate, seed=seed)
    recs = await run_open(client, reqs, arrivals_s=arrivals, max_concurrency=item.batch)
    return recs, {"arrival_seed": seed, "arrival_rate": item.arrival_rate, "arrival_span_s": round(arrivals[-1], 4)}


def _replay_extra(st: "ReplayStats") -> dict[str, Any]:
    return {
        "clipped_requests": st.clipped,
        "clipped_tokens": st.clipped_tokens,
        "failed_dependencies": st.failed_dependencies,
    }


async def warm_up(client: PerfClient, item: WorkItem, inputs: RunInputs) -> int:
    """One discarded wave before an item's runs; returns the number of warm-up requests."""
    if item.mode == "trace":
        n = min(4, len(inputs.trace.requests)) if inputs.trace else 1
        reqs = [
            GenRequest(
                id=f"{item.key}|warmup|{i}",
                prompt=inputs.pool.prompt(f"{item.key}|warmup|{i}", 32),
                max_tokens=WARMUP_TOKENS,
            )
            for i in range(n)
        ]
        await run_waves(client, reqs, batch=n)
        return n
    reqs = run_requests(item, 0, inputs, warmup=True)
    assert item.batch is not None
    n = 0
    if item.kind == "pure_decode" and item.batch > 1:
        # one request first: it computes the shared prefix once, so the wave finds it in the prefix cache
        await run_waves(client, reqs[:1], batch=1)
        n += 1
    await run_waves(client, reqs, batch=item.batch)
    return n + len(reqs)
