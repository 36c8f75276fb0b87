"""The calibrated equivalence rule: the candidate's distance from a reference, against stock's own builds'.

The scope's ``gates.equivalence.reference`` (:class:`~fasttrack.scope.reference.StockReference`) names stock
variants of the baseline that run in the same validate run on the same requests (one more engine lifetime each,
:mod:`fasttrack.pipeline.variants`). At one config point:

* the **reference** R is the ``exact`` variant's outputs (float32), or the baseline's when there is none;
* **stock's error** is the largest distance from R over stock's legitimate builds: the baseline and every other
  variant with an ``exact`` one, the variants alone without (then it is the variants' distance from the baseline);
* the **candidate's error** is its distance from R;
* each distance passes when candidate <= ``multiple`` x stock + ``tolerance``; for the KL, ``multiple``² x stock +
  ``tolerance``: a KL grows with the square of the logprob errors behind it (about half their probability-weighted
  mean square), so a candidate whose logprobs err 3x as much as stock's has about 9x stock's KL.

A distance is measured over the requests every engine answered (the same requests for stock and the candidate),
each compared with R's output of the same request (:func:`fasttrack.stats.compare_greedy`, R in the baseline's
place): max and mean |Δ logprob| of the chosen token on the matching prefix, the mean top-k KL(R || engine) over
the positions with identical context, and the divergence (1 - the mean matched-prefix fraction).

vLLM's ``check_logprobs_close`` rule stays a hard gate (``min_close_fraction``). With an ``exact`` variant it is
applied where vLLM's own tests apply it, between the reference implementation's output and the build under test:
each of the candidate's requests against R's output of the same request (stock's builds' fractions are recorded
beside it). Between two bfloat16 builds the rule's top-k test breaks on near-ties that no build is nearer the exact
answer for: where R is the baseline (no ``exact`` variant) it is the candidate against the baseline, as before.

A distance whose figure could not be measured for the candidate (no matching prefix with logprobs) is reported and
not judged on its own (the divergence then shows it); one that stock's builds could not give while the candidate
could leaves the point not judged, as does a variant without outputs at the point.

Checks that measure the variants implement :class:`VariantCollector`: the pipeline starts each variant's engine
once per engine group and hands it to them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fasttrack.scope.reference import DISTANCES, StockReference
from fasttrack.stats import compare_greedy, summarize_greedy
from fasttrack.stats.logprobs import GreedySummary, TopLogprobs

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.checks.context import EngineSession, RunContext
    from fasttrack.planning.plan import EngineGroup
    from fasttrack.scope.gates import EquivalenceGate

LABELS: dict[str, str] = {
    "max_abs_logprob_diff": "max |Δ logprob|",
    "mean_abs_logprob_diff": "mean |Δ logprob|",
    "kl_mean": "mean top-k KL",
    "divergence": "divergence",
}
"""How the report names each distance."""

Output = tuple[Sequence[int], Sequence[TopLogprobs | None]]
"""One request's greedy output: its token ids and the top-k logprobs per position."""
Outputs = Mapping[Hashable, Output]
"""One engine's outputs at one point, by request (the same key on every engine)."""


class VariantCollector(ABC):
    """Capability of an engine check that measures the scope's reference variants (``gates.equivalence.reference``):
    after an engine group's lifetimes, the pipeline starts each variant's engine once and hands it to every check
    that wants it."""

    @abstractmethod
    def wants_variant(self, ctx: RunContext, group: EngineGroup) -> bool:
        """Whether ``collect_variant`` has work on ``group``'s variants."""

    @abstractmethod
    async def collect_variant(self, ctx: RunContext, session: EngineSession, variant: str) -> None:
        """Send the variant's engine (``session``, side ``baseline``) the baseline's requests; keep its outputs."""

    @abstractmethod
    def variant_missing(self, ctx: RunContext, group: EngineGroup, variant: str, reason: str) -> None:
        """The variant produced no outputs on ``group`` (it did not start, crashed, or could not be started)."""


