"""Coverage: the tests really exercised the optimized path, and the fallback is visible.

Two kinds of evidence are judged after every engine stopped.

In-scope config points. Every check that sends requests records one
:class:`~fasttrack.checks.base.PathEvidence` row per (check, config point, side)
window in ``ctx.evidence`` (equivalence and features do; this check adds its own
decode probe at every batch size of the plan, so it also stands alone). For each
(point, check) the candidate's decode steps inside the envelope's batch range must
run the optimized path: ``optimized decode steps / decode steps >=
gates.coverage.min_optimized_decode_fraction``. The baseline's windows must contain
no optimized-path op (otherwise the baseline is not the stock path). A check whose
candidate never reached the optimized path in any window fails here with
"used the standard path", whatever its own verdict said.

Out-of-scope situations (``fallback.stock_path_for``), probed on both sides by
this check's ``collect``:

* ``prefill``: a request that only prefills (``max_tokens=1``);
* ``mixed_prefill_decode``: a long prompt arriving while another request decodes,
  so one engine step carries prefill and decode work;
* ``batch_above_range``: ``envelope.batch.max + 1`` requests decoding at once.

On the candidate, the steps of that kind must contain no optimized-path op, must
show the stock markers (when the stock markers are observable in this engine at
all), and the fallback must be visible: a line matching ``fallback.log_regex`` in
the engine log (during the probe, or earlier in the engine's life for loggers
that rate-limit) or an increase of ``fallback.metric``. Other situations
(``out_of_envelope_request``, ``unsupported_deployment``) need other deployments and
are reported as not probed.

The result carries a coverage table (config point x check -> path evidence) and a
fallback table (situation x side).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fasttrack.checks._common import (
    HOLD_PER_REQUEST_S,
    HOLD_S,
    EvidenceWindow,
    WindowRecord,
    fold_verdicts,
    group_batches,
    hold_scheduler,
    in_range_fraction,
    load_prompt_set,
    prompt_set_path,
    release_after,
    run_async,
    run_batched,
    short_point,
    write_artifact,
)
from fasttrack.checks.base import Check, CheckResult, EngineSession, Gate, PathEvidence, RunContext, Verdict, register

PROBE_TOKENS = 8
"""Decode tokens per request in the in-range probe (enough steps to see the path, few enough to be cheap)."""
MIXED_DECODE_TOKENS = 256
"""Tokens the decoding request of the mixed probe generates: it must still decode when the second one arrives,
after a few /metrics scrapes (a fast decode path finishes 48 tokens before that on two cores)."""
MIXED_PROMPT_REPEAT = 6
"""The mixed probe's second prompt: this many prompts of the set joined (a prefill of a few hundred tokens)."""
ABOVE_RANGE_TOKENS = 8
PROBE_ATTEMPTS = 3
"""Windows a situation probe may take before it is judged on a window without the situation's step.
Each retry doubles the decode length."""

SITUATION_KIND = {"prefill": "prefill", "mixed_prefill_decode": "mixed", "batch_above_range": "decode"}
"""Engine step kind each probed situation is judged on."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class SituationProbe(_Model):
    """One out-of-scope situation probed on one side."""

    situation: str
    side: str
    group: str
    window: WindowRecord | None = None
    attempts: int = 1
    """Windows opened for this probe: a probe whose window shows no step of the situation's kind
    (the engine did not form that step, e.g. a loaded machine finished the decode before the long
    prompt arrived) is repeated, up to PROBE_ATTEMPTS, with a longer decode."""
    steps: int = 0
    """Engine steps of the situation's kind seen in the probe."""
    optimized_steps: int = 0
    """Of those, steps that ran an optimized-path op."""
    stock_steps: int = 0
    """Of those, steps that ran a stock-path marker."""
    fallback_lines_window: list[str] = Field(default_factory=list)
    """Fallback log lines written during the probe."""
    fallback_lines_earlier: list[str] = Field(default_factory=list)
    """Fallback log lines written earlier in this engine's life (rate-limited loggers)."""
    fallback_metric_delta: float | None = None
    """Increase of fallback.metric during the probe."""
    note: str = ""


