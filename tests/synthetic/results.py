"""What a synthetic bundle holds: its :class:`Spec` and the invented check results it yields.

The rows are drawn from a seeded generator; their shapes follow the real checks' tables
(see :mod:`synthetic.bundles` for how they become a signed bundle).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fasttrack.report.check_views import CHECK_TITLES
from fasttrack.results import DEFAULT_CLAIM_TOLERANCE, NOT_PR_EVIDENCE, CheckResult, Gate, Verdict, claim_verdict

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


def _rows_perf(
    spec: Spec, points: list[dict[str, Any]], rng: random.Random
) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    rows, failures = [], []
    slow = None
    if "perf" in spec.fail:
        slow = points[rng.randrange(len(points))]["id"] if points else None
    margin = 0.05
    for p in points:
        base = 2.0 + 0.02 * p["batch"] + p["context"] / 65536
        for metric in ("median_tpot_ms", "output_throughput"):
            # the "true" speedup of a point depends on the tested head only, so independent
            # bundles of one head scatter around the same values (by run-to-run noise)
            truth = random.Random(f"{spec.head_sha}/{p['id']}/{metric}")
            s = spec.speedup * math.exp(truth.gauss(0, spec.noise)) * math.exp(rng.gauss(0, 0.012))
            if p["id"] == slow:
                s = 0.78 * math.exp(rng.gauss(0, 0.01))
            half = abs(rng.gauss(0.04, 0.01)) + 0.01
            lo, hi = s * math.exp(-half), s * math.exp(half)
            b = base if metric == "median_tpot_ms" else 1000 * p["batch"] / base
            c = b / s if metric == "median_tpot_ms" else b * s
            gated = metric == "median_tpot_ms"  # like the perf check: one gated metric, the others reported
            verdict = ("pass" if lo >= 1 - margin else "fail") if gated else None
            if verdict == "fail":
                failures.append(
                    plant(
                        spec,
                        f"{p['id']}: {metric} speedup {s:.3f} (95% CI [{lo:.3f}, {hi:.3f}]) below {1 - margin:.2f}",
                    )
                )
            rows.append(
                {
                    "workload": "pure_decode",
                    "point": p["id"],
                    "group": p.get("group"),
                    "batch": p["batch"],
                    "context": p["context"],
                    "full_context": p.get("full_context", False),
                    "metric": f"pure_decode/{metric}",
                    "metric_name": metric,
                    "direction": "lower_is_better" if gated else "higher_is_better",
                    "baseline": round(b, 4),
                    "candidate": round(c, 4),
                    "speedup": round(s, 5),
                    "ci_low": round(lo, 5),
                    "ci_high": round(hi, 5),
                    "confidence": 0.95,
                    "mde": round(2.8 * half / 1.96, 4),
                    "runs_baseline": 3,
                    "runs_candidate": 3,
                    "runs": 6,
                    "verdict": verdict,
                    "gated": gated,
                    "strictly_better": lo > 1,
                    "statement": plant(spec, "hierarchical bootstrap over engine lifetimes"),
                }
            )
    return rows, failures, _perf_claims(spec, rows)


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
        if spec.payload:
            for rows in tables.values():
                for r in rows:
                    r[spec.payload] = spec.payload
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


def check_results(spec: Spec, points: list[dict[str, Any]], rng: random.Random) -> list[CheckResult]:
    """Every shipped check's result, in the shipped check order (the generator is drawn from in that order)."""
    b = _Results(spec, rng, points)
    b.out.append(isolation_result(spec))
    for build in (_kernels, _equivalence, _features, _coverage, _evals, _perf):
        build(b)
    return b.out


def _kernels(b: _Results) -> None:
    spec, rng = b.spec, b.rng
    krows, kfail = [], []
    for k in ("fused_decode_attention", "fused_rmsnorm_residual"):
        for shape in ("1x4096", "64x4096"):
            err = abs(rng.gauss(2e-4, 5e-5))
            bad = "kernels" in spec.fail and shape == "64x4096" and k.startswith("fused_decode")
            err = err * 40 if bad else err
            v = "fail" if err > 1e-3 else "pass"
            if v == "fail":
                kfail.append(plant(spec, f"{k} {shape}: max abs error {err:.2e} above 1e-3"))
            krows.append({"kernel": k, "shape": shape, "dtype": "bf16", "max_abs_err": err, "tol": 1e-3, "verdict": v})
    b.finish(
        "kernels",
        {"cases": krows},
        b.gate("max abs error vs reference", 1e-3, "every case within tolerance"),
        {"cases": len(krows)},
        kfail,
        "every kernel case within tolerance",
    )


