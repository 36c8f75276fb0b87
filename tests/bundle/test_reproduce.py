"""`fasttrack reproduce`: verification first, the recorded settings drive the rerun, and
agreement is judged per check, per row and against the recorded intervals.

The rerun itself (``run_validate``) is replaced by a double that returns chosen results:
what is tested here is the comparison logic. The real rerun against demo engines is in
``tests/e2e/test_e2e_validate.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import evidence_testlib
import pytest
from bundle_testlib import SCOPE, TIER, build, make_results

from fasttrack import ROOT, pipeline
from fasttrack.errors import FasttrackError
from fasttrack.pipeline.reproduce import compare_rows, reproduce
from fasttrack.results import CheckResult, Verdict


def _gated(point: str, speedup: float, lo: float, hi: float) -> dict[str, Any]:
    """The gated row of the decode workload at ``point``, with these figures (judged by the demo scope's gate)."""
    d = evidence_testlib.draw(SCOPE, TIER)
    row = evidence_testlib._perf_row(d, "decode", point, d.scope.gates.perf.gated_metric, speedup, gated=True)
    return {**row, "speedup": speedup, "ci_low": lo, "ci_high": hi, "nominal_ci_low": lo, "nominal_ci_high": hi}


B1, B4 = "tp1-dcp1-none-b1-ctx32", "tp1-dcp1-none-b4-ctx32"
PERF_ROWS = [_gated(B1, 1.10, 1.02, 1.18), _gated(B4, 1.05, 0.97, 1.12)]
METRIC = PERF_ROWS[0]["metric"]


def _recorded_results() -> list[CheckResult]:
    """The demo results, with the two gated rows above in place of the perf check's own."""
    out = []
    for r in make_results():
        if r.check == "perf":
            mine = {(x["workload"], x["point"], x["metric_name"]): x for x in PERF_ROWS}
            rows = [mine.get((x["workload"], x["point"], x["metric_name"]), x) for x in r.tables["points"]]
            r = r.model_copy(update={"tables": {**r.tables, "points": rows}})
        out.append(r)
    return out


class Rerun:
    """Stands in for ``run_validate``: records its options, returns the given results."""

    def __init__(self, results: list[CheckResult]) -> None:
        self.results = results
        self.opts: Any = None
        self.scope_text: str | None = None

    def __call__(self, opts: Any, *, log: Any) -> Any:
        self.opts = opts
        self.scope_text = Path(opts.model).read_text()
        return pipeline.ValidateOutcome(
            run_dir=opts.out, verdict="pass", results=self.results, bundle=None, rehearsal=True, state=None
        )


def _perf(rows: list[dict[str, Any]], verdict: Verdict = Verdict.PASS) -> CheckResult:
    return CheckResult(check="perf", verdict=verdict, reason="rerun", tables={"points": rows})


#: The recorded scope: the demo suite's, retitled (so the rerun runs a copy with the recorded text). Reproduce
#: parses it before anything runs, so it must be a whole scope.
RECORDED_SCOPE = (ROOT / "suites" / "demo-llama" / "scope.yaml").read_text().replace('title: "', 'title: "Recorded ', 1)


@pytest.fixture()
def recorded(tmp_path: Path, contrib: Any) -> Path:
    return build(
        tmp_path / "bundle", results=_recorded_results(), sign=[contrib], shard="2/3", scope_yaml=RECORDED_SCOPE
    )


def _run(bundle: Path, tmp_path: Path, keydir: Path, rerun: Rerun, monkeypatch: pytest.MonkeyPatch, **kw: Any):
    monkeypatch.setattr(pipeline, "run_validate", rerun)
    return reproduce(
        bundle,
        checks=kw.pop("checks", ["perf"]),
        out=tmp_path / "rerun",
        keys=kw.pop("keys", [keydir / "contrib.pub"]),
        log=lambda m: None,
        **kw,
    )


def test_agreeing_rerun_uses_the_recorded_settings(recorded, tmp_path, keydir, monkeypatch) -> None:
    rows = [dict(PERF_ROWS[0], speedup=1.15), dict(PERF_ROWS[1], speedup=1.0)]
    rerun = Rerun([_perf(rows)])
    res = _run(recorded, tmp_path, keydir, rerun, monkeypatch)
    assert res.verified and res.all_agree, res.agreements
    a = res.agreements[0]
    assert a.rows_compared == 2 and "within the recorded intervals" in a.detail
    # the recorded tier, shard and scope text drive the rerun, on this host as a rehearsal
    assert rerun.opts.tier == "smoke" and rerun.opts.shard == "2/3" and rerun.opts.checks == ["perf"]
    assert rerun.opts.allow_hardware_mismatch is True
    assert rerun.scope_text == RECORDED_SCOPE
    # the recorded text is not the local suite's: its relative paths still mean the local suite's files
    assert rerun.opts.scope_base_dir == ROOT / "suites" / "demo-llama"


def test_estimate_outside_the_recorded_interval_disagrees(recorded, tmp_path, keydir, monkeypatch) -> None:
    rows = [dict(PERF_ROWS[0]), dict(PERF_ROWS[1], speedup=1.30)]
    res = _run(recorded, tmp_path, keydir, Rerun([_perf(rows)]), monkeypatch)
    a = res.agreements[0]
    assert not res.all_agree and not a.agrees
    assert a.row_disagreements == [
        f"points [workload=decode, point={B4}, metric={METRIC}]: speedup 1.3 now, outside the recorded interval "
        "[0.97, 1.12]"
    ]


def test_row_verdict_change_disagrees_even_when_the_check_verdict_matches(
    recorded, tmp_path, keydir, monkeypatch
) -> None:
    rows = [dict(PERF_ROWS[0], verdict="fail"), dict(PERF_ROWS[1])]
    res = _run(recorded, tmp_path, keydir, Rerun([_perf(rows)]), monkeypatch)
    assert not res.all_agree
    assert "verdict pass recorded, fail now" in res.agreements[0].row_disagreements[0]


def test_check_verdict_change_disagrees(recorded, tmp_path, keydir, monkeypatch) -> None:
    res = _run(recorded, tmp_path, keydir, Rerun([_perf(PERF_ROWS, Verdict.FAIL)]), monkeypatch)
    assert not res.all_agree and res.agreements[0].detail == "verdict pass recorded, fail now"


def test_unverified_bundle_is_refused_unless_allowed(recorded, tmp_path, keydir, monkeypatch) -> None:
    rerun = Rerun([_perf(PERF_ROWS)])
    with pytest.raises(FasttrackError, match="did not verify"):
        _run(recorded, tmp_path, keydir, rerun, monkeypatch, keys=[keydir / "mallory.pub"])
    assert rerun.opts is None, "nothing reran"
    res = _run(recorded, tmp_path, keydir, rerun, monkeypatch, keys=[keydir / "mallory.pub"], allow_unverified=True)
    assert res.verified is False and res.all_agree


def test_unknown_check_and_empty_selection_are_clear_errors(recorded, tmp_path, keydir, monkeypatch) -> None:
    with pytest.raises(FasttrackError, match="no check"):
        _run(recorded, tmp_path, keydir, Rerun([]), monkeypatch, checks=["nope"])
    with pytest.raises(FasttrackError, match="needs --checks"):
        _run(recorded, tmp_path, keydir, Rerun([]), monkeypatch, checks=[])


def test_compare_rows_matches_by_key_and_reads_passed_flags() -> None:
    old = {
        "eval_comparisons": [
            {
                "eval": "mrcr",
                "point": "b3",
                "passed": True,
                "score_difference": 0.0,
                "score_ci_low": -0.1,
                "score_ci_high": 0.1,
            },
            {"eval": "aime25", "point": "b3", "passed": True},
        ],
        "eval_samples": [{"eval": "mrcr", "sample_id": "x", "score": 1.0}],
    }
    new = {
        "eval_comparisons": [
            {"eval": "mrcr", "point": "b3", "passed": True, "score_difference": 0.2},
            {"eval": "aime25", "point": "b3", "passed": False},
            {"eval": "aime25", "point": "b8", "passed": False},  # not in the recording: not compared
        ],
        "eval_samples": [{"eval": "mrcr", "sample_id": "x", "score": 0.0}],
    }
    problems, compared = compare_rows(old, new)
    assert compared == 2
    assert problems == [
        "eval_comparisons [eval=mrcr, point=b3]: score_difference 0.2 now, outside the recorded interval [-0.1, 0.1]",
        "eval_comparisons [eval=aime25, point=b3]: verdict pass recorded, fail now",
    ]
