"""``structured_output``: every JSON schema via ``response_format``, at every batch size.

Every schema under ``suites/common/schemas`` via ``response_format`` (json_schema), greedy,
``batch`` requests at once at every batch size of the plan; every output is parsed and
validated with ``jsonschema``. Per schema and batch size the candidate's conformance must
reach ``min_json_conformance`` and must not be below the baseline's (Wilson 95% intervals
reported).
"""

from __future__ import annotations

import json
from typing import Any

from fasttrack.checks.batching import run_batched
from fasttrack.checks.context import RunContext
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import Outcome, SideData, err
from fasttrack.checks.features.spec import FeatureTest, GroupPlan, Step
from fasttrack.checks.outcome import clip, fold_verdicts
from fasttrack.inputs import load_schema_cases
from fasttrack.results import Verdict
from fasttrack.stats import wilson_interval


def steps(gp: GroupPlan) -> list[Step]:
    """Every selected short batch size, in one step at the smallest one's point."""
    batches = gp.selected_short_batches
    if not batches:
        return []
    return [Step(point=gp.point(batches[0]), batch=batches[0], run=lambda env: collect(env, batches))]


async def collect(env: FeatureEnv, batches: list[int]) -> None:
    """Every schema at every batch size (``b`` requests at once, greedy)."""
    from jsonschema import Draft202012Validator

    cases = load_schema_cases()
    data = env.side.data.setdefault("structured_output", {"records": [], "points": []})
    pids = {b: env.point(b) for b in batches}
    data["points"].extend(pids.values())

    async def round_(case: Any, batch: int) -> None:
        prompts = [case.prompts[(i + batch) % len(case.prompts)] for i in range(batch)]
        rf = {"type": "json_schema", "json_schema": {"name": case.name, "schema": case.schema_, "strict": True}}
        res, bc = await run_batched(
            lambda: [env.structured_request(p, rf) for p in prompts], client=env.client, target=batch, attempts=1
        )
        validator = Draft202012Validator(case.schema_)
        for p, r in zip(prompts, res, strict=False):
            rec = {
                "point": pids[batch],
                "batch": batch,
                "schema": case.name,
                "prompt": p,
                "batch_verified": bc.verified,
                "batch_evidence": bc.detail,
            }
            if isinstance(r, BaseException):
                rec.update(
                    text="", finish_reason=None, completion_tokens=0, valid=False, why=f"request failed: {err(r)}"
                )
            else:
                rec.update(
                    text=r.text,
                    finish_reason=r.finish_reason,
                    completion_tokens=len(r.token_ids or []) or (r.usage.completion_tokens if r.usage else 0),
                )
                rec.update(validate_json(r.text, validator, r.finish_reason))
            rec["endpoint"] = "chat" if env.chat_ok else "completion"
            data["records"].append(rec)

    for case in cases:
        for b in batches:
            await round_(case, b)


def validate_json(text: str, validator: Any, finish_reason: str | None) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        trunc = " (the output was cut off by max_tokens)" if finish_reason == "length" else ""
        return {"valid": False, "why": f"not valid JSON: {exc}{trunc}"}
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(map(str, e.absolute_path)) or "(root)"
        return {"valid": False, "why": f"violates the schema at {where}: {e.message}"}
    return {"valid": True, "why": ""}


def judge(ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
    floor = ctx.scope.gates.features.min_json_conformance
    b_recs = base.data["structured_output"]["records"]
    c_recs = cand.data["structured_output"]["records"]
    cells: dict[tuple[str, int, str], dict[str, list[dict[str, Any]]]] = {}
    for who, recs in (("baseline", b_recs), ("candidate", c_recs)):
        for r in recs:
            cells.setdefault((r["point"], r["batch"], r["schema"]), {"baseline": [], "candidate": []})[who].append(r)
    rows, failures, verdicts, req_rows = [], [], [], []
    for (pid, b, schema), d in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        nb, nc = len(d["baseline"]), len(d["candidate"])
        kb = sum(r["valid"] for r in d["baseline"])
        kc = sum(r["valid"] for r in d["candidate"])
        if nc == 0:
            continue  # the candidate did not run this batch size (only cells both sides ran are compared)
        if nb == 0:
            verdicts.append(Verdict.NOT_RUN)
            continue
        ci_c = wilson_interval(kc, nc)
        ci_b = wilson_interval(kb, nb)
        problems = []
        if kc / nc < floor:
            problems.append(f"candidate conformance {kc}/{nc} = {kc / nc:.2f} is below the floor {floor:g}")
        if kc / nc < kb / nb:
            problems.append(f"candidate conformance {kc}/{nc} is worse than the baseline's {kb}/{nb}")
        v = Verdict.FAIL if problems else Verdict.PASS
        verdicts.append(v)
        rows.append(
            {
                "feature": "structured_output",
                "group": gid,
                "point": pid,
                "batch": b,
                "schema": schema,
                "verdict": v.value,
                "baseline_conforming": kb,
                "baseline_n": nb,
                "candidate_conforming": kc,
                "candidate_n": nc,
                "candidate_rate": kc / nc,
                "candidate_ci_low": ci_c.ci_low,
                "candidate_ci_high": ci_c.ci_high,
                "baseline_rate": kb / nb,
                "baseline_ci_low": ci_b.ci_low,
                "baseline_ci_high": ci_b.ci_high,
                "floor": floor,
            }
        )
        if problems:
            bad = next((r for r in d["candidate"] if not r["valid"]), None)
            ev = ""
            if bad is not None:
                ev = (
                    f"; e.g. prompt {clip(bad['prompt'], 60)} -> output {clip(bad['text'], 90)} "
                    f"(finish_reason {bad['finish_reason']}, {bad['completion_tokens']} tokens): {bad['why']}"
                )
            base_note = "" if kb / nb >= floor else f" (the baseline also misses the floor: {kb}/{nb})"
            failures.append(
                f"{pid} (batch {b}), schema {schema}: "
                + "; ".join(problems)
                + f" [Wilson 95% candidate {ci_c.ci_low:.2f}-{ci_c.ci_high:.2f}]"
                + base_note
                + ev
            )
        for who in ("baseline", "candidate"):
            for r in d[who]:
                req_rows.append(
                    {
                        "group": gid,
                        "side": who,
                        "point": pid,
                        "batch": b,
                        "schema": schema,
                        "batch_evidence": r.get("batch_evidence"),
                        "prompt": r["prompt"],
                        "valid": r["valid"],
                        "why": r["why"],
                        "text": r["text"],
                        "finish_reason": r["finish_reason"],
                        "completion_tokens": r["completion_tokens"],
                    }
                )
    v = fold_verdicts(verdicts)
    kc_all = sum(r["valid"] for r in c_recs)
    kb_all = sum(r["valid"] for r in b_recs)
    reason = (
        f"structured output: candidate {kc_all}/{len(c_recs)} conforming, baseline {kb_all}/{len(b_recs)} "
        f"({len({k[2] for k in cells})} schemas x {len({k[1] for k in cells})} batch sizes)"
    )
    return Outcome(
        feature="structured_output",
        verdict=v,
        reason=reason,
        rows=rows,
        failures=failures,
        extra_tables={"structured_output_requests": req_rows},
    )


FEATURE = FeatureTest(name="structured_output", steps=steps, judge=judge)
