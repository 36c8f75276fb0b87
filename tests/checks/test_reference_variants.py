"""The reference variants' engines (fasttrack/pipeline/variants.py) and what the plan prices for them, with a
fake engine start (no vLLM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers_checks import demo_ctx

from fasttrack.checks.base import build_run_plan, registered_checks
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.equivalence import EquivalenceCheck
from fasttrack.checks.equivalence.reference import VariantCollector
from fasttrack.checks.features import FeaturesCheck
from fasttrack.engine.errors import EngineStartError
from fasttrack.errors import FasttrackError
from fasttrack.host.models import ResolvedModel
from fasttrack.pipeline.engines import RunState
from fasttrack.pipeline.variants import run_variants
from fasttrack.planning.cost import STARTS, measured, plan_cost
from fasttrack.scope import StockReference, load_scope
from fasttrack.scope.reference import COST_LINE as REFERENCE

CHECKS = list(registered_checks().values())


class FakeEngine:
    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.base_url = "http://127.0.0.1:1"
        self.log_path = None
        self.startup_s = 1.5
        self.stopped = False

    def environment(self) -> Any:
        raise RuntimeError("no environment in this test")

    def check_alive(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True


class Recorder(VariantCollector):
    """A check that measures variants: what it was handed, and why a variant had no outputs."""

    def __init__(self, name: str, *, wants: bool = True) -> None:
        self.name, self.want = name, wants
        self.sessions: list[tuple[str, str, str]] = []
        self.missing: dict[str, str] = {}

    def wants_variant(self, ctx: RunContext, group: Any) -> bool:
        return self.want

    async def collect_variant(self, ctx: RunContext, session: EngineSession, variant: str) -> None:
        self.sessions.append((session.side, session.group.id, variant))

    def variant_missing(self, ctx: RunContext, group: Any, variant: str, reason: str) -> None:
        self.missing[variant] = reason


def _ctx(tmp_path: Path, reference: StockReference | None) -> RunContext:
    ctx = demo_ctx(tmp_path)
    s = ctx.scope
    eq = s.gates.equivalence.model_copy(update={"reference": reference})
    ctx.scope = s.model_copy(update={"gates": s.gates.model_copy(update={"equivalence": eq})})
    ctx.model = ResolvedModel(model="/models/demo")
    return ctx


def _start(monkeypatch: pytest.MonkeyPatch, started: list[FakeEngine], fail: set[str] = frozenset()) -> None:
    import fasttrack.engine as engine_pkg

    def fake_start(*, args: list[str], log_name: str, **kw: Any) -> FakeEngine:
        if any(log_name.endswith(f"reference-{n}") for n in fail):
            raise EngineStartError("the engine exited during startup: CUDA out of memory", side="baseline")
        e = FakeEngine(list(args))
        started.append(e)
        return e

    monkeypatch.setattr(engine_pkg, "start_engine", fake_start)


TWO = StockReference(variants={"eager": ["--enforce-eager"], "float32": ["--dtype", "float32"]}, exact="float32")


def test_each_variant_starts_from_the_baselines_arguments_and_every_collector_measures_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _ctx(tmp_path, TWO)
    started: list[FakeEngine] = []
    _start(monkeypatch, started)
    a, b, idle = Recorder("equivalence"), Recorder("features"), Recorder("other", wants=False)
    state = RunState()
    group = ctx.plan.groups[0]
    run_variants(ctx, group, [a, b, idle], state, attach={}, progress=lambda s: None, launcher=None)  # type: ignore[list-item]
    assert a.sessions == b.sessions == [("baseline", group.id, "eager"), ("baseline", group.id, "float32")]
    assert idle.sessions == [] and not a.missing
    base = group.args["baseline"]
    assert started[0].args[: len(base) + 1] == [*base, "--enforce-eager"]
    assert started[1].args[: len(base) + 2] == [*base, "--dtype", "float32"]
    # no path evidence on a variant: no profiler
    assert not any("profiler" in x for e in started for x in e.args)
    assert all(e.stopped for e in started)
    recs = [e for e in state.engines]
    assert [(r.side, r.variant, r.checks) for r in recs] == [
        ("baseline", "eager", ["equivalence", "features"]),
        ("baseline", "float32", ["equivalence", "features"]),
    ]
    assert set(recs[0].check_seconds) == {"equivalence", "features"} and recs[0].startup_s == 1.5
    assert recs[0].to_json(redact=lambda e: e)["variant"] == "eager"


def test_a_variant_that_fails_to_start_is_reported_to_the_checks_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _ctx(tmp_path, TWO)
    started: list[FakeEngine] = []
    _start(monkeypatch, started, fail={"float32"})
    a = Recorder("equivalence")
    state = RunState()
    run_variants(ctx, ctx.plan.groups[0], [a], state, attach={}, progress=lambda s: None, launcher=None)  # type: ignore[list-item]
    assert [v for _, _, v in a.sessions] == ["eager"]
    assert a.missing["float32"].startswith("its engine failed (EngineStartError: the engine exited during startup")
    assert len(state.engines) == 2 and state.crash is None


def test_an_attached_baseline_gets_its_variants_from_the_scopes_model_and_none_start_without_a_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fasttrack.host.models as models

    started: list[FakeEngine] = []
    _start(monkeypatch, started)
    ctx = _ctx(tmp_path, TWO)
    ctx.model = None  # every side attached: validate resolved no model
    monkeypatch.setattr(models, "resolve_model", lambda scope, **kw: ResolvedModel(model="/models/resolved"))
    a = Recorder("equivalence")
    run_variants(
        ctx, ctx.plan.groups[0], [a], RunState(), attach={"baseline": "http://x"}, progress=print, launcher=None
    )  # type: ignore[list-item]
    assert [v for _, _, v in a.sessions] == ["eager", "float32"] and len(started) == 2

    def unresolvable(scope: Any, **kw: Any) -> ResolvedModel:
        raise FasttrackError("the model builder failed")

    monkeypatch.setattr(models, "resolve_model", unresolvable)
    ctx.model = None
    a = Recorder("equivalence")
    run_variants(
        ctx, ctx.plan.groups[0], [a], RunState(), attach={"baseline": "http://x"}, progress=print, launcher=None
    )  # type: ignore[list-item]
    assert a.missing["eager"] == (
        "the baseline is attached by URL, and the scope's model could not be resolved to start its variants: "
        "the model builder failed"
    )
    a = Recorder("equivalence")
    ctx = _ctx(tmp_path, None)
    started.clear()
    run_variants(ctx, ctx.plan.groups[0], [a], RunState(), attach={}, progress=print, launcher=None)  # type: ignore[list-item]
    assert not started and not a.sessions and not a.missing


def test_the_shipped_checks_that_use_the_reference_want_its_variants(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, TWO)
    group = ctx.plan.groups[0]
    assert EquivalenceCheck().wants_variant(ctx, group) and FeaturesCheck().wants_variant(ctx, group)
    ctx = _ctx(tmp_path, None)
    assert not EquivalenceCheck().wants_variant(ctx, group) and not FeaturesCheck().wants_variant(ctx, group)


# ----------------------------------------------------------------------------------------------- cost


def test_the_plan_prices_each_variant_as_one_more_lifetime_of_its_requests() -> None:
    """The GPU demo's smoke tier: two variants, each an engine start and stop, the equivalence rounds at every
    short-context point, the full-context requests and the logprobs request; the line doubles from one variant to
    two, and a scope without a reference has no such line."""
    scope = load_scope("demo-llama-gpu").scope
    plan = build_run_plan(scope, tier="smoke")
    two = plan_cost(scope, "smoke", plan.groups, plan.points, CHECKS)[REFERENCE]
    est = scope.estimates
    eq = scope.gates.equivalence
    one_ref = eq.reference.model_copy(update={"variants": {"eager": ["--enforce-eager"]}, "exact": None})
    one_scope = scope.model_copy(
        update={"gates": scope.gates.model_copy(update={"equivalence": eq.model_copy(update={"reference": one_ref})})}
    )
    one = plan_cost(one_scope, "smoke", plan.groups, plan.points, CHECKS)[REFERENCE]
    assert two.wall_s == pytest.approx(2 * one.wall_s) and two.requests == 2 * one.requests
    # 4 short points of 8 requests, the full points' batch 1 + 2 + 4 + 8 requests, one logprobs request
    assert one.requests == 4 * 8 + (1 + 2 + 4 + 8) + 1
    assert one.wall_s > est.engine_start_s + est.engine_stop_s
    none = scope.model_copy(
        update={"gates": scope.gates.model_copy(update={"equivalence": eq.model_copy(update={"reference": None})})}
    )
    assert REFERENCE not in plan_cost(none, "smoke", plan.groups, plan.points, CHECKS)
    # a tier without equivalence and features pays nothing for the variants
    tier = scope.tiers["smoke"].model_copy(update={"checks": ["kernels", "perf"]})
    assert REFERENCE not in plan_cost(
        scope.model_copy(update={"tiers": {**scope.tiers, "smoke": tier}}), "smoke", plan.groups, plan.points, CHECKS
    )


def test_measured_puts_a_variants_whole_lifetime_on_its_line() -> None:
    summary = {
        "engines": [
            {"group": "g", "side": "baseline", "lifetime": 0, "startup_s": 30, "stop": {"duration_s": 2},
             "check_seconds": {"equivalence": 10}},
            {"group": "g", "side": "baseline", "lifetime": 0, "variant": "eager", "startup_s": 20,
             "stop": {"duration_s": 1}, "check_seconds": {"equivalence": 5, "features": 4}},
        ],
        "timing": {"wall_s": 100},
    }  # fmt: skip
    assert measured(summary) == {STARTS: 32.0, "equivalence": 10.0, REFERENCE: 30.0, "total": 100.0}
