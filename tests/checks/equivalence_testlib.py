"""Recorded greedy runs for the equivalence check's unit tests (no engine): records, filled sides and variants."""

from __future__ import annotations

import math

from helpers_checks import window

from fasttrack.checks.batching import verify_batch
from fasttrack.checks.equivalence import EquivalenceCheck, GreedyRecord, PointRun

VOCAB = list(range(100, 110))


def top(best: int, *, lp_best: float = -0.2, second: int | None = None, shift: float = 0.0) -> list[tuple[int, float]]:
    """A top-5 list with ``best`` on top (probabilities sum below 1)."""
    others = [t for t in VOCAB if t != best and t != second][: 4 if second is None else 3]
    out = [(best, lp_best + shift)]
    if second is not None:
        out.append((second, -1.8 + shift))
    out += [(t, -3.0 - i * 0.5 + shift) for i, t in enumerate(others)]
    return out


def record(
    point: str,
    batch: int,
    rnd: int,
    pid: str,
    tokens: list[int],
    *,
    shift: float = 0.0,
    seconds: dict[int, int] | None = None,
) -> GreedyRecord:
    seconds = seconds or {}
    tops = [top(t, second=seconds.get(i), shift=shift) for i, t in enumerate(tokens)]
    return GreedyRecord(
        point=point,
        batch=batch,
        round=rnd,
        prompt_id=pid,
        prompt_text=f"prompt {pid} about rivers",
        prompt_ids=[1, 5, 6, len(pid)],
        token_ids=tokens,
        logprobs=[t[0][1] for t in tops],
        top=tops,
        text=" ".join(map(str, tokens)),
        finish_reason="length",
    )


def fill(
    chk: EquivalenceCheck, ctx, *, cand_change=None, cand_window=None, base_window=None, variant_change=None
) -> None:
    """Identical greedy runs on both sides at every non-full point, and on every reference variant of the scope;
    ``cand_change(point, rec)`` edits the candidate's records, ``variant_change(name, point, rec)`` a variant's."""
    gid = ctx.plan.groups[0].id
    base, cand = {}, {}
    ref = ctx.scope.gates.equivalence.reference
    variants: dict[str, dict[str, PointRun]] = {name: {} for name in (ref.variants if ref else {})}
    for p in ctx.plan.points:
        if p.full_context:
            continue
        br = PointRun(point=p.id, batch=p.batch, context=p.context)
        cr = PointRun(point=p.id, batch=p.batch, context=p.context)
        rounds = math.ceil(8 / p.batch)
        for r in range(rounds):
            for j in range(p.batch):
                toks = [VOCAB[(r + j + k) % 10] for k in range(6)]
                br.records.append(record(p.id, p.batch, r, f"p{j}", toks))
                rec = record(p.id, p.batch, r, f"p{j}", toks)
                if cand_change:
                    rec = cand_change(p, rec) or rec
                cr.records.append(rec)
        # every measured round carries its batch check (the running-requests gauge peaked at the batch size)
        br.round_checks = [verify_batch(p.batch, running_samples=[p.batch]) for _ in range(rounds)]
        cr.round_checks = [verify_batch(p.batch, running_samples=[p.batch]) for _ in range(rounds)]
        dec = {p.batch: 20}
        br.window = base_window(p) if base_window else window("baseline", [p.id], decode=dec)
        cr.window = cand_window(p) if cand_window else window("candidate", [p.id], decode=dec)
        base[p.id], cand[p.id] = br, cr
        for name, runs in variants.items():
            recs = [(variant_change(name, p, r) or r) if variant_change else r for r in br.records]
            runs[p.id] = br.model_copy(update={"records": recs, "window": None})
    chk.runs[(gid, "baseline")] = base
    chk.runs[(gid, "candidate")] = cand
    for name, runs in variants.items():
        chk.variant_runs[(gid, name)] = runs
