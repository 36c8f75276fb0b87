"""What a synthetic bundle holds: its :class:`Spec` and the invented check results it yields.

The rows are drawn from a seeded generator by :mod:`evidence_testlib`: they fit the row models of the real checks'
tables and are judged by the recorded scope's gates, so a synthetic bundle of a shipped suite verifies (see
:mod:`synthetic.bundles` for how they become a signed bundle). A payload is planted in the free-text fields of
the rows (never in a column name: a typed table's columns are its model's fields).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import evidence_testlib

from fasttrack.evidence.expect import planned_points
from fasttrack.report.check_views import CHECK_TITLES
from fasttrack.results import DEFAULT_CLAIM_TOLERANCE, NOT_PR_EVIDENCE, CheckResult, Gate, Verdict, claim_verdict
from fasttrack.scope import Scope

SHIPPED_CHECKS = ("isolation", "kernels", "equivalence", "features", "coverage", "evals", "perf")
"""The checks a synthetic bundle records, in the order the shipped checks run (its rows imitate theirs)."""


@dataclass
class Spec:
    """What one synthetic bundle looks like."""

    model: str = "demo-llama"
    """A suite under suites/ with a plannable scope, or any other name (a small invented plan)."""
    seed: int = 0
    repository: str = "vllm-project/vllm"
    pr_number: int | None = 101
    head_sha: str = "a" * 40
    base_sha: str = "b" * 40
    fail: Sequence[str] = ()
    """Checks that fail (perf: a slow point; evals: lower scores; coverage: a gap; others: a failed row)."""
    not_run: Sequence[str] = ()
    """Checks recorded as not run (with a reason)."""
    isolation: str = "pass"
    rehearsal: bool = False
    speedup: float = 1.12
    """Typical speedup of the candidate (perf rows scatter around it)."""
    noise: float = 0.03
    payload: str | None = None
    created: str = "2026-01-15T12:00:00+00:00"
    signer_comment: str = ""
    extra_tables: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    check_names: dict[str, str] = field(default_factory=dict)
    """Names the checks are recorded under (e.g. ``{"perf": "speed"}``); each keeps its title and view."""
    legacy_entries: bool = False
    """Record no title and view per check, like bundles written before checks declared them."""
    tier: str | None = None
    """The tier whose plan the bundle records (default: the suite's in ``synthetic.bundles.SUITES``)."""
    pr_link: bool = True
    """Whether the bundle records a PR link (without one its isolation row is not run: not PR evidence)."""
    served_commit: str | None = "head"
    """The vLLM commit the engines report: ``head`` (the PR head: the link is proven), another SHA (a
    mismatch), or None (no commit readable: the link is unproven)."""
    scope_swaps: dict[str, str] = field(default_factory=dict)
    """Text of the recorded scope replaced (each key must occur in the suite's scope): a scope edited by its
    contributor."""


def recorded_name(spec: Spec, check: str) -> str:
    """The name ``check`` is recorded under in the bundle."""
    return spec.check_names.get(check, check)


def plant(spec: Spec, text: str) -> str:
    """``text`` with the payload planted (when there is one)."""
    return f"{text} {spec.payload}" if spec.payload else text


def _perf_claims(spec: Spec, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The claims table: one claim matched to the first point (judged like the perf check, by the claim's
    tolerance), one not measured."""
    first = rows[0] if rows else None
    tolerance = DEFAULT_CLAIM_TOLERANCE
    bound = 1.0 * (1 - tolerance)
    status = "not_measured"
    if first is not None:
        status, bound = claim_verdict(1.0, first["ci_low"], first["ci_high"], tolerance=tolerance)
    claims = [
        {
            "id": "claim-b1",
            "text": plant(spec, "The fast path is at least 1.0x at batch 1."),
            "metric": "speedup_tpot",
            "reason": plant(spec, "matched to the first batch-1 point"),
            "claimed": 1.0,
            "measured": first["speedup"] if first else None,
            "ci_low": first["ci_low"] if first else None,
            "ci_high": first["ci_high"] if first else None,
            "bound": bound,
            "tolerance": tolerance,
            "point": first["point"] if first else None,
            "status": status,
        },
        {
            "id": "claim-b64",
            "text": plant(spec, "1.5x at batch 64 on the largest context."),
            "metric": "speedup_tpot",
            "reason": plant(spec, "no measured point matches the claim's configuration"),
            "claimed": 1.5,
            "measured": None,
            "point": None,
            "status": "not_measured",
        },
    ]
    return claims


@dataclass
class _Results:
    """The check results of one synthetic bundle, as they are built (one builder function per check)."""

    spec: Spec
    rng: random.Random
    points: list[dict[str, Any]]
    out: list[CheckResult] = field(default_factory=list)

    def gate(self, stat: str, thr: float | str, rule: str) -> Gate:
        spec = self.spec
        return Gate(
            statistic=plant(spec, stat),
            threshold=thr if not spec.payload else plant(spec, str(thr)),
            rule=plant(spec, rule),
        )

    def finish(
        self,
        name: str,
        rows_by_table: dict[str, list[dict[str, Any]]],
        g: Gate,
        summary: dict[str, Any],
        failures: list[str],
        ok_reason: str,
    ) -> None:
        """Record the check ``name``: not run when the spec says so, else failed by its ``failures``."""
        spec = self.spec
        title = None if spec.legacy_entries else plant(spec, CHECK_TITLES[name])
        view = None if spec.legacy_entries else name
        if name in spec.not_run:
            skipped = CheckResult.not_run(
                recorded_name(spec, name), plant(spec, f"{name} did not run: the tier does not select it")
            )
            self.out.append(skipped.model_copy(update={"title": title, "view": view}))
            return
        failed = bool(failures)
        tables = dict(rows_by_table)
        tables.update(spec.extra_tables.get(name, {}))
        self.out.append(
            CheckResult(
                check=recorded_name(spec, name),
                title=title,
                view=view,
                verdict=Verdict.FAIL if failed else Verdict.PASS,
                reason=plant(spec, f"{len(failures)} failing item(s): {failures[0]}" if failed else ok_reason),
                gate=g,
                summary={**summary, **({spec.payload: spec.payload} if spec.payload else {})},
                failures=failures,
                tables=tables,
                artifacts=[f"artifacts/{name}/notes.txt"],
            )
        )


def check_results(spec: Spec, scope: Scope, tier: str, rng: random.Random) -> list[CheckResult]:
    """Every shipped check's result, in the shipped check order, its rows judged by ``scope`` at ``tier``."""
    b = _Results(spec, rng, [])
    b.out.append(isolation_result(spec, scope))
    points = planned_points(scope, tier)
    for name in ("kernels", "equivalence", "features", "coverage", "evals", "perf"):
        d = evidence_testlib.Draw(
            scope,
            tier,
            points,
            random.Random(rng.random()),
            fail=name in spec.fail,
            text=spec.payload or "",
            speedup=spec.speedup,
            noise=spec.noise,
            head=spec.head_sha,
        )
        tables, failures = evidence_testlib.BUILDERS[name](d)
        if name == "perf":
            tables["claims"] = _perf_claims(spec, tables["points"])
        if name == "evals":
            _eval_extras(spec, rng, tables)
        stat, thr, rule, ok = _GATES[name]
        if name == "perf":
            thr = round(1.0 - scope.gates.perf.noise_margin, 9)  # as the perf check states it (0.67, not 0.66999...)
            rule = f"lower bound >= 1 - noise_margin ({thr:g}) at every point"
        b.finish(name, tables, b.gate(stat, thr, rule), {"rows": sum(map(len, tables.values()))}, failures, ok)
    return b.out


_GATES: dict[str, tuple[str, float | str, str, str]] = {
    "kernels": (
        "max abs error vs reference",
        1e-3,
        "every case within tolerance",
        "every kernel case within tolerance",
    ),
    "equivalence": (
        "fraction of requests within logprob tolerance",
        1.0,
        "all requests close at every batch size",
        "greedy outputs match at every batch size",
    ),
    "features": (
        "per-feature conformance / p-value",
        "see rows",
        "candidate not worse than baseline and above floors",
        "every serving feature behaves like the baseline",
    ),
    "coverage": (
        "fraction of decode steps on the optimized path",
        0.95,
        "every in-scope point at or above the threshold",
        "every in-scope point ran the optimized path",
    ),
    "evals": (
        "lower 95% bound of candidate - baseline (paired)",
        -0.05,
        "at least -margin, and above the floor",
        "paired scores non-inferior within the margin",
    ),
    "perf": ("hierarchical bootstrap 95% lower bound of speedup", 0.95, "", "no regression at any point"),
}
"""Each check's gate (statistic, threshold, rule) and the reason of its pass, as the report shows them."""


def _eval_extras(spec: Spec, rng: random.Random, tables: dict[str, list[dict[str, Any]]]) -> None:
    """The breakdown and review rows of each comparison (the report draws them)."""
    breakdown, review = [], []
    for c in tables["eval_comparisons"]:
        pairs, dims = _eval_pairs(rng, c["kind"], 0.25 if "evals" in spec.fail else 0.0)
        breakdown.extend(_eval_breakdown(c["eval"], c["point"], pairs, dims))
        for sid, _a, _b, bs, cs in pairs:
            if bs != cs:
                review.append(
                    {
                        "eval": c["eval"],
                        "point": c["point"],
                        "kind": "score",
                        "sample_id": sid,
                        "repeat": 0,
                        "baseline_score": bs,
                        "candidate_score": cs,
                        "difference": cs - bs,
                        "candidate_output": plant(spec, f"final answer {rng.randrange(1000)}"),
                    }
                )
    tables["eval_breakdown"], tables["eval_review"] = breakdown, review


Pair = tuple[str, str, str, float, float]
"""One eval sample: (sample id, first label, second label, baseline score, candidate score)."""


def _eval_pairs(rng: random.Random, kind: str, drop: float) -> tuple[list[Pair], tuple[tuple[str, int], ...]]:
    """The paired scores of one eval and the dimensions its breakdown groups them by."""
    pairs: list[Pair] = []
    if kind == "mrcr":
        for ctx_bin in ("4k-8k", "8k-16k", "16k-32k"):
            for needles in (2, 4, 8):
                for rep in range(4):
                    b = round(rng.uniform(0.55, 0.95), 3)
                    c = round(max(0.0, b + rng.gauss(0, 0.01) - drop), 3)
                    pairs.append((f"mrcr-{ctx_bin}-{needles}-{rep}", ctx_bin, str(needles), b, c))
        return pairs, (("bin", 1), ("n_needles", 2))
    for i in range(30):
        b = 1.0 if rng.random() < 0.4 else 0.0
        c = b if rng.random() > (0.35 if drop else 0.05) else 1.0 - b
        pairs.append((f"aime25-{i + 1:02d}", f"{i + 1}", "", b, c))
    return pairs, (("problem", 1),)


def _eval_breakdown(ev: str, point: str, pairs: list[Pair], dims: tuple[tuple[str, int], ...]) -> list[dict[str, Any]]:
    rows = []
    for dim, idx in dims:
        labels: dict[str, list[tuple[float, float]]] = {}
        for pr in pairs:
            label_of = pr[1] if dim == "problem" or idx == 1 else pr[2]
            labels.setdefault(label_of, []).append((pr[3], pr[4]))
        for label, vs in labels.items():
            n = len(vs)
            rows.append(
                {
                    "eval": ev,
                    "point": point,
                    "dimension": dim,
                    "group": label,
                    "pairs": n,
                    "baseline_score": sum(v[0] for v in vs) / n,
                    "candidate_score": sum(v[1] for v in vs) / n,
                    "difference": sum(v[1] - v[0] for v in vs) / n,
                }
            )
    return rows


#: The diff hash every synthetic PR link records.
DIFF_SHA256 = "3" * 64

_ISOLATION_KIND = {"pass": "owned", "fail": "shared", "review": "elsewhere"}
"""The class of the one changed path per isolation outcome (``review``: a path the scope does not allow, which
fails the row like a shared component)."""


def isolation_result(spec: Spec, scope: Scope) -> CheckResult:
    """The isolation row of the synthetic PR link: over exactly its base..head, with its verdict."""
    name = recorded_name(spec, "isolation")
    if not spec.pr_link:
        return CheckResult(
            check=name, verdict=Verdict.NOT_RUN, required=False, reason=NOT_PR_EVIDENCE, summary={"pr_link": False}
        )
    if spec.isolation == "not_run":
        return CheckResult.not_run(name, plant(spec, "--head was given without --repo: the diff was not checked"))
    row = evidence_testlib.isolation_row(scope, _ISOLATION_KIND[spec.isolation])
    row["status"] = plant(spec, "M")
    path, cls, component = row["path"], row["class"], row["component"]
    failures = [] if cls == "owned" else [plant(spec, f"{path} (M) is {cls}" + (f": {component}" if component else ""))]
    return CheckResult(
        check=name,
        title=None if spec.legacy_entries else plant(spec, "Isolation and PR head"),
        view=None if spec.legacy_entries else "generic",
        verdict=Verdict.FAIL if failures else Verdict.PASS,
        reason=plant(spec, failures[0] if failures else "every changed path is owned by the scope"),
        summary={
            "pr_link": True,
            "base_sha": spec.base_sha,
            "head_sha": spec.head_sha,
            "diff_sha256": DIFF_SHA256,
            "head_binding": "proven",
        },
        failures=failures,
        tables={"changed": [row]},
    )
