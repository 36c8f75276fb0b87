"""What the equivalence check keeps per request and per point, and how a point's rounds are folded."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from typing import Any

from pydantic import Field

from fasttrack.checks.batching import BatchCheck
from fasttrack.checks.windows import WindowRecord
from fasttrack.inputs import PromptItem
from fasttrack.modelbase import DocModel
from fasttrack.stats import GreedyComparison, compare_greedy
from fasttrack.stats.logprobs import TopLogprobs


class GreedyRecord(DocModel):
    """One greedy request on one side."""

    point: str
    """Config point id."""
    batch: int
    """Requests sent at once."""
    round: int
    """Round index at this point (rounds run one after another)."""
    prompt_id: str
    """Prompt set id."""
    prompt_text: str
    """The prompt text (before length adjustment)."""
    prompt_ids: list[int]
    """Token ids sent."""
    token_ids: list[int] = Field(default_factory=list)
    """Generated token ids."""
    logprobs: list[float | None] = Field(default_factory=list)
    """Logprob of each generated token."""
    top: list[list[tuple[int, float]]] = Field(default_factory=list)
    """Top-k (token id, logprob) per generated position."""
    text: str = ""
    """Generated text."""
    finish_reason: str | None = None
    error: str | None = None
    """The server's error message, when the request failed."""

    def top_maps(self) -> list[TopLogprobs | None]:
        """Top-k logprobs per position as maps (the chosen token added where it is not among them)."""
        out: list[TopLogprobs | None] = []
        for i, pos in enumerate(self.top):
            d: dict[Hashable, float] = {t: lp for t, lp in pos}
            lp = self.logprobs[i] if i < len(self.logprobs) else None
            if i < len(self.token_ids) and lp is not None:
                d.setdefault(self.token_ids[i], float(lp))
            out.append(d or None)
        return out


class PointRun(DocModel):
    """One side's requests at one config point."""

    point: str
    batch: int
    context: int
    records: list[GreedyRecord] = Field(default_factory=list)
    window: WindowRecord | None = None
    """The profiled path probe of this point (decode steps per batch size, optimized or stock)."""
    round_checks: list[BatchCheck] = Field(default_factory=list)
    """Batch composition per round, from the requests' completion times."""


class Explanation(DocModel):
    """Text around a divergence, decoded with the engine's tokenizer."""

    before: str
    """The continuation up to the divergence."""
    baseline_next: str
    """The baseline's continuation from the divergence on."""
    candidate_next: str
    """The candidate's continuation from the divergence on."""
    baseline_token: str
    candidate_token: str
    baseline_top: list[tuple[str, float]]
    """The baseline's top-k at the divergence (text, logprob)."""
    candidate_top: list[tuple[str, float]]


def prompt_sha(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def rounds_check(run: PointRun) -> BatchCheck | None:
    """Every round's batch check (metrics samples) and the profiled window's decode steps at the batch size, folded
    into one: verified only if every round peaked at the batch size and the trace shows decode steps at it."""
    checks = [(f"round {i}", c) for i, c in enumerate(run.round_checks)]
    if run.window is not None and run.window.available:
        n_at, _ = run.window.steps_at(run.batch)
        sizes = ", ".join(f"{v}x batch {k}" for k, v in sorted(run.window.decode_batch_sizes.items()))
        checks.append(
            (
                "trace",
                BatchCheck(
                    target=run.batch,
                    verified=n_at >= 1,
                    source="profiler",
                    steps_at_target=n_at,
                    decode_steps=run.window.decode_steps,
                    detail=f"{n_at} decode steps at batch {run.batch} in window {run.window.name} ({sizes})",
                ),
            )
        )
    elif not checks and run.window is not None:
        checks.append(("window", run.window.batch_check(run.batch)))
    if not checks:
        return None
    bad = [(lab, c) for lab, c in checks if not c.verified]
    shown = bad or checks[:1] + [x for x in checks if x[0] == "trace"]
    detail = "; ".join(f"{lab}: {c.detail}" for lab, c in shown)
    if not bad and len(checks) > len(shown):
        detail += f"; {len(checks) - len(shown)} more check(s) verified"
    return BatchCheck(
        target=run.batch,
        verified=not bad,
        source="+".join(sorted({c.source for _, c in checks})),
        steps_at_target=sum(c.steps_at_target for _, c in checks),
        decode_steps=sum(c.decode_steps for _, c in checks),
        above_target=sum(c.above_target for _, c in checks),
        detail=detail,
    )


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def compare(br: GreedyRecord, cr: GreedyRecord, top_k: int) -> GreedyComparison:
    return compare_greedy(br.token_ids, cr.token_ids, br.top_maps(), cr.top_maps(), top_k=top_k)


def record_from(point: str, batch: int, rnd: int, item: PromptItem, ids: list[int], res: Any) -> GreedyRecord:
    rec = GreedyRecord(point=point, batch=batch, round=rnd, prompt_id=item.id, prompt_text=item.prompt, prompt_ids=ids)
    if isinstance(res, BaseException):
        from fasttrack.engine import EngineCrashed

        if isinstance(res, EngineCrashed) or not isinstance(res, Exception):  # a crash, or Ctrl-C's cancellation
            raise res
        rec.error = getattr(res, "message", None) or f"{type(res).__name__}: {res}"
        return rec
    ch = res.choice
    rec.text = ch.text
    rec.finish_reason = ch.finish_reason
    positions = ch.logprobs or []
    rec.token_ids = list(ch.token_ids or [p.token_id for p in positions if p.token_id is not None])
    rec.logprobs = [p.logprob for p in positions]
    rec.top = [[(t.token_id, t.logprob) for t in p.top if t.token_id is not None] for p in positions]
    return rec
