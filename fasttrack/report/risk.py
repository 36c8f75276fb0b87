"""The review queue's order: what a maintainer should look at first, and why.

Unverified bundles come first (nothing in them can be trusted, and a forged "pass" must
not hide below real ones), then failed gates and isolation violations, then bundles
that disagree with an independent bundle for the same PR head, incomplete runs,
rehearsals and coverage gaps. Verified passing bundles come last. Ties: newest first.
"""

from __future__ import annotations

from dataclasses import dataclass

from fasttrack.report.records import BundleRecord

WEIGHTS = {
    "unverified": 1000,
    "unreadable": 500,
    "failed": 300,
    "isolation_fail": 250,
    "disagree": 200,
    "isolation_review": 100,
    "incomplete": 100,
    "rehearsal": 50,
    "coverage_gap": 30,
}


@dataclass
class Risk:
    score: int
    reasons: list[str]
    level: str
    """high, medium, low or none."""


def assess(r: BundleRecord, *, disagrees: bool = False) -> Risk:
    score, reasons = 0, []

    def add(key: str, why: str) -> None:
        nonlocal score
        score += WEIGHTS[key]
        reasons.append(why)

    if not r.verified:
        bits = []
        if r.signature_ok is not True:
            bits.append("signature")
        if r.hashes_ok is not True:
            bits.append("hashes")
        add("unverified", "unverified" + (f" ({', '.join(bits)})" if bits else ""))
    if not r.readable:
        add("unreadable", "manifest unreadable")
    if r.verdict == "fail":
        add("failed", "failed gates: " + ", ".join(r.failed_checks))
        score += 10 * max(0, len(r.failed_checks) - 1)
    if r.isolation == "fail":
        add("isolation_fail", "isolation violated")
    elif r.isolation == "review":
        add("isolation_review", "isolation needs review")
    if disagrees:
        add("disagree", "disagrees with another bundle for the same PR head")
    if r.verdict == "incomplete":
        add("incomplete", "incomplete: " + ", ".join(n for n, v in r.checks.items() if v == "not_run"))
    if r.rehearsal:
        add("rehearsal", "rehearsal on mismatched hardware")
    if r.coverage_gaps:
        add("coverage_gap", f"{r.coverage_gaps} coverage gap{'s' if r.coverage_gaps != 1 else ''}")
    level = "high" if score >= 250 else ("medium" if score >= 100 else ("low" if score > 0 else "none"))
    return Risk(score=score, reasons=reasons, level=level)


def order(items: list[tuple[BundleRecord, Risk]]) -> list[tuple[BundleRecord, Risk]]:
    """Highest risk first; among equal risk, newest first; then by id (stable and deterministic)."""
    out = sorted(items, key=lambda x: x[0].id)
    out.sort(key=lambda x: x[0].created, reverse=True)
    out.sort(key=lambda x: x[1].score, reverse=True)
    return out
