"""A verdict its own tables contradict, signed by a trusted key.

``verify --require-pass`` once accepted a bundle whose verdict said pass while rows of its own perf
table said fail. ``verify`` now re-judges every row from its figures: a row whose recorded verdict its
figures contradict (the perf check's gated points, the equivalence points, the in-plan coverage rows, the
features, the kernel cases, the eval comparisons) fails the ``rows`` item naming the row, and a check
recorded ``pass`` where its re-judged rows allow less fails the ``verdicts`` item, whoever signed it;
signing refuses such a bundle in the first place.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from security_testlib import HEAD, Keys, force_sign, packed, rewrite_manifest
from synthetic import Spec, make_bundle

from fasttrack import ROOT
from fasttrack.bundle.attest import sign_bundle
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.layout import table_path
from fasttrack.bundle.tables import parquet_bytes, read_rows
from fasttrack.bundle.verify import verify_bundle


@pytest.fixture(scope="module")
def passing(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Path:
    """A consistent synthetic bundle whose verdict is pass, signed by the trusted key."""
    out = tmp_path_factory.mktemp("sec-pass") / "bundle"
    make_bundle(out, Spec(model="demo-llama", seed=1, head_sha=HEAD), sign_keys=[keys.trusted])
    res = verify_bundle(out, keys=[keys.trusted_pub])
    assert res.verified and res.verdict == "pass", res.failures
    return out


def _edit_table(root: Path, check: str, table: str, edit: Any) -> None:
    """Rewrite one row of a table in place (same rows, same columns: the manifest's record still holds)."""
    p = root / table_path(check, table)
    rows = read_rows(p.read_bytes())
    edit(rows)
    data, _, _ = parquet_bytes(rows)
    p.write_bytes(data)


def _first(rows: list[dict[str, Any]], pred: Any, **change: Any) -> None:
    for r in rows:
        if pred(r):
            r.update(change)
            return
    raise AssertionError("no row to edit")


CASES = {
    "perf-gated-row-fails": ("perf", "points", lambda rows: _first(rows, lambda r: r.get("gated"), verdict="fail")),
    "perf-gated-row-not-run": (
        "perf",
        "points",
        lambda rows: _first(rows, lambda r: r.get("gated"), verdict="not_run"),
    ),
    "equivalence-point-fails": (
        "equivalence",
        "equivalence_points",
        lambda rows: _first(rows, lambda r: True, verdict="fail"),
    ),
    "coverage-in-plan-fails": (
        "coverage",
        "coverage",
        lambda rows: _first(rows, lambda r: r.get("in_plan"), verdict="fail"),
    ),
    "feature-fails": ("features", "features", lambda rows: _first(rows, lambda r: True, verdict="fail")),
    "kernel-case-fails": ("kernels", "cases", lambda rows: _first(rows, lambda r: True, verdict="fail")),
    "eval-comparison-fails": ("evals", "eval_comparisons", lambda rows: _first(rows, lambda r: True, passed=False)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_pass_its_own_table_contradicts_fails_verification(
    case: str, passing: Path, keys: Keys, tmp_path: Path
) -> None:
    import shutil

    check, table, edit = CASES[case]
    work = tmp_path / "w"
    shutil.copytree(passing, work)
    _edit_table(work, check, table, edit)
    # the regular signing path refuses it, naming the table (a verdict its figures contradict, or a check pass
    # its rows do not allow)
    with pytest.raises(BundleError, match=f"{check}/{table} row|check '{check}' is recorded pass"):
        sign_bundle(work, keys.trusted, replace=True)
    force_sign(work, keys.trusted)  # a trusted key signed it anyway
    for target in (work, packed(work, tmp_path / "w.tar.gz")):
        res = verify_bundle(target, keys=[keys.trusted_pub])
        failed = {it.name for it in res.failures}
        assert failed and failed <= {"rows", "verdicts"}, res.failures
        detail = " ".join(res.item(n).detail for n in failed)
        assert f"{check}/{table} row" in detail, detail
    # and verify --require-pass exits 1 naming it
    r = subprocess.run(
        [sys.executable, "-m", "fasttrack", "verify", str(work), "--key", str(keys.trusted_pub), "--require-pass"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={"COLUMNS": "400", "NO_COLOR": "1", "PATH": ""},
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NOT verified" in r.stdout and f"{check}/{table} row" in r.stdout, r.stdout


def _out_of_plan_failing_cell(rows: list[dict[str, Any]]) -> None:
    """A coverage cell at a point the plan does not have, failing by its own figures."""
    rows.append(
        {**rows[0], "point": "elsewhere-b9-ctx99", "in_plan": False, "verdict": "fail"}
        | {"candidate_decode_steps": 10, "candidate_optimized_decode_steps": 1, "candidate_optimized_fraction": 0.1}
    )


def test_rows_that_do_not_count_leave_the_verdict_alone(passing: Path, keys: Keys, tmp_path: Path) -> None:
    """A non-gated perf row and an out-of-plan coverage row (whose figures fail it) carry no verdict of the check."""
    import shutil

    work = tmp_path / "w"
    shutil.copytree(passing, work)
    _edit_table(work, "perf", "points", lambda rows: _first(rows, lambda r: not r.get("gated"), verdict="fail"))
    _edit_table(work, "coverage", "coverage", _out_of_plan_failing_cell)
    n = len(read_rows((work / table_path("coverage", "coverage")).read_bytes()))
    rewrite_manifest(work, lambda doc: doc["checks"]["coverage"]["tables"]["coverage"].update(rows=n))
    force_sign(work, keys.trusted)
    res = verify_bundle(work, keys=[keys.trusted_pub])
    assert res.verified, res.failures


def test_a_planned_point_cannot_be_declared_out_of_plan(passing: Path, keys: Keys, tmp_path: Path) -> None:
    """``in_plan`` is re-derived from the judging scope's plan: a planned point's failing cell marked out of plan
    is caught, naming the row."""
    import shutil

    work = tmp_path / "w"
    shutil.copytree(passing, work)
    _edit_table(work, "coverage", "coverage", lambda rows: rows[0].update(in_plan=False))
    force_sign(work, keys.trusted)
    res = verify_bundle(work, keys=[keys.trusted_pub])
    assert not res.verified and "in_plan is False, but the point is planned" in res.item("rows").detail
