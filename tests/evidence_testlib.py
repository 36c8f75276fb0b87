"""Evidence rows that fit the row models and re-judge to the verdicts they record, for a real scope's tier.

Every builder takes the scope, the tier's config points (:func:`fasttrack.evidence.expect.planned_points`) and a
seeded generator, and returns one check's rows the way the check writes them: each row typed by its model
(:mod:`fasttrack.evidence`) and judged by the scope's own gate, so a bundle made of them verifies, and a row
edited afterwards is caught. ``fail`` makes one item of the check fail by its figures (a slow point, a drifting
point, a kernel mismatch...), ``text`` is appended to free-text fields that decide nothing (the security tests
plant markup there).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any

from fasttrack.bundle.manifest import Hardware
from fasttrack.evidence.calibration import limit_for
from fasttrack.evidence.expect import PlannedPoint, perf_items, planned_points
from fasttrack.results import CheckResult, Gate, Verdict
from fasttrack.scope import Scope, load_scope
from fasttrack.scope.gates import EquivalenceGate
from fasttrack.scope.globs import classify
from fasttrack.scope.reference import DISTANCES

Rows = list[dict[str, Any]]

#: What each scope's bundles record as their hardware (the scope's own: not a rehearsal).
HARDWARE = {
    "demo-llama": Hardware(kind="cpu", cpu_model="synthetic CPU", cpu_count=2),
    "demo-llama-gpu": Hardware(
        kind="gpu", gpu_model="NVIDIA H200", gpu_count=1, cpu_model="synthetic CPU", cpu_count=16
    ),
    "kimi-k3": Hardware(kind="gpu", gpu_model="NVIDIA GB300", gpu_count=16, cpu_model="synthetic CPU", cpu_count=144),
}


@functools.lru_cache(maxsize=8)
def suite(name: str) -> tuple[str, Scope]:
    """A shipped suite's scope text and model."""
    loaded = load_scope(name)
    return loaded.text, loaded.scope


@dataclass
class Draw:
    """What one check's builder draws from: the scope, the tier's points, the generator and the options."""

    scope: Scope
    tier: str
    points: list[PlannedPoint]
    rng: random.Random
    fail: bool = False
    text: str = ""
    speedup: float = 1.12
    noise: float = 0.03
    head: str = "a" * 40

    def t(self, s: str) -> str:
        return f"{s} {self.text}" if self.text else s


def draw(scope_name: str, tier: str, seed: int = 0, *, points: list[str] | None = None, **kw: Any) -> Draw:
    """The draw of one check over the tier's points (``points``: only these ids, a shard's)."""
    _text, scope = suite(scope_name)
    pts = [p for p in planned_points(scope, tier) if points is None or p.id in points]
    return Draw(scope, tier, pts, random.Random(seed), **kw)


# --------------------------------------------------------------------------- perf


def _perf_row(d: Draw, workload: str, point: str, metric: str, s: float, *, gated: bool) -> dict[str, Any]:
    gate = d.scope.gates.perf
    thr = 1.0 - (0.0 if gate.require == "strictly_better" else gate.noise_margin)
    half = min(abs(d.rng.gauss(0.04, 0.01)) + 0.01, 0.05)
    lo, hi = s * (1 - half), s * (1 + half)
    kind = next((w.kind for w in d.scope.workloads if w.name == workload), "pure_decode")
    verdict = ("pass" if lo >= thr else "fail") if gated else None
    base = 2.0 + d.rng.random()
    return {
        "workload": workload,
        "kind": kind,
        "point": point,
        "metric": f"{workload}/{metric}",
        "metric_name": metric,
        "direction": "higher_is_better" if "throughput" in metric else "lower_is_better",
        "baseline": round(base, 4),
        "candidate": round(base / s, 4),
        "speedup": round(s, 5),
        "ci_low": round(lo, 5),
        "ci_high": round(hi, 5),
        "confidence": gate.confidence,
        "nominal_confidence": gate.confidence,
        "nominal_ci_low": round(lo, 5),
        "nominal_ci_high": round(hi, 5),
        "threshold": thr,
        "noise_margin": gate.noise_margin,
        "verdict": verdict,
        "gated": gated,
        "strictly_better": lo > 1,
        "mde": round(2.8 * half / 1.96, 4),
        "runs_baseline": 3,
        "runs_candidate": 3,
        "runs": 6,
        "decision": ("decided_pass" if verdict == "pass" else "decided_fail") if gated else None,
        "statement": d.t("hierarchical bootstrap over engine lifetimes"),
    }