def _equivalence(b: _Results) -> None:
    spec, points = b.spec, b.points
    erows, efail = [], []
    bad_point = points[min(2, len(points) - 1)]["id"] if points and "equivalence" in spec.fail else None
    for p in points:
        match = p["id"] != bad_point
        erows.append(
            {
                "point": p["id"],
                "batch": p["batch"],
                "requests": p["batch"],
                "exact_match": 1.0 if match else 0.5,
                "first_divergence": None if match else 7,
                "max_abs_logprob_diff": 0.004 if match else 0.9,
                "verdict": "pass" if match else "fail",
            }
        )
        if not match:
            efail.append(plant(spec, f"{p['id']}: 50% of requests diverge (first at token 7, logprob diff 0.9)"))
    b.finish(
        "equivalence",
        {"equivalence_points": erows},
        b.gate("fraction of requests within logprob tolerance", 1.0, "all requests close at every batch size"),
        {"points": len(points)},
        efail,
        "greedy outputs match at every batch size",
    )


def _features(b: _Results) -> None:
    spec, rng, points = b.spec, b.rng, b.points
    frows, ffail = [], []
    for feat, metric in (
        ("structured_output", "json_conformance"),
        ("sampling", "chi2_p_value"),
        ("seeds", "same_output"),
    ):
        val = {"json_conformance": 1.0, "chi2_p_value": round(rng.uniform(0.05, 0.95), 3), "same_output": 1.0}[metric]
        if "features" in spec.fail and feat == "structured_output":
            val = 0.62
        v = "pass" if (metric != "json_conformance" or val >= 1.0) else "fail"
        if v == "fail":
            ffail.append(
                plant(spec, f"{feat}: conformance {val:.2f} below 1.00 at {points[0]['id'] if points else '?'}")
            )
        frows.append(
            {
                "feature": feat,
                "point": points[0]["id"] if points else "",
                "metric": metric,
                "baseline": 1.0 if metric != "chi2_p_value" else None,
                "candidate": val,
                "verdict": v,
            }
        )
    b.finish(
        "features",
        {"features": frows},
        b.gate("per-feature conformance / p-value", "see rows", "candidate not worse than baseline and above floors"),
        {"features": len(frows)},
        ffail,
        "every serving feature behaves like the baseline",
    )


def _coverage(b: _Results) -> None:
    spec, rng, points = b.spec, b.rng, b.points
    crows, cfail = [], []
    gap = points[-1]["id"] if points and "coverage" in spec.fail else None
    for p in points:
        for chk in ("equivalence", "perf"):
            frac = 0.0 if p["id"] == gap else round(rng.uniform(0.96, 1.0), 3)
            steps = 48
            crows.append(
                {
                    "point": p["id"],
                    "check": chk,
                    "in_plan": True,
                    "verdict": "pass" if frac >= 0.95 else "fail",
                    "candidate_decode_steps": steps,
                    "candidate_optimized_decode_steps": int(frac * steps),
                    "candidate_optimized_fraction": frac,
                    "threshold": 0.95,
                    "candidate_optimized_ops": int(frac * steps * 4),
                    "candidate_stock_ops": int((1 - frac) * steps * 4),
                    "windows": f"{chk}-{p['id']}",
                    "detail": "" if frac >= 0.95 else "used the standard path",
                }
            )
            if frac < 0.95:
                cfail.append(plant(spec, f"{p['id']} ({chk}): used the standard path (optimized fraction {frac:.2f})"))
    b.finish(
        "coverage",
        {"coverage": crows},
        b.gate(
            "fraction of decode steps on the optimized path", 0.95, "every in-scope point at or above the threshold"
        ),
        {"points": len(points), "covered": len(points) - (1 if gap else 0)},
        cfail,
        "every in-scope point ran the optimized path",
    )


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


