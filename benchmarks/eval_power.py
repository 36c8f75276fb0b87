"""Minimum detectable score drop of the evals gate at the demo's sample sizes (figures, not a test).

The evals check's task-score gate (``fasttrack.evals.compare.compare``) fails when the
95% bootstrap lower bound of mean(candidate - baseline) is below ``-margin``. How large
a drop does it catch? This simulates candidates that break a random fraction of the
samples (a broken MRCR answer scores 0; a broken AIME answer is wrong) against the
baseline's per-sample scores, runs the real gate on each, and reports, per sample size,
the smallest mean score drop that fails the gate in at least 80% of trials (the minimum
detectable drop at 80% power), and how often a candidate identical to the baseline fails.

The baseline scores are the per-sample scores of a run (``--samples``: an
``eval_samples`` table of a bundle, as JSON Lines or parquet; the baseline's primary
rows of each eval are used), or, without one, the demo model's measured means
(``--mrcr-mean``, ``--aime-mean``), with MRCR scores drawn from the baseline's own
distribution shape (a prefix-correct answer scores about ``--mrcr-mean``, a wrong
prefix 0).

    python benchmarks/eval_power.py                                  # the demo's sample sizes
    python benchmarks/eval_power.py --samples runs/demo/bundle/tables/eval_samples.parquet
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fasttrack.evals.compare import SampleOutcome, compare  # noqa: E402


def _read_samples(path: Path) -> dict[str, list[float]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out: dict[str, list[float]] = {}
    for r in rows:
        if r.get("side") == "baseline" and r.get("role") == "primary":
            out.setdefault(r["eval"], []).append(float(r["score"]))
    return out


def detection_rate(
    scores: np.ndarray, *, broken: float, margin: float, binary: bool, trials: int, rng: np.random.Generator
) -> tuple[float, float]:
    """Fraction of trials in which the gate fails when a fraction ``broken`` of the samples
    scores 0 on the candidate; and the mean score drop those trials had."""
    n = len(scores)
    fails, drops = 0, []
    for _ in range(trials):
        cand = scores.copy()
        hit = rng.random(n) < broken
        cand[hit] = 0.0
        base = [SampleOutcome(sample_id=str(i), output="", score=float(s)) for i, s in enumerate(scores)]
        new = [SampleOutcome(sample_id=str(i), output="", score=float(s)) for i, s in enumerate(cand)]
        c = compare(
            eval_name="e",
            point="p",
            baseline=base,
            candidate=new,
            reference=base,
            margin=margin,
            floor=0.0,
            binary=binary,
        )
        fails += not c.task_gate.passed
        drops.append(float(scores.mean() - cand.mean()))
    return fails / trials, float(np.mean(drops))


def minimum_detectable_drop(
    scores: np.ndarray, *, margin: float, binary: bool, trials: int, power: float, seed: int
) -> tuple[float | None, float]:
    """(smallest mean drop detected with probability >= power, false-alarm rate with nothing broken)."""
    rng = np.random.default_rng(seed)
    false_alarm, _ = detection_rate(scores, broken=0.0, margin=margin, binary=binary, trials=trials, rng=rng)
    for broken in np.linspace(0.05, 1.0, 20):
        rate, drop = detection_rate(scores, broken=broken, margin=margin, binary=binary, trials=trials, rng=rng)
        if rate >= power:
            return drop, false_alarm
    return None, false_alarm


def _synthetic(kind: str, n: int, mean: float, rng: np.random.Generator) -> np.ndarray:
    if kind == "aime25":
        return (rng.random(n) < mean).astype(float)
    # MRCR: most answers start with the right prefix and score ~0.7-1.0; scale to the mean
    s = np.clip(rng.normal(0.75, 0.08, n), 0.0, 1.0)
    return np.clip(s * mean / max(s.mean(), 1e-9), 0.0, 1.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=Path, help="an eval_samples table (JSON Lines or parquet)")
    p.add_argument("--mrcr-mean", type=float, default=0.7)
    p.add_argument("--aime-mean", type=float, default=0.5)
    p.add_argument("--sizes", default="6,30,60", help="sample sizes (comma separated)")
    p.add_argument("--margin", type=float, default=0.1)
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--power", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    measured = _read_samples(args.samples) if args.samples else {}
    print(f"task-score gate, margin {args.margin}, power {args.power:.0%}, {args.trials} trials per point")
    for kind, mean in (("mrcr", args.mrcr_mean), ("aime25", args.aime_mean)):
        pool = np.array(measured[kind]) if kind in measured else None
        for n in (int(x) for x in args.sizes.split(",")):
            if pool is not None:
                scores = rng.choice(pool, size=n, replace=n > len(pool))
            else:
                scores = _synthetic(kind, n, mean, rng)
            mdd, fa = minimum_detectable_drop(
                scores,
                margin=args.margin,
                binary=kind == "aime25",
                trials=args.trials,
                power=args.power,
                seed=args.seed,
            )
            shown = f"{mdd:.3f}" if mdd is not None else "not reached"
            print(
                f"{kind:7s} n={n:3d} baseline mean {scores.mean():.3f}: minimum detectable drop {shown}; "
                f"false alarms with nothing broken {fa:.1%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