@dataclass
class Distance:
    """One distance at one point: the candidate's, stock's largest (and which build), the limit, the outcome."""

    name: str
    candidate: float | None
    stock: float | None
    stock_by: str | None
    builds: dict[str, float | None]
    """Every stock build's figure."""
    limit: float | None
    ok: bool | None
    """None: not judged (a figure was not measured)."""

    def text(self, spec: StockReference) -> str:
        """``max |Δ logprob| candidate 0.31 vs stock eager 0.22 (limit 3 x 0.22 + 0.01 = 0.67)``."""
        label = LABELS[self.name]
        tol = getattr(spec.tolerance, self.name)
        others = [f"{b} {_num(v)}" for b, v in self.builds.items() if b != self.stock_by]
        stock = f"stock {self.stock_by} {_num(self.stock)}" if self.stock_by else "stock n/a"
        if others:
            stock += f" ({', '.join(others)})"
        if self.limit is None:
            return f"{label} candidate {_num(self.candidate)} vs {stock} (not judged)"
        verdict = "" if self.ok else " EXCEEDED"
        factor = f"{spec.multiple:g}²" if self.name == "kl_mean" else f"{spec.multiple:g}"
        return (
            f"{label} candidate {_num(self.candidate)} vs {stock} "
            f"(limit {factor} x {_num(self.stock)} + {tol:g} = {_num(self.limit)}){verdict}"
        )


@dataclass
class Calibration:
    """The calibrated judgement of one point: each distance, and what failed or could not be judged."""

    spec: StockReference
    distances: list[Distance] = field(default_factory=list)
    requests: int = 0
    """Requests every engine answered (the distances are over these)."""
    missing: list[str] = field(default_factory=list)
    """Why the point could not be judged (a variant without outputs, a figure stock's builds could not give)."""
    close: dict[str, float | None] = field(default_factory=dict)
    """The close rule's fraction against the reference: the candidate's (key ``candidate``) and each stock
    build's (their keys); measured with an ``exact`` variant only."""
    min_close_fraction: float | None = None
    """The gate's ``min_close_fraction`` when the close rule is judged against the reference (else None)."""

    @property
    def judges_close(self) -> bool:
        """Whether the close rule is judged here, against the exact reference (then not candidate vs baseline)."""
        return self.min_close_fraction is not None and self.close.get("candidate") is not None

    @property
    def problems(self) -> list[str]:
        """Each distance the candidate exceeds, in words (from the reference), and the close rule broken against
        the exact reference."""
        ref = self.spec.reference_name
        out = [f"{d.text(self.spec)} (distances from {ref})" for d in self.distances if d.ok is False]
        frac = self.close.get("candidate")
        if self.judges_close and frac is not None and self.min_close_fraction is not None:
            if frac < self.min_close_fraction:
                out.append(
                    f"{round((1 - frac) * self.requests)} of {self.requests} requests break vLLM's "
                    f"check_logprobs_close rule against {ref} (close fraction {frac:.2f} < "
                    f"{self.min_close_fraction:g}; {self._close_text()})"
                )
        return out

    def _close_text(self) -> str:
        stock = [f"{b} {_num(v)}" for b, v in self.close.items() if b != "candidate"]
        return "stock's builds: " + ", ".join(stock)

    def text(self) -> str:
        """Every distance in one line, for the report's row."""
        if not self.distances:
            return "not judged: " + "; ".join(self.missing)
        head = f"from {self.spec.reference_name}, {self.requests} requests: "
        parts = [d.text(self.spec) for d in self.distances]
        if self.judges_close:
            parts.append(f"close fraction candidate {_num(self.close.get('candidate'))} ({self._close_text()})")
        return head + "; ".join(parts)

    def row(self) -> dict[str, Any]:
        """The flat row fields: the reference, and per distance the candidate's, stock's, who set it, the limit."""
        out: dict[str, Any] = {
            "reference": self.spec.reference_name,
            "stock_builds": ", ".join(stock_builds(self.spec)),
            "reference_multiple": self.spec.multiple,
            "reference_requests": self.requests,
        }
        by = {d.name: d for d in self.distances}
        for name in DISTANCES:
            d = by.get(name)
            out[f"candidate_{name}_vs_reference"] = d.candidate if d else None
            out[f"stock_{name}_vs_reference"] = d.stock if d else None
            out[f"stock_{name}_by"] = d.stock_by if d else None
            out[f"limit_{name}"] = d.limit if d else None
        stock = {b: v for b, v in self.close.items() if b != "candidate" and v is not None}
        low = min(stock, key=lambda b: stock[b]) if stock else None
        out["candidate_close_fraction_vs_reference"] = self.close.get("candidate")
        out["stock_close_fraction_vs_reference"] = stock[low] if low is not None else None
        out["stock_close_fraction_by"] = low
        return out


