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

import json
import math
from collections import Counter
from collections.abc import Hashable
from typing import Any

from fasttrack.checks.context import RunContext
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import SAMPLING_TOP_LOGPROBS, FeatureError, Outcome, SideData, choice_ids, err
from fasttrack.checks.features.spec import FeatureTest, GroupPlan, Step
from fasttrack.checks.outcome import clip, fold_verdicts
from fasttrack.errors import FasttrackError
from fasttrack.inputs import PromptItem
from fasttrack.results import Verdict
from fasttrack.stats import allowed_tokens, chi_square_sampling_test, mask_violations

SAMPLING_SELECTION_PROMPTS = 16
"""Prompts of the set considered when choosing the sampling prompt."""
MASK_TOP_K = 3
MASK_TOP_P = 0.6
SEEDS = {"temperature": 1_000_000, "top_k_mask": 7_000_000, "top_p_mask": 8_000_000}
"""First seed of each sample series (temperature ``i`` of the gate starts at ``(i + 1) * SEEDS["temperature"]``)."""


def steps(gp: GroupPlan) -> list[Step]:
    """Sampling at the wave's batch size, then temperature 0 at the short batch size closest to 3."""
    if not gp.short_batches:
        return []
    wave, t0 = gp.at(gp.wave), gp.at(3)
    return [
        Step(point=gp.point(wave), batch=wave, run=lambda env: collect_sampling(env, wave)),
        Step(point=gp.point(t0), batch=t0, run=lambda env: collect_zero_temperature(env, t0)),
    ]


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


async def _choose_prompt(env: FeatureEnv, wave: int) -> dict[str, Any]:
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
    return {
        "prompt_id": it.id,
        "prompt_text": it.prompt,
        "first_token": int(p0.token_id),
        "first_logprob": float(p0.logprob),
        "second_position": {str(t.token_id): t.logprob for t in p1.top if t.token_id is not None},
        "second_greedy": int(p1.token_id),
        "spread_ok": ok,
    }


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


async def collect_sampling(env: FeatureEnv, wave: int) -> None:
    """Choose the prompt (or reuse the baseline's), then draw the samples at every temperature and the mask
    samples (top-k, top-p) at the decode position."""
    fg = env.ctx.scope.gates.features
    pid = env.point(wave)
    data = env.side.data.setdefault("temperature_sampling", {"points": []})
    data["points"].append(pid)
    data.update(point=pid, wave=wave, samples={}, requests={}, masks=[], masks_skipped=[])
    ref_data = (env.base.data.get("temperature_sampling") or {}) if env.base is not None else {}
    ref = ref_data.get("reference")
    if ref is not None:
        data["selection"] = "baseline"
        choice = ref
        own = await _greedy_two(env, [next(p for p in env.prompts if p.id == ref_data["prompt_id"])])
        if not isinstance(own[0], BaseException) and own[0].token_ids:
            data["own_first_token"] = int(own[0].token_ids[0])
    else:
        data["selection"] = "own" if env.session.side == "candidate" else "baseline"
        choice = await _choose_prompt(env, wave)
        choice["first_token_text"] = await env.tok.detokenize([choice["first_token"]])
    data["prompt_id"] = ref_data.get("prompt_id") if ref is not None else choice["prompt_id"]
    data["prompt_text"] = ref_data.get("prompt_text") if ref is not None else choice["prompt_text"]
    data["first_token"] = choice["first_token"]
    if env.session.side == "baseline" or ref is None:
        data["reference"] = {
            k: choice[k]
            for k in (
                "first_token",
                "first_logprob",
                "second_position",
                "second_greedy",
                "spread_ok",
                "first_token_text",
            )
        }
    p_first = math.exp(choice["first_logprob"])
    prompt = data["prompt_text"]
    first = choice["first_token"]
    for i, t in enumerate(fg.temperatures):
        need = fg.sampling_samples
        max_req = math.ceil(need / (wave * max(p_first, 0.1)) * 1.5) + 2
        seed0 = SEEDS["temperature"] * (i + 1)
        got, used = await _draw(
            env, prompt, first, need=need, wave=wave, temperature=t, seed0=seed0, max_requests=max_req
        )
        env.ctx.provenance.seed(f"features/temperature_sampling/T={t:g}", seed0)
        data["samples"][f"{t:g}"] = got
        data["requests"][f"{t:g}"] = used
    # masks (at T=1 on the same decode position)
    mask_need = env.mask_samples
    max_req = math.ceil(mask_need / (wave * max(p_first, 0.1)) * 1.5) + 2
    got, _ = await _draw(
        env,
        prompt,
        first,
        need=mask_need,
        wave=wave,
        temperature=1.0,
        seed0=SEEDS["top_k_mask"],
        max_requests=max_req,
        top_k=MASK_TOP_K,
    )
    env.ctx.provenance.seed("features/temperature_sampling/top_k_mask", SEEDS["top_k_mask"])
    data["masks"].append({"name": f"top_k={MASK_TOP_K} mask", "top_k": MASK_TOP_K, "samples": got})
    known = sum(math.exp(v) for v in choice["second_position"].values())
    if known >= MASK_TOP_P + 0.05:
        got, _ = await _draw(
            env,
            prompt,
            first,
            need=mask_need,
            wave=wave,
            temperature=1.0,
            seed0=SEEDS["top_p_mask"],
            max_requests=max_req,
            top_p=MASK_TOP_P,
        )
        env.ctx.provenance.seed("features/temperature_sampling/top_p_mask", SEEDS["top_p_mask"])
        data["masks"].append({"name": f"top_p={MASK_TOP_P:g} mask", "top_p": MASK_TOP_P, "samples": got})
    else:
        data["masks_skipped"].append(
            {
                "name": f"top_p={MASK_TOP_P:g} mask",
                "why": f"the top-{SAMPLING_TOP_LOGPROBS} logprobs carry only {known:.2f} of the "
                "mass, so the nucleus is not known",
            }
        )


