"""A check and a serving feature from another package: one module, loaded as its entry point would be.

The toy plugin (``tests/checks/toy_plugin/fasttrack_toy.py``: the check ``toy`` and the feature ``toy_echo``)
is loaded through the registry the way an installed package's ``fasttrack`` entry point is, and each of its
declarations shows up where fasttrack reads it, without any other file knowing about it: the check order,
the plan and its cost, the scope's JSON Schema and its comparison with a trusted scope, the passability
analysis, the bundle and the report. ``tests/e2e/test_e2e_wheel.py`` installs the same package next to
fasttrack's wheel and runs it end to end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fake_openai_engine import serve
from helpers_checks import demo_ctx
from registry_testlib import plugin_loaded

from fasttrack import ROOT, registry
from fasttrack import bundle as B
from fasttrack.checks.base import build_run_plan, registered_checks
from fasttrack.checks.context import EngineSession
from fasttrack.checks.features import FeaturesCheck
from fasttrack.engine import AttachedEngine
from fasttrack.errors import ScopeError
from fasttrack.perf.loadgen import run_loop
from fasttrack.pipeline import RunState, ValidateOptions, run_validate
from fasttrack.results import LEGACY_CHECK_ORDER, CheckResult, Verdict
from fasttrack.scope import load_scope, parse_scope
from fasttrack.scope.compare import compare_scopes

DEMO = ROOT / "suites" / "demo-llama"
ORDER = ["isolation", "kernels", "equivalence", "features", "toy", "coverage", "evals", "perf"]


@pytest.fixture
def toy() -> Iterator[ModuleType]:
    with plugin_loaded() as mod:
        yield mod


def demo_copy(tmp_path: Path, *, min_score: float = 0.5, batch_one: bool = True) -> Path:
    """The demo scope with the toy feature listed and a ``gates.toy`` section (the suite's data linked)."""
    d = tmp_path / "demo-toy"
    d.mkdir()
    for p in DEMO.iterdir():
        if p.name != "scope.yaml":
            (d / p.name).symlink_to(p)
    text = (DEMO / "scope.yaml").read_text()
    for old, new in (
        ("logprobs,\n           speculative_acceptance]", "logprobs,\n           speculative_acceptance, toy_echo]"),
        ("               logprobs]\n", "               logprobs, toy_echo]\n"),
        (
            "  coverage: {min_optimized_decode_fraction: 0.9}\n",
            f"  coverage: {{min_optimized_decode_fraction: 0.9}}\n  toy: {{min_score: {min_score}}}\n",
        ),
    ) + ((("    batch: [1, 2, 3, 4, 8]", "    batch: [2, 3, 4, 8]"),) if not batch_one else ()):
        assert old in text, old
        text = text.replace(old, new)
    (d / "scope.yaml").write_text(text)
    return d / "scope.yaml"


def test_the_plugins_parts_are_registered_by_kind_and_name_naming_their_source(toy: ModuleType) -> None:
    assert list(registered_checks()) == ORDER
    assert list(LEGACY_CHECK_ORDER) == [n for n in ORDER if n != "toy"]
    assert registry.get("check", "toy") is toy.ToyCheck and registry.get("gate", "toy") is toy.ToyGate
    assert isinstance(registry.get("feature", "toy_echo"), toy.ToyEcho)
    assert registry.names("feature")[-1] == "toy_echo"  # after the shipped features, whatever was imported first
    assert registry.source("check", "toy") == "fasttrack_toy (test)" == registry.source("feature", "toy_echo")
    assert registry.source("check", "perf") == "fasttrack"


def test_without_the_plugin_its_names_are_unknown_and_the_error_lists_the_registered() -> None:
    with pytest.raises(registry.UnknownComponent) as err:
        registry.get("check", "toy")
    assert str(err.value).startswith("unknown check 'toy'; registered: isolation, kernels, equivalence, features")
    with pytest.raises(registry.UnknownComponent, match="unknown feature 'toy_echo'; registered: temperature_sampl"):
        registry.get("feature", "toy_echo")
    text = (
        (DEMO / "scope.yaml")
        .read_text()
        .replace(
            "  coverage: {min_optimized_decode_fraction: 0.9}\n",
            "  coverage: {min_optimized_decode_fraction: 0.9}\n  toy: {min_score: 0.5}\n",
        )
    )
    with pytest.raises(ScopeError, match=r"gates\.toy: unknown key"):
        parse_scope(text, source="no toy")


def test_the_plan_orders_lists_and_prices_the_toy_check_and_feature(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fasttrack.cli import main

    scope = demo_copy(tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["plan", "--model", str(scope), "--json", "--no-arg-check"])
    assert done.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["check_order"] == ORDER
    planned = {c["name"]: c for c in doc["checks_planned"]}
    assert [c["name"] for c in doc["checks_planned"]] == ORDER
    assert planned["toy"]["gate"] == "gates.toy" and planned["toy"]["exercises"] == ["toy-demo-fused-ops"]
    assert planned["toy"]["after"] == ["features"] and planned["toy"]["before"] == ["coverage"]
    assert "toy_echo" in planned["features"]["exercises"]
    assert doc["passability"]["ok"] is True
    # the check's own cost (one kernel suite, 30 s) and the feature's decode steps, in the features line
    costs = doc["estimate"]["checks"]
    assert costs["toy"]["wall_hours"] == round(30 / 3600, 4)
    loaded = load_scope(str(scope))
    without = loaded.scope.model_copy(update={"features": [f for f in loaded.scope.features if f != "toy_echo"]})
    before = build_run_plan(without, tier="smoke").estimate.checks["features"]["decode_tokens"]
    assert costs["features"]["decode_tokens"] == before + 2 * toy.ToyEcho.decode_steps  # both sides, one group
    with pytest.raises(SystemExit):
        main(["plan", "--model", str(scope), "--no-arg-check"])
    text = capsys.readouterr().out
    assert "toy " in text and "gates.toy" in text and "toy_echo" in text


def test_the_scope_schema_has_the_toy_gate_and_feature(toy: ModuleType, tmp_path: Path) -> None:
    from fasttrack.schemas import scope_schema

    schema = scope_schema()
    assert schema["$defs"]["Gates"]["properties"]["toy"] == {"$ref": "#/$defs/ToyGate"}
    assert "min_score" in schema["$defs"]["ToyGate"]["properties"]
    assert "toy_echo" in schema["properties"]["features"]["items"]["enum"]
    loaded = load_scope(str(demo_copy(tmp_path, min_score=0.7)))
    assert loaded.scope.gates.of(toy.ToyGate).min_score == 0.7 and loaded.scope.gates.toy.min_score == 0.7
    bad = (tmp_path / "demo-toy" / "scope.yaml").read_text().replace("toy: {min_score: 0.7}", "toy: {min_score: 2}")
    with pytest.raises(ScopeError, match=r"gates\.toy\.min_score: Input should be less than or equal to 1"):
        parse_scope(bad, source="toy")


def test_the_toy_gates_stricter_direction_decides_the_scope_comparison(toy: ModuleType, tmp_path: Path) -> None:
    trusted = load_scope(str(demo_copy(tmp_path, min_score=0.7))).scope
    (tmp_path / "lower").mkdir()
    lower = load_scope(str(demo_copy(tmp_path / "lower", min_score=0.6))).scope
    (tmp_path / "higher").mkdir()
    higher = load_scope(str(demo_copy(tmp_path / "higher", min_score=0.8))).scope
    assert toy.ToyGate.directions() == {"min_score": "higher"}
    down = compare_scopes(trusted, lower).changes
    assert [(c.field, c.loosens) for c in down] == [("gates.toy.min_score", True)], down
    assert down[0].detail == "lowered from 0.7 to 0.6"
    up = compare_scopes(trusted, higher)
    assert up.ok and [c.field for c in up.tightenings] == ["gates.toy.min_score"]


def test_passability_asks_the_toy_check_and_feature(toy: ModuleType, tmp_path: Path) -> None:
    from fasttrack.checks.passability import analyze

    loaded = load_scope(str(demo_copy(tmp_path, min_score=0.95, batch_one=False)))
    lines = analyze(loaded.scope, build_run_plan(loaded.scope, tier="smoke"), base_dir=loaded.base_dir).lines()
    assert "toy: toy score: no toy scores above 0.9 (min_score 0.95) (fix: lower it)" in lines
    assert "features: feature toy_echo: the smoke tier has no short point at batch 1 (fix: add batch 1)" in lines


def test_a_validate_run_bundles_and_reports_the_toy_check(toy: ModuleType, tmp_path: Path) -> None:
    opts = ValidateOptions(
        model=str(demo_copy(tmp_path)), tier="smoke", out=tmp_path / "run", checks=["toy"], allow_hardware_mismatch=True
    )
    out = run_validate(opts, log=lambda m: None)
    toy_res = next(r for r in out.results if r.check == "toy")
    assert toy_res.verdict is Verdict.PASS and toy_res.title == "Toy check", toy_res.reason
    assert [r.check for r in out.results] == ORDER  # every registered check has a row, in check order
    assert out.verdict == "incomplete"  # the other checks were left out with --checks, so they stay required
    ver = B.verify_bundle(out.bundle)
    assert {i.name for i in ver.failures} <= {"signature"}, ver.failures
    with B.open_bundle(out.bundle) as view:
        m = view.manifest
        assert m.plan.plan["check_order"] == ORDER and m.check_order == ORDER
        entry = m.checks["toy"]
        assert entry.title == "Toy check" and entry.gate is not None and entry.gate.statistic == "toy score"
        assert entry.tables["toy_scores"].rows == 1
    html = (out.run_dir / "report.html").read_text()
    assert "Toy check" in html and "toy_scores" in html and "toy-demo-fused-ops" in html
    # the check cards, in the bundle's recorded check order (the other views name some checks earlier)
    assert html.rindex("Serving features") < html.index("Toy check") < html.rindex("Path coverage")


def test_a_blocked_check_is_not_run_naming_its_blocker(toy: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttrack.pipeline.validate import _apply_blocks

    monkeypatch.setattr(toy.ToyCheck, "blocked_by", ("kernels",))
    for kernels, want in (
        (Verdict.FAIL, Verdict.NOT_RUN),
        (Verdict.NOT_RUN, Verdict.NOT_RUN),
        (Verdict.PASS, Verdict.PASS),
    ):
        state = RunState()
        state.results["kernels"] = CheckResult(check="kernels", verdict=kernels, reason="k")
        state.results["toy"] = CheckResult(check="toy", verdict=Verdict.PASS, reason="toy passed")
        _apply_blocks(registered_checks(), state)
        assert state.results["toy"].verdict is want, kernels
        if want is Verdict.NOT_RUN:
            assert state.results["toy"].reason.startswith(f"blocked: kernels {kernels.value}")


def test_the_toy_feature_collects_is_judged_bundled_and_reported(toy: ModuleType, tmp_path: Path) -> None:
    from fasttrack.report import render_report

    ctx = demo_ctx(tmp_path, batches=[1, 3], features=["toy_echo"])
    chk = FeaturesCheck()
    servers = []
    try:
        for side in ("baseline", "candidate"):
            srv, url = serve("")
            servers.append(srv)
            session = EngineSession(
                side=side, group=ctx.plan.groups[0], lifetime=0, engine=AttachedEngine(side=side, url=url)
            )
            run_loop(chk.collect(ctx, session))
    finally:
        for s in servers:
            s.fake_state.stopped.set()
            s.shutdown()
    side = chk.sides[(ctx.plan.groups[0].id, "candidate")]
    assert isinstance(side.results["toy_echo"], toy.EchoResult) and side.results["toy_echo"].tokens == 4
    res = chk.judge(ctx)
    rows = [r for r in res.tables["features"] if r["feature"] == "toy_echo"]
    assert {r.get("side") for r in rows} >= {"baseline", "candidate"} and all(
        r.get("tokens") == 4 for r in rows if "tokens" in r
    )
    # the fake engine has no profiler: whether the candidate ran the optimized path is unknown, so not a pass
    assert res.summary["per_feature"]["toy_echo"]["verdict"] == "not_run"
    res = res.model_copy(update={"title": FeaturesCheck.title, "view": FeaturesCheck.report_view})
    bundle = tmp_path / "bundle"
    B.write_bundle(
        bundle,
        results=[res],
        scope=B.scope_info(ctx.loaded.text, model="demo-llama", tier="smoke"),
        plan=B.plan_info(ctx.plan),
        provenance=B.collect_provenance(),
        artifacts_from=ctx.run_dir,
    )
    html = tmp_path / "report.html"
    render_report(bundle, html)
    assert "toy_echo" in html.read_text()
