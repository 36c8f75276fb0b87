"""The features check's evidence: one table of rows for every serving feature (each feature writes its own
figures into it), and the extra tables two features write (the sampling histogram, each structured-output
request).

A feature's row declares the fields every feature shares and the figures of the shipped features; a feature
from another package may add figures of its own (JSON scalars only). The candidate's rows (and the rows about
both sides) decide a feature; the baseline's rows show the stock path. Re-judging, per shipped feature, from a
row's figures and the judging scope's gates:

* ``structured_output``: a cell fails when the candidate's conformance is below ``min_json_conformance`` or the
  baseline's, and passes otherwise;
* ``temperature_sampling``: the goodness-of-fit row is inconclusive (not run) when the baseline's own samples do
  not fit, fails when the candidate's p-value is below ``sampling_alpha``, passes otherwise; a mask row fails with
  any violation;
* ``full_context`` and ``logprobs``: a row whose figures break the equivalence gate (the KL cap of full context,
  the absolute |Δ logprob| limit or, with ``reference``, the calibrated limits) fails; with ``reference``, a row
  without calibrated figures cannot pass, except a ``logprobs`` row of one side's own output (no comparison
  figures: whether its logprobs are well-formed), and ``logprobs`` passes only with a row comparing the sides;
* ``seeded_sampling``, ``stop_sequences``, ``max_tokens``, ``n_best``: a row passes only when its own figures show
  the behaviour (no differing seed; the text up to the stop string; exactly ``max_tokens`` tokens; ``n`` choices);
* every feature's rows carry an allowed verdict (``info`` rows are not judged). A pass that the check could not
  back with a profiled candidate window is recorded ``not_run``: that is allowed wherever a pass is.

The bound folds every feature of the tier over its deciding rows; a tier feature without one is not run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from fasttrack import registry
from fasttrack.evidence.base import Checker, CheckEvidence, Rejudged, Row, TableSpec, at_most, fold, headroom, worst
from fasttrack.evidence.calibration import CalibratedRow, calibrated_problems
from fasttrack.evidence.expect import RejudgeContext

CHECK = "features"

FeatureVerdict = Literal["pass", "fail", "not_run", "info"]
"""A feature row's verdict; ``info`` rows show a figure and decide nothing."""

_SCALARS = (str, int, float, bool, type(None))


class FeatureRow(CalibratedRow):
    """One row of one serving feature: where it ran, on which side, its verdict and its figures."""

    model_config = ConfigDict(extra="allow")
    KEY: ClassVar[tuple[str, ...]] = ("feature", "point", "side", "schema_", "test")

    feature: str
    group: str | None = None
    point: str | None = None
    batch: int | None = None
    side: Literal["baseline", "candidate", "both"] | None = None
    verdict: FeatureVerdict
    detail: str | None = None
    # structured_output
    schema_: str | None = Field(default=None, alias="schema")
    baseline_conforming: int | None = None
    baseline_n: int | None = None
    candidate_conforming: int | None = None
    candidate_n: int | None = None
    candidate_rate: float | None = None
    candidate_ci_low: float | None = None
    candidate_ci_high: float | None = None
    baseline_rate: float | None = None
    baseline_ci_low: float | None = None
    baseline_ci_high: float | None = None
    floor: float | None = None
    # temperature_sampling
    test: str | None = None
    temperature: float | None = None
    p_value: float | None = None
    statistic: float | None = None
    dof: int | None = None
    n_samples: int | None = None
    n_tested: int | None = None
    control_p_value: float | None = None
    control_n: int | None = None
    alpha: float | None = None
    requests: int | None = None
    violations: int | None = None
    allowed: str | None = None
    baseline_same: bool | None = None
    # full_context, logprobs
    context: int | None = None
    max_tokens: int | None = None
    n_close: int | None = None
    n_exact: int | None = None
    max_abs_logprob_diff: float | None = None
    kl_mean: float | None = None
    batch_verified: bool | None = None
    batch_evidence: str | None = None
    trace_decode_steps_at_batch: int | None = None
    positions: int | None = None
    # seeded_sampling, stop_sequences, max_tokens, n_best
    seeds: int | None = None
    differing_seeds: str | None = None
    stop: str | None = None
    text: str | None = None
    expected_text: str | None = None
    finish_reason: str | None = None
    stop_reason: str | None = None
    n_tokens: int | None = None
    usage: int | None = None
    n: int | None = None
    choices: int | None = None
    # speculative_acceptance
    baseline_acceptance_rate: float | None = None
    candidate_acceptance_rate: float | None = None
    configured_acceptance_length: float | None = None
    baseline_acceptance_length: float | None = None
    candidate_acceptance_length: float | None = None

    @model_validator(mode="after")
    def _scalar_extras(self) -> FeatureRow:
        for k, v in (self.model_extra or {}).items():
            if not isinstance(v, _SCALARS):
                raise ValueError(f"figure {k!r} of feature {self.feature!r} is a {type(v).__name__}, not a scalar")
        return self


