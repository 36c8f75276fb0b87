"""Re-judging under ``gates.equivalence.reference``: the calibrated limits are recomputed from the judging scope
(``multiple`` x stock's distance + ``tolerance``), never read from the row, and a row that carries no calibration
(or one against another reference) cannot pass.

The shipped CPU suite (``demo-llama``) calibrates against stock's eager build with the baseline as the reference;
the GPU suite (``demo-llama-gpu``) against a float32 build.
"""

from __future__ import annotations

from typing import Any

import pytest
from evidence_testlib import calibrated, draw, equivalence_tables, features_tables

from fasttrack.evidence.base import Row
from fasttrack.evidence.calibration import CalibratedRow
from fasttrack.evidence.equivalence import EquivalencePointRow, point_verdict
from fasttrack.evidence.expect import build_context
from fasttrack.evidence.features import FeatureRow
from fasttrack.evidence.features import rejudge as rejudge_features
from fasttrack.scope.reference import DISTANCES

SUITES = ("demo-llama", "demo-llama-gpu")


def _point(suite: str, **change: Any) -> tuple[EquivalencePointRow, Any]:
    d = draw(suite, "smoke")
    rows = equivalence_tables(d)[0]["equivalence_points"]
    return EquivalencePointRow.model_validate({**rows[0], **change}), d.scope.gates.equivalence


@pytest.mark.parametrize("suite", SUITES)
def test_within_the_calibrated_limits_a_point_passes(suite: str) -> None:
    row, gate = _point(suite)
    assert gate.reference is not None
    assert point_verdict(row, gate) == ("pass", [])


@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("distance", DISTANCES)
def test_a_distance_above_its_limit_fails_the_point(suite: str, distance: str) -> None:
    row, gate = _point(suite)
    bad = calibrated(gate, True)[f"candidate_{distance}_vs_reference"]
    v, why = point_verdict(row.model_copy(update={f"candidate_{distance}_vs_reference": bad}), gate)
    assert v == "fail" and any(distance in w for w in why), why


def test_the_close_rule_is_judged_against_the_exact_reference() -> None:
    """With an ``exact`` variant (the GPU suite) the close rule is judged against it: a point whose requests break it
    against the baseline passes when every request is close to the exact reference, fails when one is not, and falls
    back to the baseline's fraction when the row has none against the reference. Without one (the CPU suite) a
    fraction against a reference is ignored: the close rule is candidate vs baseline."""
    row, gate = _point("demo-llama-gpu", close_fraction=0.875)
    assert gate.reference.exact == "float32" and row.candidate_close_fraction_vs_reference == 1.0
    assert point_verdict(row, gate) == ("pass", [])
    v, why = point_verdict(row.model_copy(update={"candidate_close_fraction_vs_reference": 0.875}), gate)
    assert v == "fail" and any("close fraction against float32 0.875" in w for w in why), why
    v, why = point_verdict(row.model_copy(update={"candidate_close_fraction_vs_reference": None}), gate)
    assert v == "fail" and any(w.startswith("close fraction 0.875") for w in why), why
    row, gate = _point("demo-llama", close_fraction=0.875, candidate_close_fraction_vs_reference=1.0)
    assert gate.reference.exact is None
    v, why = point_verdict(row, gate)
    assert v == "fail" and any(w.startswith("close fraction 0.875") for w in why), why


def test_the_limit_comes_from_the_judging_scope_not_the_row() -> None:
    """A row that records a generous multiple and limits of its own is still judged by the scope's."""
    row, gate = _point("demo-llama")
    cand = gate.reference.multiple * 0.02 * 5
    forged = {f"limit_{d}": 1e9 for d in DISTANCES} | {"reference_multiple": 100.0}
    forged |= {"candidate_max_abs_logprob_diff_vs_reference": cand}
    v, why = point_verdict(row.model_copy(update=forged), gate)
    assert v == "fail" and "max_abs_logprob_diff" in why[0], why


