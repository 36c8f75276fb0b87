"""``temperature_sampling``'s typed result (one side, one engine group) and its judgement, test by test: goodness
of fit per temperature (with the baseline's own samples as the control), the top-k / top-p masks, temperature 0 is
greedy. The probe is :mod:`fasttrack.checks.features.sampling`."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Hashable
from typing import Any

from pydantic import Field

from fasttrack import attrs
from fasttrack.checks.features.model import FeatureResult, Outcome
from fasttrack.checks.features.spec import Judged, OnGroup
from fasttrack.checks.outcome import clip
from fasttrack.errors import FasttrackError
from fasttrack.modelbase import DocModel
from fasttrack.results import Verdict
from fasttrack.stats import allowed_tokens, chi_square_sampling_test, mask_violations
from fasttrack.stats.sampling import ChiSquareTest


class SamplingReference(DocModel):
    """The baseline's next-token distribution at the sampled (decode) position."""

    first_token: int
    """The greedy first token the samples are conditioned on."""
    first_logprob: float
    second_position: dict[str, float]
    """Token id -> logprob at the second position (the top-20)."""
    second_greedy: int
    spread_ok: bool
    """Whether the second position is spread enough to test sampling (no token above 0.8, four above 0.02)."""
    first_token_text: str = ""


class MaskSamples(DocModel):
    name: str
    top_k: int | None = None
    top_p: float | None = None
    samples: list[int]


class MaskSkipped(DocModel):
    name: str
    why: str


class ZeroTemperature(DocModel):
    """Temperature 0 with seeds, top-k and top-p set: every variant's output."""

    point: str
    variants: list[dict[str, Any]]
    outputs: list[list[int]]


class SamplingResult(FeatureResult):
    point: str | None = None
    """The point the samples were drawn at."""
    wave: int | None = None
    """Choices per sampling request."""
    selection: str | None = None
    """Who chose the prompt: ``baseline`` (the candidate reuses the baseline's), or ``own``."""
    prompt_id: str | None = None
    prompt_text: str | None = None
    first_token: int | None = None
    own_first_token: int | None = None
    """The candidate's own greedy first token on the baseline's prompt."""
    reference: SamplingReference | None = None
    samples: dict[str, list[int]] = Field(default_factory=dict)
    """Temperature -> the sampled second tokens."""
    requests: dict[str, int] = Field(default_factory=dict)
    """Temperature -> requests it took."""
    masks: list[MaskSamples] = Field(default_factory=list)
    masks_skipped: list[MaskSkipped] = Field(default_factory=list)
    zero_temperature: ZeroTemperature | None = None


