"""One side's equivalence collection on one engine group: the request plan, the path probes, the measured rounds.

The first side to run an engine group fixes its requests (prompt ids and token ids per round); the other side
sends the same ones. See :mod:`fasttrack.checks.equivalence.check` for what is measured and why.
"""

from __future__ import annotations

import math
from collections.abc import Coroutine
from typing import Any

from fasttrack.checks.batching import run_batched
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.equivalence.records import PointRun, record_from
from fasttrack.checks.windows import EvidenceWindow
from fasttrack.inputs import (
    PASSAGES,
    PromptBuilder,
    PromptItem,
    TokenizerClient,
    load_passages,
    load_prompt_set,
    prompt_set_path,
)
from fasttrack.planning.plan import ConfigPoint

PROBE_TOKENS = 6
"""Tokens per request of the profiled path probe (a prefill and a few decode steps per point)."""
PACER_TOKENS = 1024
"""Prompt length of the prefill-only pacer request sent just before each round (see ``run_batched``)."""

Rounds = list[list[tuple[PromptItem, list[int]]]]
"""The rounds of one point: per round, (prompt, token ids) of each request."""


class SideCollection:
    """The equivalence requests of one side on one engine group, step by step."""

    def __init__(
        self,
        ctx: RunContext,
        session: EngineSession,
        side_runs: dict[str, PointRun],
        plans: dict[str, Rounds],
        *,
        check: str,
        max_attempts: int,
    ) -> None:
        self.ctx, self.session, self.check, self.max_attempts = ctx, session, check, max_attempts
        self.gate = ctx.scope.gates.equivalence
        prompt_file = prompt_set_path(ctx.scope, ctx.base_dir)
        self.prompts = load_prompt_set(prompt_file)
        ctx.provenance.input_file(prompt_file)
        ctx.provenance.input_file(PASSAGES)
        self.builder = PromptBuilder(TokenizerClient(session.engine), load_passages())
        self.points = [p for p in ctx.plan.group_points(session.group) if not p.full_context]
        self.max_len = ctx.scope.envelope.context.max_model_len if ctx.scope.envelope else None
        self.side_runs = side_runs
        """point id -> this side's run (filled here)."""
        self.plans = plans
        """point id -> its rounds, fixed by the first side that ran this group."""
        self.client: Any = None
        self.pacers = 0

    async def run(self, client: Any, *, n_requests: int, probe: bool = True) -> None:
        """Plan the requests (first side only), probe the path (``probe``: a reference variant needs no path
        evidence), then every round of every point."""
        self.client = client
        await self.plan_requests(n_requests)
        if probe:
            await self.probe()
        for point in self.points:
            for r in range(len(self.plans[point.id])):
                await self.run_round(point, r)

    async def plan_requests(self, n_requests: int) -> None:
        """At least ``n_requests`` per point in rounds of ``batch``, prompts of length within [context/2, context]."""
        for idx, point in enumerate(self.points):
            if point.id in self.plans:
                continue
            b = point.batch
            rounds = max(1, math.ceil(n_requests / b))
            high = point.context if self.max_len is None else min(point.context, self.max_len - self.gate.max_tokens)
            low = max(1, high // 2)
            rows: Rounds = []
            for r in range(rounds):
                row = []
                for j in range(b):
                    item = self.prompts[(idx * 7 + r * b + j) % len(self.prompts)]
                    ids = await self.builder.bounded(item.prompt, key=f"{point.id}/{item.id}", low=low, high=high)
                    row.append((item, ids))
                rows.append(row)
            self.plans[point.id] = rows

    async def pacer(self) -> Any:
        """A prefill-only request with a fresh (uncached) prompt, so the engine is busy when the round arrives."""
        pacer_len = max(16, min(PACER_TOKENS, (self.max_len or PACER_TOKENS + 64) - 64))
        self.pacers += 1
        ids = await self.builder.exact(key=f"pacer-{self.session.side}-{self.pacers}", length=pacer_len)
        return await self.client.complete(ids, max_tokens=1, temperature=0.0)

    async def run_round(self, point: ConfigPoint, r: int) -> None:
        """One measured round. A round whose timing shows the requests did not decode together is repeated (greedy
        outputs are deterministic, so this selects the batch composition, not the outputs); attempts are recorded."""
        run = self.side_runs.setdefault(point.id, PointRun(point=point.id, batch=point.batch, context=point.context))
        row = self.plans[point.id][r]
        client, gate = self.client, self.gate
        results, bc = await run_batched(
            lambda: [
                client.complete(
                    ids,
                    max_tokens=gate.max_tokens,
                    temperature=0.0,
                    logprobs=gate.top_k,
                    tokens_as_ids=True,
                    ignore_eos=True,
                )
                for _, ids in row
            ],
            client=client,
            target=len(row),
            attempts=self.max_attempts,
            pacer=self.pacer,
        )
        for (item, ids), res in zip(row, results, strict=False):
            run.records.append(record_from(point.id, point.batch, r, item, ids, res))
        run.round_checks.append(bc)

    async def probe(self) -> None:
        """Path evidence: a short probe per point (its first round's prompts, PROBE_TOKENS tokens), all points of one
        context in one profiler window, split by batch size. Trace export costs seconds per window and tens of ms
        per engine step on small hosts, so the measured rounds are not profiled."""
        client, session, group = self.client, self.session, self.session.group
        for c in sorted({p.context for p in self.points}):
            at_c = [p for p in self.points if p.context == c]
            async with EvidenceWindow(
                self.ctx,
                session.engine,
                check=self.check,
                name=f"equivalence-{group.id}-ctx{c}",
                points={p.id: p.batch for p in at_c},
                side=session.side,
            ) as win:
                for point in at_c:

                    def probe_round(point: ConfigPoint = point) -> list[Coroutine[Any, Any, Any]]:
                        return [
                            client.complete(ids, max_tokens=PROBE_TOKENS, temperature=0.0, ignore_eos=True)
                            for _, ids in self.plans[point.id][0]
                        ]

                    await run_batched(probe_round, client=client, target=point.batch, attempts=2)
            for point in at_c:
                self.side_runs.setdefault(point.id, PointRun(point=point.id, batch=point.batch, context=point.context))
                self.side_runs[point.id].window = win.record