class SamplingBinRow(Row):
    """One bin of the temperature-sampling histogram on one side: the expected and observed counts."""

    KEY: ClassVar[tuple[str, ...]] = ("group", "temperature", "side", "bin")

    group: str | None = None
    temperature: float | None = None
    side: str | None = None
    bin: str | None = None
    probability: float | None = None
    expected: float | None = None
    observed: int | None = None


class StructuredRequestRow(Row):
    """One structured-output request: the schema, the output and whether it conforms."""

    KEY: ClassVar[tuple[str, ...]] = ("side", "point", "schema_")

    group: str | None = None
    side: str | None = None
    point: str | None = None
    batch: int | None = None
    schema_: str | None = Field(default=None, alias="schema")
    batch_evidence: str | None = None
    prompt: str | None = None
    valid: bool | None = None
    why: str | None = None
    text: str | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None


Rule = Callable[[FeatureRow, RejudgeContext], tuple[set[str], str]]
ANY: set[str] = {"pass", "fail", "not_run"}
PASSING = {"pass", "not_run"}  # a pass the check could not back with a profiled window is recorded not_run


def _structured(r: FeatureRow, ctx: RejudgeContext) -> tuple[set[str], str]:
    kc, nc, kb, nb = r.candidate_conforming, r.candidate_n, r.baseline_conforming, r.baseline_n
    if None in (kc, nc, kb, nb) or not nc or not nb:
        return ({"not_run"}, "no conformance counts") if r.schema_ is not None else (ANY, "")
    assert kc is not None and nc is not None and kb is not None and nb is not None
    floor = ctx.scope.gates.features.min_json_conformance
    if kc / nc < floor or kc / nc < kb / nb:
        return {"fail"}, f"candidate conformance {kc}/{nc} below the floor {floor:g} or the baseline's {kb}/{nb}"
    return PASSING, f"candidate conformance {kc}/{nc}"


def _sampling(r: FeatureRow, ctx: RejudgeContext) -> tuple[set[str], str]:
    alpha = ctx.scope.gates.features.sampling_alpha
    if r.test == "goodness_of_fit" and r.p_value is not None:
        if r.control_p_value is not None and not r.control_p_value >= alpha:
            return {"not_run"}, f"the baseline's own samples do not fit (p={r.control_p_value:.3g} < {alpha:g})"
        if not r.p_value >= alpha:
            return {"fail"}, f"p={r.p_value:.3g} < alpha {alpha:g}"
        return PASSING, f"p={r.p_value:.3g} >= alpha {alpha:g}"
    if r.test and r.test.endswith("mask") and r.violations is not None:
        return ({"fail"}, f"{r.violations} violation(s)") if r.violations else (PASSING, "no violation")
    return ANY, ""


def _drift(r: FeatureRow, ctx: RejudgeContext, *, kl: bool) -> tuple[set[str], str]:
    """A greedy comparison's figures against the equivalence gate: the KL cap (``kl``), and the absolute
    |Δ logprob| limit or, with ``reference``, the calibrated limits (the close rule's outcome is not a figure of
    the row, so a row within them may still have failed it)."""
    eq = ctx.scope.gates.equivalence
    broken: list[str] = []
    uncalibrated: list[str] = []
    if kl and r.kl_mean is not None and not at_most(r.kl_mean, eq.max_kl):
        broken.append(f"mean KL {r.kl_mean} > {eq.max_kl:g}")
    if eq.reference is None:
        if r.max_abs_logprob_diff is not None and not at_most(r.max_abs_logprob_diff, eq.max_abs_logprob_diff):
            broken.append(f"max |Δ logprob| {r.max_abs_logprob_diff} > {eq.max_abs_logprob_diff:g}")
    elif r.side != "baseline":  # the baseline's own rows decide nothing and carry no calibration
        more, uncalibrated = calibrated_problems(r, eq.reference, eq.min_close_fraction)
        broken.extend(more)
    if broken:
        return {"fail"}, "; ".join(broken)
    if uncalibrated:
        return {"fail", "not_run"}, "not calibrated: " + "; ".join(uncalibrated)
    return ANY, ""


