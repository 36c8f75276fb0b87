"""The headline never lies: one table of cases, every combination of signed, trusted, PR-bound, rehearsal and
complete, each a real signed (or unsigned) bundle, and the same headline in the report, the PR comment and the
dashboard. PASS only when signed by a trusted key, bound to the PR head, not a rehearsal and complete for its
tier; otherwise the headline names what is missing."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from report_testlib import Keys
from synthetic import Spec, make_bundle

from fasttrack.bundle.headline import headline
from fasttrack.bundle.verify import verify_bundle
from fasttrack.report.comment import render_comment
from fasttrack.report.load import build_report_data
from fasttrack.report.report import report_html
from fasttrack.report.site import build_site

SIGNERS = ("none", "untrusted", "trusted")
#: How a bundle fails to be bound to the PR head: no PR link at all, or a link whose served build is unknown.
UNBOUND = ("no PR link", "unproven link")


def expected(signer: str, bound: bool, rehearsal: bool, complete: bool, failed: bool = False) -> str:
    """The rule, written out independently of the code under test."""
    missing = []
    if signer != "trusted":
        missing.append("UNVERIFIED")
    if failed:
        missing.append("FAIL")
    if not complete:
        missing.append("INCOMPLETE")
    if rehearsal:
        missing.append("REHEARSAL")
    if not bound:
        missing.append("NOT EVIDENCE FOR THIS PR")
    return " \u00b7 ".join(missing) or "PASS"


CASES = [
    (signer, bound, rehearsal, complete, False)
    for signer, bound, rehearsal, complete in itertools.product(SIGNERS, (True, False), (False, True), (True, False))
] + [("trusted", True, False, True, True), ("untrusted", False, True, True, True)]


def case_id(c: tuple[str, bool, bool, bool, bool]) -> str:
    signer, bound, rehearsal, complete, failed = c
    return "-".join(
        [
            f"signed-{signer}",
            "bound" if bound else "unbound",
            "rehearsal" if rehearsal else "on-hw",
            "complete" if complete else "incomplete",
        ]
        + (["failed"] if failed else [])
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> dict[str, dict[str, str]]:
    """Every case's bundle, and the headline its report, comment and dashboard row show."""
    root = tmp_path_factory.mktemp("headline-table")
    bundles = root / "bundles"
    out: dict[str, dict[str, str]] = {}
    ids: dict[str, str] = {}
    for n, c in enumerate(CASES):
        signer, bound, rehearsal, complete, failed = c
        spec = Spec(
            created=f"2026-01-15T12:{n:02d}:00+00:00",  # one seed for all (no check fails by chance); another ID each
            rehearsal=rehearsal,
            not_run=() if complete else ("evals",),
            fail=("perf",) if failed else (),
            pr_link=bound or UNBOUND[n % 2] != "no PR link",
            served_commit="head" if bound else None,
        )
        sign = {"none": [], "untrusted": [keys.other], "trusted": [keys.trusted]}[signer]
        b = make_bundle(bundles / case_id(c), spec, sign_keys=sign)
        vr = verify_bundle(b, keys=[keys.trusted_pub])
        data = build_report_data(b, keys=[keys.trusted_pub], verify_result=vr)
        html = report_html(data)
        comment = render_comment(data)
        m = re.search(r'<div class="big" id="headline-text">([^<]*)</div>', html)
        first = comment.splitlines()[1]
        out[case_id(c)] = {
            "code": headline(vr).text,
            "report": m.group(1).replace("&middot;", "\u00b7") if m else "",
            "comment": first.split("fasttrack: ", 1)[1].rsplit(" \u00b7 demo-llama", 1)[0].replace("\\", ""),
            "comment_icon": first.split(" ")[1],
        }
        ids[case_id(c)] = (vr.bundle_id or "")[:16]
    build_site(bundles, root / "site", keys=[keys.trusted_pub], jobs=1)
    index = (root / "site" / "index.html").read_text()
    for name, short in ids.items():
        row = re.search(
            rf'<tr data-bundle="{short}"[^>]*>.*?<td class="headline-cell"><span class="badge [^"]*">([^<]*)</span>',
            index,
            re.S,
        )
        out[name]["dashboard"] = row.group(1).replace("&middot;", "\u00b7") if row else ""
    return out


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_headline_in_report_comment_and_dashboard(
    case: tuple[str, bool, bool, bool, bool], table: dict[str, dict[str, str]]
) -> None:
    want = expected(*case)
    got = table[case_id(case)]
    assert got["code"] == want
    assert got["report"] == want, got
    assert got["comment"] == want, got
    assert got["dashboard"] == want, got
    if want == "PASS":
        assert got["comment_icon"] == "\u2705"
    else:
        assert got["comment_icon"] != "\u2705", got


def test_only_one_case_passes(table: dict[str, dict[str, str]]) -> None:
    assert [k for k, v in table.items() if v["code"] == "PASS"] == ["signed-trusted-bound-on-hw-complete"]


def test_a_shard_is_incomplete_and_a_pr_head_mismatch_is_not_evidence(keys: Keys, tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b", Spec(), sign_keys=[keys.trusted])
    assert headline(verify_bundle(b, keys=[keys.trusted_pub])).text == "PASS"
    vr = verify_bundle(b, keys=[keys.trusted_pub], pr_head="1234567")
    # the bundle itself verifies; it tested another head than the PR's
    assert headline(vr).text == "NOT EVIDENCE FOR THIS PR" and "expected 1234567" in headline(vr).reasons[0]
    shard = verify_bundle(b, keys=[keys.trusted_pub]).model_copy(update={"shard": "2/3"})
    hl = headline(shard)
    assert hl.text == "INCOMPLETE" and "shard 2/3 holds part of the tier only" in hl.reasons[0]