def perf_tables(d: Draw) -> tuple[dict[str, Rows], list[str]]:
    """Rows of every (workload, point) item of the tier: the gated metric and the reported ones, three runs per
    side, one look each, one lifetime per group; ``fail``: one item measured slow."""
    gate = d.scope.gates.perf
    items = perf_items(d.scope, d.tier, d.points)
    slow = items[d.rng.randrange(len(items))] if d.fail and items else None
    points, runs, looks, failures = [], [], [], []
    for workload, point in items:
        truth = random.Random(f"{d.head}/{point}")
        s = d.speedup * (1 + truth.gauss(0, d.noise))
        thr = 1.0 - (0.0 if gate.require == "strictly_better" else gate.noise_margin)
        s = 0.5 if (workload, point) == slow else max(s, thr * 1.1)  # the others pass whatever the noise drew
        for metric in dict.fromkeys([gate.gated_metric, *gate.metrics]):
            row = _perf_row(d, workload, point, metric, s, gated=metric == gate.gated_metric)
            points.append(row)
            if row["verdict"] == "fail":
                failures.append(d.t(f"{point} ({workload}): lower bound {row['ci_low']:.3f} below the threshold"))
        for side in ("baseline", "candidate"):
            runs += [
                {
                    "workload": workload,
                    "point": point,
                    "side": side,
                    "lifetime": 0,
                    "run": i,
                    "failed": 0,
                    "requests": 8,
                }
                for i in range(3)
            ]
        looks.append(
            {
                "key": f"{workload}@{point}",
                "workload": workload,
                "point": point,
                "look": 1,
                "decision": "decided_fail" if (workload, point) == slow else "decided_pass",
            }
        )
    groups = sorted({p.group for p in d.points})
    lifetimes = [{"group": g, "side": "interleaved", "lifetime": 0, "runs": 6} for g in groups]
    return {"points": points, "runs": runs, "looks": looks, "lifetimes": lifetimes}, failures


# --------------------------------------------------------------------------- equivalence


def calibrated(gate: EquivalenceGate, bad: bool) -> dict[str, Any]:
    """The calibrated figures of a greedy comparison under a scope with ``reference`` (none without): each
    distance half its limit, or (``bad``) twice it."""
    ref = gate.reference
    if ref is None:
        return {}
    out: dict[str, Any] = {
        "calibration": "from the reference, 4 requests",
        "reference": ref.reference_name,
        "stock_builds": ", ".join((["baseline"] if ref.exact else []) + ref.stock_builds),
        "reference_multiple": ref.multiple,
        "reference_requests": 4,
    }
    for name in DISTANCES:
        limit = limit_for(ref, name, 0.02)
        out[f"candidate_{name}_vs_reference"] = limit * (2 if bad else 0.5)
        out[f"stock_{name}_vs_reference"] = 0.02
        out[f"stock_{name}_by"] = (ref.stock_builds or ["baseline"])[0]
        out[f"limit_{name}"] = limit
    if ref.exact:  # the close rule judged against the exact reference
        out["candidate_close_fraction_vs_reference"] = 0.5 if bad else 1.0
        out["stock_close_fraction_vs_reference"] = 1.0
        out["stock_close_fraction_by"] = "baseline"
    return out


