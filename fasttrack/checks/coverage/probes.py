"""Out-of-scope situations (prefill, mixed prefill/decode, batch above the range), probed on one engine."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from pydantic import Field

from fasttrack.checks.batching import HOLD_PER_REQUEST_S, HOLD_S, hold_scheduler, release_after, run_batched
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.requests import gather_requests
from fasttrack.checks.windows import EvidenceWindow, WindowRecord
from fasttrack.engine.flags import arg_values
from fasttrack.inputs import PromptItem
from fasttrack.modelbase import DocModel

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle

CHECK = "coverage"
PROBE_TOKENS = 8
"""Decode tokens per request in the in-range probe (enough steps to see the path, few enough to be cheap)."""
MIXED_DECODE_TOKENS = 256
"""Tokens the decoding request of the mixed probe generates: it must still decode when the second one arrives,
after a few /metrics scrapes (a fast decode path finishes 48 tokens before that on two cores)."""
MIXED_PROMPT_REPEAT = 6
"""The mixed probe's second prompt: this many prompts of the set joined (a prefill of a few hundred tokens)."""
ABOVE_RANGE_TOKENS = 8
PROBE_ATTEMPTS = 3
"""Windows a situation probe may take before it is judged on a window without the situation's step.
Each retry doubles the decode length."""

SITUATION_KIND = {
    "prefill": "prefill",
    "mixed_prefill_decode": "mixed",
    "batch_above_range": "decode",
    "out_of_envelope_request": "decode",
}
"""Engine step kind each situation probed on a running engine is judged on (``unsupported_deployment``
needs an engine of its own: :class:`~fasttrack.checks.base.DeploymentCheck`)."""
ABOVE_RANGE = ("batch_above_range", "out_of_envelope_request")
"""Situations probed with a decode batch above the envelope's range. For ``out_of_envelope_request``
that is the request-side dimension an engine inside the envelope can serve beyond it: its context
cannot exceed the envelope, whose longest context is the engine's own ``--max-model-len``."""


class SituationProbe(DocModel):
    """One out-of-scope situation probed on one side."""

    situation: str
    side: str
    group: str
    window: WindowRecord | None = None
    attempts: int = 1
    """Windows opened for this probe: a probe whose window shows no step of the situation's kind
    (the engine did not form that step, e.g. a loaded machine finished the decode before the long
    prompt arrived) is repeated, up to PROBE_ATTEMPTS, with a longer decode."""
    steps: int = 0
    """Engine steps of the situation's kind seen in the probe."""
    optimized_steps: int = 0
    """Of those, steps that ran an optimized-path op."""
    stock_steps: int = 0
    """Of those, steps that ran a stock-path marker."""
    fallback_lines_window: list[str] = Field(default_factory=list)
    """Fallback log lines written during the probe."""
    fallback_lines_earlier: list[str] = Field(default_factory=list)
    """Fallback log lines written earlier in this engine's life (rate-limited loggers)."""
    fallback_metric_delta: float | None = None
    """Increase of fallback.metric during the probe."""
    note: str = ""


async def probe_situation(
    ctx: RunContext, session: EngineSession, client: Any, situation: str, prompts: list[PromptItem]
) -> SituationProbe:
    """Probe one out-of-scope situation in its own window (repeated with a longer decode when the window
    formed no step of the situation's kind)."""
    from fasttrack.engine import scrape_metrics

    eng = session.engine
    group = session.group
    fb = ctx.scope.fallback
    probe = SituationProbe(situation=situation, side=session.side, group=group.id)
    env = ctx.scope.envelope
    if situation in ABOVE_RANGE:
        if env is None:
            probe.note = "not probed: the scope has no envelope"
            return probe
        n = env.batch.max + 1
        cap = max_num_seqs(group.args.get(session.side, []))
        if cap is not None and cap < n:
            probe.note = f"not probed: the engine serves at most {cap} sequences (--max-num-seqs), fewer than {n}"
            return probe
    for attempt in range(1, PROBE_ATTEMPTS + 1):
        probe = SituationProbe(situation=situation, side=session.side, group=group.id, attempts=attempt)
        metric_before = None
        if fb and fb.metric:
            metric_before = (await scrape_metrics(eng)).total(fb.metric)
        start = eng.log_offset()
        suffix = "" if attempt == 1 else f"-attempt{attempt}"
        async with EvidenceWindow(
            ctx, eng, check=CHECK, name=f"coverage-{situation}-{group.id}{suffix}", points={}, side=session.side
        ) as win:
            if situation == "mixed_prefill_decode":
                await mixed(client, prompts, MIXED_DECODE_TOKENS * 2 ** (attempt - 1))
            else:  # a decode batch above the range (batch_above_range, out_of_envelope_request)
                assert env is not None
                n = env.batch.max + 1
                await batched(
                    client,
                    [prompts[(j * 3) % len(prompts)].prompt for j in range(n)],
                    ABOVE_RANGE_TOKENS * 2 ** (attempt - 1),
                )
        metric_delta = None
        if metric_before is not None and fb and fb.metric:
            metric_delta = (await scrape_metrics(eng)).total(fb.metric) - metric_before
        probe = read_probe(ctx, eng, probe, win.record, start, metric_delta)
        if attempt > 1:
            probe.note = (probe.note + "; " if probe.note else "") + (
                f"attempt {attempt}: the earlier window(s) formed no step of this kind"
            )
        if probe.steps or win.record is None or not win.record.available:
            return probe
        ctx.log(
            f"coverage: {situation} on the {session.side}: attempt {attempt} formed no such step"
            + ("; trying again with a longer decode" if attempt < PROBE_ATTEMPTS else "")
        )
    return probe


