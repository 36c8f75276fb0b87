"""The paired gates: task-score non-inferiority and output agreement against the baseline's reproducibility."""

from __future__ import annotations

import pytest

from fasttrack.evals.compare import PairingError, SampleOutcome, breakdown, compare


def _runs(outputs: list[str], scores: list[float], repeat: int = 0) -> list[SampleOutcome]:
    return [
        SampleOutcome(sample_id=f"s{i}", repeat=repeat, output=o, score=s)
        for i, (o, s) in enumerate(zip(outputs, scores, strict=False))
    ]


TEXTS = [f"answer number {i}: the quiet river carries light {i * 7}" for i in range(12)]


def test_identical_outputs_pass_both_gates() -> None:
    base = _runs(TEXTS, [1.0] * 6 + [0.0] * 6)
    c = compare(
        eval_name="aime25",
        point="p-b3",
        baseline=base,
        candidate=base,
        reference=base,
        margin=0.1,
        floor=0.0,
        binary=True,
    )
    assert c.passed and not c.failures
    assert c.agreement_mean == 1.0 and c.exact_match_rate == 1.0
    assert c.task_gate.lower_bound == 0.0
    assert c.task_newcombe is not None and c.task_newcombe.table.both_correct == 6


def test_diverging_outputs_fail_agreement_even_when_scores_are_all_zero() -> None:
    base = _runs(TEXTS, [0.0] * 12)
    cand = _runs([t[:10] + "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz" for t in TEXTS], [0.0] * 12)
    c = compare(
        eval_name="mrcr",
        point="p-b3",
        baseline=base,
        candidate=cand,
        reference=base,
        margin=0.1,
        floor=0.0,
        binary=False,
    )
    assert c.task_gate.passed  # the task score cannot see it
    assert c.agreement_gate is not None and not c.agreement_gate.passed
    assert not c.passed
    assert any("agree with the baseline's less than the baseline agrees with itself" in f for f in c.failures)
    assert len(c.disagreeing_outputs) == 12
    assert c.disagreeing_outputs[0]["candidate_output"].endswith("zzz")


def test_agreement_is_judged_against_the_baselines_own_reproducibility() -> None:
    # the stock path itself changes 4 of 12 outputs between two runs (fragile samples); the candidate
    # changes the same ones by as much, so it agrees with the baseline as well as the baseline does
    noisy = [t if i % 3 else t[::-1] for i, t in enumerate(TEXTS)]
    base = _runs(TEXTS, [0.0] * 12)
    ref = _runs(noisy, [0.0] * 12)
    cand = _runs([t if i % 3 else t[: len(t) // 2] + t[len(t) // 2 :][::-1] for i, t in enumerate(TEXTS)], [0.0] * 12)
    c = compare(
        eval_name="mrcr", point="p", baseline=base, candidate=cand, reference=ref, margin=0.1, floor=0.0, binary=False
    )
    assert c.agreement_mean >= c.reference_agreement_mean
    assert c.exact_match_rate == pytest.approx(8 / 12)
    assert c.agreement_gate is not None and c.agreement_gate.passed


def test_task_score_regression_fails_non_inferiority() -> None:
    base = _runs(TEXTS, [1.0] * 12)
    cand = _runs(TEXTS[:6] + [t + "!" for t in TEXTS[6:]], [1.0] * 6 + [0.0] * 6)
    c = compare(
        eval_name="aime25", point="p", baseline=base, candidate=cand, reference=base, margin=0.1, floor=0.0, binary=True
    )
    assert not c.task_gate.non_inferior
    assert c.task_gate.difference.difference == pytest.approx(-0.5)
    assert any("task score is worse" in f for f in c.failures)
    assert sorted(d["sample_id"] for d in c.discordant_scores) == sorted(f"s{i}" for i in range(6, 12))


def test_floor_on_the_candidate_mean() -> None:
    base = _runs(TEXTS, [0.2] * 12)
    c = compare(
        eval_name="mrcr", point="p", baseline=base, candidate=base, reference=base, margin=0.1, floor=0.5, binary=False
    )
    assert c.task_gate.non_inferior and not c.task_gate.meets_floor and not c.passed
    assert any("below the floor 0.5" in f for f in c.failures)


def test_repeats_are_resampled_by_sample() -> None:
    base = _runs(TEXTS[:4], [1, 0, 1, 0]) + _runs(TEXTS[:4], [1, 0, 1, 0], repeat=1)
    c = compare(
        eval_name="aime25", point="p", baseline=base, candidate=base, reference=base, margin=0.1, floor=0.0, binary=True
    )
    assert c.repeats == 2 and c.n_samples == 4 and c.n_pairs == 8
    assert c.task_gate.difference.n_clusters == 4
    assert c.task_newcombe is None  # Newcombe assumes independent pairs


def test_mismatched_samples_are_refused() -> None:
    base = _runs(TEXTS[:3], [0, 0, 0])
    with pytest.raises(PairingError, match="different samples"):
        compare(
            eval_name="x",
            point="p",
            baseline=base,
            candidate=base[:2],
            reference=base,
            margin=0.1,
            floor=0.0,
            binary=False,
        )


def test_missing_reference_means_no_agreement_gate_and_no_pass() -> None:
    base = _runs(TEXTS[:3], [0, 0, 0])
    c = compare(
        eval_name="x", point="p", baseline=base, candidate=base, reference=None, margin=0.1, floor=0.0, binary=False
    )
    assert c.agreement_gate is None and not c.passed


def test_breakdown_per_group() -> None:
    base = _runs(TEXTS[:4], [1.0, 0.0, 0.5, 0.5])
    cand = _runs(TEXTS[:4], [1.0, 0.0, 0.0, 0.5])
    c = compare(
        eval_name="mrcr", point="p", baseline=base, candidate=cand, reference=base, margin=0.5, floor=0.0, binary=False
    )
    rows = breakdown(c.pairs, {"s0": "512-1k", "s1": "256-512", "s2": "256-512", "s3": "4k-8k"}, dimension="bin")
    assert [r["group"] for r in rows] == ["256-512", "512-1k", "4k-8k"]
    assert rows[0]["pairs"] == 2 and rows[0]["difference"] == pytest.approx(-0.25)
