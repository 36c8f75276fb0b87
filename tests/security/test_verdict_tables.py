"""A verdict its own tables contradict, signed by a trusted key.

``verify --require-pass`` once accepted a bundle whose verdict said pass while rows of its own perf
table said fail. ``verify`` now recomputes what each check's table allows: a check recorded ``pass``
next to a failing row of the table its verdict is folded from (the perf check's gated points, the
equivalence points, the in-plan coverage rows, the features, the kernel cases, the eval comparisons)
fails the ``verdicts`` item, whoever signed it, and signing refuses such a bundle in the first place.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from security_testlib import HEAD, Keys, force_sign, packed
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
    # the regular signing path refuses it
    with pytest.raises(BundleError, match=f"check '{check}' is recorded pass"):
        sign_bundle(work, keys.trusted, replace=True)
    force_sign(work, keys.trusted)  # a trusted key signed it anyway
    for target in (work, packed(work, tmp_path / "w.tar.gz")):
        res = verify_bundle(target, keys=[keys.trusted_pub])
        assert {it.name for it in res.failures} == {"verdicts"}, res.failures
        detail = res.item("verdicts").detail
        assert f"check '{check}' is recorded pass" in detail and f"{check}/{table}" in detail, detail
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
    assert "NOT verified" in r.stdout and "is recorded pass" in r.stdout, r.stdout


def test_rows_that_do_not_count_leave_the_verdict_alone(passing: Path, keys: Keys, tmp_path: Path) -> None:
    """A non-gated perf row and an out-of-plan coverage row carry no verdict of the check."""
    import shutil

    work = tmp_path / "w"
    shutil.copytree(passing, work)
    _edit_table(work, "perf", "points", lambda rows: _first(rows, lambda r: not r.get("gated"), verdict="fail"))
    _edit_table(work, "coverage", "coverage", lambda rows: rows[0].update(in_plan=False, verdict="fail"))
    sign_bundle(work, keys.trusted, replace=True)
    assert verify_bundle(work, keys=[keys.trusted_pub]).verified
