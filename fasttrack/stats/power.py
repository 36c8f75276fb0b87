"""Minimum detectable effect (MDE) of a performance comparison, at a stated power.

Everything is on the log scale of the speedup, where the bootstrap distribution is
close to normal and symmetric. With ``SE`` = standard error of log(speedup) (taken
from the bootstrap replicates, ``RatioEstimate.log_speedup_se``), a test at level
``alpha`` (one-sided level ``alpha`` for ``sides=1``, ``alpha/2`` per side for
``sides=2``) detects a true log-effect ``delta`` with probability ``power`` when::

    |delta| >= MDE_log = (z_{1 - alpha_one_sided} + z_{power}) * SE

A slowdown is then reported as a fraction of the speedup: a true speedup of
``exp(-MDE_log)`` or lower (a slowdown of ``1 - exp(-MDE_log)`` or more) would have
been detected, i.e. the upper confidence bound of the speedup would have been below 1.

The no-regression gate asks a different question (is the lower bound at least
``1 - noise_margin``?). For it two more figures follow from the same normal model
of log(speedup):

* ``gate_detectable_slowdown``: the slowdown at which the gate fails with
  probability ``power``: a true speedup ``s`` with
  ``log s <= log(1 - m) + (z_{1 - alpha_one_sided} - z_{power}) * SE``. It is 0
  when the interval is so wide that even a candidate exactly as fast as the baseline
  fails that often (then ``gate_fail_probability_at_parity`` >= ``power``);
* ``gate_fail_probability_at_parity``: the probability that the gate fails a
  candidate that is exactly as fast as the baseline:
  ``Phi(z_{1 - alpha_one_sided} + log(1 - m) / SE)``. When this is large the gate
  cannot be passed on this host with this many lifetimes and runs, whatever the code.
"""

from __future__ import annotations

import math
from typing import Literal

from scipy import stats as _sps

from fasttrack.stats._base import StatResult, StatsInputError, check_confidence
from fasttrack.stats.hierarchical import RatioEstimate


class MinimumDetectableEffect(StatResult):
    """Smallest slowdown/speedup a comparison of this precision detects with the stated power."""

    power: float
    """Probability of detecting an effect of exactly the MDE."""
    alpha: float
    """Test level (total over both sides when sides == 2)."""
    sides: Literal[1, 2]
    """1: one-sided test at alpha; 2: two-sided test at alpha (alpha/2 per side)."""
    se_log: float
    """Standard error of log(speedup) the MDE is based on."""
    z_alpha: float
    """Quantile 1 - alpha_one_sided of the reference distribution (normal, or t with `dof`)."""
    z_power: float
    """Quantile `power` of the reference distribution."""
    dof: int | None = None
    """Degrees of freedom when t quantiles were used."""
    mde_log: float
    """(z_alpha + z_power) * se_log."""
    detectable_slowdown: float
    """1 - exp(-mde_log): a slowdown of this fraction or more would have been detected."""
    detectable_speedup: float
    """exp(mde_log) - 1: a speedup of this fraction or more would have been detected."""
    noise_margin: float | None = None
    """Noise margin of the no-regression gate, when given."""
    gate_detectable_slowdown: float | None = None
    """Slowdown (1 - speedup) at which the gate lower bound >= 1 - margin fails with probability `power`."""
    gate_fail_probability_at_parity: float | None = None
    """Normal-model probability that the gate fails when the true speedup is exactly 1."""


def minimum_detectable_effect(
    *,
    se_log: float,
    alpha: float = 0.05,
    sides: Literal[1, 2] = 2,
    power: float = 0.8,
    noise_margin: float | None = None,
    dof: int | None = None,
) -> MinimumDetectableEffect:
    """MDE on the log scale: ``(z_{1-alpha/sides} + z_{power}) * se_log``; see the module docstring.

    With ``dof`` (a t interval), Student-t quantiles with ``dof`` degrees of freedom
    replace the normal ones (an approximation to the noncentral-t power calculation).
    """
    if not (isinstance(se_log, (int, float)) and math.isfinite(se_log) and se_log >= 0):
        raise StatsInputError(f"se_log must be a finite number >= 0, got {se_log!r}.")
    check_confidence(alpha, what="alpha")
    check_confidence(power, what="power")
    if sides not in (1, 2):
        raise StatsInputError(f"sides must be 1 or 2, got {sides!r}.")
    a1 = alpha / sides
    if dof is not None:
        if isinstance(dof, bool) or not isinstance(dof, int) or dof < 1:
            raise StatsInputError(f"dof must be a positive integer or None, got {dof!r}.")
        dist = _sps.t(dof)
    else:
        dist = _sps.norm()
    za, zp = float(dist.ppf(1.0 - a1)), float(dist.ppf(power))
    mde = (za + zp) * float(se_log)
    gate_slow = gate_fail = None
    if noise_margin is not None:
        if not (0.0 <= noise_margin < 1.0):
            raise StatsInputError(f"noise_margin must be in [0, 1), got {noise_margin!r}.")
        log_thr = math.log1p(-noise_margin)
        # Negative would mean a candidate must be faster than the baseline to pass with
        # probability `power`: every slowdown, even none, fails that often, so 0.
        gate_slow = max(0.0, 1.0 - math.exp(log_thr + (za - zp) * se_log))
        if se_log > 0:
            gate_fail = float(dist.cdf(za + log_thr / se_log))
        else:
            gate_fail = 0.0 if noise_margin > 0 else 1.0
    return MinimumDetectableEffect(
        name=f"minimum detectable effect at {power:.0%} power",
        method=(
            f"{'normal' if dof is None else f't({dof})'} approximation on log(speedup): "
            f"MDE_log = (q_(1-{a1:g}) + q_({power:g})) * SE; SE = the estimate's standard error of log(speedup)"
        ),
        power=power,
        alpha=alpha,
        sides=sides,
        se_log=float(se_log),
        z_alpha=za,
        z_power=zp,
        mde_log=mde,
        detectable_slowdown=1.0 - math.exp(-mde),
        detectable_speedup=math.expm1(mde),
        dof=dof,
        noise_margin=noise_margin,
        gate_detectable_slowdown=gate_slow,
        gate_fail_probability_at_parity=gate_fail,
    )


def mde_for_estimate(
    estimate: RatioEstimate, *, power: float = 0.8, noise_margin: float | None = None
) -> MinimumDetectableEffect:
    """MDE matching the estimate's interval: two-sided at alpha = 1 - estimate.confidence.

    This is the level the no-regression gate uses (its lower bound is the lower end of
    the two-sided interval, i.e. a one-sided test at alpha/2).
    """
    conf = check_confidence(estimate.confidence)
    return minimum_detectable_effect(
        se_log=estimate.log_speedup_se,
        alpha=round(1.0 - conf, 12),
        sides=2,
        power=power,
        noise_margin=noise_margin,
        dof=estimate.dof,
    )
