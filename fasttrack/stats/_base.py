"""Shared pieces of the statistics package: the result base model, input errors, helpers.

Every result is a pydantic model that serialises to JSON (``model_dump(mode="json")``)
and carries ``name`` (what statistic was computed), ``method`` (how) and, where a
confidence interval or a test level is involved, ``confidence`` or ``alpha``, next to
the raw numbers needed to re-check it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import stats as _sps

from fasttrack.errors import FasttrackError

Direction = Literal["lower_is_better", "higher_is_better"]
"""Which way a metric improves: latency (TPOT, ITL, TTFT) is lower-is-better,
throughput and interactivity are higher-is-better."""

SIDE_NAMES = ("baseline", "candidate")


class StatsInputError(FasttrackError):
    """Input to a statistic is malformed (empty, non-finite, inconsistent shapes...)."""


class StatResult(BaseModel):
    """Base of every statistics result."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, ser_json_inf_nan="null")

    name: str
    """The statistic, in words (e.g. 'ratio of median median_tpot_ms, candidate over baseline')."""
    method: str
    """How it was computed (e.g. 'hierarchical bootstrap (lifetimes, then runs), percentile interval')."""


def check_confidence(confidence: float, *, what: str = "confidence") -> float:
    """Return ``confidence`` as float after checking it lies strictly between 0 and 1."""
    c = float(confidence)
    if not (0.0 < c < 1.0) or math.isnan(c):
        raise StatsInputError(f"{what} must be strictly between 0 and 1, got {confidence!r}.")
    return c


def z_quantile(p: float) -> float:
    """Standard normal quantile Phi^-1(p)."""
    return float(_sps.norm.ppf(p))


def as_finite_array(values: Sequence[float] | np.ndarray, *, what: str, positive: bool = False) -> np.ndarray:
    """Convert to a 1-D float array, rejecting empty, non-finite or (optionally) non-positive values."""
    try:
        arr = np.asarray(values, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"{what} must be a sequence of numbers ({exc}).") from None
    if arr.size == 0:
        raise StatsInputError(f"{what} is empty: at least one value is needed.")
    if not np.all(np.isfinite(arr)):
        raise StatsInputError(
            f"{what} contains NaN or infinite values; drop failed measurements before computing statistics."
        )
    if positive and np.any(arr <= 0):
        raise StatsInputError(
            f"{what} contains values <= 0; ratio statistics need strictly positive measurements "
            "(a zero throughput or latency means the run failed and must be reported as such)."
        )
    return arr


def make_rng(seed: int) -> np.random.Generator:
    """The generator every resampling function uses: ``numpy.random.default_rng(seed)`` (PCG64)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise StatsInputError(f"seed must be an integer (it is recorded with the result), got {seed!r}.")
    if seed < 0:
        raise StatsInputError(f"seed must be non-negative, got {seed}.")
    return np.random.default_rng(int(seed))


def logprob_map(logprobs: Mapping[Hashable, float], what: str) -> dict[Hashable, float]:
    """``token -> logprob`` checked: every value a number, none NaN or above 0 (a rounding excess up to 1e-6 is
    clamped to 0; -inf is allowed)."""
    if not isinstance(logprobs, Mapping):
        raise StatsInputError(f"{what}: expected a mapping token -> logprob, got {type(logprobs).__name__}.")
    out: dict[Hashable, float] = {}
    for tok, lp in logprobs.items():
        try:
            v = float(lp)
        except (TypeError, ValueError):
            raise StatsInputError(f"{what}: logprob of token {tok!r} is not a number ({lp!r}).") from None
        if math.isnan(v) or v > 1e-6:
            raise StatsInputError(
                f"{what}: logprob of token {tok!r} is {v}; log-probabilities are <= 0 (-inf allowed)."
            )
        out[tok] = min(v, 0.0)
    return out
