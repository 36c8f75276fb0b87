"""The gate over one suite's rows: verdict, reason, failures and headline figures.

Gate: every numerics case within tolerance; every determinism check bitwise equal (or within
the declared ULP budget); no perturbation trial that differs from the unperturbed run or reads
NaN-poisoned data (no race); no error from a sanitizer that ran. A suite that did not run
(candidate not importable, no CUDA device for a GPU suite, every test skipped) is ``not_run``,
never ``pass``. Sanitizers that could not run are recorded as not run and do not block.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Mapping, Sequence

PASS, FAIL, NOT_RUN = "pass", "fail", "not_run"


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def case_failure(r: Mapping[str, Any]) -> str:
    where = f"{r.get('kernel')}/{r.get('output')} [{r.get('shape')}, {r.get('dtype')}, {r.get('dist')}]"
    if r.get("error"):
        return f"case {where}: {r['error']}"
    parts = [
        f"max_abs_err={_fmt(r.get('max_abs_err'))}",
        f"max_rel_err={_fmt(r.get('max_rel_err'))}",
        f"max_ulp={r.get('max_ulp')}",
        f"{r.get('mismatches')} of {r.get('numel')} elements out of tolerance "
        f"(atol={_fmt(r.get('atol'))}, rtol={_fmt(r.get('rtol'))})",
    ]
    if r.get("nan_mismatch"):
        parts.append(f"NaN mismatch at {r['nan_mismatch']}")
    if r.get("inf_mismatch"):
        parts.append(f"Inf mismatch at {r['inf_mismatch']}")
    if r.get("first_bad"):
        fb = r["first_bad"]
        parts.append(f"first at {fb.get('index')}: {fb.get('actual')} vs {fb.get('expected')}")
    return f"case {where}: " + ", ".join(parts)


def determinism_failure(r: Mapping[str, Any]) -> str:
    runs: Any = r.get("runs")
    return (
        f"determinism {r.get('kernel')}/{r.get('output')} [{r.get('shape')}, {r.get('dtype')}]: "
        f"{r.get('differing_runs')} of {runs - 1} repeated runs differ from the first "
        f"(max {r.get('max_ulp')} ULP, budget {r.get('budget_ulp')}"
        f"{', NaN positions differ' if r.get('nan_differs') else ''})"
    )


def race_failure(r: Mapping[str, Any]) -> str:
    poisoned = " (the unperturbed run read poisoned data too)" if r.get("baseline_stale_nan") else ""
    return (
        f"race {r.get('kernel')} [{r.get('shape')}, {r.get('dtype')}]: {r.get('failed_trials')} of "
        f"{r.get('trials')} perturbed trials differ from the unperturbed run, {r.get('stale_nan_trials')} read "
        f"NaN-poisoned data{poisoned} ({r.get('kind')})"
    )


def _rows(doc: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    return list(doc.get(kind) or [])


def _counts(doc: Mapping[str, Any], skipped: Counter[str]) -> dict[str, int]:
    cases, det, pert = _rows(doc, "cases"), _rows(doc, "determinism"), _rows(doc, "perturbation")
    san, tests = _rows(doc, "sanitizer"), _rows(doc, "tests")
    return {
        "cases": len(cases),
        "cases_failed": sum(1 for r in cases if r.get("verdict") != PASS),
        "determinism": len(det),
        "determinism_bitwise": sum(1 for r in det if r.get("bitwise_equal")),
        "determinism_failed": sum(1 for r in det if r.get("verdict") != PASS),
        "perturbation": len(pert),
        "perturbation_trials": sum(int(r.get("trials") or 0) for r in pert),
        "races_detected": sum(1 for r in pert if r.get("race_detected")),
        "sanitizer_ran": sum(1 for r in san if r.get("status") == "ran"),
        "sanitizer_errors": sum(int(r.get("errors") or 0) for r in san if r.get("status") == "ran"),
        "speed_of_light": len(_rows(doc, "speed_of_light")),
        "tests": len(tests),
        "tests_failed": sum(1 for t in tests if t.get("outcome") == "failed"),
        "tests_skipped": sum(skipped.values()),
    }


def _failures(doc: Mapping[str, Any]) -> list[str]:
    """Every failing case, determinism check, perturbation and sanitizer, and every failed test that produced
    none of those rows."""
    cases, det, pert = _rows(doc, "cases"), _rows(doc, "determinism"), _rows(doc, "perturbation")
    failures = [case_failure(r) for r in cases if r.get("verdict") != PASS]
    failures += [determinism_failure(r) for r in det if r.get("verdict") != PASS]
    failures += [race_failure(r) for r in pert if r.get("verdict") != PASS]
    for r in _rows(doc, "sanitizer"):
        if r.get("status") == "ran" and r.get("verdict") != PASS:
            failures.append(f"compute-sanitizer {r.get('tool')}: {r.get('errors')} error(s) reported")
    failing_tests = {r.get("test") for r in cases + det + pert if r.get("verdict") != PASS}
    for t in _rows(doc, "tests"):
        if t.get("outcome") == "failed" and t.get("test") not in failing_tests:
            err = (t.get("error") or "").strip().splitlines()
            failures.append(f"test {t.get('test')} failed ({t.get('when')}): {err[-1] if err else 'no message'}")
    return failures


def _passed(doc: Mapping[str, Any], counts: Mapping[str, int], skipped: Counter[str]) -> str:
    """What a passing suite showed."""
    det, san = _rows(doc, "determinism"), _rows(doc, "sanitizer")
    bits = [f"{counts['cases']} numerics cases within tolerance"]
    if det:
        bits.append(
            f"{counts['determinism_bitwise']} of {len(det)} determinism checks bitwise equal, all within budget"
        )
    if counts["perturbation"]:
        bits.append(f"no race in {counts['perturbation_trials']} perturbed trials")
    ran_tools = [r["tool"] for r in san if r.get("status") == "ran"]
    if ran_tools:
        bits.append(f"{'/'.join(ran_tools)} clean")
    not_run_tools = [r for r in san if r.get("status") != "ran"]
    if not_run_tools:
        bits.append(f"sanitizers not run: {not_run_tools[0].get('reason')}")
    if skipped:
        bits.append(f"{sum(skipped.values())} tests skipped ({'; '.join(sorted(skipped))})")
    return "; ".join(bits)


def summarize(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Judge one suite's rows document (as written by ``fasttrack.kernels.run``)."""
    suite = doc.get("suite") or "?"
    skipped = Counter(t.get("reason") or "skipped" for t in _rows(doc, "tests") if t.get("outcome") == "skipped")
    counts = _counts(doc, skipped)
    base = {
        "suite": suite,
        "counts": counts,
        "skipped": dict(skipped),
        "per_kernel": per_kernel(_rows(doc, "cases")),
        "speed_of_light": sol_summary(_rows(doc, "speed_of_light")),
    }

    def verdict(v: str, reason: str, failures: list[str] | None = None) -> dict[str, Any]:
        return {**base, "verdict": v, "reason": f"suite {suite}: {reason}", "failures": failures or []}

    if doc.get("candidate_error"):
        return verdict(NOT_RUN, f"the candidate could not be imported: {doc['candidate_error']}")
    failures = _failures(doc)
    if failures:
        return verdict(FAIL, f"{len(failures)} failure(s); first: {failures[0]}", failures)
    if doc.get("error"):
        return verdict(NOT_RUN, doc["error"])
    if not counts["cases"] and not counts["determinism"] and not counts["perturbation"]:
        why = skipped.most_common(1)[0][0] if skipped else "no kernel test ran"
        return verdict(NOT_RUN, f"not run: {why}")
    return verdict(PASS, _passed(doc, counts, skipped))


