"""Do independent bundles for the same PR head agree?

Two bundles agree when every check that ran in both has the same verdict, and for every
(config point, metric) both measured, each speedup lies inside the other's interval.
Checks that did not run in one of them, and points only one of them measured, are not
compared (and listed as such). Bundles that share nothing are "not comparable".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fasttrack.report.records import BundleRecord


@dataclass
class PairResult:
    a: str
    b: str
    status: str
    """agree, disagree or not_comparable."""
    differences: list[str] = field(default_factory=list)
    compared_checks: int = 0
    compared_points: int = 0


@dataclass
class GroupResult:
    key: tuple[str, str]
    bundles: list[BundleRecord]
    status: str
    """single, agree, disagree or not_comparable."""
    pairs: list[PairResult] = field(default_factory=list)

    @property
    def differences(self) -> list[str]:
        return [f"{p.a[:12]} vs {p.b[:12]}: {d}" for p in self.pairs for d in p.differences]


def _within(x: float, lo: float | None, hi: float | None) -> bool:
    return lo is not None and hi is not None and lo <= x <= hi


def compare(a: BundleRecord, b: BundleRecord) -> PairResult:
    diffs: list[str] = []
    nchecks = 0
    for name in sorted(set(a.checks) & set(b.checks)):
        va, vb = a.checks[name], b.checks[name]
        if "not_run" in (va, vb):
            continue
        nchecks += 1
        if va != vb:
            diffs.append(f"check {name}: {va} vs {vb}")
    pa = {(p.point, p.metric): p for p in a.perf}
    pb = {(p.point, p.metric): p for p in b.perf}
    npoints = 0
    for key in sorted(set(pa) & set(pb)):
        x, y = pa[key], pb[key]
        npoints += 1
        if not (_within(x.speedup, y.ci_low, y.ci_high) and _within(y.speedup, x.ci_low, x.ci_high)):
            diffs.append(
                f"{key[0]} {key[1]}: speedup {x.speedup:.3f} [{_f(x.ci_low)}, {_f(x.ci_high)}] vs "
                f"{y.speedup:.3f} [{_f(y.ci_low)}, {_f(y.ci_high)}]"
            )
    if nchecks == 0 and npoints == 0:
        status = "not_comparable"
    else:
        status = "disagree" if diffs else "agree"
    return PairResult(
        a=a.id, b=b.id, status=status, differences=diffs, compared_checks=nchecks, compared_points=npoints
    )


def _f(v: float | None) -> str:
    return "?" if v is None else f"{v:.3f}"


def group(records: Sequence[BundleRecord]) -> list[GroupResult]:
    """Group readable bundles by (PR head, model) and compare every pair in each group."""
    groups: dict[tuple[str, str], list[BundleRecord]] = {}
    for r in records:
        if r.readable and r.head_sha:
            groups.setdefault(r.group_key, []).append(r)
    out = []
    for key, rs in groups.items():
        rs = sorted(rs, key=lambda r: (r.created, r.id))
        if len(rs) == 1:
            out.append(GroupResult(key=key, bundles=rs, status="single"))
            continue
        pairs = [compare(rs[i], rs[j]) for i in range(len(rs)) for j in range(i + 1, len(rs))]
        statuses = {p.status for p in pairs}
        status = "disagree" if "disagree" in statuses else ("agree" if "agree" in statuses else "not_comparable")
        out.append(GroupResult(key=key, bundles=rs, status=status, pairs=pairs))
    return out
