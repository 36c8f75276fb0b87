"""The paired comparison of one eval at one config point, and its two gates.

Inputs are per-sample outcomes of three kinds of runs on identical samples and
seeds: the baseline's primary run, a repeated baseline run (the *reference*: the
same requests again, to measure how reproducible the stock path's outputs are),
and the candidate's run. Pairs are matched by (sample id, repeat).

Gate 1, task score (non-inferiority)
    d_i = candidate score - baseline score per pair; the mean of d with a 95%
    percentile-bootstrap interval over pairs (over samples when there are repeats,
    since repeats of one sample are not independent). Pass iff the lower bound is at
    least -margin and the candidate's mean score is at least the floor. For binary
    scores (AIME exact match) Newcombe's paired interval is recorded beside it.

Gate 2, output agreement (non-inferiority against the baseline's own reproducibility)
    a_i = similarity(candidate output, baseline output) and
    r_i = similarity(reference output, baseline output), with similarity the
    ``difflib.SequenceMatcher`` ratio (1.0 for identical text). The mean of
    a_i - r_i with a 95% percentile-bootstrap interval; pass iff the lower bound is at
    least -margin. With greedy decoding (or per-request seeds) a correct optimized
    path reproduces the stock outputs about as well as the stock path reproduces
    itself; a numerical defect changes outputs even where the task score cannot
    see it (e.g. a model that scores 0 on both sides).

The reference run follows the primary run in the same engine lifetime (prefix
cache warm), so it tends to agree with the primary run at least as well as a fresh
engine would: the gate errs on the strict side.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import Field

from fasttrack.evals.mrcr import bin_order, similarity
from fasttrack.modelbase import DocModel
from fasttrack.stats import (
    NonInferiorityGate,
    PairedDifference,
    discordant_pairs,
    non_inferiority_gate,
    paired_binary_difference,
    paired_bootstrap_difference,
)

CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0
BOOTSTRAP_REPLICATES = 4000
MAX_REVIEW = 20
"""Discordant samples listed for review per comparison."""
TEXT_PREVIEW = 400
"""Characters of each output kept in the review list."""


class SampleOutcome(DocModel):
    """One sample's output and score in one run."""

    sample_id: str
    repeat: int = 0
    output: str
    score: float


class PairRow(DocModel):
    """One (sample, repeat) pair after matching the three runs."""

    sample_id: str
    repeat: int
    baseline_score: float
    candidate_score: float
    reference_score: float | None
    agreement: float
    """similarity(candidate output, baseline output)."""
    reference_agreement: float | None
    """similarity(reference output, baseline output)."""
    exact_match: bool
    """Candidate output identical to the baseline output."""


class Comparison(DocModel):
    """The paired comparison of one eval at one config point."""

    eval: str
    point: str
    n_pairs: int
    n_samples: int
    repeats: int
    margin: float
    floor: float
    binary: bool
    """Whether task scores are 0/1 (AIME exact match)."""
    task_gate: NonInferiorityGate
    task_newcombe: PairedDifference | None = None
    """Newcombe's paired interval for binary scores (recorded, not gated)."""
    agreement_gate: NonInferiorityGate | None
    """None when no reference run exists (then the check is not run)."""
    agreement_mean: float
    reference_agreement_mean: float | None
    exact_match_rate: float
    """Fraction of pairs whose candidate output equals the baseline output."""
    reference_exact_match_rate: float | None
    passed: bool
    failures: list[str] = Field(default_factory=list)
    pairs: list[PairRow] = Field(default_factory=list)
    discordant_scores: list[dict[str, Any]] = Field(default_factory=list)
    """Pairs whose task scores differ (candidate regressions first)."""
    disagreeing_outputs: list[dict[str, Any]] = Field(default_factory=list)
    """Pairs whose candidate output differs from the baseline output more than the reference does."""


class PairingError(ValueError):
    """The runs of the two sides do not cover the same samples."""


def _index(outcomes: list[SampleOutcome], what: str) -> dict[tuple[str, int], SampleOutcome]:
    out: dict[tuple[str, int], SampleOutcome] = {}
    for o in outcomes:
        key = (o.sample_id, o.repeat)
        if key in out:
            raise PairingError(f"{what} has sample {o.sample_id!r} repeat {o.repeat} twice")
        out[key] = o
    return out


_Index = dict[tuple[str, int], SampleOutcome]