def equivalence_tables(d: Draw) -> tuple[dict[str, Rows], list[str]]:
    """One row per compared point (non-full context, not a synthetic group) and its request pairs; ``fail``:
    one point drifts past the gate's logprob limit (the calibrated limits of a scope with ``reference``)."""
    gate = d.scope.gates.equivalence
    pts = [p for p in d.points if not p.full_context and not p.synthetic]
    bad = pts[min(1, len(pts) - 1)].id if d.fail and pts else None
    rows, reqs, failures = [], [], []
    for p in pts:
        n = max(p.batch, 4)
        fixed = gate.reference is None
        drift = gate.max_abs_logprob_diff * (9 if p.id == bad and fixed else 0.3)
        problems = "" if p.id != bad else f"max |Δ logprob| {drift:.4f} > {gate.max_abs_logprob_diff:g}"
        if p.id == bad and not fixed:
            problems = "max |Δ logprob| from the reference EXCEEDED"
        rows.append(
            {
                "group": p.group,
                "point": p.id,
                "batch": p.batch,
                "context": p.context,
                "verdict": "fail" if problems else "pass",
                "requests": n,
                "n_exact": n - 1,
                "n_close": n,
                "close_fraction": 1.0,
                "max_abs_logprob_diff": drift,
                "mean_abs_logprob_diff": drift / 4,
                "kl_mean": gate.max_kl / 10,
                "kl_max": gate.max_kl / 5,
                "baseline_batch_verified": True,
                "baseline_batch_evidence": "a single round",
                "candidate_batch_verified": True,
                "candidate_batch_evidence": "a single round",
                "candidate_decode_steps": 20,
                "candidate_optimized_decode_steps": 20,
                "candidate_path_evidence": True,
                "problems": problems,
                "missing_evidence": "",
                **calibrated(gate, p.id == bad),
            }
        )
        if problems:
            failures.append(d.t(f"{p.id} (batch {p.batch}): {problems}"))
        for i in range(n):
            reqs.append(
                {
                    "group": p.group,
                    "point": p.id,
                    "batch": p.batch,
                    "round": 0,
                    "prompt_id": f"p{i:02d}",
                    "exact_match": i > 0,
                    "first_divergence": None if i else 7,
                    "close": True,
                    "max_abs_logprob_diff": drift if i == 0 else drift / 2,
                    "baseline_text": d.t("the same words"),
                    "candidate_text": d.t("the same words"),
                }
            )
    return {"equivalence_points": rows, "equivalence_requests": reqs}, failures


# --------------------------------------------------------------------------- features


def _feature_row(d: Draw, feature: str, p: PlannedPoint, bad: bool) -> dict[str, Any]:
    eq, fg = d.scope.gates.equivalence, d.scope.gates.features
    row: dict[str, Any] = {
        "feature": feature,
        "group": p.group,
        "point": p.id,
        "verdict": "fail" if bad else "pass",
        "detail": d.t("as on the baseline"),
    }
    row.update(
        {
            "structured_output": {
                "schema": "calendar_event",
                "batch": p.batch,
                "baseline_conforming": 4,
                "baseline_n": 4,
                "candidate_conforming": 1 if bad else 4,
                "candidate_n": 4,
                "floor": fg.min_json_conformance,
            },
            "temperature_sampling": {
                "test": "goodness_of_fit",
                "temperature": 1.0,
                "p_value": 1e-6 if bad else 0.4,
                "control_p_value": 0.5,
                "alpha": fg.sampling_alpha,
                "n_samples": 2000,
            },
            "full_context": {
                "max_abs_logprob_diff": eq.max_abs_logprob_diff * (3 if bad and eq.reference is None else 0.3),
                "kl_mean": eq.max_kl / 10,
                "batch": p.batch,
                **calibrated(eq, bad),
            },
            "logprobs": {
                "side": "both",
                "max_abs_logprob_diff": eq.max_abs_logprob_diff * (3 if bad and eq.reference is None else 0.3),
                **calibrated(eq, bad),
            },
            "seeded_sampling": {"side": "candidate", "seeds": 4, "differing_seeds": "3" if bad else ""},
            "stop_sequences": {
                "side": "candidate",
                "stop": ".",
                "text": "ab" if bad else "abc",
                "expected_text": "abc",
            },
            "max_tokens": {"side": "candidate", "max_tokens": 7, "n_tokens": 5 if bad else 7, "usage": 7},
            "n_best": {"side": "candidate", "n": 2, "choices": 1 if bad else 2},
        }.get(feature, {"side": "candidate"})
    )
    return row


