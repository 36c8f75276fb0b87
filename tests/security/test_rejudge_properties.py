"""Property: however a committed FAIL bundle's tables are edited (columns dropped, types changed, case changed,
cells nulled, rows repeated far beyond the plan), and whatever its entries then claim, nothing reaches pass unless
the recomputed verdicts pass, and nothing crashes verify or the report.

Hypothesis draws a committed bundle, a table, a column and an edit (several edits per case), the forger claims
pass and signs with their own key, and the maintainer's gate (``verify --require-pass --trusted-scope``, the
forger's key trusted) must refuse it; the report of the edited bundle must render, marked not verified.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutate_testlib import EXAMPLES, claim_pass, gate, manifest, put, read, trusted_scope, unpack

from fasttrack.bundle.keys import generate_keypair, load_private_key
from fasttrack.limits import BUNDLE_DECODED_MAX_ROWS
from fasttrack.report.load import build_report_data
from fasttrack.report.report import report_html

ROW_CAP = BUNDLE_DECODED_MAX_ROWS * 6 // 5
"""At most this many rows in an edited table: a fifth above the rows a bundle may decode (what verify refuses)."""

EDITS = ("drop", "to_text", "to_int", "upper", "nulls", "repeat", "pass_words")


#: The verdict column of each table a check folds its verdict from: the column a forger edits in every one of them.
VERDICT_COLUMNS = {
    ("perf", "points"): "verdict",
    ("equivalence", "equivalence_points"): "verdict",
    ("features", "features"): "verdict",
    ("coverage", "coverage"): "verdict",
    ("coverage", "fallback"): "verdict",
    ("kernels", "cases"): "verdict",
    ("evals", "eval_comparisons"): "passed",
}


def _edit(root: Path, check: str, table: str, column: int | str, edit: str, n: int) -> None:
    """One edit of one column (by name, or the ``column``-th) of one table (the manifest kept consistent)."""
    t = read(root, check, table)
    if not t.column_names:
        return
    name = column if isinstance(column, str) else t.column_names[column % len(t.column_names)]
    if name not in t.column_names:
        return
    i = t.column_names.index(name)
    col = t.column(name)
    field = t.schema.field(name)
    if edit == "drop":
        t = t.drop_columns([name])
    elif edit == "repeat":
        # repeated edits of one table compound (200,000 copies of 200,000 copies): cap the rows just above the
        # bundle's row budget, which is what verify must refuse, not an hours-long parquet write
        t = pa.concat_tables([t] * max(1, min(n, ROW_CAP // max(1, t.num_rows))))
    else:
        if edit == "to_text":
            new = pc.cast(col, pa.string(), safe=False) if not pa.types.is_null(col.type) else col
        elif edit == "to_int":
            new = pa.array([7] * t.num_rows, type=pa.int64())
        elif edit == "upper" and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            new = pc.utf8_upper(col)
        elif edit == "nulls":
            new = pa.nulls(t.num_rows, type=col.type)
        elif edit == "pass_words":
            new = pa.array(["pass"] * t.num_rows, type=pa.string())
        else:
            return
        t = t.set_column(i, pa.field(name, new.type, metadata=field.metadata), new)
    put(root, check, table, t)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("rejudge-props")
    priv, pub = generate_keypair(root / "k", name="forger")
    scopes = {e: trusted_scope(e, root / "scopes" / e) for e in EXAMPLES}
    pristine = {e: unpack(e, root / "pristine" / e) for e in EXAMPLES}
    tables = {
        e: sorted((c, t) for c, en in manifest(p)["checks"].items() for t in en["tables"]) for e, p in pristine.items()
    }
    return {
        "root": root,
        "key": load_private_key(priv),
        "pub": pub,
        "scopes": scopes,
        "pristine": pristine,
        "tables": tables,
        "n": 0,
    }


@settings(max_examples=45, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_edit_of_a_failing_bundle_reaches_pass(world: dict[str, Any], data: st.DataObject) -> None:
    example = data.draw(st.sampled_from(EXAMPLES), label="example")
    world["n"] += 1
    root = world["root"] / f"case{world['n']}"
    shutil.copytree(world["pristine"][example], root)
    try:
        # the same edit of every verdict column (what stops the plain row check), then a few edits anywhere
        edit = data.draw(st.sampled_from(EDITS), label="verdict edit")
        for (check, table), column in VERDICT_COLUMNS.items():
            _edit(root, check, table, column, edit, 2)
        for _ in range(data.draw(st.integers(0, 3), label="more edits")):
            check, table = data.draw(st.sampled_from(world["tables"][example]), label="table")
            edit = data.draw(st.sampled_from(EDITS), label="edit")
            pick = data.draw(st.integers(0, 80), label="column")
            n = data.draw(st.sampled_from([2, 1000, 200_000]), label="copies")
            _edit(root, check, table, pick, edit, n)
        claim_pass(root)
        ok, res = gate(root, world["key"], world["pub"], trusted=world["scopes"][example])
        assert not ok, [it for it in res.items if it.ok is not True]
        assert res.rejudged_verdict != "pass" or not res.verified
        # the report of the edited bundle renders, marked not verified (no edit crashes it)
        data_ = build_report_data(root, keys=[world["pub"]])
        assert not data_.verification.verified and report_html(data_)
    finally:
        shutil.rmtree(root, ignore_errors=True)
