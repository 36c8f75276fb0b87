"""``gates.equivalence.reference``: stock's own legitimate builds, run beside the baseline, that calibrate the
equivalence limits; and the work their engines add to a plan.

A **variant** is one more engine lifetime of the baseline side per engine group: the baseline's arguments with
the variant's appended (``--enforce-eager``: stock without torch.compile and CUDA graphs; ``--dtype float32``: stock
at a higher precision). The equivalence check and the ``full_context`` and ``logprobs`` features send it the same
requests as the baseline, and judge the candidate by how far stock's builds are from a reference
(:mod:`fasttrack.checks.equivalence.reference`): with an ``exact`` variant (float32) the reference is that
variant's output and stock's error is the largest distance of the baseline and the other variants from it;
without one (a model whose float32 copy does not fit) the reference is the baseline's output and stock's error is
the distance of the variants from it. A distance passes when the candidate's is at most ``multiple`` x stock's
+ ``tolerance`` (``multiple``² for the KL): PyTorch inductor's accuracy rule (compiled passes when its error
against an fp64 reference is at most 3x eager's in bfloat16, 2x in float32, plus ``tol / 10``).

:func:`variant_work` counts what the variants' lifetimes add to a plan: ``fasttrack.planning.cost`` prices it on
its own line, ``reference variants``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import Field, field_validator, model_validator

from fasttrack.scope.common import ScopeModel

#: A variant's name (it becomes part of engine log and artifact names).
VARIANT_NAME = r"^[a-z][a-z0-9_]{0,31}$"

DISTANCES: tuple[str, ...] = ("max_abs_logprob_diff", "mean_abs_logprob_diff", "kl_mean", "divergence")
"""The distances between two engines' greedy outputs the rule compares, in the order they are reported."""


class ReferenceTolerance(ScopeModel):
    """The absolute slack added to ``multiple`` x stock's distance, per distance: what the candidate may differ by
    where stock's builds agree to the last bit (inductor's ``tol / 10``). Each is far below what a numerics defect
    moves (docs/writing-a-scope.md gives the measured figures)."""

    max_abs_logprob_diff: float = Field(default=0.01, ge=0, le=100)
    """Largest |Δ logprob| of the chosen token on matching prefixes (0.01: the token's probability changes by 1%)."""
    mean_abs_logprob_diff: float = Field(default=0.002, ge=0, le=100)
    """Mean |Δ logprob| of the chosen token on matching prefixes."""
    kl_mean: float = Field(default=0.001, ge=0, le=100)
    """Mean top-k KL estimate (nats) over the positions with identical context."""
    divergence: float = Field(default=0.1, ge=0, le=1)
    """Share of the generated tokens that come after the first divergence (1 - mean matched-prefix fraction):
    0.1 lets one request in eight part at its middle where stock's builds never part."""


