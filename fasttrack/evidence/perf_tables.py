"""The perf check's tables beside its points: runs, looks, claims, drift, lifetimes, tails, curves and curve
dominance (their row models; the re-judging rule is :mod:`fasttrack.evidence.perf`'s)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from fasttrack.evidence.base import Row

Decision = Literal["decided_pass", "decided_fail", "undecided", "inconclusive"]
"""A sequential look's decision (``inconclusive``: its interval covers no lifetime variance)."""
ClaimStatus = Literal["supported", "refuted", "inconclusive", "not_measured", "confirmed", "contradicted"]
"""A claim's status (``confirmed``/``contradicted``: the words of bundles written before claims were judged by
intervals)."""


class PerfRunRow(Row):
    """One run of one item on one engine lifetime, with its raw samples."""

    KEY: ClassVar[tuple[str, ...]] = ("workload", "point", "side", "lifetime", "run")

    workload: str
    point: str
    side: Literal["baseline", "candidate"]
    lifetime: int | None = None
    run: int | None = None
    requests: int | None = None
    failed: int
    """Requests that failed (a candidate's failure fails its point)."""
    errors: list[str] | None = None
    duration_s: float | None = None
    started_at: float | None = None
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    output_tokens: int | None = None
    output_throughput: float | None = None
    decode_throughput: float | None = None
    per_gpu_throughput: float | None = None
    gpus: int | None = None
    ttft_ms: list[float | None] | None = None
    tpot_ms: list[float | None] | None = None
    itl_ms: list[float | None] | None = None
    e2e_ms: list[float | None] | None = None
    engine_tpot_ms: list[float | None] | None = None
    engine_ttft_ms: list[float | None] | None = None
    percentiles: dict[str, float | None] | None = None
    client_cpu_s: float | None = None
    client_cpu_us_per_token: float | None = None
    content_chunks: int | None = None
    burst_delivered: int | None = None
    itl_counts: list[int] | None = None
    timed_output_tokens: list[int] | None = None
    good_requests: int | None = None
    good_output_tokens: int | None = None
    goodput: float | None = None
    warmup_requests: int | None = None
    extra: dict[str, Any] | None = None
    drift_only: bool | None = None


class PerfLookRow(Row):
    """One sequential look at an item's gated metric."""

    KEY: ClassVar[tuple[str, ...]] = ("key", "look")

    key: str | None = None
    workload: str | None = None
    point: str | None = None
    look: int | None = None
    planned_looks: int | None = None
    decision: Decision | None = None
    per_look_confidence: float | None = None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    threshold: float | None = None
    runs_baseline: int | None = None
    runs_candidate: int | None = None
    reason: str | None = None
    at_judge: bool | None = None


class PerfClaimRow(Row):
    """One headline claim of the scope, held against the measured intervals."""

    KEY: ClassVar[tuple[str, ...]] = ("id",)

    id: str
    text: str | None = None
    metric: str | None = None
    status: ClaimStatus
    reason: str | None = None
    claimed: float | None = None
    measured: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    bound: float | None = None
    tolerance: float | None = None
    confidence: float | None = None
    measured_baseline: float | None = None
    claimed_baseline: float | None = None
    point: str | None = None
    workload: str | None = None
    other_matches: list[str] | None = None
    like_for_like: bool | None = None
    baseline_gpus: int | None = None
    candidate_gpus: int | None = None
    claimed_per_gpu_speedup: float | None = None
    claimed_baseline_per_gpu: float | None = None
    claimed_candidate_per_gpu: float | None = None
    measured_baseline_gpus: int | None = None
    measured_candidate_gpus: int | None = None
    detectable_slowdown: float | None = None