def _evals(b: _Results) -> None:
    """Tables shaped like fasttrack.checks.evals: comparisons, breakdown, review."""
    spec, rng, points = b.spec, b.rng, b.points
    drop = 0.25 if "evals" in spec.fail else 0.0
    ev_point = points[0]["id"] if points else "point"
    breakdown_rows, review, cmp_rows, efails = [], [], [], []
    for ev, kind in (("mrcr", "mrcr"), ("aime25", "aime25")):
        pairs, dims = _eval_pairs(rng, kind, drop)
        breakdown_rows.extend(_eval_breakdown(ev, ev_point, pairs, dims))
        bmean = sum(pr[3] for pr in pairs) / len(pairs)
        cmean = sum(pr[4] for pr in pairs) / len(pairs)
        diff = cmean - bmean
        lo, hi = diff - 0.04, diff + 0.04
        passed = lo >= -0.05
        cmp_rows.append(
            {
                "eval": ev,
                "kind": kind,
                "point": ev_point,
                "batch": points[0]["batch"] if points else 1,
                "pairs": len(pairs),
                "baseline_score": round(bmean, 4),
                "candidate_score": round(cmean, 4),
                "score_difference": round(diff, 4),
                "score_ci_low": round(lo, 4),
                "score_ci_high": round(hi, 4),
                "margin": 0.05,
                "passed": passed,
            }
        )
        if not passed:
            efails.append(
                plant(
                    spec,
                    f"{ev} at {ev_point}: candidate - baseline {diff:.3f} (95% CI [{lo:.3f}, {hi:.3f}]) below -0.05",
                )
            )
        for sid, _a, _b, bs, cs in pairs:
            if bs != cs:
                review.append(
                    {
                        "eval": ev,
                        "point": ev_point,
                        "kind": "score",
                        "sample_id": sid,
                        "repeat": 0,
                        "baseline_score": bs,
                        "candidate_score": cs,
                        "difference": cs - bs,
                        "candidate_output": plant(spec, f"final answer {rng.randrange(1000)}"),
                    }
                )
    b.finish(
        "evals",
        {"eval_comparisons": cmp_rows, "eval_breakdown": breakdown_rows, "eval_review": review},
        b.gate("lower 95% bound of candidate - baseline (paired)", -0.05, "at least -margin, and above the floor"),
        {"evals": [r["eval"] for r in cmp_rows], "discordant": len(review)},
        efails,
        "paired scores non-inferior within the margin",
    )


def _perf(b: _Results) -> None:
    points = b.points
    prow, pfail, claims = _rows_perf(b.spec, points, b.rng)
    b.finish(
        "perf",
        {"points": prow, "claims": claims},
        b.gate(
            "hierarchical bootstrap 95% lower bound of speedup",
            0.95,
            "lower bound >= 1 - noise_margin (0.95) at every point",
        ),
        {
            "points": len(points),
            "metrics": ["pure_decode/median_tpot_ms", "pure_decode/output_throughput"],
            "strictly_better": sum(1 for r in prow if r["strictly_better"]),
        },
        pfail,
        f"no regression at any of {len(points)} points",
    )


#: The diff hash every synthetic PR link records.
DIFF_SHA256 = "3" * 64

_ISOLATION_CHANGES = {
    "pass": ("vllm/model_executor/models/kimi_k3/fast_decode.py", "owned", None),
    "fail": ("vllm/v1/sample/sampler.py", "shared", "sampling"),
    "review": ("vllm/envs.py", "elsewhere", None),
}


def isolation_result(spec: Spec) -> CheckResult:
    """The isolation row of the synthetic PR link: over exactly its base..head, with its verdict
    (``review``: a path the scope does not allow, which fails the row like a shared component)."""
    name = recorded_name(spec, "isolation")
    if not spec.pr_link:
        return CheckResult(
            check=name, verdict=Verdict.NOT_RUN, required=False, reason=NOT_PR_EVIDENCE, summary={"pr_link": False}
        )
    if spec.isolation == "not_run":
        return CheckResult.not_run(name, plant(spec, "--head was given without --repo: the diff was not checked"))
    path, cls, component = _ISOLATION_CHANGES[spec.isolation]
    failures = [] if cls == "owned" else [plant(spec, f"{path} (M) is {cls}" + (f": {component}" if component else ""))]
    row: dict[str, Any] = {"path": path, "status": "M", "class": cls, "component": component}
    if spec.payload:
        row[spec.payload] = spec.payload
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