class StockReference(ScopeModel):
    """Stock's legitimate builds that calibrate the equivalence limits (see the module docstring)."""

    variants: dict[str, list[str]] = Field(min_length=1, max_length=8)
    """Variant name -> vLLM arguments appended to the baseline's, e.g. ``eager: ["--enforce-eager"]``,
    ``float32: ["--dtype", "float32"]``. Each is one more engine lifetime of the baseline per engine group."""
    exact: str | None = None
    """The variant that stands for the model's exact answer (a float32 build): the reference the distances are
    measured from. None: the baseline's output is the reference (a model whose float32 copy does not fit)."""
    multiple: float = Field(default=3.0, ge=1, le=100)
    """The candidate's distance may be at most this many times stock's, its square for the KL, which grows with the
    square of the logprob errors (inductor's multiplier for bfloat16; it uses 2 for float32 outputs of 1,000 values
    or more and 3 below)."""
    tolerance: ReferenceTolerance = Field(default_factory=ReferenceTolerance)

    @field_validator("variants")
    @classmethod
    def _variants(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, args in v.items():
            if not re.match(VARIANT_NAME, name):
                raise ValueError(
                    f"variant name {name!r} must be lower-case letters, digits and '_', starting with a letter "
                    "(at most 32 characters): it names the variant's engine log"
                )
            if not args or any(not isinstance(a, str) or not a.strip() for a in args):
                raise ValueError(
                    f"variant {name!r} needs the vLLM arguments it adds to the baseline's, none empty (got {args!r})"
                )
        return v

    @model_validator(mode="after")
    def _exact(self) -> StockReference:
        if self.exact is not None and self.exact not in self.variants:
            raise ValueError(
                f"exact names {self.exact!r}, which is not one of the variants ({', '.join(self.variants)})"
            )
        return self

    @property
    def stock_builds(self) -> list[str]:
        """The variants that are stock builds judged against the reference (every variant but ``exact``)."""
        return [n for n in self.variants if n != self.exact]

    @property
    def reference_name(self) -> str:
        """What the distances are measured from: the ``exact`` variant, else ``baseline``."""
        return self.exact or "baseline"


COST_LINE = "reference variants"
"""The plan's cost line of the variants' engine lifetimes (:mod:`fasttrack.planning.cost`)."""
EQUIVALENCE_REQUESTS = 8
"""Requests per point the equivalence check sends (whole rounds of the point's batch)."""
LOGPROBS_TOKENS = 8
"""Tokens of the ``logprobs`` feature's one request."""


class StepModel(Protocol):
    """The engine's speed, as :mod:`fasttrack.planning.cost` models it."""

    def decode(self, requests: int, batch: int, tokens: int) -> float: ...
    def prefill(self, tokens: float) -> float: ...


class Point(Protocol):
    @property
    def batch(self) -> int: ...
    @property
    def context(self) -> int: ...
    @property
    def full_context(self) -> bool: ...


class Group(Protocol):
    @property
    def synthetic_acceptance(self) -> bool: ...


def variant_lifetimes(scope: Any, tier: Any, group: Group) -> int:
    """How many reference variants' engine lifetimes one engine group of ``scope`` gets in ``tier`` (a
    :class:`~fasttrack.scope.Scope` and its :class:`~fasttrack.scope.TierSpec`, typed loosely as this module sits
    below them): every variant, once, unless the scope has no reference, the group has synthetic acceptance (its
    outputs are not compared), or the tier runs neither the equivalence check nor a feature the variants
    calibrate."""
    ref: StockReference | None = scope.gates.equivalence.reference
    if ref is None or group.synthetic_acceptance:
        return 0
    return len(ref.variants) if (_runs(tier, "equivalence") or _features(scope, tier)) else 0


def _runs(tier: Any, check: str) -> bool:
    return tier.checks is None or check in tier.checks


def _features(scope: Any, tier: Any) -> set[str]:
    """The features the tier checks whose judgement the variants calibrate."""
    if not _runs(tier, "features"):
        return set()
    return {f for f in scope.features if tier.features is None or f in tier.features} & {"full_context", "logprobs"}


def variant_work(
    scope: Any, tier: Any, group: Group, points: Sequence[Point], model: StepModel
) -> dict[str, Any] | None:
    """What the reference variants add to one engine group (:func:`variant_lifetimes`), as ``Cost.add`` takes it
    (``wall_s``, ``requests``, ``tokens``): every variant's engine lifetime, its start and stop, the equivalence
    check's rounds at every short-context point (no profiled probe: a variant needs no path evidence), and the
    ``full_context`` and ``logprobs`` features' requests. None when the group gets no variant."""
    k = variant_lifetimes(scope, tier, group)
    if not k:
        return None
    feats = _features(scope, tier)
    max_tokens = scope.gates.equivalence.max_tokens
    est = scope.estimates
    secs, reqs, toks = est.engine_start_s + est.engine_stop_s, 0, 0
    for p in points:
        if p.full_context and "full_context" in feats:
            secs += model.decode(p.batch, p.batch, max_tokens) + model.prefill(p.batch * p.context)
            reqs, toks = reqs + p.batch, toks + p.batch * max_tokens
        elif not p.full_context and _runs(tier, "equivalence"):
            n = math.ceil(EQUIVALENCE_REQUESTS / p.batch) * p.batch
            secs += model.decode(n, p.batch, max_tokens) + model.prefill(n * p.context)
            reqs, toks = reqs + n, toks + n * max_tokens
    if "logprobs" in feats:
        secs += model.decode(1, 1, LOGPROBS_TOKENS)
        reqs, toks = reqs + 1, toks + LOGPROBS_TOKENS
    return {"wall_s": k * secs, "requests": k * reqs, "tokens": k * toks}
