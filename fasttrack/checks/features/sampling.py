"""``temperature_sampling``: the candidate samples a decode step from the baseline's distribution.

The sampled position is a **decode step**: the second generated token. A prompt
is chosen on the baseline (among the first prompts of the set, the one whose
greedy first token is most probable while the second position stays spread);
the reference is the baseline's top-20 logprobs at the second position, given
that first token. Candidate samples: ``max_tokens=2``, temperature T, ``n``
choices per request (a decode batch of ``n`` inside the optimized range) with
distinct seeds; only samples whose first token equals the reference's first
token are kept (rejection keeps the conditioning exact). The first token comes
from the prefill (stock path), the sampled one from a decode step; the ``n``
children reach the engine one after another, so the first of them may take its
2nd token in a mixed step (measured: 27 of 32 sampled tokens in decode-only steps
on the demo target), which dilutes but does not hide a decode-path sampling bug. Pearson chi-square
goodness of fit with pooled bins (``fasttrack.stats.chi_square_sampling_test``)
at ``sampling_alpha``; the same test on the baseline's own samples is the control
(if the control fails, the test is inconclusive: not run). Also: temperature 0
equals greedy (with seeds, top-k and top-p set), and top-k / top-p masks are
never violated (``allowed_tokens`` from the reference).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import (
    SAMPLING_TOP_LOGPROBS,
    FeatureError,
    FeatureResult,
    Outcome,
    choice_ids,
    err,
)
from fasttrack.checks.features.sampling_result import (
    MaskSamples,
    MaskSkipped,
    SamplingJudging,
    SamplingReference,
    SamplingResult,
    ZeroTemperature,
)
from fasttrack.checks.features.spec import GroupPlan, OnGroup, ServingFeature, Step, serving_feature
from fasttrack.inputs import PromptItem
from fasttrack.results import Verdict

SAMPLING_SELECTION_PROMPTS = 16
"""Prompts of the set considered when choosing the sampling prompt."""
MASK_TOP_K = 3
MASK_TOP_P = 0.6
SEEDS = {"temperature": 1_000_000, "top_k_mask": 7_000_000, "top_p_mask": 8_000_000}
"""First seed of each sample series (temperature ``i`` of the gate starts at ``(i + 1) * SEEDS["temperature"]``)."""


@serving_feature
class TemperatureSampling(ServingFeature[SamplingResult]):
    name: ClassVar[str] = "temperature_sampling"
    decode_steps: ClassVar[int] = 2500
    result_model: ClassVar[type[FeatureResult]] = SamplingResult

    def steps(self, gp: GroupPlan) -> list[Step]:
        """Sampling at the wave's batch size, then temperature 0 at the short batch size closest to 3."""
        if not gp.short_batches:
            return []
        wave, t0 = gp.at(gp.wave), gp.at(3)
        return [
            Step(point=gp.point(wave), batch=wave, run=lambda env: self.collect_sampling(env, wave)),
            Step(point=gp.point(t0), batch=t0, run=lambda env: self.collect_zero_temperature(env, t0)),
        ]

    async def collect_sampling(self, env: FeatureEnv, wave: int) -> None:
        """Choose the prompt (or reuse the baseline's), then draw the samples at every temperature and the mask
        samples (top-k, top-p) at the decode position."""
        pid = env.point(wave)
        data = self.mine(env)
        data.points.append(pid)
        data.point, data.wave = pid, wave
        data.samples, data.requests, data.masks, data.masks_skipped = {}, {}, [], []
        ref = await self._reference(env, data, wave)
        assert data.prompt_text is not None  # set with the reference
        p_first = math.exp(ref.first_logprob)
        for i, t in enumerate(env.ctx.scope.gates.features.temperatures):
            await _samples_at(env, data, ref, t, seed0=SEEDS["temperature"] * (i + 1), wave=wave, p_first=p_first)
        await _mask_samples(env, data, ref, wave=wave, p_first=p_first)

    async def _reference(self, env: FeatureEnv, data: SamplingResult, wave: int) -> SamplingReference:
        """The prompt and reference distribution: the baseline's (the candidate reuses them, noting its own first
        token), or chosen here."""
        theirs = self.baseline(env)
        if theirs is not None and theirs.reference is not None:
            data.selection = "baseline"
            own = await _greedy_two(env, [next(p for p in env.prompts if p.id == theirs.prompt_id)])
            if not isinstance(own[0], BaseException) and own[0].token_ids:
                data.own_first_token = int(own[0].token_ids[0])
            data.prompt_id, data.prompt_text = theirs.prompt_id, theirs.prompt_text
            data.first_token = theirs.reference.first_token
            return theirs.reference
        data.selection = "own" if env.session.side == "candidate" else "baseline"
        item, ref = await _choose_prompt(env, wave)
        ref.first_token_text = await env.tok.detokenize([ref.first_token])
        data.prompt_id, data.prompt_text, data.first_token = item.id, item.prompt, ref.first_token
        data.reference = ref
        return ref

    async def collect_zero_temperature(self, env: FeatureEnv, batch: int) -> None:
        """Temperature 0 with seeds, top-k and top-p equals the greedy output (``batch`` variants at once)."""
        data = self.mine(env)
        pid = env.point(batch)
        data.points.append(pid)
        prompt = env.prompts[2].prompt
        variants: list[dict[str, Any]] = [{}, {"seed": 11}, {"seed": 12, "top_p": 0.5, "top_k": 3}]
        variants = (variants * batch)[: max(batch, 1)]
        for i, v in enumerate(variants):
            if i >= 3:
                v = dict(v, seed=100 + i)
                variants[i] = v
        res = await env.gather(
            [env.client.complete(prompt, max_tokens=8, temperature=0.0, ignore_eos=True, **v) for v in variants]
        )
        outs = []
        for r in res:
            if isinstance(r, BaseException):
                raise FeatureError(f"a temperature-0 request failed: {err(r)}")
            outs.append(list(r.token_ids or []))
        data.zero_temperature = ZeroTemperature(point=pid, variants=variants, outputs=outs)

    def judge(self, on: OnGroup, base: SamplingResult, cand: SamplingResult) -> Outcome:
        ref = base.reference
        if not ref:
            return Outcome(
                feature=self.name, verdict=Verdict.NOT_RUN, reason="the baseline produced no reference distribution"
            )
        if cand.prompt_id != base.prompt_id or cand.first_token != ref.first_token:
            return Outcome(
                feature=self.name,
                verdict=Verdict.NOT_RUN,
                reason=(
                    f"the candidate sampled prompt {cand.prompt_id} after token {cand.first_token}, "
                    f"the baseline's reference is prompt {base.prompt_id} after token {ref.first_token}"
                ),
            )
        judging = SamplingJudging(on=on, base=base, cand=cand, ref=ref)
        for t_key in sorted(cand.samples):
            judging.goodness_of_fit(t_key)
        for mask in cand.masks:
            judging.mask(mask)
        for m in cand.masks_skipped:
            judging.row(test=m.name, verdict="not_run", detail=m.why)
        judging.zero_temperature()
        return judging.outcome()