def _logprobs(r: FeatureRow, ctx: RejudgeContext) -> tuple[set[str], str]:
    """A ``logprobs`` row: one side's own logprobs (well-formed or not: a row without comparison figures) or the
    two sides compared (side ``both``), judged as :func:`_drift`. The feature passes only with a comparison row
    (:func:`rejudge`), so relabelling that row as one side's drops its pass."""
    if r.side in ("candidate", "baseline") and r.max_abs_logprob_diff is None and r.reference is None:
        return ANY, ""
    return _drift(r, ctx, kl=False)


COMPARED: tuple[str, ...] = ("logprobs",)
"""Features whose pass needs a row comparing the two sides (side ``both``): their per-side rows show each side's
own output only."""


def _shows(ok: bool | None, why: str) -> tuple[set[str], str]:
    """A row whose figures must show the behaviour for a pass (None: the figures are absent)."""
    if ok is None:
        return ANY, ""
    return (ANY, why) if ok else ({"fail", "not_run"}, f"not shown: {why}")


RULES: dict[str, Rule] = {
    "structured_output": _structured,
    "temperature_sampling": _sampling,
    "full_context": lambda r, ctx: _drift(r, ctx, kl=True),
    "logprobs": _logprobs,
    "seeded_sampling": lambda r, ctx: _shows(
        None if r.differing_seeds is None else r.differing_seeds == "", f"differing seeds {r.differing_seeds!r}"
    ),
    "stop_sequences": lambda r, ctx: _shows(
        None if r.expected_text is None else r.text == r.expected_text, "the text ends at the stop string"
    ),
    "max_tokens": lambda r, ctx: _shows(
        None if r.max_tokens is None or r.n_tokens is None else r.n_tokens == r.max_tokens == r.usage,
        f"{r.n_tokens} tokens for max_tokens={r.max_tokens}",
    ),
    "n_best": lambda r, ctx: _shows(
        None if r.n is None or r.choices is None else r.n == r.choices, f"{r.choices} choices for n={r.n}"
    ),
}


def rejudge(tables: Mapping[str, Sequence[Row]], gate: Any, ctx: RejudgeContext) -> Rejudged:
    c = Checker(CHECK)
    deciding: dict[str, list[str]] = {}
    compared: set[str] = set()
    for i, r in enumerate(tables.get("features", ())):
        assert isinstance(r, FeatureRow)
        if r.verdict == "info":
            continue
        rule = RULES.get(r.feature)
        allowed, why = rule(r, ctx) if rule is not None else (ANY, "")
        if r.verdict not in allowed:
            c.row(
                "features",
                i,
                r,
                f"recorded verdict {r.verdict!r}, the figures give {'/'.join(sorted(allowed))} ({why})",
            )
        if r.side != "baseline":
            deciding.setdefault(r.feature, []).append(r.verdict if r.verdict in allowed else worst(*allowed))
        if r.side == "both":
            compared.add(r.feature)
    for f in COMPARED:
        if f in deciding and f not in compared:
            c.gap("features", f"{f}: no row compares the two sides; one side's own rows cannot pass it")
            deciding[f].append("not_run")
    want = ctx.tier_features()
    missing = [f for f in want if f not in deciding]
    if missing:
        c.gap("features", f"no deciding row for {len(missing)} feature(s) of the tier: {', '.join(missing)}")
    bound = fold(fold(deciding.get(f, [])) for f in want) if want else fold(fold(v) for v in deciding.values())
    judged = sorted(f for f in deciding if f in RULES)
    return c.done(bound, [f"{len(deciding)} feature(s); figures re-judged for {', '.join(judged) or 'none'}"])


EVIDENCE = registry.register(
    "evidence",
    CHECK,
    CheckEvidence(
        check=CHECK,
        tables=(
            TableSpec(
                "features",
                FeatureRow,
                lambda ctx: headroom(ctx.n_points * (len(ctx.scope.features) + 1) * 16),
                version=2,  # v2: close fractions against the exact reference (v1 rows: candidate vs baseline)
                keep=tuple(FeatureRow.model_fields),
            ),
            TableSpec(
                "sampling_bins",
                SamplingBinRow,
                lambda ctx: headroom(ctx.n_groups * 2 * 16 * 256),
                required=False,
            ),
            TableSpec(
                "structured_output_requests",
                StructuredRequestRow,
                lambda ctx: headroom(ctx.n_points * ctx.max_batch * 64),
                required=False,
            ),
        ),
        rejudge=rejudge,
    ),
)
