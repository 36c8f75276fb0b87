"""``structured_output``: every JSON schema via ``response_format``, at every batch size.

Every schema under ``suites/common/schemas`` via ``response_format`` (json_schema), greedy,
``batch`` requests at once at every batch size of the plan; every output is parsed and
validated with ``jsonschema``. Per schema and batch size the candidate's conformance must
reach ``min_json_conformance`` and must not be below the baseline's (Wilson 95% intervals
reported).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import ConfigDict, Field

from fasttrack.checks.batching import run_batched
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import FeatureResult, Outcome, err
from fasttrack.checks.features.spec import GroupPlan, OnGroup, ServingFeature, Step, serving_feature
from fasttrack.checks.outcome import clip, fold_verdicts
from fasttrack.inputs import load_schema_cases
from fasttrack.modelbase import DocModel
from fasttrack.results import Verdict
from fasttrack.stats import wilson_interval


class StructuredRecord(DocModel):
    """One structured-output request and what its output was."""

    model_config = ConfigDict(populate_by_name=True)

    point: str
    batch: int
    schema_name: str = Field(alias="schema")
    """The schema (case) the request used."""
    prompt: str
    batch_verified: bool | None = None
    batch_evidence: str | None = None
    text: str
    finish_reason: str | None
    completion_tokens: int
    valid: bool
    why: str
    endpoint: str = "completion"
    """``chat`` or ``completion`` (when the model has no chat template)."""


class StructuredResult(FeatureResult):
    records: list[StructuredRecord] = Field(default_factory=list)


Cell = dict[str, list[StructuredRecord]]
"""The requests of one (point, batch size, schema), by side."""


@serving_feature
class StructuredOutput(ServingFeature[StructuredResult]):
    name: ClassVar[str] = "structured_output"
    decode_steps: ClassVar[int] = 1500
    result_model: ClassVar[type[FeatureResult]] = StructuredResult

    def steps(self, gp: GroupPlan) -> list[Step]:
        """Every selected short batch size, in one step at the smallest one's point."""
        batches = gp.selected_short_batches
        if not batches:
            return []
        return [Step(point=gp.point(batches[0]), batch=batches[0], run=lambda env: self.collect(env, batches))]

    async def collect(self, env: FeatureEnv, batches: list[int]) -> None:
        """Every schema at every batch size (``b`` requests at once, greedy)."""
        res = self.mine(env)
        pids = {b: env.point(b) for b in batches}
        res.points.extend(pids.values())
        for case in load_schema_cases():
            for b in batches:
                res.records.extend(await _round(env, case, b, pids[b]))

    def judge(self, on: OnGroup, base: StructuredResult, cand: StructuredResult) -> Outcome:
        gid, floor = on.gid, on.ctx.scope.gates.features.min_json_conformance
        cells = _cells(base.records, cand.records)
        rows, failures, verdicts, req_rows = [], [], [], []
        for (pid, b, schema), d in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][2])):
            if not d["candidate"]:
                continue  # the candidate did not run this batch size (only cells both sides ran are compared)
            if not d["baseline"]:
                verdicts.append(Verdict.NOT_RUN)
                continue
            row, failure = _judge_cell(gid, pid, b, schema, d, floor)
            verdicts.append(Verdict(row["verdict"]))
            rows.append(row)
            if failure:
                failures.append(failure)
            req_rows.extend(_request_rows(gid, pid, b, schema, d))
        kc_all = sum(r.valid for r in cand.records)
        kb_all = sum(r.valid for r in base.records)
        reason = (
            f"structured output: candidate {kc_all}/{len(cand.records)} conforming, baseline "
            f"{kb_all}/{len(base.records)} ({len({k[2] for k in cells})} schemas x {len({k[1] for k in cells})} "
            "batch sizes)"
        )
        return Outcome(
            feature=self.name,
            verdict=fold_verdicts(verdicts),
            reason=reason,
            rows=rows,
            failures=failures,
            extra_tables={"structured_output_requests": req_rows},
        )