def test_the_absolute_drift_limit_gives_way_to_the_calibrated_rule() -> None:
    """With a reference, a candidate-vs-baseline drift above ``max_abs_logprob_diff`` is not a failure by itself:
    stock's own builds drift as much (the calibrated figures decide)."""
    row, gate = _point("demo-llama", max_abs_logprob_diff=5.0)
    assert point_verdict(row, gate)[0] == "pass"
    assert point_verdict(row, gate.model_copy(update={"reference": None}))[0] == "fail"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({f: None for f in CalibratedRow.model_fields if f not in Row.model_fields}, "no calibration"),
        ({"reference": "float64"}, "calibrated against 'float64'"),
        ({"stock_kl_mean_vs_reference": None}, "stock's builds give no kl_mean"),
        ({"stock_divergence_vs_reference": float("inf")}, "no finite limit"),
        ({f"candidate_{d}_vs_reference": None for d in DISTANCES}, "no distance"),
    ],
)
def test_a_point_without_usable_calibration_cannot_pass(change: dict[str, Any], words: str) -> None:
    row, gate = _point("demo-llama")
    v, why = point_verdict(row.model_copy(update=change), gate)
    assert v == "not_run" and any(words in w for w in why), why


def test_nan_figures_never_pass() -> None:
    row, gate = _point("demo-llama", candidate_kl_mean_vs_reference=float("nan"))
    assert point_verdict(row, gate)[0] == "fail"


@pytest.mark.parametrize("feature", ["full_context", "logprobs"])
def test_a_feature_recorded_pass_above_the_calibrated_limit_is_a_finding(feature: str) -> None:
    d = draw("demo-llama", "smoke")
    rows = [r for r in features_tables(d)[0]["features"] if r["feature"] == feature and r.get("side") != "baseline"]
    assert rows, f"the smoke tier of demo-llama has no {feature} row"
    typed = [FeatureRow.model_validate(r) for r in rows]
    ctx = build_context(d.scope, "smoke", source="the test scope")
    assert not rejudge_features({"features": typed}, d.scope.gates.features, ctx).findings
    worse = [r.model_copy(update={"candidate_mean_abs_logprob_diff_vs_reference": 9.0}) for r in typed]
    found = rejudge_features({"features": worse}, d.scope.gates.features, ctx).findings
    assert found and "mean_abs_logprob_diff" in found[0].message, found
    bare = [r.model_copy(update={"reference": None}) for r in typed]
    found = rejudge_features({"features": bare}, d.scope.gates.features, ctx).findings
    assert found and "not calibrated" in found[0].message, found


def test_logprobs_passes_on_its_calibrated_comparison_and_needs_one() -> None:
    """The check writes each side's own logprobs row (no comparison figures) beside the row comparing the sides:
    the per-side rows need no calibration, and without the comparison row (dropped, or relabelled as one side's
    with its figures cleared) the feature cannot pass."""
    d = draw("demo-llama", "smoke")
    rows = [r for r in features_tables(d)[0]["features"] if r["feature"] == "logprobs"]
    assert sorted(r["side"] for r in rows) == ["baseline", "both", "candidate"], rows
    typed = [FeatureRow.model_validate(r) for r in rows]
    ctx = build_context(d.scope, "smoke", source="the test scope")
    got = rejudge_features({"features": typed}, d.scope.gates.features, ctx)
    assert not got.findings and not [g for g in got.gaps if "logprobs" in g], (got.findings, got.gaps)
    drop = [r for r in typed if r.side != "both"]
    relabel = [
        r.model_copy(update={"side": "candidate", "max_abs_logprob_diff": None, "reference": None})
        if r.side == "both"
        else r
        for r in typed
    ]
    for forged in (drop, relabel):
        got = rejudge_features({"features": forged}, d.scope.gates.features, ctx)
        assert [g for g in got.gaps if "no row compares the two sides" in g], got.gaps
        assert got.bound != "pass", got
