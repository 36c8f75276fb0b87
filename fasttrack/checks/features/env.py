"""One side's feature collection on one engine group: the client, the inputs, the windows and the path probes."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from fasttrack.checks.batching import run_batched
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.features.model import JSON_MAX_TOKENS, PROBE_TOKENS, SideData
from fasttrack.checks.points import short_point
from fasttrack.checks.requests import gather_requests
from fasttrack.checks.windows import EvidenceWindow
from fasttrack.inputs import (
    PromptBuilder,
    PromptItem,
    TokenizerClient,
    load_passages,
    load_prompt_set,
    load_schema_cases,
    prompt_set_path,
)

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineClient
    from fasttrack.planning.plan import ConfigPoint

CHECK = "features"


class FeatureEnv:
    """What a feature test's ``collect`` works with on one side of one engine group."""

    def __init__(
        self,
        ctx: RunContext,
        session: EngineSession,
        side: SideData,
        base: SideData | None,
        client: EngineClient,
        *,
        mask_samples: int,
    ) -> None:
        self.ctx = ctx
        self.session = session
        self.side = side
        """This side's measurements (each feature records its typed result in ``side.results[<feature>]``)."""
        self.base = base
        """The baseline's measurements of this group, when this is the candidate (it reuses the baseline's choices)."""
        self.group = session.group
        self.client = client
        self.mask_samples = mask_samples
        """Samples per top-k / top-p mask test."""
        self.chat_ok: bool | None = None
        """Whether the chat endpoint works for this model (None until tried)."""
        self.tok = TokenizerClient(session.engine)
        prompt_file = prompt_set_path(ctx.scope, ctx.base_dir)
        self.prompts: list[PromptItem] = load_prompt_set(prompt_file)
        self.builder = PromptBuilder(self.tok, load_passages())

    def point(self, batch: int) -> str:
        """The short-context point at ``batch`` (the steps only use batch sizes that have one)."""
        p = short_point(self.ctx, self.group, batch)
        assert p is not None, f"no short-context point at batch {batch}"
        return p.id

    async def gather(self, coros: Iterable[Awaitable[Any]]) -> list[Any]:
        """Requests sent together; failures come back as exceptions, a crash is raised."""
        return await gather_requests(coros)

    @contextlib.asynccontextmanager
    async def window(
        self, point_id: str, name: str, *, points: dict[str, int | None] | None = None
    ) -> AsyncIterator[EvidenceWindow]:
        """A profiler window attributed to ``point_id`` (or to ``points``, split by batch size); its record is kept
        under its name."""
        win = EvidenceWindow(
            self.ctx,
            self.session.engine,
            check=CHECK,
            name=f"features-{name}-{point_id}",
            points=points or {point_id: None},
            side=self.session.side,
        )
        async with win:
            yield win
        if win.record is not None:
            self.side.windows[win.record.name] = win.record

    async def structured_request(self, prompt: str, rf: dict[str, Any], *, max_tokens: int = JSON_MAX_TOKENS) -> Any:
        """A chat request (how structured output is used in practice); completions when the model has no chat
        template."""
        from fasttrack.engine import EngineRequestError

        if self.chat_ok is not False:
            try:
                r = await self.client.chat(
                    [{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0, response_format=rf
                )
                self.chat_ok = True
                return r
            except EngineRequestError as exc:
                if self.chat_ok is None and exc.status_code == 400 and "template" in exc.server_message.lower():
                    self.chat_ok = False
                else:
                    raise
        return await self.client.complete(prompt, max_tokens=max_tokens, temperature=0.0, response_format=rf)

    async def full_prompts(self, point: ConfigPoint) -> list[list[int]]:
        """``batch`` prompts of exactly ``context`` tokens (real passages) for a full-context point."""
        return [await self.builder.exact(key=f"{point.id}/{j}", length=point.context) for j in range(point.batch)]

    # -- path evidence

    async def probe_short(self, batches: list[int], *, wave: int | None, structured: bool) -> None:
        """Path evidence for the short-context points: at every batch size, a structured-output round (the smallest
        schema; a plain greedy round when structured output is not tested) of PROBE_TOKENS tokens and, at the
        sampling batch, two sampling requests (``n = wave``, 2 tokens); one profiler window, split by batch size."""
        cases = load_schema_cases()
        case = min(cases, key=lambda c: (len(json.dumps(c.schema_)), c.name))
        rf = {"type": "json_schema", "json_schema": {"name": case.name, "schema": case.schema_, "strict": True}}
        pids = {b: self.point(b) for b in batches}
        client = self.client
        async with self.window(pids[batches[0]], "probe", points={pid: b for b, pid in pids.items()}):
            for b in batches:
                if structured:
                    texts = [case.prompts[(i + b) % len(case.prompts)] for i in range(b)]

                    def structured_round(texts: list[str] = texts) -> list[Coroutine[Any, Any, Any]]:
                        return [self.structured_request(p, rf, max_tokens=PROBE_TOKENS) for p in texts]

                    await run_batched(structured_round, client=client, target=b, attempts=2)
                else:
                    texts = [self.prompts[(i + b) % len(self.prompts)].prompt for i in range(b)]

                    def greedy_round(texts: list[str] = texts) -> list[Coroutine[Any, Any, Any]]:
                        return [
                            client.complete(p, max_tokens=PROBE_TOKENS, temperature=0.0, ignore_eos=True) for p in texts
                        ]

                    await run_batched(greedy_round, client=client, target=b, attempts=2)
            if wave is not None:
                for k in range(2):
                    await client.complete(
                        self.prompts[0].prompt, max_tokens=2, temperature=1.0, seed=k * wave, n=wave, ignore_eos=True
                    )

    async def probe_full(self, points: list[ConfigPoint]) -> None:
        """Path evidence for the full-context points: each point's prompts, PROBE_TOKENS tokens; one window."""
        client = self.client
        async with self.window(points[0].id, "probe", points={p.id: p.batch for p in points}):
            for p in points:
                ids_all = await self.full_prompts(p)

                def full_round(ids_all: list[list[int]] = ids_all) -> list[Coroutine[Any, Any, Any]]:
                    return [
                        client.complete(ids, max_tokens=PROBE_TOKENS, temperature=0.0, ignore_eos=True)
                        for ids in ids_all
                    ]

                await run_batched(full_round, client=client, target=p.batch, attempts=2)
