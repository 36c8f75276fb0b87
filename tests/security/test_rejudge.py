"""The gate re-judges: a contributor who edits a failing bundle's tables and re-signs it with their own key cannot
make ``verify --require-pass --trusted-scope`` pass, however the rows are edited, and no edit crashes it.

Material: the committed H200 bundles (real FAIL bundles: equivalence, features and perf fail on their rows). Each
case edits their tables as issue 45's findings did (every one of them made the gate pass before re-judging), sets
every check entry and the bundle verdict to pass, signs with the forger's key, and runs the gate with that key
trusted: the gate must refuse, naming the row, the table or the check that gives the edit away.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from mutate_testlib import (
    EXAMPLES,
    claim_pass,
    edit_rows,
    gate,
    manifest,
    put,
    read,
    trusted_scope,
    unpack,
    write_manifest,
)

from fasttrack.bundle.keys import generate_keypair, load_private_key

#: Tables whose verdicts the checks fold (a ``passed`` flag for the evals): what a forger edits first.
JUDGED = {
    ("perf", "points"): "verdict",
    ("equivalence", "equivalence_points"): "verdict",
    ("features", "features"): "verdict",
    ("coverage", "coverage"): "verdict",
    ("kernels", "cases"): "verdict",
    ("evals", "eval_comparisons"): "passed",
}


@pytest.fixture(scope="module")
def forger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Path]:
    """The forger's key pair (trusted by the gate: a signature says who wrote a bundle) and the trusted scope."""
    root = tmp_path_factory.mktemp("forger")
    priv, pub = generate_keypair(root / "k", name="forger")
    return load_private_key(priv), pub, trusted_scope("h200-run", root / "scopes")


def _forged(tmp: Path, forger: Any, edit: Callable[[Path], None], example: str = "h200-run") -> Any:
    root = unpack(example, tmp / "b")
    edit(root)
    claim_pass(root)
    key, pub, scope = forger
    ok, res = gate(root, key, pub, trusted=scope)
    assert not ok, "the gate passed an edited failing bundle"
    assert not res.verified and res.verdict == "pass"  # it claims pass; the gate does not believe it
    return res


def _all(check: str, table: str, **change: Any) -> Callable[[Path], None]:
    return lambda root: edit_rows(root, check, table, lambda rows: [r.update(change) for r in rows])


def _every_verdict(value: Callable[[Any], Any]) -> Callable[[Path], None]:
    """Rewrite the verdict cell of every judged table (so that no table keeps a plain 'fail')."""

    def edit(root: Path) -> None:
        for (check, table), col in JUDGED.items():
            edit_rows(root, check, table, lambda rows, c=col: [r.update({c: value(r.get(c))}) for r in rows])

    return edit


def _drop(check: str, table: str, column: str) -> Callable[[Path], None]:
    return lambda root: put(root, check, table, read(root, check, table).drop_columns([column]))


def _emptied(check: str, table: str) -> Callable[[Path], None]:
    return lambda root: put(root, check, table, read(root, check, table).slice(0, 0))


def _renamed(check: str, table: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        doc = manifest(root)
        doc["checks"][check]["tables"][table + "_old"] = doc["checks"][check]["tables"].pop(table)
        write_manifest(root, doc)

    return edit


#: Finding 1 of issue 45, each edit that made the gate pass: (edit, the item that refuses it, words it names).
FINDING_1: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "perf rows' gated set to false": (_all("perf", "points", gated=False), "rows", "gated is False"),
    "fail written as FAIL": (_every_verdict(lambda v: v.upper() if isinstance(v, str) else v), "tables", "FAIL"),
    "fail written with a space": (
        _every_verdict(lambda v: f"{v} " if isinstance(v, str) else v),
        "tables",
        "'fail '",
    ),
    "verdicts set to null": (_all("perf", "points", verdict=None), "rows", "recorded verdict None"),
    "the verdict column dropped": (_drop("perf", "points", "verdict"), "tables", "field 'verdict'"),
    "the perf table emptied": (_emptied("perf", "points"), "verdicts", "'perf' is recorded pass"),
    "the perf table renamed": (_renamed("perf", "points"), "tables", "wrote no table points"),
    "gated given as the string 'true'": (_all("perf", "points", gated="true"), "tables", "valid boolean"),
    "coverage rows out of the plan": (_all("coverage", "coverage", in_plan=False), "rows", "in_plan is False"),
    "coverage rows all not_run": (
        _all("coverage", "coverage", verdict="not_run"),
        "rows",
        "recorded verdict 'not_run'",
    ),
    "an eval's passed set to null": (_all("evals", "eval_comparisons", passed=None), "tables", "'passed'"),
    "a kernel case marked error": (
        lambda root: edit_rows(root, "kernels", "cases", lambda rows: rows[0].update(verdict="error")),
        "tables",
        "'error'",
    ),
    "one undecodable JSON cell": (
        lambda root: edit_rows(root, "perf", "points", lambda rows: rows[0].update(notes="[1, ")),
        "tables",
        "not the JSON its column says",
    ),
}