def read_probe(
    ctx: RunContext,
    eng: EngineHandle,
    probe: SituationProbe,
    rec: WindowRecord | None,
    start: int,
    metric_delta: float | None,
) -> SituationProbe:
    """Fill a probe from its window: steps of the situation's kind, their path, and the fallback lines."""
    fb = ctx.scope.fallback
    env = ctx.scope.envelope
    probe.window = rec
    probe.fallback_metric_delta = metric_delta
    kind = SITUATION_KIND[probe.situation]
    if rec is not None and rec.available:
        steps = [s for s in rec.steps if s.get("kind") == kind]
        if probe.situation in ABOVE_RANGE and env is not None:
            steps = [s for s in steps if int(s.get("batch", 0)) > env.batch.max]
        probe.steps = len(steps)
        probe.optimized_steps = sum(1 for s in steps if s.get("optimized_ops"))
        probe.stock_steps = sum(1 for s in steps if s.get("stock_ops"))
        probe.fallback_lines_window = list(rec.summary.get("fallback_lines") or [])
        if rec.summary.get("fallback_events") and not probe.fallback_lines_window:
            probe.fallback_lines_window = ["(fallback lines counted in the window)"]
    elif rec is not None:
        probe.note = rec.unavailable_reason or "no path evidence"
    if fb and fb.log_regex and not probe.fallback_lines_window and eng.log_path is not None:
        rx = re.compile(fb.log_regex)
        probe.fallback_lines_window = [ln for ln in eng.read_log(start).splitlines() if rx.search(ln)][:5]
        if not probe.fallback_lines_window:
            probe.fallback_lines_earlier = [ln for ln in eng.read_log(0, start).splitlines() if rx.search(ln)][-5:]
    return probe


# ------------------------------------------------------------------ judge


def max_num_seqs(args: list[str]) -> int | None:
    """The first ``--max-num-seqs`` of an engine's arguments (None when unset)."""
    given = arg_values(args, "--max-num-seqs")
    return int(given[0]) if given else None


async def gather_texts(client: Any, prompts: list[str], max_tokens: int) -> None:
    """Greedy requests sent together (failures are ignored; a crash or Ctrl-C is raised)."""
    await gather_requests(client.complete(p, max_tokens=max_tokens, temperature=0.0, ignore_eos=True) for p in prompts)


async def batched(client: Any, prompts: list[str], max_tokens: int) -> None:
    """One round of concurrent requests, repeated once if its timing shows they were not decoded together."""
    await run_batched(
        lambda: [client.complete(p, max_tokens=max_tokens, temperature=0.0, ignore_eos=True) for p in prompts],
        client=client,
        target=len(prompts),
        attempts=2,
    )


async def mixed(client: Any, prompts: list[Any], decode_tokens: int = MIXED_DECODE_TOKENS) -> None:
    """One request decodes; a long prompt arrives meanwhile, so a step mixes prefill and decode.

    The first request streams, so its decode is seen as it happens (a metrics scrape from a busy
    API server can lag by longer than the whole request)."""
    decoding = asyncio.Event()

    def seen(n_chunks: int) -> None:
        if n_chunks >= 2:
            decoding.set()

    first = asyncio.create_task(
        client.complete(
            prompts[1].prompt, max_tokens=decode_tokens, temperature=0.0, ignore_eos=True, stream=True, on_chunk=seen
        )
    )
    waiter = asyncio.ensure_future(decoding.wait())
    await asyncio.wait([first, waiter], timeout=30.0, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    long_prompt = " ".join(p.prompt for p in prompts[2 : 2 + MIXED_PROMPT_REPEAT])
    # Hold the scheduler (where the engine allows it) while the long prompt arrives, so the step
    # after the release runs the first request's decode and the second one's prefill together.
    held = not first.done() and await hold_scheduler(client)
    second = asyncio.ensure_future(client.complete(long_prompt, max_tokens=2, temperature=0.0, ignore_eos=True))
    if held:
        await release_after(client, HOLD_S + HOLD_PER_REQUEST_S, [first, second])
    res = await asyncio.gather(first, second, return_exceptions=True)
    for r in res:
        if isinstance(r, BaseException) and not isinstance(r, Exception):
            raise r