def stock_builds(spec: StockReference) -> list[str]:
    """Stock's legitimate builds judged against the reference: the baseline and the other variants with an exact
    variant; the variants alone without one (the baseline is then the reference)."""
    return (["baseline"] if spec.exact else []) + spec.stock_builds


def calibrate(
    spec: StockReference,
    top_k: int,
    *,
    baseline: Outputs,
    candidate: Outputs,
    variants: Mapping[str, Outputs | str],
    min_close_fraction: float | None = None,
) -> Calibration:
    """Judge the candidate's outputs at one point against stock's builds (see the module docstring).
    ``variants``: each variant's outputs, or why it has none; ``min_close_fraction``: the gate's close rule, judged
    here against the reference when the scope names an ``exact`` variant."""
    cal = Calibration(spec)
    engines: dict[str, Outputs] = {"baseline": baseline}
    for name in spec.variants:
        got = variants.get(name, f"the {name} variant produced no outputs")
        if isinstance(got, str):
            cal.missing.append(f"reference variant {name}: {got}")
        else:
            engines[name] = got
    if cal.missing:
        return cal
    keys = [k for k in candidate if all(k in e for e in engines.values())]
    if not keys:
        cal.missing.append("no request was answered by the candidate and every stock build")
        return cal
    cal.requests = len(keys)
    ref = engines[spec.reference_name]
    cand = _distance(ref, candidate, keys, top_k)
    stock = {b: _distance(ref, engines[b], keys, top_k) for b in stock_builds(spec)}
    for name in DISTANCES:
        cal.distances.append(_judge_distance(spec, name, cand, stock, cal.missing))
    if spec.exact is not None and min_close_fraction is not None:
        cal.min_close_fraction = min_close_fraction
        cal.close = {"candidate": cand.close_fraction, **{b: s.close_fraction for b, s in stock.items()}}
    return cal


def calibrate_by_gate(
    gate: EquivalenceGate, *, baseline: Outputs, candidate: Outputs, variants: Mapping[str, Outputs | str]
) -> Calibration:
    """:func:`calibrate` with the settings of ``gates.equivalence`` (its ``reference``, ``top_k`` and
    ``min_close_fraction``); the gate must have a ``reference``."""
    assert gate.reference is not None
    return calibrate(
        gate.reference,
        gate.top_k,
        baseline=baseline,
        candidate=candidate,
        variants=variants,
        min_close_fraction=gate.min_close_fraction,
    )


def _distance(ref: Outputs, other: Outputs, keys: list[Hashable], top_k: int) -> GreedySummary:
    comps = [compare_greedy(ref[k][0], other[k][0], ref[k][1], other[k][1], top_k=top_k) for k in keys]
    return summarize_greedy(comps)


def _judge_distance(
    spec: StockReference, name: str, cand: GreedySummary, stock: dict[str, GreedySummary], missing: list[str]
) -> Distance:
    builds: dict[str, float | None] = {b: getattr(s, name) for b, s in stock.items()}
    measured = {b: v for b, v in builds.items() if v is not None}
    c = getattr(cand, name)
    by = max(measured, key=lambda b: measured[b]) if measured else None
    s = measured[by] if by is not None else None
    if c is None:
        return Distance(name, None, s, by, builds, None, None)
    if s is None:
        missing.append(
            f"stock's builds give no {LABELS[name]} from {spec.reference_name} (no matching prefix with logprobs), "
            "so the candidate's cannot be calibrated"
        )
        return Distance(name, c, None, None, builds, None, None)
    limit = multiple_for(spec, name) * s + getattr(spec.tolerance, name)
    return Distance(name, c, s, by, builds, limit, c <= limit)


def multiple_for(spec: StockReference, name: str) -> float:
    """The factor on stock's figure of distance ``name``: ``multiple``, squared for the KL (see the module
    docstring)."""
    return spec.multiple**2 if name == "kl_mean" else spec.multiple


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"
