"""The power of the evals task-score gate: the smallest score drop it catches at a comparison's sample size.

The gate (:mod:`fasttrack.evals.compare`) fails a candidate when the 95% percentile-bootstrap lower
bound of mean(candidate score - baseline score) falls below ``-margin``. With few samples that bound
is wide, so only a large drop fails it. :func:`minimum_detectable_drop` measures how large, by
simulation on the baseline's own scores: a defect that zeroes each sample's candidate score with
probability ``p`` (a numerics bug that breaks some answers outright), ``trials`` simulated candidates
per ``p`` on a grid, each judged by the same percentile bootstrap (fewer replicates, shared between
trials). The result is the mean score drop of the smallest ``p`` the gate catches in at least
``power`` of the trials, or None when even zeroing every sample is not caught (a baseline that
scores about nothing cannot lose score). Deterministic for a given seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fasttrack.evals.compare import CONFIDENCE
from fasttrack.modelbase import DocModel

POWER = 0.8
TRIALS = 200
REPLICATES = 1000
GRID = tuple(round(0.05 * i, 2) for i in range(1, 21))
"""Fractions of samples zeroed, in order."""


class DetectableDrop(DocModel):
    """The smallest mean score drop the task-score gate catches with probability ``power``."""

    drop: float | None
    """Mean score drop (baseline mean - candidate mean) caught in at least ``power`` of the trials;
    None when not even a candidate that scores 0 everywhere is caught that often."""
    fraction_broken: float | None
    """The fraction of samples zeroed at that drop."""
    power: float
    samples: int
    margin: float
    trials: int
    method: str


def minimum_detectable_drop(
    scores: Sequence[float],
    *,
    margin: float,
    power: float = POWER,
    trials: int = TRIALS,
    replicates: int = REPLICATES,
    seed: int = 0,
) -> DetectableDrop:
    """The gate's minimum detectable drop on these baseline scores (one per sample; see the module)."""
    s = np.asarray(list(scores), dtype=float)
    method = (
        f"simulation: each sample's candidate score zeroed with probability p (p = 0.05, 0.10, ... 1.00), "
        f"{trials} trials per p, {CONFIDENCE:.0%} percentile bootstrap ({replicates} replicates) of the "
        f"paired mean difference; caught when its lower bound < -margin; power {power:.0%}"
    )

    def result(drop: float | None, fraction: float | None) -> DetectableDrop:
        return DetectableDrop(
            drop=drop,
            fraction_broken=fraction,
            power=power,
            samples=int(s.size),
            margin=margin,
            trials=trials,
            method=method,
        )

    if s.size == 0:
        return result(None, None)
    rng = np.random.default_rng(seed)
    # one set of bootstrap draws for every trial: weights[i, b] = how often sample i is in replicate b / n
    draws = rng.integers(0, s.size, size=(replicates, s.size))
    weights = np.zeros((s.size, replicates))
    np.add.at(weights, (draws, np.arange(replicates)[:, None]), 1.0 / s.size)
    tail = (1.0 - CONFIDENCE) / 2.0
    for p in GRID:
        hit = rng.random((trials, s.size)) < p
        diffs = np.where(hit, -s, 0.0)  # candidate - baseline per sample
        low = np.quantile(diffs @ weights, tail, axis=1)
        if float(np.mean(low < -margin)) >= power:
            return result(round(float(np.mean(hit * s)), 4), p)
    return result(None, None)