async def _greedy_two(env: FeatureEnv, items: list[PromptItem]) -> list[Any]:
    return await env.gather(
        [
            env.client.complete(
                it.prompt,
                max_tokens=2,
                temperature=0.0,
                logprobs=SAMPLING_TOP_LOGPROBS,
                tokens_as_ids=True,
                ignore_eos=True,
            )
            for it in items
        ]
    )


async def _choose_prompt(env: FeatureEnv, wave: int) -> tuple[PromptItem, SamplingReference]:
    """Pick the sampling prompt: the most probable greedy first token, with a spread second position."""
    cands = env.prompts[:SAMPLING_SELECTION_PROMPTS]
    scored = []
    for i in range(0, len(cands), max(1, wave)):
        chunk = cands[i : i + max(1, wave)]
        for it, r in zip(chunk, await _greedy_two(env, chunk), strict=False):
            if isinstance(r, BaseException) or len(r.logprobs or []) < 2:
                continue
            p0, p1 = r.logprobs[0], r.logprobs[1]
            second = {t.token_id: t.logprob for t in p1.top if t.token_id is not None}
            probs = sorted((math.exp(v) for v in second.values()), reverse=True)
            p_first = math.exp(p0.logprob or -1e9)
            spread_ok = bool(probs) and probs[0] <= 0.8 and sum(1 for q in probs if q >= 0.02) >= 4
            scored.append((spread_ok, p_first, it, r))
    if not scored:
        raise FeatureError("no sampling prompt produced two tokens with logprobs")
    scored.sort(key=lambda s: (s[0], s[1]), reverse=True)
    ok, p_first, it, r = scored[0]
    p0, p1 = r.logprobs[0], r.logprobs[1]
    return it, SamplingReference(
        first_token=int(p0.token_id),
        first_logprob=float(p0.logprob),
        second_position={str(t.token_id): t.logprob for t in p1.top if t.token_id is not None},
        second_greedy=int(p1.token_id),
        spread_ok=ok,
    )