@register
class CoverageCheck(Check):
    """Path coverage: optimized path in scope, visible stock fallback out of scope."""

    name = "coverage"
    title = "Path coverage (optimized path at every in-scope point, visible fallback outside)"

    def __init__(self) -> None:
        self.probes: list[SituationProbe] = []
        self.windows: list[WindowRecord] = []
        self.stock_seen: dict[tuple[str, str], bool] = {}
        self.artifacts: list[str] = []
        self.lifetimes: set[tuple[str, str]] = set()

    def skip_reason(self, ctx: RunContext) -> str | None:
        if ctx.scope.path_markers is None:
            return "the scope declares no path_markers, so no path evidence can be judged"
        return None

    def wants(self, ctx: RunContext, session: EngineSession) -> bool:
        return session.lifetime == 0

    # ------------------------------------------------------------------ collect

    def collect(self, ctx: RunContext, session: EngineSession) -> None:
        run_async(self._collect(ctx, session))

    async def _collect(self, ctx: RunContext, session: EngineSession) -> None:
        group = session.group
        self.lifetimes.add((group.id, session.side))
        prompts = load_prompt_set(prompt_set_path(ctx))
        eng = session.engine
        fb = ctx.scope.fallback
        situations = list(fb.stock_path_for) if fb else []
        batches = [b for b in group_batches(ctx, group) if short_point(ctx, group, b) is not None]
        async with eng.client() as client:
            # 1. in-range decode probe at every batch size, one window, evidence split by batch size. Its requests
            #    start with prefill steps, and one prefill-only request is added, so it is also the prefill probe.
            points = {short_point(ctx, group, b).id: b for b in batches}  # type: ignore[union-attr]
            start = eng.log_offset()
            async with EvidenceWindow(
                ctx, eng, check=self.name, name=f"coverage-decode-{group.id}", points=points, side=session.side
            ) as win:
                for b in batches:
                    await _batched(client, [prompts[(b + j) % len(prompts)].prompt for j in range(b)], PROBE_TOKENS)
                if "prefill" in situations:
                    await _gather(client, [prompts[0].prompt], 1)
            if win.record:
                self.windows.append(win.record)
                if "prefill" in situations:
                    probe = SituationProbe(situation="prefill", side=session.side, group=group.id)
                    self.probes.append(self._read_probe(ctx, eng, probe, win.record, start, None))
            # 2. the other out-of-scope situations, one window each (so each fallback line is attributable)
            for s in situations:
                if s == "prefill":
                    continue
                if s not in SITUATION_KIND:
                    self.probes.append(
                        SituationProbe(
                            situation=s,
                            side=session.side,
                            group=group.id,
                            note="not probed: it needs a different deployment or request",
                        )
                    )
                    continue
                self.probes.append(await self._probe(ctx, session, client, s, prompts))
        self.artifacts.append(
            write_artifact(
                ctx,
                self.name,
                f"{group.id}.{session.side}.json",
                {
                    "windows": [w.model_dump(mode="json") for w in self.windows if w.side == session.side],
                    "probes": [
                        p.model_dump(mode="json") for p in self.probes if p.side == session.side and p.group == group.id
                    ],
                },
            )
        )

    async def _probe(
        self, ctx: RunContext, session: EngineSession, client: Any, situation: str, prompts: list[Any]
    ) -> SituationProbe:
        from fasttrack.engine import scrape_metrics

        eng = session.engine
        group = session.group
        fb = ctx.scope.fallback
        probe = SituationProbe(situation=situation, side=session.side, group=group.id)
        env = ctx.scope.envelope
        if situation == "batch_above_range":
            if env is None:
                probe.note = "not probed: the scope has no envelope"
                return probe
            n = env.batch.max + 1
            cap = _max_num_seqs(group.args.get(session.side, []))
            if cap is not None and cap < n:
                probe.note = f"not probed: the engine serves at most {cap} sequences (--max-num-seqs), fewer than {n}"
                return probe
        for attempt in range(1, PROBE_ATTEMPTS + 1):
            probe = SituationProbe(situation=situation, side=session.side, group=group.id, attempts=attempt)
            metric_before = None
            if fb and fb.metric:
                metric_before = (await scrape_metrics(eng)).total(fb.metric)
            start = eng.log_offset()
            suffix = "" if attempt == 1 else f"-attempt{attempt}"
            async with EvidenceWindow(
                ctx, eng, check=self.name, name=f"coverage-{situation}-{group.id}{suffix}", points={}, side=session.side
            ) as win:
                if situation == "mixed_prefill_decode":
                    await _mixed(client, prompts, MIXED_DECODE_TOKENS * 2 ** (attempt - 1))
                else:
                    assert env is not None
                    n = env.batch.max + 1
                    await _batched(
                        client,
                        [prompts[(j * 3) % len(prompts)].prompt for j in range(n)],
                        ABOVE_RANGE_TOKENS * 2 ** (attempt - 1),
                    )
            metric_delta = None
            if metric_before is not None and fb and fb.metric:
                metric_delta = (await scrape_metrics(eng)).total(fb.metric) - metric_before
            probe = self._read_probe(ctx, eng, probe, win.record, start, metric_delta)
            if attempt > 1:
                probe.note = (probe.note + "; " if probe.note else "") + (
                    f"attempt {attempt}: the earlier window(s) formed no step of this kind"
                )
            if probe.steps or win.record is None or not win.record.available:
                return probe
            ctx.log(
                f"coverage: {situation} on the {session.side}: attempt {attempt} formed no such step"
                + ("; trying again with a longer decode" if attempt < PROBE_ATTEMPTS else "")
            )
        return probe

    def _read_probe(
        self,
        ctx: RunContext,
        eng: Any,
        probe: SituationProbe,
        rec: WindowRecord | None,
        start: int,
        metric_delta: float | None,
    ) -> SituationProbe:
        """Fill a probe from its window: steps of the situation's kind, their path, and the fallback lines."""
        fb = ctx.scope.fallback
        env = ctx.scope.envelope
        probe.window = rec
        probe.fallback_metric_delta = metric_delta
        kind = SITUATION_KIND[probe.situation]
        if rec is not None and rec.available:
            steps = [s for s in rec.steps if s.get("kind") == kind]
            if probe.situation == "batch_above_range" and env is not None:
                steps = [s for s in steps if int(s.get("batch", 0)) > env.batch.max]
            probe.steps = len(steps)
            probe.optimized_steps = sum(1 for s in steps if s.get("optimized_ops"))
            probe.stock_steps = sum(1 for s in steps if s.get("stock_ops"))
            probe.fallback_lines_window = list(rec.summary.get("fallback_lines") or [])
            if rec.summary.get("fallback_events") and not probe.fallback_lines_window:
                probe.fallback_lines_window = ["(fallback lines counted in the window)"]
        elif rec is not None:
            probe.note = rec.unavailable_reason or "no path evidence"
        if fb and fb.log_regex and not probe.fallback_lines_window and eng.log_path is not None:
            rx = re.compile(fb.log_regex)
            probe.fallback_lines_window = [ln for ln in eng.read_log(start).splitlines() if rx.search(ln)][:5]
            if not probe.fallback_lines_window:
                probe.fallback_lines_earlier = [ln for ln in eng.read_log(0, start).splitlines() if rx.search(ln)][-5:]
        return probe

    # ------------------------------------------------------------------ judge

    def judge(self, ctx: RunContext) -> CheckResult:
        thr = ctx.scope.gates.coverage.min_optimized_decode_fraction
        env = ctx.scope.envelope
        lo, hi = (env.batch.min, env.batch.max) if env else (1, 10**9)
        gate = Gate(
            statistic="per (config point, check): fraction of the candidate's in-range decode steps that ran an optimized-path marker",
            threshold=thr,
            rule=(
                f"fraction >= {thr:g} at every exercised in-scope point; no optimized op on the baseline; every "
                "out-of-scope situation on the candidate runs no optimized op, shows the stock markers (when "
                "observable) and a visible fallback (log line or metric); no check used only the standard path"
            ),
        )
        evidence = [e for e in ctx.evidence]
        if not evidence and not self.probes:
            return CheckResult.not_run(
                self.name, "no check recorded path evidence (no engine ran)", required=self.required
            )
        plan_points = {p.id for p in ctx.plan.points}
        failures: list[str] = []
        verdicts: list[Verdict] = []
        rows: list[dict[str, Any]] = []
        cells: dict[tuple[str, str], dict[str, list[PathEvidence]]] = {}
        for e in evidence:
            cells.setdefault((e.point, e.check), {"baseline": [], "candidate": []})[e.side].append(e)
        per_check_cand: dict[str, list[PathEvidence]] = {}
        unavailable = 0
        for (point, check), sides in sorted(cells.items()):
            cand = [e for e in sides["candidate"] if "unavailable" not in e.detail]
            base = [e for e in sides["baseline"] if "unavailable" not in e.detail]
            unavailable += sum(1 for e in sides["candidate"] + sides["baseline"] if "unavailable" in e.detail)
            per_check_cand.setdefault(check, []).extend(cand)
            n_dec = sum(in_range_fraction(e, lo, hi)[0] for e in cand)
            n_opt = sum(in_range_fraction(e, lo, hi)[1] for e in cand)
            base_opt = sum(e.optimized_ops for e in base)
            frac = n_opt / n_dec if n_dec else None
            problems = []
            if not cand:
                v = Verdict.NOT_RUN
                why = "no candidate path evidence" + (
                    ": " + sides["candidate"][0].detail["unavailable"] if sides["candidate"] else ""
                )
            elif n_dec == 0:
                v = None  # this check did not exercise the point's decode path (e.g. its round formed a smaller batch)
                why = "not exercised: the candidate's windows of this check contain no decode step for this point"
            else:
                if frac is not None and frac < thr:
                    problems.append(
                        "used the standard path"
                        if n_opt == 0
                        else f"only {n_opt} of {n_dec} decode steps on the optimized path"
                    )
                if base_opt:
                    problems.append(f"the baseline ran {base_opt} optimized-path op(s)")
                v = Verdict.FAIL if problems else Verdict.PASS
                why = "; ".join(problems)
            if point in plan_points and v is not None:
                verdicts.append(v)
            if v is Verdict.FAIL:
                c_ops = sum(e.optimized_ops for e in cand)
                s_ops = sum(e.stock_ops for e in cand)
                sizes = _merge_sizes(cand)
                failures.append(
                    f"{point} [{check}]: {why}: the candidate ran {n_opt} of {n_dec} in-range decode steps on the optimized "
                    f"path (threshold {thr:g}); optimized-marker ops {c_ops}, stock-marker ops {s_ops}, decode steps by "
                    f"batch size {sizes}; windows {sorted({e.window for e in cand})}"
                )
            rows.append(
                {
                    "point": point,
                    "check": check,
                    "in_plan": point in plan_points,
                    "verdict": v.value if v is not None else "not_exercised",
                    "candidate_decode_steps": n_dec,
                    "candidate_optimized_decode_steps": n_opt,
                    "candidate_optimized_fraction": frac,
                    "threshold": thr,
                    "candidate_optimized_ops": sum(e.optimized_ops for e in cand),
                    "candidate_stock_ops": sum(e.stock_ops for e in cand),
                    "candidate_fallback_events": sum(e.fallback_events for e in cand),
                    "baseline_decode_steps": sum(e.decode_steps for e in base),
                    "baseline_optimized_ops": base_opt,
                    "baseline_stock_ops": sum(e.stock_ops for e in base),
                    "windows": ",".join(sorted({e.window for e in sides["candidate"] + sides["baseline"]})),
                    "detail": why,
                }
            )
        # checks that never reached the optimized path
        standard_checks = []
        for check, evs in sorted(per_check_cand.items()):
            dec = sum(e.decode_steps for e in evs)
            if evs and dec and sum(e.optimized_decode_steps for e in evs) == 0:
                standard_checks.append(check)
                failures.insert(
                    0,
                    f"check {check} used the standard path: none of its candidate's {dec} decode steps in "
                    f"{len({e.window for e in evs})} window(s) ran an optimized-path marker "
                    f"({', '.join(ctx.scope.path_markers.optimized) if ctx.scope.path_markers else ''})",
                )
                verdicts.append(Verdict.FAIL)
        exercised = {r["point"] for r in rows if r["verdict"] in ("pass", "fail")}
        not_exercised = sorted(plan_points - exercised)
        # out-of-scope situations
        fb_rows, fb_verdicts, fb_fail = self._judge_situations(ctx)
        verdicts.extend(fb_verdicts)
        failures.extend(fb_fail)
        verdict = fold_verdicts(verdicts)
        n_in = sum(1 for r in rows if r["in_plan"])
        n_pass = sum(1 for r in rows if r["in_plan"] and r["verdict"] == "pass")
        if verdict is Verdict.PASS:
            reason = (
                f"optimized path at all {n_pass} exercised (point, check) pairs, visible stock fallback in "
                f"{sum(v is Verdict.PASS for v in fb_verdicts)} out-of-scope situation(s)"
            )
        elif verdict is Verdict.FAIL:
            if standard_checks:
                reason = f"check(s) {', '.join(standard_checks)} used the standard path"
            else:
                reason = f"{len(failures)} coverage problem(s): " + failures[0].split(":")[0]
        else:
            missing = [
                f"{r['point']} [{r['check']}]: {r['detail']}"
                for r in rows
                if r["in_plan"] and r["verdict"] == "not_run"
            ]
            missing += [
                f"{r['situation']} on the {r['side']}: {r['detail']}"
                for r in fb_rows
                if r["verdict"] == "not_run" and r["side"] == "candidate"
            ]
            reason = (
                (
                    "path evidence is missing"
                    + (f" ({unavailable} window(s) without a profiler)" if unavailable else "")
                    if unavailable or not missing
                    else "not everything could be judged"
                )
                + f"; {n_pass} of {n_in} (point, check) pairs verified"
                + (f"; not judged: {'; '.join(missing[:3])}" if missing else "")
            )
        return CheckResult(
            check=self.name,
            verdict=verdict,
            reason=reason,
            required=self.required,
            gate=gate,
            summary={
                "threshold": thr,
                "pairs": n_in,
                "pairs_passing": n_pass,
                "checks_on_standard_path": standard_checks,
                "points_not_exercised": not_exercised,
                "windows_without_profiler": unavailable,
                "stock_markers_observable": {f"{g}/{s}": v for (g, s), v in sorted(self.stock_seen.items())},
            },
            failures=failures,
            tables={"coverage": rows, "fallback": fb_rows},
            artifacts=list(self.artifacts),
        )

    def _stock_observable(self, ctx: RunContext, group: str, side: str) -> bool:
        """Whether the stock markers matched any op in any window of this engine (evidence from every check)."""
        seen = any(e.stock_ops for e in ctx.evidence if e.side == side and "unavailable" not in e.detail)
        seen = seen or any(p.stock_steps for p in self.probes if p.group == group and p.side == side)
        self.stock_seen[(group, side)] = seen
        return seen

    def _judge_situations(self, ctx: RunContext) -> tuple[list[dict[str, Any]], list[Verdict], list[str]]:
        fb = ctx.scope.fallback
        rows, verdicts, failures = [], [], []
        for p in self.probes:
            problems: list[str] = []
            notes: list[str] = []
            if p.note and p.window is None:
                v = Verdict.NOT_RUN
                notes.append(p.note)
            elif p.window is None or not p.window.available:
                v = Verdict.NOT_RUN
                notes.append(p.note or "no path evidence for this probe")
            elif p.steps == 0:
                v = Verdict.NOT_RUN
                notes.append(
                    f"the probe did not produce a {SITUATION_KIND[p.situation]} step in {p.attempts} "
                    f"attempt(s) (steps seen in the last: {p.window.summary.get('step_counts')})"
                )
            else:
                if p.optimized_steps:
                    problems.append(f"{p.optimized_steps} of {p.steps} {p.situation} steps ran optimized-path ops")
                if p.side == "candidate":
                    if self._stock_observable(ctx, p.group, p.side):
                        if p.stock_steps < p.steps:
                            problems.append(
                                f"only {p.stock_steps} of {p.steps} {p.situation} steps show the stock markers"
                            )
                    else:
                        notes.append(
                            "the stock markers matched no op in any window of this engine; the stock path is "
                            "inferred from the absence of optimized ops"
                        )
                    if fb is not None and fb.visible:
                        visible = bool(
                            p.fallback_lines_window or p.fallback_lines_earlier or (p.fallback_metric_delta or 0) > 0
                        )
                        if not visible:
                            problems.append(
                                "the fallback is not visible: no log line matches "
                                f"{fb.log_regex!r}" + (f" and {fb.metric} did not increase" if fb.metric else "")
                            )
                        elif not p.fallback_lines_window and p.fallback_lines_earlier:
                            notes.append(
                                "the fallback line was logged earlier in this engine's life (rate-limited logger)"
                            )
                v = Verdict.FAIL if problems else Verdict.PASS
            if p.side == "candidate" or v is Verdict.FAIL:
                verdicts.append(v)
            if v is Verdict.FAIL:
                lines = (p.fallback_lines_window or p.fallback_lines_earlier)[:1]
                failures.append(
                    f"{p.group}:{p.situation} [{p.side}]: "
                    + "; ".join(problems)
                    + f" (steps {p.window.summary.get('step_counts') if p.window else {}}"
                    + (f"; fallback line {lines[0][-160:]!r}" if lines else "")
                    + ")"
                )
            rows.append(
                {
                    "group": p.group,
                    "situation": p.situation,
                    "side": p.side,
                    "verdict": v.value,
                    "steps": p.steps,
                    "optimized_steps": p.optimized_steps,
                    "stock_steps": p.stock_steps,
                    "fallback_visible": bool(
                        p.fallback_lines_window or p.fallback_lines_earlier or (p.fallback_metric_delta or 0) > 0
                    ),
                    "fallback_line": (p.fallback_lines_window or p.fallback_lines_earlier or [""])[0][-200:],
                    "fallback_metric_delta": p.fallback_metric_delta,
                    "detail": "; ".join(problems + notes),
                }
            )
        return rows, verdicts, failures


