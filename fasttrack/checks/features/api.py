"""API behaviour on the optimized path: seeds, stop strings, ``max_tokens``, ``n``, returned logprobs.

``seeded_sampling``
The same seeded requests twice, in opposite order within the batch: each seed
gives the same output.
``stop_sequences``
A stop string taken from the baseline's greedy output: both sides stop where
their own greedy output contains it, with ``finish_reason == 'stop'``.
``max_tokens``
Requests with different ``max_tokens`` in one batch each produce exactly that many
tokens (``finish_reason == 'length'``, usage agrees).
``n_best``
``n > 1`` with a seed returns ``n`` complete choices, reproducibly.
``logprobs``
Returned logprobs are well-formed (top-k present, sorted, <= 0, greedy token is
the argmax) and agree across sides within ``max_abs_logprob_diff``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

from fasttrack.checks.context import RunContext
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import FeatureError, Outcome, SideData, choice_ids, err, tops
from fasttrack.checks.features.spec import FeatureTest, GroupPlan, Step
from fasttrack.checks.outcome import clip, fold_verdicts
from fasttrack.inputs import TokenizerClient
from fasttrack.results import Verdict
from fasttrack.stats import compare_greedy

SEEDED_SAMPLING_SEED = 4242
"""Seed of the first seeded request (request ``i`` uses ``SEEDED_SAMPLING_SEED + i``)."""
N_BEST_SEED = 99


def _at(want: int, collect: Callable[[FeatureEnv, int], Awaitable[None]]) -> Callable[[GroupPlan], list[Step]]:
    """Steps: one, at the short batch size closest to ``want``."""

    def steps(gp: GroupPlan) -> list[Step]:
        if not gp.short_batches:
            return []
        b = gp.at(want)
        return [Step(point=gp.point(b), batch=b, run=lambda env: collect(env, b))]

    return steps


async def collect_seeded(env: FeatureEnv, batch: int) -> None:
    pid = env.point(batch)
    seeds = [SEEDED_SAMPLING_SEED + i for i in range(max(batch, 1))]
    env.ctx.provenance.seed("features/seeded_sampling", SEEDED_SAMPLING_SEED)
    prompts = [env.prompts[(i * 5) % len(env.prompts)].prompt for i in range(len(seeds))]

    async def run(order: list[int]) -> dict[str, list[int]]:
        res = await env.gather(
            [
                env.client.complete(prompts[i], max_tokens=12, temperature=1.0, seed=seeds[i], ignore_eos=True)
                for i in order
            ]
        )
        out = {}
        for i, r in zip(order, res, strict=False):
            if isinstance(r, BaseException):
                raise FeatureError(f"a seeded request failed: {err(r)}")
            out[str(seeds[i])] = list(r.token_ids or [])
        return out

    idx = list(range(len(seeds)))
    first = await run(idx)
    second = await run(idx[::-1])
    env.side.data["seeded_sampling"] = {
        "point": pid,
        "points": [pid],
        "seeds": seeds,
        "first": first,
        "second": second,
    }


async def collect_stop(env: FeatureEnv, batch: int) -> None:
    pid = env.point(batch)
    prompt = env.prompts[3].prompt
    g = await env.client.complete(prompt, max_tokens=16, temperature=0.0, ignore_eos=True)
    ids = list(g.token_ids or [])
    base = (env.base.data.get("stop_sequences") if env.base is not None else None) or {}
    stop = base.get("stop")
    if stop is None:
        stop = await pick_stop(env.tok, ids, g.text)
    r = await env.client.complete(prompt, max_tokens=16, temperature=0.0, ignore_eos=True, stop=[stop])
    env.side.data["stop_sequences"] = {
        "point": pid,
        "points": [pid],
        "stop": stop,
        "greedy_text": g.text,
        "text": r.text,
        "finish_reason": r.finish_reason,
        "stop_reason": r.choice.stop_reason,
    }


async def collect_max_tokens(env: FeatureEnv, batch: int) -> None:
    pid = env.point(batch)
    limits = [(3, 7, 11)[i % 3] + 4 * (i // 3) for i in range(max(batch, 1))]
    prompts = [env.prompts[(i * 3 + 1) % len(env.prompts)].prompt for i in range(len(limits))]
    res = await env.gather(
        [
            env.client.complete(p, max_tokens=m, temperature=0.0, ignore_eos=True)
            for p, m in zip(prompts, limits, strict=False)
        ]
    )
    reqs = []
    for m, r in zip(limits, res, strict=False):
        if isinstance(r, BaseException):
            reqs.append({"max_tokens": m, "n_tokens": -1, "usage": -1, "finish_reason": f"error: {err(r)}"})
        else:
            reqs.append(
                {
                    "max_tokens": m,
                    "n_tokens": len(r.token_ids or []),
                    "usage": r.usage.completion_tokens if r.usage else -1,
                    "finish_reason": r.finish_reason,
                }
            )
    env.side.data["max_tokens"] = {"point": pid, "points": [pid], "requests": reqs}


async def collect_n_best(env: FeatureEnv, batch: int) -> None:
    pid = env.point(batch)
    n, mt, t = max(batch, 2), 8, 0.8
    prompt = env.prompts[7].prompt
    env.ctx.provenance.seed("features/n_best", N_BEST_SEED)
    outs = []
    for _ in range(2):
        r = await env.client.complete(prompt, max_tokens=mt, temperature=t, seed=N_BEST_SEED, n=n, ignore_eos=True)
        outs.append([choice_ids(c) for c in r.choices])
    env.side.data["n_best"] = {
        "point": pid,
        "points": [pid],
        "n": n,
        "max_tokens": mt,
        "temperature": t,
        "first": outs[0],
        "second": outs[1],
    }


async def collect_logprobs(env: FeatureEnv, batch: int) -> None:
    eq = env.ctx.scope.gates.equivalence
    pid = env.point(batch)
    prompt = env.prompts[11].prompt
    r = await env.client.complete(
        prompt, max_tokens=8, temperature=0.0, logprobs=eq.top_k, tokens_as_ids=True, ignore_eos=True
    )
    pos = r.logprobs or []
    env.side.data["logprobs"] = {
        "point": pid,
        "points": [pid],
        "token_ids": list(r.token_ids or []),
        "logprobs": [p.logprob for p in pos],
        "top": [[(t.token_id, t.logprob) for t in p.top if t.token_id is not None] for p in pos],
    }


async def pick_stop(tok: TokenizerClient, ids: list[int], text: str) -> str:
    """A stop string from a greedy output: two tokens of its text whose first occurrence starts at that token."""
    for k in range(3, max(3, len(ids) - 2)):
        s = await tok.detokenize(ids[k : k + 2])
        prefix = await tok.detokenize(ids[:k])
        if s.strip() and text.find(s) == len(prefix) and text.startswith(prefix):
            return s
    for k in range(1, len(ids)):
        s = await tok.detokenize(ids[k : k + 1])
        if s.strip():
            return s
    return text[len(text) // 2 :] or "."


def judge_seeded(ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
    rows, failures, verdicts = [], [], []
    for who, sd in (("baseline", base), ("candidate", cand)):
        d = sd.data["seeded_sampling"]
        diff = [s for s in d["seeds"] if d["first"][str(s)] != d["second"][str(s)]]
        v = Verdict.FAIL if diff else Verdict.PASS
        if who == "candidate":
            verdicts.append(v)
        rows.append(
            {
                "feature": "seeded_sampling",
                "group": gid,
                "side": who,
                "point": d["point"],
                "verdict": v.value,
                "seeds": len(d["seeds"]),
                "differing_seeds": ",".join(map(str, diff)),
            }
        )
        if diff and who == "candidate":
            s = diff[0]
            failures.append(
                f"{d['point']} (batch {len(d['seeds'])}): seed {s} gave different outputs in two batches "
                f"(token ids {d['first'][str(s)]} then {d['second'][str(s)]})"
            )
    bd, cd = base.data["seeded_sampling"], cand.data["seeded_sampling"]
    same = sum(bd["first"].get(str(s)) == cd["first"].get(str(s)) for s in cd["seeds"])
    rows.append(
        {
            "feature": "seeded_sampling",
            "group": gid,
            "side": "both",
            "point": cd["point"],
            "verdict": "info",
            "detail": f"{same} of {len(cd['seeds'])} seeds gave the same output on both sides",
        }
    )
    return Outcome(
        feature="seeded_sampling",
        verdict=fold_verdicts(verdicts),
        reason=(
            f"seeded sampling: same seed, same output on the candidate ({same}/{len(cd['seeds'])} equal across sides)"
        ),
        rows=rows,
        failures=failures,
    )


def judge_stop(ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
    rows, failures, verdicts = [], [], []
    for who, sd in (("baseline", base), ("candidate", cand)):
        d = sd.data["stop_sequences"]
        stop = d["stop"]
        full = d["greedy_text"]
        if stop in full:
            exp_text, exp_reason = full[: full.index(stop)], "stop"
        else:
            exp_text, exp_reason = full, "length"
        ok = (
            d["text"] == exp_text
            and d["finish_reason"] == exp_reason
            and (exp_reason != "stop" or d["stop_reason"] == stop)
        )
        v = Verdict.PASS if ok else Verdict.FAIL
        if who == "candidate":
            verdicts.append(v)
        rows.append(
            {
                "feature": "stop_sequences",
                "group": gid,
                "side": who,
                "point": d["point"],
                "verdict": v.value,
                "stop": stop,
                "text": d["text"],
                "expected_text": exp_text,
                "finish_reason": d["finish_reason"],
                "stop_reason": str(d["stop_reason"]),
            }
        )
        if not ok and who == "candidate":
            failures.append(
                f"{d['point']} (batch 1): stop string {stop!r}: expected {clip(exp_text, 60)} with "
                f"finish_reason {exp_reason!r}, got {clip(d['text'], 60)} with {d['finish_reason']!r} "
                f"(stop_reason {d['stop_reason']!r})"
            )
    return Outcome(
        feature="stop_sequences",
        verdict=fold_verdicts(verdicts),
        reason="stop sequences end generation at the stop string",
        rows=rows,
        failures=failures,
    )


def judge_max_tokens(ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
    rows, failures, verdicts = [], [], []
    for who, sd in (("baseline", base), ("candidate", cand)):
        d = sd.data["max_tokens"]
        for r in d["requests"]:
            ok = r["n_tokens"] == r["max_tokens"] and r["usage"] == r["max_tokens"] and r["finish_reason"] == "length"
            v = Verdict.PASS if ok else Verdict.FAIL
            if who == "candidate":
                verdicts.append(v)
            rows.append(
                {
                    "feature": "max_tokens",
                    "group": gid,
                    "side": who,
                    "point": d["point"],
                    "verdict": v.value,
                    "max_tokens": r["max_tokens"],
                    "n_tokens": r["n_tokens"],
                    "usage": r["usage"],
                    "finish_reason": r["finish_reason"],
                }
            )
            if not ok and who == "candidate":
                failures.append(
                    f"{d['point']} (batch {len(d['requests'])}): max_tokens={r['max_tokens']} produced "
                    f"{r['n_tokens']} tokens (usage {r['usage']}, finish_reason {r['finish_reason']!r})"
                )
    return Outcome(
        feature="max_tokens",
        verdict=fold_verdicts(verdicts),
        reason="max_tokens bounds generation exactly",
        rows=rows,
        failures=failures,
    )


def judge_n_best(ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
    rows, failures, verdicts = [], [], []
    for who, sd in (("baseline", base), ("candidate", cand)):
        d = sd.data["n_best"]
        problems = []
        if len(d["first"]) != d["n"]:
            problems.append(f"{len(d['first'])} choices returned for n={d['n']}")
        if any(len(c) != d["max_tokens"] for c in d["first"]):
            problems.append(f"choice lengths {[len(c) for c in d['first']]} (expected {d['max_tokens']} each)")
        if d["first"] != d["second"]:
            problems.append("the same seeded request returned different choices the second time")
        if len({tuple(c) for c in d["first"]}) == 1 and d["n"] > 1 and d["temperature"] > 0:
            problems.append("all choices are identical (n > 1 at temperature > 0 should vary)")
        v = Verdict.FAIL if problems else Verdict.PASS
        if who == "candidate":
            verdicts.append(v)
        rows.append(
            {
                "feature": "n_best",
                "group": gid,
                "side": who,
                "point": d["point"],
                "verdict": v.value,
                "n": d["n"],
                "choices": len(d["first"]),
                "detail": "; ".join(problems),
            }
        )
        if problems and who == "candidate":
            failures.append(f"{d['point']} (batch {d['n']}): n={d['n']}: " + "; ".join(problems))
    return Outcome(
        feature="n_best",
        verdict=fold_verdicts(verdicts),
        reason="n > 1 returns n reproducible choices",
        rows=rows,
        failures=failures,
    )


def judge_logprobs(ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
    eq = ctx.scope.gates.equivalence
    rows, failures, verdicts = [], [], []
    for who, sd in (("baseline", base), ("candidate", cand)):
        d = sd.data["logprobs"]
        problems = logprob_problems(d, eq.top_k)
        v = Verdict.FAIL if problems else Verdict.PASS
        if who == "candidate":
            verdicts.append(v)
        rows.append(
            {
                "feature": "logprobs",
                "group": gid,
                "side": who,
                "point": d["point"],
                "verdict": v.value,
                "positions": len(d["token_ids"]),
                "detail": "; ".join(problems),
            }
        )
        if problems and who == "candidate":
            failures.append(f"{d['point']} (batch 1): returned logprobs are malformed: " + "; ".join(problems[:3]))
    bd, cd = base.data["logprobs"], cand.data["logprobs"]
    if failures or logprob_problems(bd, eq.top_k):
        return Outcome(
            feature="logprobs",
            verdict=fold_verdicts(verdicts) if failures else Verdict.NOT_RUN,
            reason="returned logprobs are malformed" if failures else "the baseline's logprobs are malformed",
            rows=rows,
            failures=failures,
        )
    comp = compare_greedy(bd["token_ids"], cd["token_ids"], tops(bd), tops(cd), top_k=eq.top_k)
    ok = comp.close and (comp.max_abs_logprob_diff is None or comp.max_abs_logprob_diff <= eq.max_abs_logprob_diff)
    verdicts.append(Verdict.PASS if ok else Verdict.FAIL)
    rows.append(
        {
            "feature": "logprobs",
            "group": gid,
            "side": "both",
            "point": cd["point"],
            "verdict": "pass" if ok else "fail",
            "max_abs_logprob_diff": comp.max_abs_logprob_diff,
            "detail": comp.close_reason,
        }
    )
    if not ok:
        failures.append(
            f"{cd['point']} (batch 1): returned logprobs differ across sides: {comp.close_reason}; "
            f"max |Δ logprob| {comp.max_abs_logprob_diff} (limit {eq.max_abs_logprob_diff:g})"
        )
    return Outcome(
        feature="logprobs",
        verdict=fold_verdicts(verdicts),
        reason="returned logprobs are well-formed and agree across sides",
        rows=rows,
        failures=failures,
    )


def logprob_problems(d: dict[str, Any], top_k: int) -> list[str]:
    problems = []
    if len(d["top"]) != len(d["token_ids"]):
        problems.append(f"{len(d['top'])} logprob positions for {len(d['token_ids'])} tokens")
    for i, pos in enumerate(d["top"]):
        lps = [lp for _, lp in pos]
        if len(pos) < top_k:
            problems.append(f"position {i}: {len(pos)} alternatives for logprobs={top_k}")
        if any(lp > 1e-6 for lp in lps):
            problems.append(f"position {i}: a logprob is positive")
        if sum(math.exp(lp) for lp in lps) > 1 + 1e-3:
            problems.append(f"position {i}: top-k probabilities sum above 1")
        if pos and i < len(d["token_ids"]):
            best = max(pos, key=lambda x: x[1])
            chosen_lp = d["logprobs"][i]
            if chosen_lp is not None and best[1] - chosen_lp > 1e-4:
                problems.append(
                    f"position {i}: greedy token {d['token_ids'][i]} (logprob {chosen_lp:.4f}) is not the "
                    f"argmax {best[0]} ({best[1]:.4f})"
                )
    return problems


FEATURES = [
    FeatureTest(name="seeded_sampling", steps=_at(4, collect_seeded), judge=judge_seeded),
    FeatureTest(name="stop_sequences", steps=_at(1, collect_stop), judge=judge_stop),
    FeatureTest(name="max_tokens", steps=_at(3, collect_max_tokens), judge=judge_max_tokens),
    FeatureTest(name="n_best", steps=_at(3, collect_n_best), judge=judge_n_best),
    FeatureTest(name="logprobs", steps=_at(1, collect_logprobs), judge=judge_logprobs),
]