async def _draw(
    env: FeatureEnv,
    prompt: str,
    first: int,
    *,
    need: int,
    wave: int,
    temperature: float,
    seed0: int,
    max_requests: int,
    **mask: Any,
) -> tuple[list[int], int]:
    """Sample the 2nd token (given the 1st equals ``first``) until ``need`` samples or ``max_requests``.

    Request ``k`` asks for ``wave`` choices with seeds ``seed0 + k*wave ...`` (vLLM gives child ``i`` the
    seed ``seed + i``), so every sample has its own seed."""
    out: list[int] = []
    k = 0
    while len(out) < need and k < max_requests:
        r = await env.client.complete(
            prompt, max_tokens=2, temperature=temperature, seed=seed0 + k * wave, n=wave, ignore_eos=True, **mask
        )
        k += 1
        for ch in r.choices:
            ids = choice_ids(ch)
            if len(ids) >= 2 and ids[0] == first:
                out.append(int(ids[1]))
    return out[:need], k


def _max_requests(need: int, wave: int, p_first: float) -> int:
    """Requests allowed for ``need`` samples of the second token: 1.5 times the expected number (a request
    gives ``wave`` choices, a ``p_first`` share of which start with the first token), plus two."""
    return math.ceil(need / (wave * max(p_first, 0.1)) * 1.5) + 2


async def _samples_at(
    env: FeatureEnv, data: SamplingResult, ref: SamplingReference, t: float, *, seed0: int, wave: int, p_first: float
) -> None:
    """``sampling_samples`` samples of the decode position at temperature ``t``."""
    need = env.ctx.scope.gates.features.sampling_samples
    max_req = _max_requests(need, wave, p_first)
    assert data.prompt_text is not None
    got, used = await _draw(
        env, data.prompt_text, ref.first_token, need=need, wave=wave, temperature=t, seed0=seed0, max_requests=max_req
    )
    env.ctx.provenance.seed(f"features/temperature_sampling/T={t:g}", seed0)
    data.samples[f"{t:g}"] = got
    data.requests[f"{t:g}"] = used


async def _masked(
    env: FeatureEnv, data: SamplingResult, ref: SamplingReference, *, wave: int, p_first: float, **mask: Any
) -> None:
    """``mask_samples`` samples at T=1 under one mask (``top_k=`` or ``top_p=``), kept as a :class:`MaskSamples`."""
    ((key, value),) = mask.items()
    seed0 = SEEDS[f"{key}_mask"]
    assert data.prompt_text is not None
    got, _ = await _draw(
        env,
        data.prompt_text,
        ref.first_token,
        need=env.mask_samples,
        wave=wave,
        temperature=1.0,
        seed0=seed0,
        max_requests=_max_requests(env.mask_samples, wave, p_first),
        **mask,
    )
    env.ctx.provenance.seed(f"features/temperature_sampling/{key}_mask", seed0)
    data.masks.append(MaskSamples(name=f"{key}={value:g} mask", samples=got, **mask))


async def _mask_samples(
    env: FeatureEnv, data: SamplingResult, ref: SamplingReference, *, wave: int, p_first: float
) -> None:
    """Samples under a top-k mask and, where the known logprobs carry the nucleus, a top-p mask (at T=1)."""
    await _masked(env, data, ref, wave=wave, p_first=p_first, top_k=MASK_TOP_K)
    known = sum(math.exp(v) for v in ref.second_position.values())
    if known < MASK_TOP_P + 0.05:
        data.masks_skipped.append(
            MaskSkipped(
                name=f"top_p={MASK_TOP_P:g} mask",
                why=f"the top-{SAMPLING_TOP_LOGPROBS} logprobs carry only {known:.2f} of the "
                "mass, so the nucleus is not known",
            )
        )
        return
    await _masked(env, data, ref, wave=wave, p_first=p_first, top_p=MASK_TOP_P)
