"""False-regression rate of the perf gate under the measured noise structure (pure statistics, no engines).

The candidate is simulated as *identical* to the baseline, with the timing noise
measured on the 2-core CPU hosts (docs/perf.md, "Statistics", measured timing noise):

* between engine lifetimes: coefficient of variation ~20% (1.35 ms vs 1.9 ms median TPOT
  after a restart);
* between back-to-back runs inside one lifetime: CV 6% to 22% (concurrency 1 to 16).

Each run's summary (e.g. its median TPOT) is ``mu * U_lifetime * V_run`` with log-normal
``U`` and ``V`` of the stated CVs. For every design (lifetimes per side x runs per
lifetime x interval method: the hierarchical bootstrap, or the lifetime t interval)
the script applies the real gate (``hierarchical_ratio_bootstrap`` or
``lifetime_t_ratio``, then the ``no_regression_gate`` rule) and reports:

* **false-regression rate**: how often an identical candidate fails the gate
  (lower bound of the speedup < 1 - margin). The nominal one-sided level of the
  gate is (1 - confidence)/2 = 2.5%, but a non-inferiority gate does not bound this
  rate by its level: it is 1 - power at parity and depends on noise and margin.
  The normal-model prediction from the bootstrap SE
  (``MinimumDetectableEffect.gate_fail_probability_at_parity``) is shown next to it;
* **false-pass rate**: how often a candidate that is exactly ``1 - margin`` as fast
  passes. This is the error the nominal level is meant to bound (<= 2.5%); it is
  computed at the chosen margin only (on the log scale it hardly depends on it);
* the bootstrap SE of log(speedup) against the true SE of the design, and the
  median minimum detectable slowdown at 80% power;
* optionally (``--sequential``) the same two rates for adaptive repetition with a
  Bonferroni correction over the planned looks (runs per lifetime grow from
  ``--min-runs`` to ``--max-runs``).

Run: ``python benchmarks/false_alarm_stats.py`` (about 5 minutes on 2 cores;
``--quick`` for a rough pass). Deterministic given ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from fasttrack.stats import (
    RatioEstimate,
    hierarchical_ratio_bootstrap,
    lifetime_t_ratio,
    mde_for_estimate,
    planned_looks,
    sequential_decision,
    wilson_interval,
)

CV_LIFETIME = 0.20
CV_RUNS = (0.06, 0.14, 0.22)
MARGINS = (0.02, 0.05, 0.10, 0.20, 0.30)
#: (lifetimes per side, interval method)
DESIGNS = ((1, "bootstrap"), (2, "bootstrap"), (2, "lifetime_t"), (3, "bootstrap"), (3, "lifetime_t"))


@dataclass
class Cell:
    lifetimes: int
    method: str
    runs: int
    cv_run: float
    sims: int
    margin: float
    false_regression: float
    false_regression_ci: tuple[float, float]
    predicted_false_regression: float
    false_pass_at_margin: float
    false_pass_ci: tuple[float, float]
    est_se_log: float
    true_se_log: float
    median_detectable_slowdown: float
    false_regression_by_margin: dict[str, float] = field(default_factory=dict)


@dataclass
class SequentialCell:
    lifetimes: int
    min_runs: int
    max_runs: int
    looks: int
    cv_run: float
    sims: int
    margin: float
    false_regression: float
    false_pass_at_margin: float
    mean_runs_at_parity: float


def _sigma(cv: float) -> float:
    return math.sqrt(math.log1p(cv * cv))


def simulate_side(
    rng: np.random.Generator, mu: float, lifetimes: int, runs: int, cv_l: float, cv_r: float
) -> list[list[float]]:
    """Per-run summaries: mu * U_lifetime * V_run, log-normal with the given CVs."""
    u = rng.lognormal(0.0, _sigma(cv_l), size=lifetimes)
    v = rng.lognormal(0.0, _sigma(cv_r), size=(lifetimes, runs))
    out: list[list[float]] = (mu * u[:, None] * v).tolist()
    return out


def true_se(lifetimes: int, runs: int, cv_l: float, cv_r: float) -> float:
    """SE of log(speedup) for a mean-of-logs estimator: both sides, lifetime and run components."""
    sl, sr = _sigma(cv_l), _sigma(cv_r)
    return math.sqrt(2.0 * (sl**2 / lifetimes + sr**2 / (lifetimes * runs)))


def _rate(k: int, n: int) -> tuple[float, tuple[float, float]]:
    w = wilson_interval(k, n)
    return k / n, (w.ci_low, w.ci_high)


def estimate(
    method: str,
    b: list[list[float]],
    c: list[list[float]],
    *,
    statistic: str,
    confidence: float,
    n_boot: int,
    seed: int,
) -> RatioEstimate:
    if method == "lifetime_t":
        return lifetime_t_ratio(
            b,
            c,
            metric="median_tpot_ms",
            direction="lower_is_better",
            statistic=statistic,
            confidence=confidence,
            include_raw=False,
        )
    return hierarchical_ratio_bootstrap(
        b,
        c,
        metric="median_tpot_ms",
        direction="lower_is_better",
        statistic=statistic,
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
        include_raw=False,
    )


def run_cell(
    *,
    lifetimes: int,
    method: str,
    runs: int,
    cv_run: float,
    sims: int,
    boundary_sims: int,
    margin: float,
    statistic: str,
    confidence: float,
    n_boot: int,
    seed: int,
) -> Cell:
    rng = np.random.default_rng([seed, lifetimes, runs, int(cv_run * 1000)])
    lows, ses, slows, preds = [], [], [], []
    for k in range(sims):
        b = simulate_side(rng, 1.0, lifetimes, runs, CV_LIFETIME, cv_run)
        c = simulate_side(rng, 1.0, lifetimes, runs, CV_LIFETIME, cv_run)
        est = estimate(method, b, c, statistic=statistic, confidence=confidence, n_boot=n_boot, seed=k)
        mde = mde_for_estimate(est, noise_margin=margin)
        lows.append(est.ci_low)
        ses.append(est.log_speedup_se)
        slows.append(mde.detectable_slowdown)
        preds.append(mde.gate_fail_probability_at_parity or 0.0)
    lows_a = np.array(lows)
    fr_by_margin = {f"{m:g}": float(np.mean(lows_a < 1.0 - m)) for m in MARGINS}
    passes = 0
    for k in range(boundary_sims):
        b = simulate_side(rng, 1.0, lifetimes, runs, CV_LIFETIME, cv_run)
        # candidate latency 1/(1-m) times the baseline's: true speedup exactly 1 - m
        c = simulate_side(rng, 1.0 / (1.0 - margin), lifetimes, runs, CV_LIFETIME, cv_run)
        est = estimate(method, b, c, statistic=statistic, confidence=confidence, n_boot=n_boot, seed=10**6 + k)
        passes += est.ci_low >= 1.0 - margin
    fp_main = (passes, boundary_sims)
    fails = int(np.sum(lows_a < 1.0 - margin))
    fr, fr_ci = _rate(fails, sims)
    fp, fp_ci = _rate(*fp_main)
    return Cell(
        lifetimes=lifetimes,
        method=method,
        runs=runs,
        cv_run=cv_run,
        sims=sims,
        margin=margin,
        false_regression=fr,
        false_regression_ci=fr_ci,
        predicted_false_regression=float(np.mean(preds)),
        false_pass_at_margin=fp,
        false_pass_ci=fp_ci,
        est_se_log=float(np.median(ses)),
        true_se_log=true_se(lifetimes, runs, CV_LIFETIME, cv_run),
        median_detectable_slowdown=float(np.median(slows)),
        false_regression_by_margin=fr_by_margin,
    )


def run_sequential(
    *,
    lifetimes: int,
    min_runs: int,
    max_runs: int,
    cv_run: float,
    sims: int,
    margin: float,
    statistic: str,
    confidence: float,
    n_boot: int,
    seed: int,
) -> SequentialCell:
    rng = np.random.default_rng([seed, 7, lifetimes, int(cv_run * 1000)])
    looks = planned_looks(min_runs=min_runs, max_runs=max_runs)

    def procedure(truth_speedup: float, k: int) -> tuple[str, int]:
        b = np.array(simulate_side(rng, 1.0, lifetimes, max_runs, CV_LIFETIME, cv_run))
        c = np.array(simulate_side(rng, 1.0 / truth_speedup, lifetimes, max_runs, CV_LIFETIME, cv_run))
        for look in range(1, looks + 1):
            r = min_runs + look - 1
            d = sequential_decision(
                b[:, :r].tolist(),
                c[:, :r].tolist(),
                metric="median_tpot_ms",
                direction="lower_is_better",
                noise_margin=margin,
                look=look,
                planned_looks=looks,
                statistic=statistic,
                confidence=confidence,
                n_boot=n_boot,
                seed=k * 100 + look,
            )
            if d.final:
                return d.decision, r
        raise AssertionError("the last look is always final")

    parity = [procedure(1.0, k) for k in range(sims)]
    boundary = [procedure(1.0 - margin, 10**6 + k) for k in range(sims)]
    return SequentialCell(
        lifetimes=lifetimes,
        min_runs=min_runs,
        max_runs=max_runs,
        looks=looks,
        cv_run=cv_run,
        sims=sims,
        margin=margin,
        false_regression=sum(d == "decided_fail" for d, _ in parity) / sims,
        false_pass_at_margin=sum(d == "decided_pass" for d, _ in boundary) / sims,
        mean_runs_at_parity=float(np.mean([r for _, r in parity])),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000, help="simulated comparisons per cell at parity")
    ap.add_argument("--boundary-sims", type=int, default=1000, help="simulated comparisons per cell at the margin")
    ap.add_argument("--margin", type=float, default=0.05, help="noise margin of the gate (scope default 0.05)")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--runs", type=int, default=6, help="runs per lifetime (fixed designs)")
    ap.add_argument("--statistic", default="median")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sequential", action="store_true", help="also simulate adaptive repetition with Bonferroni looks")
    ap.add_argument("--seq-sims", type=int, default=400)
    ap.add_argument("--min-runs", type=int, default=3)
    ap.add_argument("--max-runs", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="few simulations (rough figures)")
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    a = ap.parse_args(argv)
    if a.quick:
        a.sims, a.boundary_sims, a.seq_sims = 300, 200, 100

    alpha1 = (1.0 - a.confidence) / 2.0
    t0 = time.time()
    print(
        f"noise model: between-lifetime CV {CV_LIFETIME:.0%}, "
        f"within-lifetime run CV {', '.join(f'{c:.0%}' for c in CV_RUNS)}"
    )
    print(
        f"gate: lower end of the {a.confidence:.0%} interval of the speedup "
        "(hierarchical bootstrap, or t on lifetimes) "
        f">= 1 - margin "
        f"(one-sided nominal level {alpha1:.1%}); statistic '{a.statistic}' of per-run summaries; n_boot {a.n_boot}"
    )
    print()
    cells: list[Cell] = []
    for lifetimes, method in DESIGNS:
        for cv in CV_RUNS:
            cells.append(
                run_cell(
                    lifetimes=lifetimes,
                    method=method,
                    runs=a.runs,
                    cv_run=cv,
                    sims=a.sims,
                    boundary_sims=a.boundary_sims,
                    margin=a.margin,
                    statistic=a.statistic,
                    confidence=a.confidence,
                    n_boot=a.n_boot,
                    seed=a.seed,
                )
            )
    hdr = (
        f"{'lifetimes/side':>14} {'interval':>10} {'runs':>4} {'run CV':>6} | "
        f"{'false regression @ margin ' + format(a.margin, 'g'):>34} "
        f"{'predicted':>9} | {'false pass @ 1-margin':>24} | {'est SE':>7} {'true SE':>7} {'MDE@80%':>8}"
    )
    print(hdr)
    print("-" * len(hdr))
    for c in cells:
        print(
            f"{c.lifetimes:>14} {c.method:>10} {c.runs:>4} {c.cv_run:>6.0%} | {c.false_regression:>8.1%} "
            f"[{c.false_regression_ci[0]:.1%}, {c.false_regression_ci[1]:.1%}] (nominal {alpha1:.1%}) "
            f"{c.predicted_false_regression:>9.1%} | {c.false_pass_at_margin:>7.1%} [{c.false_pass_ci[0]:.1%}, "
            f"{c.false_pass_ci[1]:.1%}] | {c.est_se_log:>7.3f} {c.true_se_log:>7.3f} "
            f"{c.median_detectable_slowdown:>8.1%}"
        )
    print()
    print("false-regression rate (identical candidate fails) by noise margin:")
    print(
        f"{'lifetimes/side':>14} {'interval':>10} {'run CV':>6} | "
        + " ".join(f"{'m=' + format(m, 'g'):>7}" for m in MARGINS)
    )
    for c in cells:
        print(
            f"{c.lifetimes:>14} {c.method:>10} {c.cv_run:>6.0%} | "
            + " ".join(f"{c.false_regression_by_margin[f'{m:g}']:>7.1%}" for m in MARGINS)
        )

    seq: list[SequentialCell] = []
    if a.sequential:
        print()
        print(
            f"adaptive repetition: runs per lifetime {a.min_runs}..{a.max_runs}, Bonferroni over "
            f"{planned_looks(min_runs=a.min_runs, max_runs=a.max_runs)} looks, margin {a.margin:g}"
        )
        print(
            f"{'lifetimes/side':>14} {'run CV':>6} | {'false regression':>16} {'false pass':>10} "
            f"{'mean runs @ parity':>18}"
        )
        for lifetimes in (1, 2):
            for cv in CV_RUNS:
                s = run_sequential(
                    lifetimes=lifetimes,
                    min_runs=a.min_runs,
                    max_runs=a.max_runs,
                    cv_run=cv,
                    sims=a.seq_sims,
                    margin=a.margin,
                    statistic=a.statistic,
                    confidence=a.confidence,
                    n_boot=a.n_boot,
                    seed=a.seed,
                )
                seq.append(s)
                print(
                    f"{s.lifetimes:>14} {s.cv_run:>6.0%} | {s.false_regression:>16.1%} {s.false_pass_at_margin:>10.1%} "
                    f"{s.mean_runs_at_parity:>18.2f}"
                )
    print()
    print(f"({time.time() - t0:.0f} s; {a.sims} sims per cell at parity, {a.boundary_sims} at the margin)")
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
                    "cv_lifetime": CV_LIFETIME,
                    "cells": [asdict(c) for c in cells],
                    "sequential": [asdict(s) for s in seq],
                },
                indent=2,
            ),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