def features_tables(d: Draw) -> tuple[dict[str, Rows], list[str]]:
    """A deciding row per tier feature (a baseline row beside it), judged by the scope's gates; ``fail``: the
    first feature's figures fail."""
    chosen = d.scope.tiers[d.tier].features
    feats = [f for f in d.scope.features if chosen is None or f in chosen]
    p = next((q for q in d.points if not q.full_context), d.points[0])
    rows, failures = [], []
    for i, f in enumerate(feats):
        bad = d.fail and i == 0
        rows.append(_feature_row(d, f, p, bad))
        rows.append({"feature": f, "group": p.group, "point": p.id, "side": "baseline", "verdict": "pass"})
        if f == "logprobs":  # the check's row of the candidate's own logprobs (well-formed), beside the comparison
            rows.append({"feature": f, "group": p.group, "point": p.id, "side": "candidate", "verdict": "pass"})
        if bad:
            failures.append(d.t(f"{f} at {p.id}: the candidate's figures fail"))
    return {"features": rows}, failures


# --------------------------------------------------------------------------- coverage


def coverage_tables(d: Draw) -> tuple[dict[str, Rows], list[str]]:
    """Two cells per point (equivalence, perf) at or above the scope's threshold, a visible prefill fallback and
    a stock marker; ``fail``: the last point ran half of its steps on the stock path."""
    thr = d.scope.gates.coverage.min_optimized_decode_fraction
    gap = d.points[-1].id if d.fail else None
    cells, failures = [], []
    for p in d.points:
        for chk in ("equivalence", "perf"):
            opt = 24 if p.id == gap else 48
            ok = opt / 48 >= thr
            cells.append(
                {
                    "point": p.id,
                    "check": chk,
                    "in_plan": True,
                    "verdict": "pass" if ok else "fail",
                    "candidate_decode_steps": 48,
                    "candidate_optimized_decode_steps": opt,
                    "candidate_optimized_fraction": opt / 48,
                    "threshold": thr,
                    "candidate_optimized_ops": opt * 4,
                    "candidate_stock_ops": (48 - opt) * 4,
                    "baseline_decode_steps": 48,
                    "baseline_optimized_ops": 0,
                    "baseline_stock_ops": 0,
                    "windows": d.t(f"{chk}-{p.group}"),
                    "detail": "" if ok else "too few steps",
                }
            )
            if not ok:
                failures.append(d.t(f"{p.id} [{chk}]: only {opt} of 48 decode steps on the optimized path"))
    group = d.points[0].group if d.points else "g"
    fallback = [
        {
            "group": group,
            "situation": "prefill",
            "side": "candidate",
            "verdict": "pass",
            "steps": 5,
            "optimized_steps": 0,
            "stock_steps": 5,
            "fallback_visible": True,
            "detail": d.t(""),
        }
    ]
    markers = [{"marker": "^stock", "kind": "stock", "verdict": "pass", "detail": ""}]
    return {"coverage": cells, "fallback": fallback, "markers": markers}, failures


# --------------------------------------------------------------------------- evals


def evals_tables(d: Draw) -> tuple[dict[str, Rows], list[str]]:
    """One comparison per tier eval at the first point, judged by the eval's margin and floor, with a run and a
    sample per side; ``fail``: the first eval's score drops past its margin."""
    chosen = d.scope.tiers[d.tier].evals
    specs = [e for e in d.scope.evals if chosen is None or e.name in chosen]
    point = next((p for p in d.points if not p.full_context), d.points[0])
    cmp_rows, runs, samples, failures = [], [], [], []
    for i, e in enumerate(specs):
        drop = 3 * e.margin if d.fail and i == 0 else 0.0
        score = max(e.floor, 0.8)
        lo = -drop - e.margin / 2
        task = lo >= -e.margin and score >= e.floor
        cmp_rows.append(
            {
                "eval": e.name,
                "kind": e.kind,
                "point": point.id,
                "batch": point.batch,
                "pairs": 30,
                "samples": 30,
                "margin": e.margin,
                "floor": e.floor,
                "baseline_score": score,
                "candidate_score": score - drop,
                "score_difference": -drop,
                "score_ci_low": lo,
                "score_ci_high": -drop + e.margin / 2,
                "task_pass": task and score - drop >= e.floor,
                "agreement": 0.97,
                "reference_agreement": 0.98,
                "agreement_ci_low": -e.margin / 2,
                "agreement_ci_high": e.margin / 4,
                "agreement_pass": True,
                "passed": task and score - drop >= e.floor,
            }
        )
        if not cmp_rows[-1]["passed"]:
            failures.append(d.t(f"{e.name} at {point.id}: the score's lower bound is below -{e.margin:g}"))
        for side in ("baseline", "candidate"):
            runs.append(
                {
                    "eval": e.name,
                    "kind": e.kind,
                    "point": point.id,
                    "side": side,
                    "role": "primary",
                    "repeat": 0,
                    "samples": 30,
                    "mean_score": score,
                }
            )
            samples.append(
                {
                    "eval": e.name,
                    "point": point.id,
                    "side": side,
                    "role": "primary",
                    "repeat": 0,
                    "sample_id": "0",
                    "score": 1.0,
                    "output": d.t("42"),
                }
            )
    return {"eval_comparisons": cmp_rows, "eval_runs": runs, "eval_samples": samples}, failures


