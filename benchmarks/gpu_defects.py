"""The GPU demo's planted defects through ``fasttrack validate``: which check catches each, at which points.

    python benchmarks/gpu_defects.py --out runs/gpu-defects [--defects numerics-from-batch,slow-batch] [--tier smoke]

On a CUDA host with the GPU demo target installed (docs/gpu.md). The baseline engine starts once, as
``validate`` starts it (profiler, device counters, the scope's arguments), and is attached to every run.
Each defect runs the checks meant to catch it next to one meant to pass (``EXPECTED``), chosen so that the
whole table fits one 30-minute lease of one H100:

- ``atomic-order``, ``slow-batch`` and ``context-fallback`` act at run time: one candidate engine, started once
  with the demo plugin's run-time defect file, is attached too, and the file names each defect in turn (the
  kernels read it through their device flags, also inside captured CUDA graphs);
- ``graph-stale`` acts when graphs are captured, and ``numerics-from-batch`` is judged by the calibrated
  equivalence rule, whose float32 reference variant needs half of the GPU: for these two the attached
  candidate is stopped and ``validate`` starts its own, with ``FASTTRACK_DEMO_DEFECT`` in its environment,
  stopping it before the reference variants start beside the attached baseline.

The kernel defects also reach the kernels check (it runs the suite in this process's environment).

Prints one row per (defect, check): the verdict, the failing points (or kernel cases) and whether that is the
expected outcome; ``--out``/defects.json keeps them and every run folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fasttrack.bundle.reader import open_bundle  # noqa: E402

#: defect -> (checks to run, {check: (expected verdict, where it should fail)})
EXPECTED: dict[str, tuple[list[str], dict[str, tuple[str, str]]]] = {
    "atomic-order": (
        ["kernels", "coverage"],
        {"kernels": ("fail", "the determinism rows"), "coverage": ("pass", "")},
    ),
    "slow-batch": (["perf", "coverage"], {"perf": ("fail", "batch-4 points"), "coverage": ("pass", "")}),
    "context-fallback": (
        ["coverage", "evals"],
        {"coverage": ("fail", "full-context points"), "evals": ("pass", "")},
    ),
    "graph-stale": (["coverage", "evals"], {"coverage": ("fail", "batch-2 points"), "evals": ("pass", "")}),
    "numerics-from-batch": (
        ["kernels", "equivalence", "evals"],
        {
            "kernels": ("fail", "cases with 5 or more rows"),
            "equivalence": ("fail", "batch-8 points (8 rows: batches 5..8 replay the graph of 8)"),
            "evals": ("fail", "its batch-8 points"),
        },
    ),
}
"""defect -> (checks to run, {check: (expected verdict, where it should fail)}), in run order: the run-time
defects on the attached candidate first, then the two that need a candidate of their own."""

OWN_CANDIDATE = frozenset({"graph-stale", "numerics-from-batch"})
"""Defects whose ``validate`` starts its own candidate (``FASTTRACK_DEMO_DEFECT`` at start), the attached one
stopped: ``graph-stale`` acts at graph capture; ``numerics-from-batch`` is judged against the float32 reference
variant, which needs the room of the attached candidate."""


def _failing(run: Path, check: str) -> list[str]:
    """Failing rows of one check's tables: their point (or kernel case)."""
    out: list[str] = []
    with open_bundle(run / "bundle.tar.gz") as view:
        entry = view.manifest.checks.get(check)
        if entry is None:
            return out
        for table in entry.tables:
            for r in view.rows(check, table):
                if r.get("verdict") == "fail":
                    label = r.get("point") or r.get("test") or r.get("shape") or r.get("situation") or table
                    out.append(f"{table}:{label}")
    return sorted(set(out))