def per_kernel(cases: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Worst errors per (kernel, output, dtype) over all cases."""
    agg: dict[tuple[str, str, str], dict[str, Any]] = defaultdict(
        lambda: {"cases": 0, "failed": 0, "max_abs_err": 0.0, "max_rel_err": 0.0, "max_ulp": 0}
    )
    for r in cases:
        key = (str(r.get("kernel")), str(r.get("output")), str(r.get("dtype")))
        a = agg[key]
        a["cases"] += 1
        a["failed"] += 0 if r.get("verdict") == PASS else 1
        if r.get("dist") in ("normal", "outliers"):
            for f in ("max_abs_err", "max_rel_err", "max_ulp"):
                v = r.get(f)
                if isinstance(v, (int, float)) and v > a[f]:
                    a[f] = v
        a.setdefault("atol", r.get("atol"))
        a.setdefault("rtol", r.get("rtol"))
    return [
        {"kernel": k, "output": o, "dtype": d, **v, "errors_over": "normal and outliers cases"}
        for (k, o, d), v in sorted(agg.items())
    ]


def sol_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    keys = (
        "kernel",
        "shape",
        "dtype",
        "time_us",
        "achieved_gbs",
        "pct_peak_bandwidth",
        "achieved_tflops",
        "pct_peak_flops",
        "bound",
        "floor_us",
    )
    return [{k: r.get(k) for k in keys} for r in rows]
