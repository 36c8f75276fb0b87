"""The report's first screen: the headline and why, and the tier's caveats.

The headline follows one rule (:mod:`fasttrack.bundle.headline`), the same for the report, the PR comment,
the maintainers' comment body and the dashboard. The caveats say what the tier that ran cannot show, from
the bundle alone: its plan (points, engine lifetimes per side), its check entries (checks the tier left
out) and its recorded scope (the perf gate's noise margin, caps on evals and workloads).
"""

from __future__ import annotations

from typing import Any

from fasttrack import attrs
from fasttrack.bundle.headline import Headline, headline
from fasttrack.bundle.manifest import Manifest
from fasttrack.bundle.verify import VerifyResult
from fasttrack.report import fields as F
from fasttrack.report import fmt
from fasttrack.report.views import Condition, HeadlineView

#: The conditions of a PASS, as the first screen lists them: (the headline word when it fails, label).
CONDITIONS: tuple[tuple[str, str], ...] = (
    ("unverified", "Verified: signed by a trusted key, every file matches its signed hash"),
    ("fail", "Every required check passed"),
    ("incomplete", "Complete for its tier"),
    ("rehearsal", "Not a rehearsal (run on the scope's hardware)"),
    ("not evidence for this PR", "Bound to the PR head"),
)

TIER_WORDS = {
    "smoke": "the smallest tier: a quick run on a few points, not the evidence a merge needs",
    "standard": "the middle tier",
    "full": "the whole envelope",
}


def headline_view(vr: VerifyResult) -> HeadlineView:
    hl: Headline = headline(vr)
    why = {r.split(": ", 1)[0]: r.split(": ", 1)[1] if ": " in r else r for r in hl.reasons}
    ok_detail = {
        "unverified": _signed_by(vr),
        "fail": f"the bundle's verdict is {hl.verdict}",
        "incomplete": "every required check of the tier ran, over the whole tier",
        "rehearsal": "the host matched the scope's hardware",
        "not evidence for this PR": fmt.one_line(vr.pr_link_detail, 400),
    }
    conds = [
        Condition(label=label, ok=word not in hl.missing, detail=fmt.one_line(why.get(word, ok_detail[word]), 600))
        for word, label in CONDITIONS
    ]
    extra = [w for w in hl.missing if w not in dict(CONDITIONS)]
    for w in extra:  # a trusted scope or a lowest tier asked for and not met
        conds.append(Condition(label=w.capitalize(), ok=False, detail=fmt.one_line(why.get(w, ""), 600)))
    return HeadlineView(
        **attrs(hl, "text", "state", "icon", "verdict", "passed"),
        missing=list(hl.missing),
        reasons=[fmt.one_line(r, 600) for r in hl.reasons],
        conditions=conds,
    )


def _signed_by(vr: VerifyResult) -> str:
    """Who signed, by the trusted keys that verified (a signature's own key id is never quoted)."""
    who = [
        f"{s.get('identity') or 'a trusted key'} (key {str(s.get('key'))[:16]})"
        for s in vr.signatures
        if s.get("status") == "valid"
    ]
    return ("signed by " + ", ".join(who)) if who else "signed by a trusted key"


def _noise_margin(m: Manifest, scope_obj: dict[str, Any]) -> float | None:
    """The perf gate's noise margin: from the threshold the perf check applied (``1 - margin``), else from the
    recorded scope's ``gates.perf.noise_margin`` (or its default)."""
    perf = m.checks.get("perf")
    if perf is None:
        return None
    thr = F.as_float(perf.gate.threshold) if perf.gate is not None else None
    if thr is not None and 0 < thr <= 1:
        return round(1 - thr, 6)
    gates: dict[str, Any] = scope_obj["gates"] if isinstance(scope_obj.get("gates"), dict) else {}
    pg: dict[str, Any] = gates["perf"] if isinstance(gates.get("perf"), dict) else {}
    margin = F.as_float(pg.get("noise_margin"))
    return margin if margin is not None else 0.05  # the gate's default


def tier_caveats(m: Manifest, scope_obj: dict[str, Any]) -> list[str]:
    """What the tier that ran cannot show, one sentence each (see the module docstring)."""
    tier = m.scope.tier
    out = [f"{tier}: {TIER_WORDS.get(tier, 'a tier of the scope')}"]
    plan = m.plan.plan
    points: list[Any] = plan["points"] if isinstance(plan.get("points"), list) else []
    groups: list[Any] = plan["groups"] if isinstance(plan.get("groups"), list) else []
    lifetimes = sorted({F.as_int(g.get("lifetimes_per_side")) or 0 for g in groups if isinstance(g, dict)})
    sizes = f"{len(points)} config point{'s' if len(points) != 1 else ''} in {len(groups)} engine group"
    sizes += "s" if len(groups) != 1 else ""
    if lifetimes and lifetimes[0]:
        lt = str(lifetimes[0]) if lifetimes[0] == lifetimes[-1] else f"{lifetimes[0]}-{lifetimes[-1]}"
        sizes += f", {lt} engine lifetime{'s' if lt != '1' else ''} per side"
    out.append(sizes)
    perf = m.checks.get("perf")
    if lifetimes and lifetimes[0] == 1 and perf is not None and perf.verdict.value != "not_run":
        out.append(
            "one engine lifetime per side: the speedup intervals leave out how much two starts of the same "
            "engine differ"
        )
    margin = _noise_margin(m, scope_obj)
    if margin is not None and perf is not None and perf.verdict.value != "not_run":
        out.append(
            f"noise margin {margin:g}: a point fails only when its speedup's lower bound is below {1 - margin:g}"
            + (f", so a slowdown of up to {margin:.0%} can pass" if margin >= 0.1 else "")
        )
    left = [n for n, e in m.checks.items() if e.verdict.value == "not_run" and not e.required and n != "isolation"]
    if left:
        out.append("left out by this tier (not run, not required): " + ", ".join(sorted(left)))
    not_run = [n for n, e in m.checks.items() if e.verdict.value == "not_run" and e.required]
    if not_run:
        out.append("required but not run: " + ", ".join(sorted(not_run)))
    tiers: dict[str, Any] = scope_obj["tiers"] if isinstance(scope_obj.get("tiers"), dict) else {}
    t: dict[str, Any] = tiers[tier] if isinstance(tiers.get(tier), dict) else {}
    if t and isinstance(t.get("eval_limit"), int):
        out.append(f"evals capped at {t['eval_limit']} samples each")
    if t and isinstance(t.get("workloads"), list):
        out.append("perf workloads: " + ", ".join(str(w) for w in t["workloads"][:12]))
    if m.plan.shard != "1/1":
        out.append(f"shard {m.plan.shard}: this bundle holds part of the tier")
    if any(e.mode == "attached" for e in m.provenance.engines):
        out.append("engines attached by URL: fasttrack did not start them; their settings are as they reported")
    if m.rehearsal:
        out.append("rehearsal: " + (m.rehearsal_reason or "run on hardware the scope does not declare"))
    return [fmt.one_line(x, 600) for x in out if x]
