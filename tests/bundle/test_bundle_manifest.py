"""The manifest: schema in sync, verdict derived from the check results only."""

from __future__ import annotations

import json

import jsonschema
import pytest
from bundle_testlib import make_provenance, make_results
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttrack import ROOT
from fasttrack import bundle as B
from fasttrack.bundle.manifest import SCHEMA_FILE, _main, build_manifest, manifest_bytes, parse_shard, schema_text
from fasttrack.results import LEGACY_CHECK_ORDER, CheckResult, Verdict


def _manifest(results, **kw):
    kw.setdefault("expected_checks", LEGACY_CHECK_ORDER)
    return build_manifest(
        results,
        scope=B.scope_info("a: 1\n", model="demo", tier="smoke"),
        plan=B.plan_info({"points": []}),
        provenance=make_provenance(),
        created="2025-01-01T00:00:00+00:00",
        **kw,
    )


def test_checked_in_schema_matches_the_models() -> None:
    on_disk = (ROOT / SCHEMA_FILE).read_bytes()
    assert on_disk == schema_text(), "run: python -m fasttrack.bundle.manifest --write-schema"
    assert _main(["--check-schema"]) == 0


def test_manifest_validates_against_its_schema() -> None:
    m = _manifest(make_results())
    jsonschema.validate(json.loads(manifest_bytes(m)), B.json_schema())
    assert B.load_manifest(manifest_bytes(m)) == m


def test_all_pass_is_pass() -> None:
    assert _manifest(make_results()).verdict == "pass"


def test_required_fail_is_fail() -> None:
    assert _manifest(make_results(perf=Verdict.FAIL)).verdict == "fail"


def test_missing_check_makes_it_incomplete() -> None:
    m = _manifest([r for r in make_results() if r.check != "evals"])
    assert m.verdict == "incomplete"
    assert m.checks["evals"].verdict is Verdict.NOT_RUN and m.checks["evals"].required
    assert "no result" in m.checks["evals"].reason
    assert _manifest([r for r in make_results() if r.check != "evals"], expected_checks=()).verdict == "pass"


def test_optional_failure_does_not_fail_the_bundle() -> None:
    results = make_results()
    results.append(CheckResult(check="plugin-x", verdict=Verdict.FAIL, reason="optional", required=False))
    m = _manifest(results)
    assert m.verdict == "pass" and m.checks["plugin-x"].verdict is Verdict.FAIL


def test_duplicate_results_are_refused() -> None:
    with pytest.raises(B.BundleError, match="two results"):
        _manifest(make_results() + make_results()[:1])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(Verdict)), st.booleans()), min_size=6, max_size=6))
def test_verdict_never_pass_with_required_fail_or_not_run(spec) -> None:
    results = [
        CheckResult(check=name, verdict=v, reason="r", required=req)
        for name, (v, req) in zip(LEGACY_CHECK_ORDER, spec, strict=False)
    ]
    m = _manifest(results)
    required = [v for v, req in spec if req]
    if m.verdict == "pass":
        assert required and all(v is Verdict.PASS for v in required)
    if any(v is Verdict.FAIL for v in required):
        assert m.verdict == "fail"
    elif any(v is Verdict.NOT_RUN for v in required) or not required:
        assert m.verdict == "incomplete"
    assert B.recompute_verdict(m.checks) == m.verdict


def test_scope_hash_must_match_its_text() -> None:
    info = B.scope_info("a: 1\n", model="demo", tier="smoke")
    data = info.model_dump()
    data["yaml"] = "a: 2\n"
    with pytest.raises(ValueError, match="scope text hashes to"):
        B.ScopeInfo.model_validate(data)


def test_plan_hash_and_shard() -> None:
    p = B.plan_info({"points": [1], "shard": "2/3", "fingerprint": "abc"})
    assert (p.shard, p.fingerprint) == ("2/3", "abc")
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "1-3", "a/b"):
        with pytest.raises((ValueError, B.BundleError)):
            B.plan_info({"points": []}, shard=bad)
    data = p.model_dump()
    data["plan"]["points"] = [2]
    with pytest.raises(ValueError, match="plan hashes to"):
        B.PlanInfo.model_validate(data)


def test_rehearsal_needs_a_reason() -> None:
    with pytest.raises(B.BundleError, match="rehearsal_reason"):
        _manifest(make_results(), rehearsal=True)
    m = _manifest(make_results(), rehearsal=True, rehearsal_reason="scope needs sm_100; host has none")
    assert m.rehearsal


def test_extra_fields_and_bad_names_are_refused() -> None:
    m = json.loads(manifest_bytes(_manifest(make_results())))
    m["checks"]["perf"]["unexpected"] = 1
    with pytest.raises(B.BundleError, match="unexpected"):
        B.load_manifest(m)
    with pytest.raises(B.BundleError, match="cannot be used in a bundle path|must match"):
        _manifest([CheckResult(check="../evil", verdict=Verdict.PASS, reason="r")])


def test_non_finite_summary_values_are_written_as_strings() -> None:
    results = [
        r.model_copy(update={"summary": {**r.summary, "nan_case": float("nan")}}) if r.check == "kernels" else r
        for r in make_results()
    ]
    m = _manifest(results)
    raw = json.loads(manifest_bytes(m))
    assert raw["checks"]["kernels"]["summary"]["nan_case"] == "nan"
