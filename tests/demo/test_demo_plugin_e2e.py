"""The demo plugin in real vLLM engines: the candidate is faithful to the baseline,
logs its fallbacks, and each planted defect has its effect.

The tests use the session's engines (``tests/conftest.py``), shared with the other
modules: the baseline's greedy outputs are taken while its engine is up
(``baseline_greedy``), the candidates' when their turn comes, and the ``slow-batch``
candidate runs next to the baseline, as in the interleaved perf test. So the defect
tests cost no engine start of their own.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

import pytest
from demo_engines import SLOW_FACTOR, demo_engine, engine_phase, require_demo_target, set_defect

pytestmark = pytest.mark.e2e

BATCHES = (1, 2, 3, 4, 8)
MAX_TOKENS = 24
LOGPROB_TOL = 1e-3
"""Largest |logprob difference| allowed between candidate and baseline on the same
greedy tokens (float32; measured differences are about 1e-5)."""
PROMPTS = (
    "Alice was beginning to get very tired",
    "Four score and seven years ago",
    "The quick brown fox",
    "Call me Ishmael.",
    "It was the best of times",
    "In the beginning God created",
    "We hold these truths",
    "To be, or not to be",
)
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "ok"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Greedy:
    """Greedy completions of ``PROMPTS[:b]`` sent concurrently, per batch size ``b``."""

    tokens: dict[int, list[list[str]]]
    logprobs: dict[int, list[list[float]]]


async def _post(client: Any, engine: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await client.post(engine.base_url.rstrip("/") + path, json={"model": engine.model, **body}, timeout=600)
    assert r.status_code == 200, r.text[:500]
    return r.json()


def _greedy(engine: Any) -> Greedy:
    import httpx

    async def go() -> Greedy:
        tokens: dict[int, list[list[str]]] = {}
        logprobs: dict[int, list[list[float]]] = {}
        async with httpx.AsyncClient() as c:
            await _post(c, engine, "/v1/completions", {"prompt": "warm up", "max_tokens": 2})
            for b in BATCHES:
                outs = await asyncio.gather(
                    *[
                        _post(
                            c,
                            engine,
                            "/v1/completions",
                            {
                                "prompt": p,
                                "max_tokens": MAX_TOKENS,
                                "temperature": 0.0,
                                "logprobs": 1,
                                "ignore_eos": True,
                            },
                        )
                        for p in PROMPTS[:b]
                    ]
                )
                tokens[b] = [o["choices"][0]["logprobs"]["tokens"] for o in outs]
                logprobs[b] = [o["choices"][0]["logprobs"]["token_logprobs"] for o in outs]
        return Greedy(tokens, logprobs)

    return asyncio.run(go())


def _json_conformance(engine: Any, n: int = 6) -> list[bool]:
    import httpx
    import jsonschema

    async def go() -> list[bool]:
        async with httpx.AsyncClient() as c:
            outs = await asyncio.gather(
                *[
                    _post(
                        c,
                        engine,
                        "/v1/chat/completions",
                        {
                            "messages": [{"role": "user", "content": f"{p} Reply in JSON."}],
                            "max_tokens": 96,
                            "temperature": 0.0,
                            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}},
                        },
                    )
                    for p in PROMPTS[:n]
                ]
            )
        ok = []
        for o in outs:
            try:
                jsonschema.validate(json.loads(o["choices"][0]["message"]["content"]), SCHEMA)
                ok.append(True)
            except (ValueError, jsonschema.ValidationError):
                ok.append(False)
        return ok

    return asyncio.run(go())


def _tpot_ms(engine: Any, batch: int, *, tokens: int = 96, reps: int = 3) -> float:
    """Median time per output token (ms) of ``batch`` concurrent streams."""
    import httpx

    async def stream(c: Any, prompt: str) -> float:
        body = {
            "model": engine.model,
            "prompt": prompt,
            "max_tokens": tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
        }
        times: list[float] = []
        async with c.stream("POST", engine.base_url.rstrip("/") + "/v1/completions", json=body, timeout=600) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    times.append(time.perf_counter())
        return (times[-1] - times[0]) / (len(times) - 1) * 1000

    async def go() -> float:
        from fasttrack.checks.batching import hold_scheduler, release_after

        async with httpx.AsyncClient() as c, engine.client() as ctl:
            samples = []
            for _ in range(reps):
                # the scheduler is held while the streams arrive, so they are prefilled and decoded together
                assert await hold_scheduler(ctl), "the engine serves no scheduler hold"
                tasks = [asyncio.ensure_future(stream(c, PROMPTS[i])) for i in range(batch)]
                await release_after(ctl, 0.5, tasks)
                samples += await asyncio.gather(*tasks)
            return statistics.median(samples)

    return asyncio.run(go())


@pytest.fixture(scope="session")
@engine_phase("baseline")
def baseline_greedy(engine_slot: Any, demo_model: Any, demo_target: Any) -> Greedy:
    """The session's baseline engine's greedy completions (taken while it is up)."""
    require_demo_target(demo_model)
    return _greedy(demo_engine(engine_slot, demo_model, demo_target, "baseline"))


def test_baseline_greedy_completions_are_whole(baseline_greedy: Greedy) -> None:
    for b in BATCHES:
        assert len(baseline_greedy.tokens[b]) == b and len(baseline_greedy.logprobs[b]) == b
        assert all(len(t) == MAX_TOKENS for t in baseline_greedy.tokens[b]), b
        assert all(lp is None or lp <= 0 for lps in baseline_greedy.logprobs[b] for lp in lps), b


def _first_divergence(a: list[str], b: list[str]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)


def test_candidate_is_faithful_to_the_baseline(baseline_greedy: Greedy, candidate_engine) -> None:
    engine = candidate_engine
    start = engine.log_offset()
    cand = _greedy(engine)
    for b in BATCHES:
        for i, (ct, bt) in enumerate(zip(cand.tokens[b], baseline_greedy.tokens[b], strict=False)):
            assert ct == bt, f"batch {b} request {i}: greedy tokens diverge at {_first_divergence(ct, bt)}"
            for cl, bl in zip(cand.logprobs[b][i], baseline_greedy.logprobs[b][i], strict=False):
                if cl is not None and bl is not None:
                    assert abs(cl - bl) <= LOGPROB_TOL, f"batch {b} request {i}: logprob {cl} vs {bl}"
    log = engine.read_log(start)
    assert "fasttrack-demo fallback reason=prefill" in log or "fasttrack-demo fallback reason=mixed" in log


def test_candidate_keeps_structured_output(candidate_engine) -> None:
    ok = _json_conformance(candidate_engine)
    assert all(ok), f"conforming JSON outputs: {ok}"


# --- planted defects ----------------------------------------------------------


def test_numerics_batch_defect_diverges_at_batch_3(baseline_greedy: Greedy, numerics_batch_engine) -> None:
    # three requests sent together share their decode steps only when the engine admits them together; on a
    # busy host one can lag behind, so up to three tries (a clean candidate diverges in none of them)
    tries = []
    for _ in range(3):
        cand = _greedy(numerics_batch_engine)
        for b in (1, 2):
            assert cand.tokens[b] == baseline_greedy.tokens[b], f"batch {b} should match the baseline"
        diverged = [
            _first_divergence(ct, bt) for ct, bt in zip(cand.tokens[3], baseline_greedy.tokens[3], strict=False)
        ]
        tries.append(diverged)
        if all(d is not None for d in diverged):
            break
    assert all(d is not None for d in tries[-1]), f"first divergence per request at batch 3, per try: {tries}"
    # (runs at batch 4 and 8 can contain batch-3 steps where requests start or end
    # out of step, so they are not asserted either way)


def test_ignore_temperature_defect_keeps_greedy_but_changes_logprobs(
    baseline_greedy: Greedy, ignore_temperature_engine
) -> None:
    cand = _greedy(ignore_temperature_engine)
    assert cand.tokens == baseline_greedy.tokens
    # decode-step logprobs (positions >= 1) come from logits scaled by 2: sharper
    diffs = [
        c - b
        for bt in BATCHES
        for cl, bl in zip(cand.logprobs[bt], baseline_greedy.logprobs[bt], strict=False)
        for c, b in zip(cl[1:], bl[1:], strict=False)
    ]
    assert statistics.mean(diffs) > 0.05, f"mean logprob shift {statistics.mean(diffs):.4f}"
    # the first token comes from the prefill (stock path) and is unaffected
    first = [
        abs(cl[0] - bl[0])
        for bt in BATCHES
        for cl, bl in zip(cand.logprobs[bt], baseline_greedy.logprobs[bt], strict=False)
    ]
    assert max(first) <= LOGPROB_TOL


def test_broken_json_defect_breaks_structured_output_only(baseline_greedy: Greedy, broken_json_engine) -> None:
    engine = broken_json_engine
    ok = _json_conformance(engine)
    assert not any(ok), f"conforming JSON outputs: {ok}"
    assert _greedy(engine).tokens == baseline_greedy.tokens


def test_silent_fallback_defect_claims_the_fast_path_and_runs_stock(
    baseline_greedy: Greedy, silent_fallback_engine
) -> None:
    engine = silent_fallback_engine
    start = engine.log_offset()
    assert _greedy(engine).tokens == baseline_greedy.tokens
    log = engine.read_log(0)
    assert "decode_backend=latency_specialized enabled" in log
    assert "fasttrack-demo fast-path first decode step" in log
    # every decode step was diverted, and none of them was logged as a fallback
    reasons = {line.split("reason=")[1].split()[0] for line in engine.read_log(start).splitlines() if "reason=" in line}
    assert reasons <= {"prefill", "mixed"}, reasons


def test_slow_batch_defect_slows_batch_4(slow_batch_engine, engine_slot) -> None:
    """The session candidate's ``slow-batch`` is a factor (``FASTTRACK_DEMO_SLOW_FACTOR``, ``SLOW_FACTOR``): batch 4
    slows down by at least about that much against the same engine without the defect, and batches 3 and 5 do
    not. A large factor overshoots (the busy-wait holds the core that the API server's output handling shares,
    and that handling then counts in the next step's own time): 3 gave 4.6x (14.6 against 3.2 ms)."""
    engine = slow_batch_engine
    t3, t4, t5 = (_tpot_ms(engine, b) for b in (3, 4, 5))
    set_defect(engine_slot, None)
    try:
        clean4 = _tpot_ms(engine, 4)
    finally:
        set_defect(engine_slot, "slow-batch")
    figures = f"median TPOT ms: batch 3 {t3:.2f}, batch 4 {t4:.2f} (clean {clean4:.2f}), batch 5 {t5:.2f}"
    assert 0.8 * SLOW_FACTOR < t4 / clean4 < 2.5 * SLOW_FACTOR and t4 > max(t3, t5), figures