def _merge_sizes(evs: list[PathEvidence]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in evs:
        for k, v in (e.detail.get("decode_batch_sizes") or {}).items():
            out[str(k)] = out.get(str(k), 0) + int(v)
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def _max_num_seqs(args: list[str]) -> int | None:
    for i, a in enumerate(args):
        if a == "--max-num-seqs" and i + 1 < len(args):
            return int(args[i + 1])
        if a.startswith("--max-num-seqs="):
            return int(a.split("=", 1)[1])
    return None


async def _gather(client: Any, prompts: list[str], max_tokens: int) -> None:
    from fasttrack.engine import EngineCrashed

    res = await asyncio.gather(
        *(client.complete(p, max_tokens=max_tokens, temperature=0.0, ignore_eos=True) for p in prompts),
        return_exceptions=True,
    )
    for r in res:
        if isinstance(r, EngineCrashed) or (isinstance(r, BaseException) and not isinstance(r, Exception)):
            raise r


async def _batched(client: Any, prompts: list[str], max_tokens: int) -> None:
    """One round of concurrent requests, repeated once if its timing shows they were not decoded together."""
    await run_batched(
        lambda: [client.complete(p, max_tokens=max_tokens, temperature=0.0, ignore_eos=True) for p in prompts],
        client=client,
        target=len(prompts),
        attempts=2,
    )


async def _mixed(client: Any, prompts: list[Any], decode_tokens: int = MIXED_DECODE_TOKENS) -> None:
    """One request decodes; a long prompt arrives meanwhile, so a step mixes prefill and decode.

    The first request streams, so its decode is seen as it happens (a metrics scrape from a busy
    API server can lag by longer than the whole request)."""
    decoding = asyncio.Event()

    def seen(n_chunks: int) -> None:
        if n_chunks >= 2:
            decoding.set()

    first = asyncio.create_task(
        client.complete(
            prompts[1].prompt, max_tokens=decode_tokens, temperature=0.0, ignore_eos=True, stream=True, on_chunk=seen
        )
    )
    waiter = asyncio.ensure_future(decoding.wait())
    await asyncio.wait([first, waiter], timeout=30.0, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    long_prompt = " ".join(p.prompt for p in prompts[2 : 2 + MIXED_PROMPT_REPEAT])
    # Hold the scheduler (where the engine allows it) while the long prompt arrives, so the step
    # after the release runs the first request's decode and the second one's prefill together.
    held = not first.done() and await hold_scheduler(client)
    second = asyncio.ensure_future(client.complete(long_prompt, max_tokens=2, temperature=0.0, ignore_eos=True))
    if held:
        await release_after(client, HOLD_S + HOLD_PER_REQUEST_S, [first, second])
    res = await asyncio.gather(first, second, return_exceptions=True)
    for r in res:
        if isinstance(r, BaseException) and not isinstance(r, Exception):
            raise r
