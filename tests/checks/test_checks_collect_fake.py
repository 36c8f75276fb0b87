"""The checks' collect and judge end to end over HTTP against a fake OpenAI-compatible engine.

No vLLM here (see ``fake_openai_engine``): this exercises the request plumbing,
the sampling pipeline (choice of the decode position, rejection on the first
token, chi-square), structured output, API behaviour and the no-profiler paths (no
trace, so no check can pass: each is ``not_run`` with the reason), and the reference variants' collection (a
stock fake engine answering the baseline's requests again).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_openai_engine import serve
from helpers_checks import demo_ctx

from fasttrack.checks.context import EngineSession
from fasttrack.checks.coverage import CoverageCheck
from fasttrack.checks.equivalence import EquivalenceCheck
from fasttrack.checks.equivalence.reference import VariantCollector
from fasttrack.checks.features import FeaturesCheck
from fasttrack.engine import AttachedEngine
from fasttrack.perf.loadgen import run_loop
from fasttrack.results import Verdict


@pytest.fixture
def engines():
    started = []

    def make(side: str, mode: str = "", pause: bool = False) -> AttachedEngine:
        srv, url = serve(mode, pause=pause)
        started.append(srv)
        return AttachedEngine(side=side, url=url)

    yield make
    for s in started:
        s.fake_state.stopped.set()
        s.shutdown()


def _run(tmp_path: Path, make, mode: str, checks: list, *, pause: bool = False, **scope):
    ctx = demo_ctx(tmp_path, batches=[1, 3, 8], **scope)
    ctx.scope.gates.features.sampling_samples = 200
    g = ctx.plan.groups[0]
    for side, m in (("baseline", ""), ("candidate", mode)):
        eng = make(side, m, pause)
        for c in checks:
            run_loop(c.collect(ctx, EngineSession(side=side, group=g, lifetime=0, engine=eng)))  # as the pipeline does
    ref = ctx.scope.gates.equivalence.reference
    for variant in ref.variants if ref is not None else []:  # stock's builds: the fake's stock answers again
        eng = make("baseline", "", pause)
        for c in checks:
            if isinstance(c, VariantCollector) and c.wants_variant(ctx, g):
                run_loop(
                    c.collect_variant(ctx, EngineSession(side="baseline", group=g, lifetime=0, engine=eng), variant)
                )
    return ctx, {c.name: c.judge(ctx) for c in checks}


def test_clean_fake_candidate(tmp_path: Path, engines) -> None:
    ctx, res = _run(
        tmp_path,
        engines,
        "",
        [EquivalenceCheck(requests_per_point=2), FeaturesCheck(mask_samples=40), CoverageCheck()],
        pause=True,
    )
    eq, fe, cov = res["equivalence"], res["features"], res["coverage"]
    reqs = eq.tables["equivalence_requests"]
    assert reqs and all(r["exact_match"] and r["close"] for r in reqs)
    # no profiler: batch composition from the requests' completion times; the rounds are held with /pause
    # and /resume, so each starts and finishes in one step of the fake however late its requests arrived
    rows = eq.tables["equivalence_points"]
    assert all(
        "finished within" in r["candidate_batch_evidence"] or "single request" in r["candidate_batch_evidence"]
        for r in rows
    )
    assert all(r["candidate_batch_verified"] and r["baseline_batch_verified"] for r in rows), [
        (r["point"], r["problems"]) for r in rows
    ]
    # the outputs agree, but without a profiler whether the candidate ran the optimized path is unknown:
    # every point and feature is not_run with that reason, none fails
    assert eq.verdict is Verdict.NOT_RUN, eq.failures
    assert all(r["verdict"] == "not_run" and "no profiled window" in r["missing_evidence"] for r in rows), rows
    assert "no profiler" in eq.reason
    assert fe.verdict is Verdict.NOT_RUN, fe.failures
    per = fe.summary["per_feature"]
    assert all(d["verdict"] == "not_run" and "no profiled window" in d["reason"] for d in per.values()), per
    gof = next(r for r in fe.tables["features"] if r.get("test") == "goodness_of_fit")
    assert gof["n_tested"] == 200 and gof["p_value"] >= 0.001
    # without traces there is no path evidence: coverage cannot pass
    assert cov.verdict is Verdict.NOT_RUN
    assert "without a profiler" in cov.reason
    assert (tmp_path / "artifacts" / "equivalence").is_dir()


def test_fake_defects_are_caught(tmp_path: Path, engines) -> None:
    _, res = _run(
        tmp_path / "t",
        engines,
        "ignore-temperature",
        [FeaturesCheck(mask_samples=40)],
        features=["temperature_sampling"],
    )
    f = res["features"]
    assert f.verdict is Verdict.FAIL and "temperature_sampling" in f.reason
    assert "p=" in f.failures[0] and "(batch 8)" in f.failures[0]

    _, res = _run(
        tmp_path / "j", engines, "broken-json", [FeaturesCheck(mask_samples=40)], features=["structured_output"]
    )
    f = res["features"]
    assert f.verdict is Verdict.FAIL
    assert any("not valid JSON" in m for m in f.failures)

    _, res = _run(tmp_path / "n", engines, "numerics", [EquivalenceCheck(requests_per_point=2)])
    e = res["equivalence"]
    assert e.verdict is Verdict.FAIL
    assert "first divergence at generated token 0" in "\n".join(e.failures)
