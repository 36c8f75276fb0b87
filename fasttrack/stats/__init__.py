"""Statistics for fasttrack's gates: pure numpy/scipy, deterministic given a seed.

Every function documents the statistic it computes; every result is a pydantic model
(``model_dump(mode="json")``) that names the statistic and the method, states its
confidence level (or test level), and carries the raw numbers needed to re-check it.

Performance (perf check)
    :func:`hierarchical_ratio_bootstrap`, :func:`lifetime_t_ratio` -> :class:`RatioEstimate`
    :func:`minimum_detectable_effect`, :func:`mde_for_estimate` -> :class:`MinimumDetectableEffect`
    :func:`no_regression_gate` -> :class:`PointGate`; :func:`overall_gate` -> :class:`OverallGate`
    :func:`sequential_decision` -> :class:`SequentialDecision`; :func:`ratio_interval`; :func:`planned_looks`
    :func:`detect_drift` -> :class:`DriftCheck`
    :func:`normalize_per_gpu`, :func:`normalize_speedup_per_gpu` -> :class:`ResourceNormalization`
    :func:`multi_stat_comparison` -> :class:`MultiStatComparison` (tails and each side's own interval)
    :func:`paired_trend_test` -> :class:`TrendTest` (drift of interleaved run pairs)
Evaluations (evals check)
    :func:`wilson_interval` -> :class:`ProportionInterval`
    :func:`paired_binary_difference`, :func:`paired_bootstrap_difference` -> :class:`PairedDifference`
    :func:`non_inferiority_gate` -> :class:`NonInferiorityGate`; :func:`discordant_pairs`
Sampling (features check)
    :func:`chi_square_sampling_test` -> :class:`ChiSquareTest`
    :func:`allowed_tokens` -> :class:`AllowedTokens`; :func:`mask_violations` -> :class:`MaskCheck`
Greedy equivalence (equivalence check)
    :func:`compare_greedy` -> :class:`GreedyComparison`; :func:`summarize_greedy`; :func:`topk_kl`
"""

from __future__ import annotations

from fasttrack.stats._base import Direction, StatResult, StatsInputError
from fasttrack.stats.drift import DriftCheck, detect_drift
from fasttrack.stats.gate import (
    Decision,
    OverallGate,
    PointGate,
    SequentialDecision,
    no_regression_gate,
    overall_gate,
    planned_looks,
    ratio_interval,
    sequential_decision,
)
from fasttrack.stats.hierarchical import (
    RatioEstimate,
    SideSummary,
    hierarchical_ratio_bootstrap,
    lifetime_t_ratio,
)
from fasttrack.stats.logprobs import GreedyComparison, GreedySummary, compare_greedy, summarize_greedy, topk_kl
from fasttrack.stats.nested import LifetimeSamples, RunSamples, SideSamples, parse_statistic
from fasttrack.stats.power import MinimumDetectableEffect, mde_for_estimate, minimum_detectable_effect
from fasttrack.stats.proportions import (
    DiscordantPair,
    NonInferiorityGate,
    PairedDifference,
    PairedTable,
    ProportionInterval,
    discordant_pairs,
    non_inferiority_gate,
    paired_binary_difference,
    paired_bootstrap_difference,
    wilson_interval,
)
from fasttrack.stats.resources import ResourceNormalization, normalize_per_gpu, normalize_speedup_per_gpu
from fasttrack.stats.sampling import (
    AllowedTokens,
    ChiSquareBin,
    ChiSquareTest,
    MaskCheck,
    allowed_tokens,
    chi_square_sampling_test,
    mask_violations,
)
from fasttrack.stats.tails import MultiStatComparison, StatFigures, multi_stat_comparison
from fasttrack.stats.trend import TrendTest, paired_trend_test

__all__ = [
    "AllowedTokens",
    "ChiSquareBin",
    "ChiSquareTest",
    "Decision",
    "Direction",
    "DiscordantPair",
    "DriftCheck",
    "GreedyComparison",
    "GreedySummary",
    "LifetimeSamples",
    "MaskCheck",
    "MinimumDetectableEffect",
    "MultiStatComparison",
    "NonInferiorityGate",
    "OverallGate",
    "PairedDifference",
    "PairedTable",
    "PointGate",
    "ProportionInterval",
    "RatioEstimate",
    "ResourceNormalization",
    "RunSamples",
    "SequentialDecision",
    "SideSamples",
    "SideSummary",
    "StatFigures",
    "StatResult",
    "StatsInputError",
    "TrendTest",
    "allowed_tokens",
    "chi_square_sampling_test",
    "compare_greedy",
    "detect_drift",
    "discordant_pairs",
    "hierarchical_ratio_bootstrap",
    "lifetime_t_ratio",
    "mask_violations",
    "mde_for_estimate",
    "minimum_detectable_effect",
    "multi_stat_comparison",
    "no_regression_gate",
    "non_inferiority_gate",
    "normalize_per_gpu",
    "normalize_speedup_per_gpu",
    "overall_gate",
    "paired_binary_difference",
    "paired_bootstrap_difference",
    "paired_trend_test",
    "parse_statistic",
    "planned_looks",
    "ratio_interval",
    "sequential_decision",
    "summarize_greedy",
    "topk_kl",
    "wilson_interval",
]