async def collect_zero_temperature(env: FeatureEnv, batch: int) -> None:
    """Temperature 0 with seeds, top-k and top-p equals the greedy output (``batch`` variants at once)."""
    data = env.side.data.setdefault("temperature_sampling", {"points": []})
    pid = env.point(batch)
    data["points"].append(pid)
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
    data["zero_temperature"] = {"point": pid, "variants": variants, "outputs": outs}


def judge(ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
    fg = ctx.scope.gates.features
    bd, cd = base.data["temperature_sampling"], cand.data["temperature_sampling"]
    ref = bd.get("reference")
    rows, failures, verdicts, bins_rows = [], [], [], []
    pid = cd.get("point")
    if not ref:
        return Outcome(
            feature="temperature_sampling",
            verdict=Verdict.NOT_RUN,
            reason="the baseline produced no reference distribution",
        )
    if cd.get("prompt_id") != bd.get("prompt_id") or cd.get("first_token") != ref["first_token"]:
        return Outcome(
            feature="temperature_sampling",
            verdict=Verdict.NOT_RUN,
            reason=(
                f"the candidate sampled prompt {cd.get('prompt_id')} after token {cd.get('first_token')}, "
                f"the baseline's reference is prompt {bd.get('prompt_id')} after token {ref['first_token']}"
            ),
        )
    ref_lps: dict[Hashable, float] = {int(k): float(v) for k, v in ref["second_position"].items()}
    context = (
        f"prompt {bd['prompt_id']} {clip(bd['prompt_text'][-40:], 42)} + first token {ref['first_token']} "
        f"({ref['first_token_text']!r}, p={math.exp(ref['first_logprob']):.3f})"
    )
    for t_key, c_samples in sorted(cd["samples"].items()):
        t = float(t_key)
        b_samples = bd["samples"].get(t_key, [])
        c_counts: Counter[Hashable] = Counter(int(x) for x in c_samples)
        b_counts: Counter[Hashable] = Counter(int(x) for x in b_samples)
        try:
            test = chi_square_sampling_test(ref_lps, c_counts, temperature=t, alpha=fg.sampling_alpha)
            control = (
                chi_square_sampling_test(ref_lps, b_counts, temperature=t, alpha=fg.sampling_alpha)
                if b_counts
                else None
            )
        except FasttrackError as exc:
            verdicts.append(Verdict.NOT_RUN)
            rows.append(
                {
                    "feature": "temperature_sampling",
                    "group": gid,
                    "point": pid,
                    "temperature": t,
                    "verdict": "not_run",
                    "detail": exc.message,
                }
            )
            continue
        if control is not None and not control.consistent:
            v = Verdict.NOT_RUN
            detail = (
                f"inconclusive: the baseline's own {control.n_tested} samples do not fit its logprobs "
                f"(p={control.p_value:.2e}); the test is not calibrated on this engine"
            )
        elif not test.consistent:
            v = Verdict.FAIL
            top = sorted(test.bins, key=lambda b: -b.expected)[:4]
            detail = (
                f"candidate samples at T={t:g} do not follow the baseline's distribution: chi-square "
                f"{test.statistic:.1f}, dof {test.dof}, p={test.p_value:.2e} < alpha {fg.sampling_alpha:g} "
                f"over {test.n_tested} samples"
                + (f" (baseline control p={control.p_value:.3f})" if control else "")
                + "; expected vs observed: "
                + ", ".join(f"{b.label} {b.expected:.0f}/{b.observed}" for b in top)
            )
        else:
            v = Verdict.PASS
            detail = f"p={test.p_value:.3f} over {test.n_tested} samples" + (
                f" (baseline control p={control.p_value:.3f})" if control else ""
            )
        verdicts.append(v)
        rows.append(
            {
                "feature": "temperature_sampling",
                "group": gid,
                "point": pid,
                "test": "goodness_of_fit",
                "temperature": t,
                "verdict": v.value,
                "p_value": test.p_value,
                "statistic": test.statistic,
                "dof": test.dof,
                "n_samples": test.n_samples,
                "n_tested": test.n_tested,
                "control_p_value": control.p_value if control else None,
                "control_n": control.n_tested if control else None,
                "alpha": fg.sampling_alpha,
                "requests": cd["requests"].get(t_key),
                "detail": detail,
            }
        )
        for bn in test.bins:
            bins_rows.append(
                {
                    "group": gid,
                    "temperature": t,
                    "side": "candidate",
                    "bin": bn.label,
                    "probability": bn.probability,
                    "expected": bn.expected,
                    "observed": bn.observed,
                }
            )
        if control is not None:
            for bn in control.bins:
                bins_rows.append(
                    {
                        "group": gid,
                        "temperature": t,
                        "side": "baseline",
                        "bin": bn.label,
                        "probability": bn.probability,
                        "expected": bn.expected,
                        "observed": bn.observed,
                    }
                )
        if v is Verdict.FAIL:
            failures.append(
                f"{pid} (batch {cd['wave']}), temperature sampling: {detail}; sampled position: 2nd "
                f"generated token after {context}"
            )
    # masks
    for mask in cd.get("masks", []):
        try:
            kwargs = {"top_k": mask["top_k"]} if mask.get("top_k") else {"top_p": mask["top_p"]}
            allowed = allowed_tokens(ref_lps, temperature=1.0, **kwargs)
            counts: Counter[Hashable] = Counter(int(x) for x in mask["samples"])
            mc = mask_violations(counts, allowed) if counts else None
        except FasttrackError as exc:
            verdicts.append(Verdict.NOT_RUN)
            rows.append(
                {
                    "feature": "temperature_sampling",
                    "group": gid,
                    "point": pid,
                    "test": mask["name"],
                    "verdict": "not_run",
                    "detail": exc.message,
                }
            )
            continue
        if mc is None:
            verdicts.append(Verdict.NOT_RUN)
            continue
        v = Verdict.PASS if mc.passed else Verdict.FAIL
        verdicts.append(v)
        rows.append(
            {
                "feature": "temperature_sampling",
                "group": gid,
                "point": pid,
                "test": mask["name"],
                "verdict": v.value,
                "n_samples": mc.n_samples,
                "violations": mc.n_violations,
                "allowed": ",".join(allowed.tokens),
                "detail": json.dumps(mc.violations),
            }
        )
        if not mc.passed:
            failures.append(
                f"{pid} (batch {cd['wave']}), {mask['name']}: {mc.n_violations} of {mc.n_samples} samples "
                f"outside the allowed tokens {allowed.tokens} (violations {mc.violations}) after {context}"
            )
    for m in cd.get("masks_skipped", []):
        rows.append(
            {
                "feature": "temperature_sampling",
                "group": gid,
                "point": pid,
                "test": m["name"],
                "verdict": "not_run",
                "detail": m["why"],
            }
        )
    # temperature 0 equals greedy
    z = cd.get("zero_temperature")
    if z:
        same = all(seq == z["outputs"][0] for seq in z["outputs"])
        v = Verdict.PASS if same else Verdict.FAIL
        verdicts.append(v)
        bz = bd.get("zero_temperature") or {}
        rows.append(
            {
                "feature": "temperature_sampling",
                "group": gid,
                "point": z["point"],
                "test": "temperature_0_is_greedy",
                "verdict": v.value,
                "detail": json.dumps(z["outputs"]),
                "baseline_same": bool(bz) and bz.get("outputs", [None])[0] == z["outputs"][0],
            }
        )
        if not same:
            failures.append(
                f"{z['point']} (batch {len(z['outputs'])}): temperature 0 is not greedy on the candidate: "
                f"outputs {z['variants']} gave token ids {z['outputs']}"
            )
    v = fold_verdicts(verdicts)
    gof = [r for r in rows if r.get("test") == "goodness_of_fit"]
    reason = (
        "temperature sampling: "
        + ", ".join(f"T={r['temperature']:g} p={r['p_value']:.3g} (n={r['n_tested']})" for r in gof)
        if gof
        else "temperature sampling"
    )
    return Outcome(
        feature="temperature_sampling",
        verdict=v,
        reason=reason,
        rows=rows,
        failures=failures,
        extra_tables={"sampling_bins": bins_rows},
    )


FEATURE = FeatureTest(name="temperature_sampling", steps=steps, judge=judge)