def _paired_rows(
    where: str,
    baseline: list[SampleOutcome],
    candidate: list[SampleOutcome],
    reference: list[SampleOutcome] | None,
) -> tuple[list[PairRow], _Index, _Index, _Index | None]:
    """The runs matched by (sample, repeat), in that order (they must cover the same samples), and each run's
    outcomes by (sample, repeat)."""
    b_idx = _index(baseline, "the baseline run")
    c_idx = _index(candidate, "the candidate run")
    r_idx = _index(reference, "the reference run") if reference is not None else None
    if set(b_idx) != set(c_idx):
        only_b = sorted(set(b_idx) - set(c_idx))[:5]
        only_c = sorted(set(c_idx) - set(b_idx))[:5]
        raise PairingError(
            f"{where}: baseline and candidate ran different samples (baseline only: {only_b}, candidate only: {only_c})"
        )
    if not b_idx:
        raise PairingError(f"{where}: no samples to compare")
    if r_idx is not None and set(r_idx) != set(b_idx):
        raise PairingError(f"{where}: the reference run covers different samples than the baseline run")
    pairs = []
    for k in sorted(b_idx):
        b, c = b_idx[k], c_idx[k]
        r = r_idx[k] if r_idx is not None else None
        pairs.append(
            PairRow(
                sample_id=k[0],
                repeat=k[1],
                baseline_score=b.score,
                candidate_score=c.score,
                reference_score=r.score if r else None,
                agreement=similarity(c.output, b.output),
                reference_agreement=similarity(r.output, b.output) if r else None,
                exact_match=c.output == b.output,
            )
        )
    return pairs, b_idx, c_idx, r_idx


def _difference(b: list[float], c: list[float], clusters: list[str] | None) -> PairedDifference:
    """The paired bootstrap difference ``c - b`` every gate of a comparison uses (pairs clustered by sample)."""
    return paired_bootstrap_difference(
        b, c, clusters=clusters, confidence=CONFIDENCE, n_boot=BOOTSTRAP_REPLICATES, seed=BOOTSTRAP_SEED
    )


def _failures(
    where: str,
    pairs: list[PairRow],
    task_gate: NonInferiorityGate,
    agreement_gate: NonInferiorityGate | None,
    *,
    margin: float,
    floor: float,
) -> list[str]:
    """What a comparison failed, in words."""
    failures: list[str] = []
    task_diff = task_gate.difference
    if not task_gate.non_inferior:
        failures.append(
            f"{where}: task score is worse than the baseline's: mean difference "
            f"{task_diff.difference:+.3f}, 95% lower bound {task_diff.ci_low:+.3f} < -{margin:g} "
            f"(baseline {task_diff.baseline_mean:.3f}, candidate {task_diff.candidate_mean:.3f}, {len(pairs)} pairs)"
        )
    if not task_gate.meets_floor:
        failures.append(f"{where}: candidate mean score {task_diff.candidate_mean:.3f} is below the floor {floor:g}")
    if agreement_gate is not None and not agreement_gate.non_inferior:
        d = agreement_gate.difference
        failures.append(
            f"{where}: candidate outputs agree with the baseline's less than the baseline agrees with "
            f"itself: mean agreement {d.candidate_mean:.3f} vs {d.baseline_mean:.3f} (repeated baseline run), "
            f"difference {d.difference:+.3f}, 95% lower bound {d.ci_low:+.3f} < -{margin:g}; "
            f"{sum(1 for p in pairs if not p.exact_match)}/{len(pairs)} outputs differ from the baseline's"
        )
    return failures


def _disagreeing_outputs(pairs: list[PairRow], b_idx: _Index, c_idx: _Index) -> list[dict[str, Any]]:
    """Up to MAX_REVIEW pairs whose candidate output agrees with the baseline's less than the reference's does,
    least agreeing first, with both outputs' beginnings."""
    out: list[dict[str, Any]] = []
    for p in sorted(pairs, key=lambda p: (p.agreement - (p.reference_agreement or 1.0), p.sample_id, p.repeat)):
        ref_a = p.reference_agreement if p.reference_agreement is not None else 1.0
        if p.agreement >= ref_a:
            continue
        k = (p.sample_id, p.repeat)
        out.append(
            {
                "sample_id": p.sample_id,
                "repeat": p.repeat,
                "agreement": round(p.agreement, 4),
                "reference_agreement": p.reference_agreement,
                "baseline_score": p.baseline_score,
                "candidate_score": p.candidate_score,
                "baseline_output": b_idx[k].output[:TEXT_PREVIEW],
                "candidate_output": c_idx[k].output[:TEXT_PREVIEW],
            }
        )
        if len(out) >= MAX_REVIEW:
            break
    return out