class SamplingJudging:
    """The temperature-sampling judgement of one engine group, test by test."""

    def __init__(self, *, on: OnGroup, base: SamplingResult, cand: SamplingResult, ref: SamplingReference) -> None:
        self.on, self.base, self.cand, self.ref = on, base, cand, ref
        self.alpha = on.ctx.scope.gates.features.sampling_alpha
        self.ref_lps: dict[Hashable, float] = {int(k): float(v) for k, v in ref.second_position.items()}
        self.j = Judged()
        self.bins: list[dict[str, Any]] = []
        self.context = (
            f"prompt {base.prompt_id} {clip((base.prompt_text or '')[-40:], 42)} + first token {ref.first_token} "
            f"({ref.first_token_text!r}, p={math.exp(ref.first_logprob):.3f})"
        )

    def row(self, **fields: Any) -> None:
        self.j.rows.append(
            {"feature": "temperature_sampling", "group": self.on.gid, "point": self.cand.point, **fields}
        )

    def goodness_of_fit(self, t_key: str) -> None:
        """The candidate's samples at one temperature against the reference (the baseline's own: the control)."""
        t = float(t_key)
        c_counts: Counter[Hashable] = Counter(int(x) for x in self.cand.samples[t_key])
        b_counts: Counter[Hashable] = Counter(int(x) for x in self.base.samples.get(t_key, []))
        try:
            test = chi_square_sampling_test(self.ref_lps, c_counts, temperature=t, alpha=self.alpha)
            control = (
                chi_square_sampling_test(self.ref_lps, b_counts, temperature=t, alpha=self.alpha) if b_counts else None
            )
        except FasttrackError as exc:
            self.j.verdicts.append(Verdict.NOT_RUN)
            self.row(temperature=t, verdict="not_run", detail=exc.message)
            return
        v, detail = self._fit_verdict(t, test, control)
        self.j.verdicts.append(v)
        self.row(
            test="goodness_of_fit",
            temperature=t,
            verdict=v.value,
            **attrs(test, "p_value", "statistic", "dof", "n_samples", "n_tested"),
            control_p_value=control.p_value if control else None,
            control_n=control.n_tested if control else None,
            alpha=self.alpha,
            requests=self.cand.requests.get(t_key),
            detail=detail,
        )
        self._bins(t, "candidate", test)
        if control is not None:
            self._bins(t, "baseline", control)
        if v is Verdict.FAIL:
            self.j.failures.append(
                f"{self.cand.point} (batch {self.cand.wave}), temperature sampling: {detail}; sampled position: 2nd "
                f"generated token after {self.context}"
            )

    def _fit_verdict(self, t: float, test: ChiSquareTest, control: ChiSquareTest | None) -> tuple[Verdict, str]:
        """Inconclusive when the baseline's own samples do not fit (the control), else whether the candidate's do."""
        ctl = f" (baseline control p={control.p_value:.3f})" if control else ""
        if control is not None and not control.consistent:
            return Verdict.NOT_RUN, (
                f"inconclusive: the baseline's own {control.n_tested} samples do not fit its logprobs "
                f"(p={control.p_value:.2e}); the test is not calibrated on this engine"
            )
        if not test.consistent:
            top = sorted(test.bins, key=lambda b: -b.expected)[:4]
            return Verdict.FAIL, (
                f"candidate samples at T={t:g} do not follow the baseline's distribution: chi-square "
                f"{test.statistic:.1f}, dof {test.dof}, p={test.p_value:.2e} < alpha {self.alpha:g} "
                f"over {test.n_tested} samples"
                + ctl
                + "; expected vs observed: "
                + ", ".join(f"{b.label} {b.expected:.0f}/{b.observed}" for b in top)
            )
        return Verdict.PASS, f"p={test.p_value:.3f} over {test.n_tested} samples" + ctl

    def _bins(self, t: float, side: str, test: ChiSquareTest) -> None:
        for bn in test.bins:
            self.bins.append(
                {
                    "group": self.on.gid,
                    "temperature": t,
                    "side": side,
                    "bin": bn.label,
                    "probability": bn.probability,
                    "expected": bn.expected,
                    "observed": bn.observed,
                }
            )

    def mask(self, mask: MaskSamples) -> None:
        """No sample outside the tokens a top-k / top-p mask allows at the reference position."""
        try:
            kwargs = {"top_k": mask.top_k} if mask.top_k else {"top_p": mask.top_p}
            allowed = allowed_tokens(self.ref_lps, temperature=1.0, **kwargs)
            counts: Counter[Hashable] = Counter(int(x) for x in mask.samples)
            mc = mask_violations(counts, allowed) if counts else None
        except FasttrackError as exc:
            self.j.verdicts.append(Verdict.NOT_RUN)
            self.row(test=mask.name, verdict="not_run", detail=exc.message)
            return
        if mc is None:
            self.j.verdicts.append(Verdict.NOT_RUN)
            return
        v = Verdict.PASS if mc.passed else Verdict.FAIL
        self.j.verdicts.append(v)
        self.row(
            test=mask.name,
            verdict=v.value,
            n_samples=mc.n_samples,
            violations=mc.n_violations,
            allowed=",".join(allowed.tokens),
            detail=json.dumps(mc.violations),
        )
        if not mc.passed:
            self.j.failures.append(
                f"{self.cand.point} (batch {self.cand.wave}), {mask.name}: {mc.n_violations} of {mc.n_samples} "
                f"samples outside the allowed tokens {allowed.tokens} (violations {mc.violations}) after {self.context}"
            )

    def zero_temperature(self) -> None:
        """Temperature 0 gives the greedy output whatever the seed, top-k and top-p."""
        z = self.cand.zero_temperature
        if not z:
            return
        same = all(seq == z.outputs[0] for seq in z.outputs)
        v = Verdict.PASS if same else Verdict.FAIL
        self.j.verdicts.append(v)
        bz = self.base.zero_temperature
        self.j.rows.append(
            {
                "feature": "temperature_sampling",
                "group": self.on.gid,
                "point": z.point,
                "test": "temperature_0_is_greedy",
                "verdict": v.value,
                "detail": json.dumps(z.outputs),
                "baseline_same": bz is not None and bool(bz.outputs) and bz.outputs[0] == z.outputs[0],
            }
        )
        if not same:
            self.j.failures.append(
                f"{z.point} (batch {len(z.outputs)}): temperature 0 is not greedy on the candidate: "
                f"outputs {z.variants} gave token ids {z.outputs}"
            )

    def outcome(self) -> Outcome:
        gof = [r for r in self.j.rows if r.get("test") == "goodness_of_fit"]
        reason = (
            "temperature sampling: "
            + ", ".join(f"T={r['temperature']:g} p={r['p_value']:.3g} (n={r['n_tested']})" for r in gof)
            if gof
            else "temperature sampling"
        )
        out = self.j.outcome("temperature_sampling", reason)
        out.extra_tables = {"sampling_bins": self.bins}
        return out