# --------------------------------------------------------------------------- kernels and isolation


def kernels_tables(d: Draw) -> tuple[dict[str, Rows], list[str]]:
    """Four numerics cases per kernel suite of the scope; ``fail``: one with mismatches."""
    rows, failures = [], []
    for k in d.scope.kernels:
        for i, shape in enumerate(("B=1,hidden=256", "B=8,hidden=256", "B=1,hidden=4096", "B=8,hidden=4096")):
            bad = d.fail and i == 3
            mism = 3 if bad else 0
            rows.append(
                {
                    "suite": k.name,
                    "test": d.t(f"test_kernels.py::test_case[{i}]"),
                    "kernel": "fused_op",
                    "shape": shape,
                    "dtype": "bf16",
                    "output": "out",
                    "verdict": "fail" if bad else "pass",
                    "numel": 256,
                    "max_abs_err": 4e-3 if bad else 2e-4,
                    "mismatches": mism,
                    "out_of_bound": mism,
                    "nan_mismatch": 0,
                    "inf_mismatch": 0,
                    "atol": 1e-3,
                    "rtol": 1e-3,
                }
            )
            if bad:
                failures.append(d.t(f"{k.name} {shape}: {mism} element(s) outside the tolerance"))
    return {"cases": rows}, failures


def changed_path(scope: Scope, kind: str) -> str:
    """A path the scope's globs class as ``kind``: ``owned``, ``shared`` or ``elsewhere`` (not allowed)."""
    spec = scope.isolation
    assert spec is not None
    if kind == "owned":
        glob = spec.owned_paths[0]
    elif kind == "shared":
        glob = next(iter(spec.shared_components.values()))[0]
    else:
        return "an/unowned/path.txt"
    path = glob.replace("**/", "").replace("**", "a/b.py").replace("*", "x")
    assert classify(path, spec)[0] == kind, (path, kind)
    return path


def isolation_row(scope: Scope, kind: str) -> dict[str, Any]:
    spec = scope.isolation
    assert spec is not None
    path = changed_path(scope, kind)
    cls, comp, glob = classify(path, spec)
    return {"path": path, "status": "M", "class": cls, "component": comp, "allowed": False, "matched": glob}


BUILDERS = {
    "kernels": kernels_tables,
    "equivalence": equivalence_tables,
    "features": features_tables,
    "coverage": coverage_tables,
    "evals": evals_tables,
    "perf": perf_tables,
}


def check_result(name: str, d: Draw, **kw: Any) -> CheckResult:
    """The result of check ``name``: its rows, failed exactly when a row fails."""
    tables, failures = BUILDERS[name](d)
    return CheckResult(
        check=name,
        verdict=Verdict.FAIL if failures else Verdict.PASS,
        reason=d.t(f"{len(failures)} failing item(s): {failures[0]}" if failures else f"every {name} row passes"),
        gate=Gate(statistic=d.t(f"{name} rule"), threshold=None, rule=d.t(f"every {name} row passes")),
        failures=failures,
        tables=tables,
        **kw,
    )


def results(
    scope_name: str = "demo-llama", tier: str = "smoke", *, fail: tuple[str, ...] = (), seed: int = 0, **kw: Any
) -> list[CheckResult]:
    """Every check's result but isolation's, each failing when named in ``fail``."""
    return [
        check_result(name, draw(scope_name, tier, seed=seed + i, fail=name in fail, **kw))
        for i, name in enumerate(BUILDERS)
    ]
