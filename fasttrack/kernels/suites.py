"""Run kernel suites and combine their rows into the kernels check's result.

Each suite runs through ``python -m fasttrack.kernels.run`` in a subprocess (the same runner a
GPU host uses without fasttrack's other dependencies); the rows JSON it writes is read back
here. A suite that needs a GPU on a host without CUDA is ``not_run`` ("no CUDA device on this
host"), never ``pass``. Used by the kernels check and by ``fasttrack kernels``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fasttrack.kernels.spec import SuiteSpec
from fasttrack.kernels.summary import FAIL, NOT_RUN, PASS, summarize
from fasttrack.results import CheckResult, Gate, Verdict

NO_CUDA = "no CUDA device on this host"

GATE = Gate(
    statistic=(
        "per numerics case: elements with |actual - expected| > atol + rtol*|expected| (float64 reference), "
        "NaN/Inf placement; per determinism check: ULP distance between repeated runs; per perturbation test: "
        "trials that differ from the unperturbed run or read NaN-poisoned data; compute-sanitizer errors"
    ),
    threshold=0,
    rule=(
        "every case within its tolerance (dtype default < suite < scope override), repeated runs bitwise equal "
        "or within the declared ULP budget, no perturbed trial differs (no race), no error from a sanitizer that ran; "
        "a suite that cannot run (no CUDA for a GPU suite, candidate not importable) is not_run, never pass"
    ),
)

TABLES = ("cases", "determinism", "perturbation", "sanitizer", "speed_of_light")


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch means no CUDA for our purposes
        return False


def _flat(row: dict[str, Any], suite: str) -> dict[str, Any]:
    """A row with nested values as JSON text, so every table column is a scalar (Parquet)."""
    out: dict[str, Any] = {"suite": suite}
    for k, v in row.items():
        if k in ("log_tail",):
            continue
        out[k] = json.dumps(v) if isinstance(v, (dict, list, tuple)) else v
    return out


def run_suite(
    spec: SuiteSpec,
    *,
    tier: str,
    out_dir: Path,
    log: Callable[[str], None] = print,
    defects: Sequence[str] = (),
    timeout_s: float = 7200.0,
    has_cuda: bool | None = None,
) -> dict[str, Any]:
    """Run one suite (or decide it cannot run) and return its rows document with ``summary``.

    ``has_cuda``: whether this host has a CUDA device (detected when not given)."""
    rows_path = out_dir / f"{spec.name.replace('/', '_')}.rows.json"
    if spec.requires_gpu and not (cuda_available() if has_cuda is None else has_cuda):
        doc: dict[str, Any] = {"suite": spec.name, "error": NO_CUDA}
        doc["summary"] = {
            "suite": spec.name,
            "verdict": NOT_RUN,
            "reason": f"suite {spec.name}: not run: {NO_CUDA}",
            "failures": [],
            "counts": {},
            "per_kernel": [],
            "speed_of_light": [],
        }
        return doc
    if not spec.path.is_dir():
        doc = {"suite": spec.name, "error": f"suite directory {spec.path} does not exist"}
        doc["summary"] = summarize(doc)
        return doc
    cmd = [
        sys.executable,
        "-m",
        "fasttrack.kernels.run",
        "--suite",
        str(spec.path),
        "--out",
        str(rows_path),
        "--tier",
        tier,
        "--name",
        spec.name,
        "--quiet",
    ]
    if spec.candidate:
        cmd += ["--candidate", spec.candidate]
    if spec.tolerances:
        cmd += ["--tolerances", json.dumps(spec.tolerances)]
    if spec.dims:
        cmd += ["--dims", json.dumps(spec.dims)]
    if spec.dtypes:
        cmd += ["--dtypes", ",".join(spec.dtypes)]
    for d in defects:
        cmd += ["--defect", d]
    log(f"kernels: running suite {spec.name} ({spec.path})")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        tail = (proc.stdout + proc.stderr)[-3000:]
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        tail, rc = "", None
    if rows_path.is_file():
        doc = json.loads(rows_path.read_text(encoding="utf-8"))
        doc["summary"] = summarize(doc)
    else:
        why = (
            f"the runner timed out after {timeout_s:.0f} s"
            if rc is None
            else f"the runner exited with {rc} without writing rows: "
            f"{tail.strip().splitlines()[-1] if tail.strip() else 'no output'}"
        )
        doc = {"suite": spec.name, "error": why, "runner_tail": tail}
        doc["summary"] = summarize(doc)
    doc["rows_path"] = str(rows_path)
    return doc


def judge(docs: Sequence[dict[str, Any]], *, run_dir: Path | None = None) -> CheckResult:
    """Combine per-suite documents into the check's result."""
    summaries = [d["summary"] for d in docs]
    verdicts = [s["verdict"] for s in summaries]
    if FAIL in verdicts:
        verdict = Verdict.FAIL
    elif NOT_RUN in verdicts or not verdicts:
        verdict = Verdict.NOT_RUN
    else:
        verdict = Verdict.PASS
    tables: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    for d in docs:
        for t in TABLES:
            tables[t].extend(_flat(r, d.get("suite") or "?") for r in d.get(t) or [])
    failures = [f for s in summaries for f in s.get("failures", [])]
    if verdict is Verdict.PASS:
        reason = "; ".join(s["reason"] for s in summaries)
    else:
        reason = "; ".join(s["reason"] for s in summaries if s["verdict"] != PASS)
    artifacts = []
    for d in docs:
        p = d.get("rows_path")
        if p and Path(p).is_file():
            artifacts.append(
                str(Path(p).relative_to(run_dir)) if run_dir and Path(p).is_relative_to(run_dir) else str(p)
            )
    peaks = next((d.get("peaks") for d in docs if d.get("peaks")), None)
    summary = {
        "suites": [
            {"suite": s["suite"], "verdict": s["verdict"], "reason": s["reason"], **(s.get("counts") or {})}
            for s in summaries
        ],
        "per_kernel": [{"suite": s["suite"], **k} for s in summaries for k in s.get("per_kernel", [])],
        "speed_of_light": [{"suite": s["suite"], **k} for s in summaries for k in s.get("speed_of_light", [])],
        "device_peaks": {k: v for k, v in (peaks or {}).items() if not k.endswith("_samples")} or None,
    }
    return CheckResult(
        check="kernels",
        verdict=verdict,
        reason=reason or "no kernel suite",
        gate=GATE,
        summary=summary,
        failures=failures,
        tables=tables,
        artifacts=artifacts,
    )
