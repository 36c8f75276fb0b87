"""The evals gate's minimum detectable drop (fasttrack.evals.power), checked against the gate itself."""

from __future__ import annotations

import numpy as np

from fasttrack.evals.compare import SampleOutcome, compare
from fasttrack.evals.power import minimum_detectable_drop


def _mrcr_like(n: int, seed: int = 1) -> list[float]:
    return [float(x) for x in np.clip(np.random.default_rng(seed).normal(0.75, 0.08, n), 0.0, 1.0)]


def test_more_samples_detect_smaller_drops() -> None:
    small, large = minimum_detectable_drop([1.0] * 6, margin=0.1), minimum_detectable_drop([1.0] * 120, margin=0.1)
    assert small.drop is not None and large.drop is not None
    assert large.drop < small.drop <= 1.0
    # a drop smaller than the margin cannot fail a gate whose lower bound is compared with -margin
    assert large.drop > 0.1 * 0.9
    assert large.samples == 120 and large.power == 0.8 and "percentile bootstrap" in large.method
    mrcr = minimum_detectable_drop(_mrcr_like(60), margin=0.1)
    assert mrcr.drop is not None and mrcr.drop < small.drop


def test_a_baseline_that_scores_nothing_has_no_detectable_drop() -> None:
    d = minimum_detectable_drop([0.0] * 8, margin=0.1)
    assert d.drop is None and d.fraction_broken is None
    assert minimum_detectable_drop([], margin=0.1).drop is None


def test_the_same_scores_give_the_same_answer() -> None:
    scores = _mrcr_like(8)
    assert minimum_detectable_drop(scores, margin=0.1) == minimum_detectable_drop(scores, margin=0.1)


def test_the_gate_itself_catches_the_detectable_drop_about_as_often_as_stated() -> None:
    """Candidates broken at the returned fraction, judged by the real gate (compare): caught in about
    80% of trials (the simulation shares its bootstrap draws, so allow some slack); at a quarter of that
    fraction, caught much less often."""
    scores = _mrcr_like(24, seed=3)
    d = minimum_detectable_drop(scores, margin=0.1)
    assert d.fraction_broken is not None
    rng = np.random.default_rng(7)

    def caught(p: float, trials: int = 60) -> float:
        n = 0
        for _ in range(trials):
            cand = [0.0 if rng.random() < p else s for s in scores]
            c = compare(
                eval_name="e",
                point="p",
                baseline=[SampleOutcome(sample_id=str(i), output="", score=s) for i, s in enumerate(scores)],
                candidate=[SampleOutcome(sample_id=str(i), output="", score=s) for i, s in enumerate(cand)],
                reference=None,
                margin=0.1,
                floor=0.0,
                binary=False,
            )
            n += not c.task_gate.non_inferior
        return n / trials

    assert caught(d.fraction_broken) >= 0.65
    assert caught(d.fraction_broken / 4) <= 0.4
