"""Condensing rows documents into the small results file committed next to a suite."""

from __future__ import annotations

import json

from fasttrack.kernels.results import condense, main


def _doc():
    case = {
        "kernel": "k",
        "output": "out",
        "dtype": "bf16",
        "dist": "normal",
        "shape": "B=1",
        "verdict": "pass",
        "max_abs_err": 0.01,
        "max_rel_err": 0.002,
        "max_ulp": 1,
        "atol": 0.01,
        "rtol": 0.016,
        "nan_mismatch": 0,
        "inf_mismatch": 0,
        "expected_nonfinite": 0,
    }
    bad = {**case, "shape": "B=3", "verdict": "fail", "max_abs_err": 0.5, "mismatches": 3, "numel": 8}
    trials = [
        {"trial": i, "sleep_cycles": [i * 10], "ok": i % 2 == 0, "stale_nan": 0 if i % 2 == 0 else 4} for i in range(4)
    ]
    return {
        "suite": "m/kernels",
        "candidate": "c",
        "defects": [],
        "tier": "smoke",
        "cases": [case, bad],
        "determinism": [
            {"kernel": "k", "output": "out", "bitwise_equal": True, "verdict": "pass", "runs": 3, "log_tail": "x" * 100}
        ],
        "perturbation": [
            {
                "kernel": "k",
                "trials": 4,
                "failed_trials": 2,
                "stale_nan_trials": 2,
                "verdict": "fail",
                "race_detected": True,
                "trial_records": trials,
            }
        ],
        "sanitizer": [
            {"tool": "memcheck", "status": "not_run", "reason": "no CUDA device on this host", "verdict": "not_run"}
        ],
        "speed_of_light": [],
        "tests": [],
    }


def test_condense_keeps_worst_errors_and_trial_pattern():
    c = condense("run", _doc())
    (w,) = c["worst_errors"]
    assert (w["cases"], w["failed"], w["max_abs_err"], w["shapes"]) == (2, 1, 0.5, 2)
    assert c["verdict"] == "fail" and c["failures_total"] == 2
    (p,) = c["perturbation"]
    assert "trial_records" not in p and p["trials_ok"] == ".X.X" and p["sleep_cycles_max"] == 30
    assert "log_tail" not in c["determinism"][0]


def test_results_cli_writes_file(tmp_path):
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps(_doc()))
    out = tmp_path / "res" / "r.json"
    assert main(["--out", str(out), "--note", "n", f"a={rows}"]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "fasttrack.kernels.results/1" and doc["runs"][0]["name"] == "a" and doc["notes"] == ["n"]
    assert main(["--out", str(out), str(rows)]) == 2