def _validate(args: list[str], run: Path, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "fasttrack", "validate", *args, "--out", str(run), "--force"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    (run.parent / f"{run.name}.log").write_text(proc.stdout + proc.stderr)
    manifest = json.loads((run / "bundle" / "manifest.json").read_text()) if (run / "bundle").is_dir() else {}
    return {"rc": proc.returncode, "seconds": round(time.monotonic() - t0, 1), "manifest": manifest}


def _start(scope: Any, group: Any, model: str, side: str, out: Path, defect_file: Path) -> Any:
    from fasttrack.engine import per_request_metrics_args, profiler_args, start_engine

    args = list(group.args[side])
    if scope.model.served_name:
        args += ["--served-model-name", scope.model.served_name]
    args += profiler_args(out / "profiles" / side) + per_request_metrics_args(args)
    env: dict[str, str | None] = dict(group.env[side])
    prom = out / "engines" / f"{side}.prometheus"
    shutil.rmtree(prom, ignore_errors=True)
    prom.mkdir(parents=True)
    env["PROMETHEUS_MULTIPROC_DIR"] = str(prom)
    if side == "candidate":
        env["FASTTRACK_DEMO_DEFECT_FILE"] = str(defect_file)
    print(f"starting the {side} engine ...", flush=True)
    return start_engine(
        side=side,
        model=model,
        args=args,
        env=env,
        log_dir=out / "logs",
        log_name=side,
        startup_timeout=scope.engine.startup_timeout_s,
        exclusive=False,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--scope", default="demo-llama-gpu")
    ap.add_argument("--tier", default="smoke")
    ap.add_argument("--defects", default=",".join(EXPECTED))
    opts = ap.parse_args(argv)
    from fasttrack.checks.base import build_run_plan
    from fasttrack.host.models import resolve_model
    from fasttrack.scope.loading import load_scope

    asked = [d.strip() for d in opts.defects.split(",") if d.strip()]
    unknown = sorted(set(asked) - set(EXPECTED))
    if unknown:
        ap.error(f"unknown defect(s) {unknown}; known: {', '.join(EXPECTED)}")
    defects = [d for d in EXPECTED if d in asked]  # run order: the attached candidate's defects first
    out = opts.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    loaded = load_scope(opts.scope)
    scope = loaded.scope
    group = build_run_plan(scope, tier=opts.tier).groups[0]
    model = resolve_model(scope, base_dir=loaded.base_dir).model
    defect_file = out / "defect"
    defect_file.write_text("")
    results: list[dict[str, Any]] = []
    env = {k: v for k, v in os.environ.items() if k not in ("FASTTRACK_DEMO_DEFECT", "FASTTRACK_DEMO_DEFECT_FILE")}
    base = cand = None
    try:
        base = _start(scope, group, model, "baseline", out, defect_file)
        for defect in defects:
            checks, expect = EXPECTED[defect]
            common = ["--model", opts.scope, "--tier", opts.tier, "--checks", ",".join(checks)]
            common += ["--baseline-url", base.base_url]
            run_env = dict(env)
            if defect in OWN_CANDIDATE:
                if cand is not None:  # one GPU: the attached candidate makes room for validate's own
                    cand.stop()
                    cand = None
                run_env["FASTTRACK_DEMO_DEFECT"] = defect
            else:
                if cand is None:
                    cand = _start(scope, group, model, "candidate", out, defect_file)
                defect_file.write_text(defect)
                time.sleep(1.0)  # the candidate re-reads the file after its next step
                common += ["--candidate-url", cand.base_url]
                if defect == "atomic-order":
                    run_env["FASTTRACK_DEMO_DEFECT"] = defect  # the kernels check's suite reads it
            print(f"== {defect}: validate --checks {','.join(checks)}", flush=True)
            res = _validate(common, out / defect, run_env)
            defect_file.write_text("")
            for check in checks:
                entry = res["manifest"].get("checks", {}).get(check, {})
                verdict = entry.get("verdict", "missing")
                want, where = expect[check]
                row = {
                    "defect": defect,
                    "check": check,
                    "verdict": verdict,
                    "expected": want,
                    "where_expected": where,
                    "failing": _failing(out / defect, check) if (out / defect / "bundle.tar.gz").is_file() else [],
                    "reason": entry.get("reason", ""),
                    "seconds": res["seconds"],
                }
                row["as_expected"] = verdict == want
                results.append(row)
                print(json.dumps(row), flush=True)
            (out / "defects.json").write_text(json.dumps(results, indent=2))
    finally:
        for eng in (cand, base):
            if eng is not None:
                eng.stop()
    print("\n| defect | check | verdict | expected | failing points / cases |")
    print("|---|---|---|---|---|")
    for r in results:
        shown = ", ".join(r["failing"][:8]) + (f" (+{len(r['failing']) - 8})" if len(r["failing"]) > 8 else "")
        print(f"| {r['defect']} | {r['check']} | {r['verdict']} | {r['expected']} ({r['where_expected']}) | {shown} |")
    return 0 if all(r["as_expected"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
