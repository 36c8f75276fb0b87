"""Workloads: which points each kind covers, exact prompt lengths, seeded Poisson arrivals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fasttrack.checks.base import build_run_plan
from fasttrack.perf.tokens import TokenPool
from fasttrack.perf.workloads import UNIQUE_TAIL, RunInputs, arrival_seed, plan_items, poisson_arrivals, run_requests
from fasttrack.scope import WorkloadSpec, load_scope


@pytest.fixture(scope="module")
def demo():
    loaded = load_scope("demo-llama")
    return loaded.scope


def _items(scope, tier, workloads):
    plan = build_run_plan(scope, tier=tier)
    # the stock-decode group (the standard tier adds the speculative group, whose items take the same shape)
    group = next(g for g in plan.groups if g.spec == "none")
    return plan, plan_items(plan, group, workloads, max_model_len=scope.envelope.context.max_model_len)


def test_pure_decode_covers_every_point_with_its_context(demo) -> None:
    plan, items = _items(
        demo, "smoke", [WorkloadSpec(name="decode", kind="pure_decode", output_len=64, requests_per_run=24)]
    )
    assert {i.point for i in items} == {p.id for p in plan.points}
    for it in items:
        p = plan.point(it.point)
        assert it.batch == p.batch and it.mode == "waves"
        assert it.requests_per_run % it.batch == 0
        if p.full_context:
            assert it.prompt_len == demo.envelope.context.max_model_len - 64 - 1
        else:
            assert it.prompt_len == p.context


def test_context_sweep_mixed_prompts_and_trace_points(demo) -> None:
    wls = [
        WorkloadSpec(name="ctx", kind="context_sweep", output_len=32),
        WorkloadSpec(name="mix", kind="mixed", input_len=256, output_len=64, arrival_rate=20.0, requests_per_run=10),
        WorkloadSpec(name="real", kind="prompts", output_len=16),
        WorkloadSpec(name="agent", kind="trace_replay", trace="traces/x.jsonl"),
    ]
    plan, items = _items(demo, "standard", wls)
    by = {}
    for it in items:
        by.setdefault(it.workload, []).append(it)
    assert {it.batch for it in by["ctx"]} == {1}
    assert {it.context for it in by["ctx"]} == {p.context for p in plan.points}
    assert sorted(it.batch for it in by["mix"]) == [1, 2, 3, 4, 8]
    assert all(not it.full_context and it.prompt_len == 256 and it.mode == "open" for it in by["mix"])
    assert all(it.prompt_len is None and it.mode == "waves" for it in by["real"])
    (agent,) = by["agent"]
    assert agent.mode == "trace" and agent.point.endswith("-trace") and agent.batch is None


def test_requests_rounded_to_whole_waves_and_unused_input_len_noted(demo) -> None:
    _, items = _items(
        demo, "smoke", [WorkloadSpec(name="d", kind="pure_decode", input_len=16, output_len=8, requests_per_run=10)]
    )
    b3 = next(i for i in items if i.batch == 3)
    assert b3.requests_per_run == 12
    assert any("rounded up" in n for n in b3.notes)
    assert all(any("input_len 16 is not used" in n for n in i.notes) for i in items)


def test_poisson_arrivals_are_seeded_and_poisson() -> None:
    a = poisson_arrivals(2000, 20.0, seed=7)
    assert a == poisson_arrivals(2000, 20.0, seed=7)
    assert a != poisson_arrivals(2000, 20.0, seed=8)
    assert a[0] == 0.0 and all(x <= y for x, y in zip(a, a[1:], strict=False))
    gaps = np.diff(a)
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.08)
    # exponential gaps: Kolmogorov-Smirnov against Exp(mean 1/20)
    assert stats.kstest(gaps, "expon", args=(0, 1 / 20.0)).pvalue > 0.001
    assert arrival_seed("mix@p", 0) != arrival_seed("mix@p", 1)
    assert arrival_seed("mix@p", 3) == arrival_seed("mix@p", 3)
    with pytest.raises(ValueError):
        poisson_arrivals(3, 0.0, seed=1)


def test_run_requests_exact_lengths_deterministic_and_distinct_runs(demo) -> None:
    _, items = _items(demo, "smoke", [WorkloadSpec(name="d", kind="pure_decode", output_len=32, requests_per_run=8)])
    pool = TokenPool(list(range(3, 500)), bos=[0])
    inputs = RunInputs(pool=pool, max_model_len=demo.envelope.context.max_model_len)
    it = next(i for i in items if i.full_context and i.batch == 4)
    r0 = run_requests(it, 0, inputs)
    assert len(r0) == 8 and all(len(r.prompt) == it.prompt_len and r.prompt[0] == 0 for r in r0)
    assert all(r.max_tokens == 32 for r in r0)
    assert [r.prompt for r in r0] == [r.prompt for r in run_requests(it, 0, inputs)]
    # pure decode: one prefix shared by every request of this context (all batch sizes), a unique tail each
    tail = UNIQUE_TAIL
    b8 = next(i for i in items if i.full_context and i.batch == 8)
    shared = r0[0].prompt[:-tail]
    assert all(r.prompt[:-tail] == shared for r in r0 + run_requests(b8, 0, inputs))
    r1 = run_requests(it, 1, inputs)
    assert all(a.prompt[-tail:] != b.prompt[-tail:] for a, b in zip(r0, r1, strict=False))
    assert len({tuple(r.prompt[-tail:]) for r in r0}) == len(r0)
    warm = run_requests(it, 0, inputs, warmup=True)
    assert len(warm) == 4 and all(r.max_tokens == 16 for r in warm)
    # the context sweep pays a full prefill per request: nothing shared
    _, ctx_items = _items(
        demo, "smoke", [WorkloadSpec(name="c", kind="context_sweep", output_len=32, requests_per_run=2)]
    )
    c = next(i for i in ctx_items if i.full_context)
    cr = run_requests(c, 0, inputs)
    assert len(cr) == 2 and cr[0].prompt[1:6] != cr[1].prompt[1:6] and len(cr[0].prompt) == c.prompt_len


def test_real_prompts_are_cycled_and_cut_to_fit(demo) -> None:
    _, items = _items(demo, "smoke", [WorkloadSpec(name="real", kind="prompts", output_len=8, requests_per_run=4)])
    pool = TokenPool(list(range(3, 500)), bos=[0])
    real = [[0, 5, 6], [0, 7], list(range(2000))]
    inputs = RunInputs(pool=pool, real_prompts=real, max_model_len=1024)
    it = next(i for i in items if i.batch == 2)
    reqs = run_requests(it, 0, inputs) + run_requests(it, 1, inputs)
    assert [r.prompt for r in reqs[:3]] == real[:2] + [list(range(2000))[-(1024 - 8 - 1) :]]
    assert reqs[3].prompt == real[0]
    assert all(len(r.prompt) <= 1024 - 8 - 1 for r in reqs)


def test_token_pool() -> None:
    pool = TokenPool(list(range(100, 200)), bos=[1])
    assert pool.prompt("k", 50) == pool.prompt("k", 50)
    assert len(pool.prompt("k", 1)) == 1 and pool.prompt("k", 1) == [1]
    assert len(pool.prompt("k", 777)) == 777
    assert pool.tokens("a", 30) != pool.tokens("b", 30)
    assert all(100 <= t < 200 for t in pool.tokens("x", 500))
    with pytest.raises(ValueError):
        TokenPool([1, 2, 3])