@pytest.mark.parametrize("case", sorted(FINDING_1))
def test_finding_1_an_edited_failing_bundle_never_verifies_as_pass(case: str, tmp_path: Path, forger: Any) -> None:
    edit, item, words = FINDING_1[case]
    res = _forged(tmp_path, forger, edit)
    assert res.item(item).ok is False and words in res.item(item).detail, res.item(item).detail


def _checks_edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        doc = manifest(root)
        for check in ("perf", "equivalence", "features"):
            change(doc["checks"][check]) if check in doc["checks"] else None
        write_manifest(root, doc)

    return edit


def _deleted(root: Path) -> None:
    doc = manifest(root)
    for check in ("perf", "equivalence", "features"):
        for t in doc["checks"].pop(check)["tables"].values():
            (root / t["path"]).unlink()
    write_manifest(root, doc)


def test_finding_2_checks_cannot_vanish_or_be_marked_not_required(tmp_path: Path, forger: Any) -> None:
    """Which checks must exist and which are required comes from the trusted scope and its tier, never the bundle."""
    res = _forged(tmp_path / "deleted", forger, _deleted)
    for check in ("perf", "equivalence", "features"):
        assert f"check {check!r} has no entry, but the trusted scope" in res.item("verdicts").detail
    res = _forged(tmp_path / "optional", forger, _checks_edit(lambda e: e.update(required=False)))
    assert "check 'perf' is recorded not required, but the trusted scope" in res.item("verdicts").detail


def test_finding_8_a_row_s_own_figures_recompute_its_verdict(tmp_path: Path, forger: Any) -> None:
    """A perf point marked pass keeps its lower bound below the threshold; an equivalence point marked pass keeps a
    logprob difference above the limit: each row is named."""
    res = _forged(
        tmp_path,
        forger,
        lambda root: (
            _all("perf", "points", verdict="pass")(root),
            _all("equivalence", "equivalence_points", verdict="pass", problems="")(root),
        ),
    )
    rows = res.item("rows").detail
    assert "perf/points row 0 (decode/tp1-dcp1-none-b1-ctx32/median_engine_tpot_ms): recorded verdict 'pass'" in rows
    assert "equivalence/equivalence_points row 0 (tp1-dcp1-none-b1-ctx32): recorded verdict 'pass'" in rows
    assert "max |Δ logprob| 0.5007625818252563 > 0.1" in rows


def _cpu_host(root: Path) -> None:
    doc = manifest(root)
    doc["provenance"]["hardware"] = {"kind": "cpu", "cpu_model": "a laptop", "cpu_count": 8, "gpu_count": 0}
    write_manifest(root, doc)


def test_finding_9_recorded_hardware_is_held_against_the_scope(tmp_path: Path, forger: Any) -> None:
    res = _forged(tmp_path, forger, _cpu_host)
    assert res.item("hardware").ok is False
    assert "recorded a CPU host (a laptop): the bundle recorded a cpu host, the scope asks for GPUs" in (
        res.item("hardware").detail
    )


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_committed_bundles_still_verify_and_are_re_judged(example: str, forger: Any) -> None:
    """Older bundles (no row model recorded) are read by the legacy path, said so, and re-judged: every row."""
    from fasttrack import ROOT
    from fasttrack.bundle.verify import verify_bundle

    res = verify_bundle(
        ROOT / "examples" / example / "bundle.tar.gz",
        keys=[ROOT / "examples" / example / "h200.pub"],
        trusted_scope=trusted_scope(example, forger[2].parent / example),
        min_tier="smoke",
    )
    assert res.verified and res.verdict == res.rejudged_verdict == "fail", res.failures
    assert res.judged_by and res.judged_by.startswith("the trusted scope")
    assert len(res.legacy_tables) == 27 and "read by the legacy path" in res.item("rows").detail
    own = verify_bundle(ROOT / "examples" / example / "bundle.tar.gz", keys=[ROOT / "examples" / example / "h200.pub"])
    assert own.verified and own.judged_by == "the bundle's own recorded scope (no --trusted-scope given)"
    assert json.loads(own.model_dump_json())["rejudged_verdict"] == "fail"


def test_a_list_valued_verdict_is_a_finding_not_a_crash(tmp_path: Path, forger: Any) -> None:
    """Finding 4: one list-valued verdict cell crashed verify, report, merge and sign."""
    res = _forged(
        tmp_path, forger, lambda root: edit_rows(root, "perf", "points", lambda r: r[0].update(verdict=["x"]))
    )
    assert "perf/points row 0: field 'verdict'" in res.item("tables").detail


def test_rows_repeated_far_beyond_the_plan_are_refused_from_the_footer(tmp_path: Path, forger: Any) -> None:
    """Finding 3 in verify: the table's row count is held against what the plan could produce before any row is
    decoded (the memory and time bound is measured in test_rejudge_bounds)."""

    def bomb(root: Path) -> None:
        t = read(root, "perf", "points")
        put(root, "perf", "points", pa.concat_tables([t] * 50_000))

    res = _forged(tmp_path, forger, bomb)
    assert "table perf/points has 1,200,000 rows, more than the 576 the judging scope's plan could produce" in (
        res.item("tables").detail
    )