class PerfDriftRow(Row):
    """Drift of one item: the baseline's lifetimes against each other, and the interleaved pairs' trend."""

    KEY: ClassVar[tuple[str, ...]] = ("workload", "point", "metric")

    workload: str | None = None
    point: str | None = None
    metric: str | None = None
    test: str | None = None
    method: str | None = None
    statement: str | None = None
    pairs: int | None = None
    differences: list[float | None] | None = None
    tau: float | None = None
    p_value: float | None = None
    alpha: float | None = None
    trend_drifted: bool | None = None
    drifted: bool | None = None
    first_lifetimes: list[int] | None = None
    second_lifetimes: list[int] | None = None
    first_value: float | None = None
    second_value: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None
    tolerance: float | None = None
    mannwhitney_p: float | None = None
    ignores_lifetime_variance: bool | None = None
    trend: dict[str, Any] | None = None


class PerfLifetimeRow(Row):
    """One engine lifetime (or interleaved pair of lifetimes) of the perf check."""

    KEY: ClassVar[tuple[str, ...]] = ("group", "side", "lifetime")

    group: str | None = None
    side: str | None = None
    lifetime: int | None = None
    looks_allowed: bool | None = None
    drift_only: bool | None = None
    items: int | None = None
    skipped_decided: int | None = None
    runs: int | None = None
    seconds: float | None = None
    core_swaps: int | None = None
    cores_now: dict[str, Any] | None = None
    core_moves: int | None = None
    measuring_cores: Any = None


class PerfTailRow(Row):
    """One latency percentile of one item on both sides, with the ratio's interval."""

    KEY: ClassVar[tuple[str, ...]] = ("workload", "point", "label")

    workload: str | None = None
    kind: str | None = None
    point: str | None = None
    group: str | None = None
    batch: int | None = None
    context: int | None = None
    metric: str | None = None
    label: str | None = None
    statistic: str | None = None
    unit: str | None = None
    baseline: float | None = None
    baseline_ci_low: float | None = None
    baseline_ci_high: float | None = None
    candidate: float | None = None
    candidate_ci_low: float | None = None
    candidate_ci_high: float | None = None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None
    baseline_samples: int | None = None
    candidate_samples: int | None = None
    paired: bool | None = None
    ignores_lifetime_variance: bool | None = None
    n_boot: int | None = None
    seed: int | None = None
    method: str | None = None
    error: str | None = None
    slo_bound: float | None = None
    slo_baseline: Any = None
    slo_candidate: Any = None


class PerfCurveRow(Row):
    """One side at one concurrency level of a sweep: throughput per GPU and interactivity, with intervals."""

    KEY: ClassVar[tuple[str, ...]] = ("workload", "point", "side")

    workload: str | None = None
    group: str | None = None
    point: str | None = None
    concurrency: int | None = None
    side: str | None = None
    gpus: int | None = None
    throughput_unit: str | None = None
    runs: int | None = None
    lifetimes: int | None = None
    confidence: float | None = None
    paired: bool | None = None
    throughput: float | None = None
    throughput_ci_low: float | None = None
    throughput_ci_high: float | None = None
    itl_p50_ms: float | None = None
    itl_p50_ci: list[float | None] | None = None
    itl_p90_ms: float | None = None
    itl_p90_ci: list[float | None] | None = None
    itl_p99_ms: float | None = None
    itl_p99_ci: list[float | None] | None = None
    interactivity_p50: float | None = None
    interactivity_p50_ci_low: float | None = None
    interactivity_p50_ci_high: float | None = None
    interactivity_p90: float | None = None
    interactivity_p90_ci_low: float | None = None
    interactivity_p90_ci_high: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p50_ci: list[float | None] | None = None
    ttft_p90_ms: float | None = None
    ttft_p90_ci: list[float | None] | None = None
    ttft_p99_ms: float | None = None
    ttft_p99_ci: list[float | None] | None = None
    n_boot: int | None = None
    pareto: bool | None = None


class PerfDominanceRow(Row):
    """Whether the candidate's curve dominates the baseline's within the margin at one concurrency level."""

    KEY: ClassVar[tuple[str, ...]] = ("workload", "point")

    point: str
    workload: str
    dominates: bool | None
    threshold: float | None = None
    figures: dict[str, Any] | None = None
    statement: str | None = None
