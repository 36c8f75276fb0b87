"""A/A performance on a GPU host: both sides stock, so every difference is noise.

    python benchmarks/gpu_aa.py --out runs/gpu-aa [--runs 1] [--batches 1,2,3,4,5,6,7,8] [--contexts 32,256,full]

On a CUDA host with the GPU demo target installed (docs/gpu.md). Each run is one
``fasttrack validate --checks perf`` of an A/A copy of the GPU demo scope (the candidate gets the baseline's
arguments: the stock path on both sides, fresh engines per run), over the given batches and contexts. Every
(run, point) is one A/A comparison of the gated metric. Printed per point: the speedup and its interval,
the interval's half-widths (the spread a real effect must clear), the detectable slowdown the perf check
states, and whether the point would be a false alarm at the scope's noise margin; then the summary that
docs/perf.md records: the widest interval, the largest detectable slowdown, the false-alarm count and rate
with its Wilson interval, and the margin the measurement supports.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fasttrack.bundle.reader import open_bundle  # noqa: E402


def aa_scope(src: Path, batches: list[int], contexts: list[str | int]) -> str:
    """The A/A copy of a scope: the candidate runs the baseline's arguments; the smoke tier covers the points."""
    data = yaml.safe_load(src.read_text())
    data["engine"]["candidate"] = {"args": list(data["engine"]["baseline"].get("args", []))}
    data["claims"] = []
    data["title"] = f"A/A: {data['title']}"
    env = data["envelope"]
    env["batch"]["sweep"] = sorted(set(batches) | set(env["batch"]["sweep"]))
    env["context"]["sweep"] = list(dict.fromkeys([*env["context"]["sweep"], *contexts]))
    smoke = data["tiers"]["smoke"]
    smoke.update(batch=batches, context=contexts, workloads=["decode"], lifetimes_per_side=1)
    return yaml.safe_dump(data, sort_keys=False)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--scope", type=Path, default=ROOT / "suites" / "demo-llama-gpu" / "scope.yaml")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--batches", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--contexts", default="32,256,full")
    opts = ap.parse_args(argv)
    batches = [int(b) for b in opts.batches.split(",")]
    contexts: list[str | int] = [c if c == "full" else int(c) for c in opts.contexts.split(",")]
    out = opts.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    scope_src = yaml.safe_load(opts.scope.read_text())
    margin = float(scope_src["gates"]["perf"]["noise_margin"])
    gated = scope_src["gates"]["perf"].get("gated_metric", "median_engine_tpot_ms")
    # the A/A scope sits beside the original, so its relative paths mean the same
    aa_path = opts.scope.parent / f".aa-{os.getpid()}.yaml"
    aa_path.write_text(aa_scope(opts.scope, batches, contexts))
    rows: list[dict[str, Any]] = []
    try:
        for run in range(opts.runs):
            rd = out / f"run{run + 1}"
            cmd = [sys.executable, "-m", "fasttrack", "validate", "--model", str(aa_path), "--checks", "perf"]
            cmd += ["--out", str(rd), "--force"]
            t0 = time.monotonic()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            (out / f"run{run + 1}.log").write_text(proc.stdout + proc.stderr)
            if not (rd / "bundle.tar.gz").is_file():
                print(f"run {run + 1}: no bundle (rc {proc.returncode}); see {out / f'run{run + 1}.log'}")
                continue
            with open_bundle(rd / "bundle.tar.gz") as view:
                entry = view.manifest.checks.get("perf")
                points = view.rows("perf", "points") if entry is not None and "points" in entry.tables else []
            for r in points:
                if r.get("metric_name") != gated or r.get("speedup") is None:
                    continue
                lo, hi, sp = float(r["ci_low"]), float(r["ci_high"]), float(r["speedup"])
                rows.append(
                    {
                        "run": run + 1,
                        "point": r.get("point"),
                        "speedup": sp,
                        "ci_low": lo,
                        "ci_high": hi,
                        "below": round(1 - lo, 4),
                        "above": round(hi - 1, 4),
                        "detectable_slowdown": r.get("detectable_slowdown"),
                        "false_alarm": lo < 1 - margin,
                        "seconds": round(time.monotonic() - t0, 1),
                    }
                )
            (out / "aa.json").write_text(json.dumps(rows, indent=2))
    finally:
        aa_path.unlink(missing_ok=True)
    head = f"| run | point | speedup [interval] ({gated}) | interval - / + | detectable slowdown"
    print(f"{head} | false alarm at {margin:g} |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        det = r["detectable_slowdown"]
        print(
            f"| {r['run']} | {r['point']} | {r['speedup']:.4f} [{r['ci_low']:.4f}, {r['ci_high']:.4f}] | "
            f"-{r['below']:.2%} / +{r['above']:.2%} | {det if det is None else f'{float(det):.2%}'} | "
            f"{'yes' if r['false_alarm'] else 'no'} |"
        )
    if not rows:
        print("no A/A comparison was measured")
        return 1
    n, k = len(rows), sum(r["false_alarm"] for r in rows)
    lo_w, hi_w = wilson(k, n)
    widest = max(max(r["below"], r["above"]) for r in rows)
    dets = [float(r["detectable_slowdown"]) for r in rows if r["detectable_slowdown"] is not None]
    det_text = f"; largest detectable slowdown {max(dets):.2%}" if dets else ""
    print(
        f"\n{n} A/A comparisons: widest interval half-width {widest:.2%}{det_text}; false alarms at margin "
        f"{margin:g}: {k} of {n} ({k / n:.1%}, 95% Wilson {lo_w:.1%}-{hi_w:.1%}); a margin of "
        f"{max(r['below'] for r in rows):.2%} would have raised none"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