def compare(
    *,
    eval_name: str,
    point: str,
    baseline: list[SampleOutcome],
    candidate: list[SampleOutcome],
    reference: list[SampleOutcome] | None,
    margin: float,
    floor: float,
    binary: bool,
) -> Comparison:
    """Match the runs by (sample, repeat), compute both gates and the review lists."""
    where = f"{eval_name} at {point}"
    pairs, b_idx, c_idx, r_idx = _paired_rows(where, baseline, candidate, reference)
    repeats = len({p.repeat for p in pairs})
    clusters = [p.sample_id for p in pairs] if repeats > 1 else None
    b_scores = [p.baseline_score for p in pairs]
    c_scores = [p.candidate_score for p in pairs]
    task_gate = non_inferiority_gate(_difference(b_scores, c_scores, clusters), margin=margin, floor=floor)
    newcombe = paired_binary_difference(b_scores, c_scores, confidence=CONFIDENCE) if binary and repeats == 1 else None
    agreement_gate = None
    ref_mean = ref_exact = None
    if r_idx is not None:
        # every pair has a reference agreement when there is a reference run (same samples, checked above)
        ref = [p.reference_agreement for p in pairs if p.reference_agreement is not None]
        agreement_diff = _difference(ref, [p.agreement for p in pairs], clusters)
        agreement_gate = non_inferiority_gate(agreement_diff, margin=margin, floor=None)
        ref_mean = sum(ref) / len(ref)
        ref_exact = sum(1 for k, b in b_idx.items() if r_idx[k].output == b.output) / len(pairs)
    ids = [f"{p.sample_id}#{p.repeat}" if repeats > 1 else p.sample_id for p in pairs]
    return Comparison(
        eval=eval_name,
        point=point,
        n_pairs=len(pairs),
        n_samples=len({p.sample_id for p in pairs}),
        repeats=repeats,
        margin=margin,
        floor=floor,
        binary=binary,
        task_gate=task_gate,
        task_newcombe=newcombe,
        agreement_gate=agreement_gate,
        agreement_mean=sum(p.agreement for p in pairs) / len(pairs),
        reference_agreement_mean=ref_mean,
        exact_match_rate=sum(1 for p in pairs if p.exact_match) / len(pairs),
        reference_exact_match_rate=ref_exact,
        passed=task_gate.passed and (agreement_gate is not None and agreement_gate.passed),
        failures=_failures(where, pairs, task_gate, agreement_gate, margin=margin, floor=floor),
        pairs=pairs,
        discordant_scores=[d.model_dump() for d in discordant_pairs(b_scores, c_scores, ids=ids)][:MAX_REVIEW],
        disagreeing_outputs=_disagreeing_outputs(pairs, b_idx, c_idx),
    )


def breakdown(pairs: list[PairRow], groups: dict[str, str], *, dimension: str) -> list[dict[str, Any]]:
    """Mean scores and agreement per group (MRCR context bin or needle count, AIME problem).

    ``groups`` maps sample id -> group label.
    """
    acc: dict[str, list[PairRow]] = defaultdict(list)
    for p in pairs:
        acc[groups.get(p.sample_id, "?")].append(p)

    def key(label: str) -> tuple[int, str]:
        if dimension == "bin":
            try:
                return bin_order(label), label
            except ValueError:
                return 1 << 62, label
        return (int(label), label) if label.isdigit() else (1 << 62, label)

    rows = []
    for label in sorted(acc, key=key):
        ps = acc[label]
        n = len(ps)
        ref = [p.reference_agreement for p in ps if p.reference_agreement is not None]
        rows.append(
            {
                "dimension": dimension,
                "group": label,
                "pairs": n,
                "baseline_score": sum(p.baseline_score for p in ps) / n,
                "candidate_score": sum(p.candidate_score for p in ps) / n,
                "difference": sum(p.candidate_score - p.baseline_score for p in ps) / n,
                "agreement": sum(p.agreement for p in ps) / n,
                "reference_agreement": sum(ref) / len(ref) if ref else None,
                "exact_match_rate": sum(1 for p in ps if p.exact_match) / n,
            }
        )
    return rows