async def _round(env: FeatureEnv, case: Any, batch: int, pid: str) -> list[StructuredRecord]:
    """``batch`` requests of one schema at once, each output validated."""
    from jsonschema import Draft202012Validator

    prompts = [case.prompts[(i + batch) % len(case.prompts)] for i in range(batch)]
    rf = {"type": "json_schema", "json_schema": {"name": case.name, "schema": case.schema_, "strict": True}}
    res, bc = await run_batched(
        lambda: [env.structured_request(p, rf) for p in prompts], client=env.client, target=batch, attempts=1
    )
    validator = Draft202012Validator(case.schema_)
    out = []
    for p, r in zip(prompts, res, strict=False):
        rec: dict[str, Any] = {
            "point": pid,
            "batch": batch,
            "schema": case.name,
            "prompt": p,
            "batch_verified": bc.verified,
            "batch_evidence": bc.detail,
        }
        if isinstance(r, BaseException):
            rec.update(text="", finish_reason=None, completion_tokens=0, valid=False, why=f"request failed: {err(r)}")
        else:
            rec.update(
                text=r.text,
                finish_reason=r.finish_reason,
                completion_tokens=len(r.token_ids or []) or (r.usage.completion_tokens if r.usage else 0),
            )
            rec.update(validate_json(r.text, validator, r.finish_reason))
        rec["endpoint"] = "chat" if env.chat_ok else "completion"
        out.append(StructuredRecord.model_validate(rec))
    return out


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


def _cells(base: list[StructuredRecord], cand: list[StructuredRecord]) -> dict[tuple[str, int, str], Cell]:
    """The requests by (point, batch size, schema) and side."""
    cells: dict[tuple[str, int, str], Cell] = {}
    for who, recs in (("baseline", base), ("candidate", cand)):
        for r in recs:
            cells.setdefault((r.point, r.batch, r.schema_name), {"baseline": [], "candidate": []})[who].append(r)
    return cells


def _judge_cell(gid: str, pid: str, b: int, schema: str, d: Cell, floor: float) -> tuple[dict[str, Any], str | None]:
    """The row of one (point, batch size, schema) both sides ran, and its failure message (None when it passes)."""
    nb, nc = len(d["baseline"]), len(d["candidate"])
    kb = sum(r.valid for r in d["baseline"])
    kc = sum(r.valid for r in d["candidate"])
    ci_c = wilson_interval(kc, nc)
    ci_b = wilson_interval(kb, nb)
    problems = []
    if kc / nc < floor:
        problems.append(f"candidate conformance {kc}/{nc} = {kc / nc:.2f} is below the floor {floor:g}")
    if kc / nc < kb / nb:
        problems.append(f"candidate conformance {kc}/{nc} is worse than the baseline's {kb}/{nb}")
    row = {
        "feature": "structured_output",
        "group": gid,
        "point": pid,
        "batch": b,
        "schema": schema,
        "verdict": (Verdict.FAIL if problems else Verdict.PASS).value,
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
    if not problems:
        return row, None
    bad = next((r for r in d["candidate"] if not r.valid), None)
    ev = ""
    if bad is not None:
        ev = (
            f"; e.g. prompt {clip(bad.prompt, 60)} -> output {clip(bad.text, 90)} "
            f"(finish_reason {bad.finish_reason}, {bad.completion_tokens} tokens): {bad.why}"
        )
    base_note = "" if kb / nb >= floor else f" (the baseline also misses the floor: {kb}/{nb})"
    failure = (
        f"{pid} (batch {b}), schema {schema}: "
        + "; ".join(problems)
        + f" [Wilson 95% candidate {ci_c.ci_low:.2f}-{ci_c.ci_high:.2f}]"
        + base_note
        + ev
    )
    return row, failure


def _request_rows(gid: str, pid: str, b: int, schema: str, d: Cell) -> list[dict[str, Any]]:
    """Every request of one cell, both sides (table ``structured_output_requests``)."""
    return [
        {
            "group": gid,
            "side": who,
            "point": pid,
            "batch": b,
            "schema": schema,
            "batch_evidence": r.batch_evidence,
            "prompt": r.prompt,
            "valid": r.valid,
            "why": r.why,
            "text": r.text,
            "finish_reason": r.finish_reason,
            "completion_tokens": r.completion_tokens,
        }
        for who in ("baseline", "candidate")
        for r in d[who]
    ]
