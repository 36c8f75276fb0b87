"""Features: production serving features keep working on the optimized path.

Each feature the scope lists (``scope.features``) is one sub-test; the candidate is
judged against the baseline and against absolute thresholds
(``gates.features``, and ``gates.equivalence`` where outputs are compared).

Path evidence comes from two short profiler windows per engine lifetime (trace
export costs seconds per window and tens of ms per step on small hosts): the
short-context points (a structured-output round of a few tokens at every batch
size, and two sampling requests at the sampling batch) and the full-context points
(each point's prompts, a few tokens). Evidence is split by batch size and recorded
for the coverage check; a sub-test whose points never reached the optimized path on
the candidate fails with "used the standard path".

Sub-tests
---------
``structured_output``
    Every JSON schema under ``suites/common/schemas`` via ``response_format``
    (json_schema), greedy, ``batch`` requests at once at every batch size of the plan;
    every output is parsed and validated with ``jsonschema``. Per schema and batch
    size the candidate's conformance must reach ``min_json_conformance`` and must not
    be below the baseline's (Wilson 95% intervals reported).
``temperature_sampling``
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
``full_context``
    At every full-context point, ``batch`` prompts of exactly ``context`` tokens
    (``max_model_len - max_tokens``, real passages) run greedy to ``max_model_len``;
    both sides must succeed with the reported token counts, and outputs must pass
    the equivalence thresholds.
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
``speculative_acceptance``
    Where the engine group has a speculative config: acceptance from the
    ``vllm:spec_decode_*`` counters over a fixed greedy workload; the candidate's
    acceptance rate (accepted / draft tokens) must not be below the baseline's
    (its Wilson 95% upper bound reaches the baseline's rate). Not run otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections import Counter
from typing import Any, AsyncIterator, Awaitable, Callable

from pydantic import BaseModel, ConfigDict, Field

from fasttrack.checks._common import (
    BatchCheck,
    EvidenceWindow,
    PromptBuilder,
    PromptItem,
    TokenizerClient,
    WindowRecord,
    clip,
    fold_verdicts,
    full_points,
    group_batches,
    load_passages,
    load_prompt_set,
    load_schema_cases,
    nearest_batch,
    prompt_set_path,
    run_async,
    run_batched,
    short_point,
    used_standard_path,
    write_artifact,
)
from fasttrack.checks.base import Check, CheckResult, EngineSession, Gate, RunContext, Verdict, register
from fasttrack.errors import FasttrackError
from fasttrack.stats import (
    allowed_tokens,
    chi_square_sampling_test,
    compare_greedy,
    mask_violations,
    summarize_greedy,
    wilson_interval,
)

JSON_MAX_TOKENS = 192
"""Token budget of one structured-output request (the shipped schemas need far fewer)."""
SAMPLING_TOP_LOGPROBS = 20
"""Logprobs requested for the reference distribution (vLLM's default ``max_logprobs``)."""
SAMPLING_SELECTION_PROMPTS = 16
"""Prompts of the set considered when choosing the sampling prompt."""
SAMPLING_WAVE = 8
"""Preferred choices per sampling request (``n``): one decode batch, snapped to a batch size of the plan."""
PROBE_TOKENS = 6
"""Tokens per request of the profiled path probes (a prefill and a few decode steps per point)."""
MASK_SAMPLES = 120
"""Samples per mask test (top-k, top-p)."""
MASK_TOP_K = 3
MASK_TOP_P = 0.6
SPEC_ACCEPTANCE_PROMPTS = 4
SPEC_ACCEPTANCE_TOKENS = 64


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Outcome(_Model):
    """The verdict of one sub-test, with its rows."""

    feature: str
    verdict: Verdict
    reason: str
    """One sentence."""
    rows: list[dict[str, Any]] = Field(default_factory=list)
    """Result rows (table ``features``)."""
    failures: list[str] = Field(default_factory=list)
    """Failure messages naming the config point and the evidence."""
    extra_tables: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)


class SideData(_Model):
    """What one side measured for one engine group."""

    data: dict[str, Any] = Field(default_factory=dict)
    """feature -> raw measurements (JSON-friendly)."""
    errors: dict[str, str] = Field(default_factory=dict)
    """feature -> why it could not be measured."""
    windows: dict[str, WindowRecord] = Field(default_factory=dict)
    """window name -> evidence window (each attributed to one config point)."""
    points: dict[str, str] = Field(default_factory=dict)
    """feature -> config point its requests ran at (multi-point features list them in their data)."""


def _choice_ids(ch: Any) -> list[int]:
    if ch.token_ids is not None:
        return list(ch.token_ids)
    return [p.token_id for p in (ch.logprobs or []) if p.token_id is not None]


def _err(exc: BaseException) -> str:
    return getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"


def _reraise_fatal(results: list[Any]) -> None:
    from fasttrack.engine import EngineCrashed

    for r in results:
        if isinstance(r, EngineCrashed) or (isinstance(r, BaseException) and not isinstance(r, Exception)):
            raise r


@register
class FeaturesCheck(Check):
    """Serving features on the optimized path: structured output, sampling, full context, API behaviour."""

    name = "features"
    title = "Serving features (structured output, temperature sampling, full context, API behaviour)"

    def __init__(
        self, *, wave: int = SAMPLING_WAVE, mask_samples: int = MASK_SAMPLES, batches: list[int] | None = None
    ) -> None:
        self.wave_pref = wave
        """Preferred choices per sampling request (snapped to a batch size of the plan)."""
        self.mask_samples = mask_samples
        """Samples per top-k / top-p mask test."""
        self.batches = batches
        """Batch sizes structured output and full context run at (None: every batch size of the plan)."""
        self.sides: dict[tuple[str, str], SideData] = {}
        self.artifacts: list[str] = []

    # ------------------------------------------------------------------ plan

    def skip_reason(self, ctx: RunContext) -> str | None:
        if not ctx.scope.features:
            return "the scope lists no serving features (scope.features is empty)"
        return None

    def wants(self, ctx: RunContext, session: EngineSession) -> bool:
        return session.lifetime == 0

    # ------------------------------------------------------------------ collect

    def collect(self, ctx: RunContext, session: EngineSession) -> None:
        run_async(self._collect(ctx, session))

    async def _collect(self, ctx: RunContext, session: EngineSession) -> None:
        group = session.group
        side = SideData()
        self.sides[(group.id, session.side)] = side
        base = self.sides.get((group.id, "baseline")) if session.side == "candidate" else None
        feats = list(dict.fromkeys(ctx.scope.features))
        batches = group_batches(ctx, group)
        tasks: list[tuple[str, Callable[[], Awaitable[Any]]]] = []
        env = _Env(ctx, session, side, base, self)

        def add(feature: str, batch: int, fn: Callable[[], Awaitable[Any]], *, point_id: str | None = None) -> None:
            sp = short_point(ctx, group, batch)
            p = point_id or (sp.id if sp else None)
            if p is None:
                side.errors[feature] = f"the plan has no config point at batch {batch} in group {group.id}"
                return
            tasks.append((feature, fn))
            side.points.setdefault(feature, p)

        short_batches = [b for b in batches if short_point(ctx, group, b) is not None]
        # Sampling first: the candidate reuses the prompt and reference the baseline chose.
        if "temperature_sampling" in feats and short_batches:
            wave = nearest_batch(short_batches, self.wave_pref)
            add("temperature_sampling", wave, lambda w=wave: env.sampling(w))
            t0 = nearest_batch(short_batches, 3)
            add("temperature_sampling", t0, lambda b=t0: env.zero_temperature(b))
        so_batches = [b for b in short_batches if self.batches is None or b in self.batches]
        if "structured_output" in feats and so_batches:
            add("structured_output", so_batches[0], lambda: env.structured(so_batches))
        fulls = [p for p in full_points(ctx, group) if self.batches is None or p.batch in self.batches]
        if "full_context" in feats and fulls:
            add("full_context", fulls[0].batch, lambda: env.full_context(fulls), point_id=fulls[0].id)
        if short_batches:
            at = {want: nearest_batch(short_batches, want) for want in (1, 3, 4)}
            if "seeded_sampling" in feats:
                add("seeded_sampling", at[4], lambda b=at[4]: env.seeds(b))
            if "stop_sequences" in feats:
                add("stop_sequences", at[1], lambda b=at[1]: env.stop(b))
            if "max_tokens" in feats:
                add("max_tokens", at[3], lambda b=at[3]: env.max_tokens(b))
            if "n_best" in feats:
                add("n_best", at[3], lambda b=at[3]: env.n_best(b))
            if "logprobs" in feats:
                add("logprobs", at[1], lambda b=at[1]: env.logprobs(b))
            if "speculative_acceptance" in feats and group.spec != "none":
                add("speculative_acceptance", at[1], lambda b=at[1]: env.speculative(b))

        async with session.engine.client() as client:
            env.client = client
            # path evidence first: short probes in two profiler windows (short-context and full-context points)
            probe_batches = [b for b in short_batches if self.batches is None or b in self.batches] or short_batches
            if "structured_output" not in feats and "temperature_sampling" in feats:
                probe_batches = [nearest_batch(short_batches, self.wave_pref)]
            sampling_wave = (
                nearest_batch(short_batches, self.wave_pref)
                if "temperature_sampling" in feats and short_batches
                else None
            )
            if probe_batches:
                await env.probe_short(probe_batches, wave=sampling_wave, structured="structured_output" in feats)
            if "full_context" in feats and fulls:
                await env.probe_full(fulls)
            for feature, fn in tasks:
                try:
                    await fn()
                except FasttrackError as exc:
                    from fasttrack.engine import EngineCrashed

                    if isinstance(exc, EngineCrashed):
                        raise
                    side.errors[feature] = f"{type(exc).__name__}: {exc.message}"
        self.artifacts.append(
            write_artifact(ctx, self.name, f"{group.id}.{session.side}.json", side.model_dump(mode="json"))
        )

    # ------------------------------------------------------------------ judge

    def judge(self, ctx: RunContext) -> CheckResult:
        feats = list(dict.fromkeys(ctx.scope.features))
        fg = ctx.scope.gates.features
        gate = Gate(
            statistic=(
                "per feature: JSON-schema conformance rate (Wilson 95%); chi-square goodness-of-fit p-value of "
                "candidate samples against the baseline's next-token distribution; exact behaviour of seeds, "
                "stop, max_tokens, n, logprobs; full-context equivalence"
            ),
            threshold=(
                f"conformance >= {fg.min_json_conformance:g} and >= baseline; p >= {fg.sampling_alpha:g}; "
                "0 mask violations; identical seeded outputs"
            ),
            rule="every listed feature passes at every config point it ran at, and the candidate ran the optimized path",
        )
        groups = sorted({gid for gid, _ in self.sides})
        if not groups:
            return CheckResult.not_run(self.name, "no engine ran the feature requests", required=self.required)
        outcomes: list[Outcome] = []
        windows: list[WindowRecord] = []
        for gid in groups:
            base = self.sides.get((gid, "baseline"))
            cand = self.sides.get((gid, "candidate"))
            if base is None or cand is None:
                missing = "baseline" if base is None else "candidate"
                outcomes.append(
                    Outcome(feature="*", verdict=Verdict.NOT_RUN, reason=f"group {gid}: the {missing} side never ran")
                )
                continue
            windows.extend(cand.windows.values())
            for f in feats:
                outcomes.append(self._judge_feature(ctx, gid, f, base, cand))
        # a feature that applies to no group (speculative decoding without speculative configs)
        merged: dict[str, list[Outcome]] = {}
        for o in outcomes:
            merged.setdefault(o.feature, []).append(o)
        per_feature: dict[str, dict[str, str]] = {}
        verdicts: list[Verdict] = []
        failures: list[str] = []
        rows: list[dict[str, Any]] = []
        tables: dict[str, list[dict[str, Any]]] = {}
        for f, outs in merged.items():
            applicable = [o for o in outs if o.reason != "n/a"]
            if not applicable:
                o = Outcome(
                    feature=f,
                    verdict=Verdict.NOT_RUN,
                    reason="no engine group of the plan has a speculative-decoding configuration"
                    if f == "speculative_acceptance"
                    else "not applicable to any engine group",
                )
                applicable = [o]
            v = fold_verdicts(o.verdict for o in applicable)
            verdicts.append(v)
            per_feature[f] = {"verdict": v.value, "reason": "; ".join(o.reason for o in applicable)}
            for o in applicable:
                failures.extend(o.failures)
                rows.extend(o.rows)
                for k, t in o.extra_tables.items():
                    tables.setdefault(k, []).extend(t)
        standard = used_standard_path(windows)
        verdict = fold_verdicts(verdicts)
        if standard:
            verdict = Verdict.FAIL
            failures.insert(0, f"features {standard}")
            reason = f"the candidate {standard}; the feature results say nothing about the optimized path"
        elif verdict is Verdict.PASS:
            reason = f"all {len(per_feature)} features behave on the candidate as on the baseline"
        elif verdict is Verdict.FAIL:
            bad = [f for f, d in per_feature.items() if d["verdict"] == "fail"]
            reason = f"feature(s) failing on the candidate: {', '.join(bad)}"
        else:
            nr = [f"{f} ({d['reason']})" for f, d in per_feature.items() if d["verdict"] == "not_run"]
            reason = "not every feature could be judged: " + "; ".join(nr)
        tables["features"] = rows
        return CheckResult(
            check=self.name,
            verdict=verdict,
            reason=reason,
            required=self.required,
            gate=gate,
            summary={"per_feature": per_feature, "thresholds": fg.model_dump(), "used_standard_path": standard},
            failures=failures,
            tables=tables,
            artifacts=list(self.artifacts),
        )

    def _judge_feature(self, ctx: RunContext, gid: str, f: str, base: SideData, cand: SideData) -> Outcome:
        if f == "speculative_acceptance" and f not in cand.data and f not in cand.errors and f not in base.errors:
            return Outcome(feature=f, verdict=Verdict.NOT_RUN, reason="n/a")
        if f in base.errors:
            return Outcome(
                feature=f,
                verdict=Verdict.NOT_RUN,
                reason=f"{gid}: the baseline could not run it: {base.errors[f]}",
                rows=[{"feature": f, "group": gid, "verdict": "not_run", "detail": base.errors[f]}],
            )
        if f in cand.errors:
            where = cand.points.get(f) or gid
            return Outcome(
                feature=f,
                verdict=Verdict.FAIL,
                reason=f"{f}: the candidate failed where the baseline succeeded",
                rows=[{"feature": f, "group": gid, "verdict": "fail", "detail": cand.errors[f]}],
                failures=[f"{where}: {f} failed on the candidate (the baseline ran it): {cand.errors[f]}"],
            )
        if f not in cand.data or f not in base.data:
            return Outcome(
                feature=f,
                verdict=Verdict.NOT_RUN,
                reason=f"{gid}: no measurements on both sides",
                rows=[{"feature": f, "group": gid, "verdict": "not_run"}],
            )
        judge = getattr(self, f"_judge_{f}")
        try:
            out: Outcome = judge(ctx, gid, base, cand)
        except FasttrackError as exc:
            return Outcome(
                feature=f,
                verdict=Verdict.NOT_RUN,
                reason=f"{gid}: the measurements could not be judged: {exc.message}",
                rows=[{"feature": f, "group": gid, "verdict": "not_run", "detail": exc.message}],
            )
        # a sub-test whose candidate window never reached the optimized path proves nothing
        pts = cand.data[f].get("points") or [cand.points.get(f)]
        ws = [w for w in cand.windows.values() if any(p in pts for p in w.points)]
        std = used_standard_path(ws)
        if std and out.verdict is not Verdict.NOT_RUN:
            out.verdict = Verdict.FAIL
            out.failures.insert(0, f"{f} at {', '.join(p for p in pts if p)}: {std}")
            out.reason = f"{f}: {std}"
        return out

    # ---------------------------------------------------------------- structured output

    def _judge_structured_output(self, ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
        floor = ctx.scope.gates.features.min_json_conformance
        b_recs = base.data["structured_output"]["records"]
        c_recs = cand.data["structured_output"]["records"]
        cells: dict[tuple[str, int, str], dict[str, list[dict[str, Any]]]] = {}
        for who, recs in (("baseline", b_recs), ("candidate", c_recs)):
            for r in recs:
                cells.setdefault((r["point"], r["batch"], r["schema"]), {"baseline": [], "candidate": []})[who].append(
                    r
                )
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

    # ---------------------------------------------------------------- sampling

    def _judge_temperature_sampling(self, ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
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
        ref_lps = {int(k): v for k, v in ref["second_position"].items()}
        context = (
            f"prompt {bd['prompt_id']} {clip(bd['prompt_text'][-40:], 42)} + first token {ref['first_token']} "
            f"({ref['first_token_text']!r}, p={math.exp(ref['first_logprob']):.3f})"
        )
        for t_key, c_samples in sorted(cd["samples"].items()):
            t = float(t_key)
            b_samples = bd["samples"].get(t_key, [])
            c_counts = Counter(int(x) for x in c_samples)
            b_counts = Counter(int(x) for x in b_samples)
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
                counts = Counter(int(x) for x in mask["samples"])
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

    # ---------------------------------------------------------------- full context

    def _judge_full_context(self, ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
        eq = ctx.scope.gates.equivalence
        rows, failures, verdicts = [], [], []
        bpts = {p["point"]: p for p in base.data["full_context"]["runs"]}
        for crun in cand.data["full_context"]["runs"]:
            pid = crun["point"]
            brun = bpts.get(pid)
            if brun is None:
                verdicts.append(Verdict.NOT_RUN)
                continue
            problems, comps = [], []
            for br, cr in zip(brun["records"], crun["records"], strict=False):
                for who, r in (("baseline", br), ("candidate", cr)):
                    if r["error"]:
                        problems.append(f"the {who} request failed: {r['error']}")
                    elif r["prompt_tokens"] != crun["context"] or r["completion_tokens"] != crun["max_tokens"]:
                        problems.append(
                            f"the {who} reported {r['prompt_tokens']} prompt + {r['completion_tokens']} "
                            f"completion tokens, expected {crun['context']} + {crun['max_tokens']}"
                        )
                if br["error"] or cr["error"]:
                    continue
                comps.append(compare_greedy(br["token_ids"], cr["token_ids"], _tops(br), _tops(cr), top_k=eq.top_k))
            summ = summarize_greedy(comps) if comps else None
            if summ is not None:
                if summ.close_fraction < eq.min_close_fraction:
                    problems.append(
                        f"{summ.n_requests - summ.n_close} of {summ.n_requests} outputs break the "
                        f"check_logprobs_close rule"
                    )
                if summ.max_abs_logprob_diff is not None and summ.max_abs_logprob_diff > eq.max_abs_logprob_diff:
                    problems.append(f"max |Δ logprob| {summ.max_abs_logprob_diff:.4f} > {eq.max_abs_logprob_diff:g}")
                if summ.kl_mean is not None and summ.kl_mean > eq.max_kl:
                    problems.append(f"mean top-k KL {summ.kl_mean:.4f} > {eq.max_kl:g}")
            # Batch composition is recorded, not gated: long prompts prefill one after another (chunked prefill
            # admits one long prompt at a time), so short generations may finish before the last prefill ends.
            win = next((w for w in cand.windows.values() if pid in w.points), None)
            bc = BatchCheck.model_validate(crun["batch_check"]) if crun.get("batch_check") else None
            steps_at = win.steps_at(crun["batch"]) if win is not None and win.available else None
            v = Verdict.FAIL if problems else (Verdict.PASS if comps else Verdict.NOT_RUN)
            verdicts.append(v)
            rows.append(
                {
                    "feature": "full_context",
                    "group": gid,
                    "point": pid,
                    "batch": crun["batch"],
                    "context": crun["context"],
                    "max_tokens": crun["max_tokens"],
                    "verdict": v.value,
                    "n_close": summ.n_close if summ else None,
                    "n_exact": summ.n_exact if summ else None,
                    "max_abs_logprob_diff": summ.max_abs_logprob_diff if summ else None,
                    "kl_mean": summ.kl_mean if summ else None,
                    "batch_verified": bc.verified if bc else None,
                    "batch_evidence": bc.detail if bc else None,
                    "trace_decode_steps_at_batch": steps_at[0] if steps_at else None,
                    "detail": "; ".join(problems),
                }
            )
            if problems:
                first = next((c for c in comps if not c.exact_match), None)
                ev = ""
                if first is not None:
                    i = comps.index(first)
                    ev = (
                        f"; request {i}: first divergence at token {first.first_divergence} ({first.close_reason}); "
                        f"baseline {clip(brun['records'][i]['text'], 50)} vs candidate {clip(crun['records'][i]['text'], 50)}"
                    )
                failures.append(
                    f"{pid} (batch {crun['batch']}, {crun['context']}-token prompts filling max_model_len): "
                    + "; ".join(problems[:3])
                    + ev
                )
        v = fold_verdicts(verdicts)
        return Outcome(
            feature="full_context",
            verdict=v,
            reason=f"full context: {sum(x is Verdict.PASS for x in verdicts)}/{len(verdicts)} points pass",
            rows=rows,
            failures=failures,
        )

    # ---------------------------------------------------------------- API behaviour

    def _judge_seeded_sampling(self, ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
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
            reason=f"seeded sampling: same seed, same output on the candidate ({same}/{len(cd['seeds'])} equal across sides)",
            rows=rows,
            failures=failures,
        )

    def _judge_stop_sequences(self, ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
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

    def _judge_max_tokens(self, ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
        rows, failures, verdicts = [], [], []
        for who, sd in (("baseline", base), ("candidate", cand)):
            d = sd.data["max_tokens"]
            for r in d["requests"]:
                ok = (
                    r["n_tokens"] == r["max_tokens"]
                    and r["usage"] == r["max_tokens"]
                    and r["finish_reason"] == "length"
                )
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

    def _judge_n_best(self, ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
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

    def _judge_logprobs(self, ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
        eq = ctx.scope.gates.equivalence
        rows, failures, verdicts = [], [], []
        for who, sd in (("baseline", base), ("candidate", cand)):
            d = sd.data["logprobs"]
            problems = _logprob_problems(d, eq.top_k)
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
        if failures or _logprob_problems(bd, eq.top_k):
            return Outcome(
                feature="logprobs",
                verdict=fold_verdicts(verdicts) if failures else Verdict.NOT_RUN,
                reason="returned logprobs are malformed" if failures else "the baseline's logprobs are malformed",
                rows=rows,
                failures=failures,
            )
        comp = compare_greedy(bd["token_ids"], cd["token_ids"], _tops(bd), _tops(cd), top_k=eq.top_k)
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

    def _judge_speculative_acceptance(self, ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
        bd, cd = base.data["speculative_acceptance"], cand.data["speculative_acceptance"]
        rows = []
        if not cd.get("draft_tokens") or not bd.get("draft_tokens"):
            return Outcome(
                feature="speculative_acceptance",
                verdict=Verdict.NOT_RUN,
                reason=f"{gid}: the engine reported no vllm:spec_decode_* draft tokens",
                rows=[{"feature": "speculative_acceptance", "group": gid, "verdict": "not_run"}],
            )
        rate_b = bd["accepted_tokens"] / bd["draft_tokens"]
        ci_c = wilson_interval(int(cd["accepted_tokens"]), int(cd["draft_tokens"]))
        ok = ci_c.ci_high >= rate_b
        v = Verdict.PASS if ok else Verdict.FAIL
        al = {
            k: (1 + d["accepted_tokens"] / d["drafts"]) if d.get("drafts") else None for k, d in (("b", bd), ("c", cd))
        }
        rows.append(
            {
                "feature": "speculative_acceptance",
                "group": gid,
                "point": cd["point"],
                "verdict": v.value,
                "baseline_acceptance_rate": rate_b,
                "candidate_acceptance_rate": ci_c.proportion,
                "candidate_ci_high": ci_c.ci_high,
                "baseline_acceptance_length": al["b"],
                "candidate_acceptance_length": al["c"],
            }
        )
        failures = (
            []
            if ok
            else [
                f"{cd['point']}: speculative acceptance rate {ci_c.proportion:.3f} (Wilson 95% upper {ci_c.ci_high:.3f}, "
                f"acceptance length {al['c']}) is below the baseline's {rate_b:.3f} (acceptance length {al['b']})"
            ]
        )
        return Outcome(
            feature="speculative_acceptance",
            verdict=v,
            reason=f"acceptance length candidate {al['c']} vs baseline {al['b']}",
            rows=rows,
            failures=failures,
        )


def _tops(d: dict[str, Any]) -> list[dict[int, float] | None]:
    out: list[dict[int, float] | None] = []
    for i, pos in enumerate(d["top"]):
        m = {int(t): float(lp) for t, lp in pos}
        lp = d["logprobs"][i] if i < len(d["logprobs"]) else None
        if lp is not None and i < len(d["token_ids"]):
            m.setdefault(int(d["token_ids"][i]), float(lp))
        out.append(m or None)
    return out


def _logprob_problems(d: dict[str, Any], top_k: int) -> list[str]:
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


class _Env:
    """One side's collection for one engine group (the per-feature request logic)."""

    def __init__(
        self, ctx: RunContext, session: EngineSession, side: SideData, base: SideData | None, check: FeaturesCheck
    ) -> None:
        self.ctx = ctx
        self.session = session
        self.side = side
        self.base = base
        self.check = check
        self.group = session.group
        self.client: Any = None
        self.chat_ok: bool | None = None
        """Whether the chat endpoint works for this model (None until tried)."""
        self.tok = TokenizerClient(session.engine)
        self.prompts: list[PromptItem] = load_prompt_set(prompt_set_path(ctx))
        self.builder = PromptBuilder(self.tok, load_passages())

    @contextlib.asynccontextmanager
    async def window(
        self, point_id: str, name: str, *, points: dict[str, int | None] | None = None
    ) -> AsyncIterator[EvidenceWindow]:
        """A profiler window attributed to ``point_id`` (or to ``points``, split by batch size); its record is kept
        under its name."""
        win = EvidenceWindow(
            self.ctx,
            self.session.engine,
            check=self.check.name,
            name=f"features-{name}-{point_id}",
            points=points or {point_id: None},
            side=self.session.side,
        )
        async with win:
            yield win
        if win.record is not None:
            self.side.windows[win.record.name] = win.record

    async def probe_short(self, batches: list[int], *, wave: int | None, structured: bool) -> None:
        """Path evidence for the short-context points: at every batch size, a structured-output round (the smallest
        schema; a plain greedy round when structured output is not tested) of PROBE_TOKENS tokens and, at the
        sampling batch, two sampling requests (``n = wave``, 2 tokens); one profiler window, split by batch size."""
        cases = load_schema_cases()
        case = min(cases, key=lambda c: (len(json.dumps(c.schema_)), c.name))
        rf = {"type": "json_schema", "json_schema": {"name": case.name, "schema": case.schema_, "strict": True}}
        pids = {b: self._point(b) for b in batches}
        async with self.window(pids[batches[0]], "probe", points={pid: b for b, pid in pids.items()}):
            for b in batches:
                if structured:
                    prompts = [case.prompts[(i + b) % len(case.prompts)] for i in range(b)]
                    await run_batched(
                        lambda prompts=prompts: [
                            self._structured_request(p, rf, max_tokens=PROBE_TOKENS) for p in prompts
                        ],
                        client=self.client,
                        target=b,
                        attempts=2,
                    )
                else:
                    prompts = [self.prompts[(i + b) % len(self.prompts)].prompt for i in range(b)]
                    await run_batched(
                        lambda prompts=prompts: [
                            self.client.complete(p, max_tokens=PROBE_TOKENS, temperature=0.0, ignore_eos=True)
                            for p in prompts
                        ],
                        client=self.client,
                        target=b,
                        attempts=2,
                    )
            if wave is not None:
                for k in range(2):
                    await self.client.complete(
                        self.prompts[0].prompt, max_tokens=2, temperature=1.0, seed=k * wave, n=wave, ignore_eos=True
                    )

    async def probe_full(self, points: list[Any]) -> None:
        """Path evidence for the full-context points: each point's prompts, PROBE_TOKENS tokens; one window."""
        async with self.window(points[0].id, "probe", points={p.id: p.batch for p in points}):
            for p in points:
                ids_all = await self.full_prompts(p)
                await run_batched(
                    lambda ids_all=ids_all: [
                        self.client.complete(ids, max_tokens=PROBE_TOKENS, temperature=0.0, ignore_eos=True)
                        for ids in ids_all
                    ],
                    client=self.client,
                    target=p.batch,
                    attempts=2,
                )

    def _point(self, batch: int) -> str:
        p = short_point(self.ctx, self.group, batch)
        assert p is not None
        return p.id

    async def _gather(self, coros: list[Awaitable[Any]]) -> list[Any]:
        res = await asyncio.gather(*coros, return_exceptions=True)
        _reraise_fatal(res)
        return res

    # -- structured output

    async def structured(self, batches: list[int]) -> None:
        """Every schema at every batch size (``b`` requests at once, greedy)."""
        from jsonschema import Draft202012Validator

        cases = load_schema_cases()
        data = self.side.data.setdefault("structured_output", {"records": [], "points": []})
        pids = {b: self._point(b) for b in batches}
        data["points"].extend(pids.values())

        async def round_(case: Any, batch: int) -> None:
            prompts = [case.prompts[(i + batch) % len(case.prompts)] for i in range(batch)]
            rf = {"type": "json_schema", "json_schema": {"name": case.name, "schema": case.schema_, "strict": True}}
            res, bc = await run_batched(
                lambda: [self._structured_request(p, rf) for p in prompts], client=self.client, target=batch, attempts=1
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
                        text="", finish_reason=None, completion_tokens=0, valid=False, why=f"request failed: {_err(r)}"
                    )
                else:
                    rec.update(
                        text=r.text,
                        finish_reason=r.finish_reason,
                        completion_tokens=len(r.token_ids or []) or (r.usage.completion_tokens if r.usage else 0),
                    )
                    rec.update(_validate_json(r.text, validator, r.finish_reason))
                rec["endpoint"] = "chat" if self.chat_ok else "completion"
                data["records"].append(rec)

        for case in cases:
            for b in batches:
                await round_(case, b)

    async def _structured_request(self, prompt: str, rf: dict[str, Any], *, max_tokens: int = JSON_MAX_TOKENS) -> Any:
        """A chat request (how structured output is used in practice); completions when the model has no chat template."""
        from fasttrack.engine import EngineRequestError

        if self.chat_ok is not False:
            try:
                r = await self.client.chat(
                    [{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0, response_format=rf
                )
                self.chat_ok = True
                return r
            except EngineRequestError as exc:
                if self.chat_ok is None and exc.status_code == 400 and "template" in exc.server_message.lower():
                    self.chat_ok = False
                else:
                    raise
        return await self.client.complete(prompt, max_tokens=max_tokens, temperature=0.0, response_format=rf)

    # -- temperature sampling

    async def _greedy_two(self, items: list[PromptItem]) -> list[Any]:
        return await self._gather(
            [
                self.client.complete(
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

    async def _choose_prompt(self, wave: int) -> dict[str, Any]:
        """Pick the sampling prompt: the most probable greedy first token, with a spread second position."""
        cands = self.prompts[:SAMPLING_SELECTION_PROMPTS]
        scored = []
        for i in range(0, len(cands), max(1, wave)):
            chunk = cands[i : i + max(1, wave)]
            for it, r in zip(chunk, await self._greedy_two(chunk), strict=False):
                if isinstance(r, BaseException) or len(r.logprobs or []) < 2:
                    continue
                p0, p1 = r.logprobs[0], r.logprobs[1]
                second = {t.token_id: t.logprob for t in p1.top if t.token_id is not None}
                probs = sorted((math.exp(v) for v in second.values()), reverse=True)
                p_first = math.exp(p0.logprob or -1e9)
                spread_ok = bool(probs) and probs[0] <= 0.8 and sum(1 for q in probs if q >= 0.02) >= 4
                scored.append((spread_ok, p_first, it, r))
        if not scored:
            raise _FeatureError("no sampling prompt produced two tokens with logprobs")
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
        self,
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
            r = await self.client.complete(
                prompt, max_tokens=2, temperature=temperature, seed=seed0 + k * wave, n=wave, ignore_eos=True, **mask
            )
            k += 1
            for ch in r.choices:
                ids = _choice_ids(ch)
                if len(ids) >= 2 and ids[0] == first:
                    out.append(int(ids[1]))
        return out[:need], k

    async def sampling(self, wave: int) -> None:
        fg = self.ctx.scope.gates.features
        pid = self._point(wave)
        data = self.side.data.setdefault("temperature_sampling", {"points": []})
        data["points"].append(pid)
        data.update(point=pid, wave=wave, samples={}, requests={}, masks=[], masks_skipped=[])
        ref_data = (self.base.data.get("temperature_sampling") or {}) if self.base is not None else {}
        ref = ref_data.get("reference")
        if ref is not None:
            data["selection"] = "baseline"
            choice = ref
            own = await self._greedy_two([next(p for p in self.prompts if p.id == ref_data["prompt_id"])])
            if not isinstance(own[0], BaseException) and own[0].token_ids:
                data["own_first_token"] = int(own[0].token_ids[0])
        else:
            data["selection"] = "own" if self.session.side == "candidate" else "baseline"
            choice = await self._choose_prompt(wave)
            choice["first_token_text"] = await self.tok.detokenize([choice["first_token"]])
        data["prompt_id"] = ref_data.get("prompt_id") if ref is not None else choice["prompt_id"]
        data["prompt_text"] = ref_data.get("prompt_text") if ref is not None else choice["prompt_text"]
        data["first_token"] = choice["first_token"]
        if self.session.side == "baseline" or ref is None:
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
            got, used = await self._draw(
                prompt, first, need=need, wave=wave, temperature=t, seed0=1_000_000 * (i + 1), max_requests=max_req
            )
            data["samples"][f"{t:g}"] = got
            data["requests"][f"{t:g}"] = used
        # masks (at T=1 on the same decode position)
        mask_need = self.check.mask_samples
        max_req = math.ceil(mask_need / (wave * max(p_first, 0.1)) * 1.5) + 2
        got, _ = await self._draw(
            prompt,
            first,
            need=mask_need,
            wave=wave,
            temperature=1.0,
            seed0=7_000_000,
            max_requests=max_req,
            top_k=MASK_TOP_K,
        )
        data["masks"].append({"name": f"top_k={MASK_TOP_K} mask", "top_k": MASK_TOP_K, "samples": got})
        known = sum(math.exp(v) for v in choice["second_position"].values())
        if known >= MASK_TOP_P + 0.05:
            got, _ = await self._draw(
                prompt,
                first,
                need=mask_need,
                wave=wave,
                temperature=1.0,
                seed0=8_000_000,
                max_requests=max_req,
                top_p=MASK_TOP_P,
            )
            data["masks"].append({"name": f"top_p={MASK_TOP_P:g} mask", "top_p": MASK_TOP_P, "samples": got})
        else:
            data["masks_skipped"].append(
                {
                    "name": f"top_p={MASK_TOP_P:g} mask",
                    "why": f"the top-{SAMPLING_TOP_LOGPROBS} logprobs carry only {known:.2f} of the "
                    "mass, so the nucleus is not known",
                }
            )

    async def zero_temperature(self, batch: int) -> None:
        """Temperature 0 with seeds, top-k and top-p equals the greedy output (``batch`` variants at once)."""
        data = self.side.data.setdefault("temperature_sampling", {"points": []})
        pid = self._point(batch)
        data["points"].append(pid)
        prompt = self.prompts[2].prompt
        variants: list[dict[str, Any]] = [{}, {"seed": 11}, {"seed": 12, "top_p": 0.5, "top_k": 3}]
        variants = (variants * batch)[: max(batch, 1)]
        for i, v in enumerate(variants):
            if i >= 3:
                v = dict(v, seed=100 + i)
                variants[i] = v
        res = await self._gather(
            [self.client.complete(prompt, max_tokens=8, temperature=0.0, ignore_eos=True, **v) for v in variants]
        )
        outs = []
        for r in res:
            if isinstance(r, BaseException):
                raise _FeatureError(f"a temperature-0 request failed: {_err(r)}")
            outs.append(list(r.token_ids or []))
        data["zero_temperature"] = {"point": pid, "variants": variants, "outputs": outs}

    # -- full context

    async def full_context(self, points: list[Any]) -> None:
        """At every full-context point, ``batch`` prompts of exactly ``context`` tokens, greedy to max_model_len."""
        eq = self.ctx.scope.gates.equivalence
        data = self.side.data.setdefault("full_context", {"runs": [], "points": []})
        data["points"].extend(p.id for p in points)
        for point in points:
            await self._full_round(point, eq)

    async def full_prompts(self, point: Any) -> list[list[int]]:
        return [await self.builder.exact(key=f"{point.id}/{j}", length=point.context) for j in range(point.batch)]

    async def _full_round(self, point: Any, eq: Any) -> None:
        data = self.side.data["full_context"]
        ids_all = await self.full_prompts(point)
        max_tokens = (
            (self.ctx.scope.envelope.context.max_model_len - point.context)
            if self.ctx.scope.envelope
            else eq.max_tokens
        )
        res, bc = await run_batched(
            lambda: [
                self.client.complete(
                    ids, max_tokens=max_tokens, temperature=0.0, logprobs=eq.top_k, tokens_as_ids=True, ignore_eos=True
                )
                for ids in ids_all
            ],
            client=self.client,
            target=point.batch,
            attempts=1,
        )
        recs = []
        for ids, r in zip(ids_all, res, strict=False):
            if isinstance(r, BaseException):
                recs.append(
                    {
                        "error": _err(r),
                        "prompt_tokens": len(ids),
                        "completion_tokens": 0,
                        "token_ids": [],
                        "logprobs": [],
                        "top": [],
                        "text": "",
                    }
                )
                continue
            ch = r.choice
            pos = ch.logprobs or []
            recs.append(
                {
                    "error": None,
                    "prompt_tokens": r.usage.prompt_tokens if r.usage else len(ids),
                    "completion_tokens": r.usage.completion_tokens if r.usage else len(ch.token_ids or []),
                    "token_ids": list(ch.token_ids or []),
                    "logprobs": [p.logprob for p in pos],
                    "top": [[(t.token_id, t.logprob) for t in p.top if t.token_id is not None] for p in pos],
                    "text": ch.text,
                }
            )
        data["runs"].append(
            {
                "point": point.id,
                "batch": point.batch,
                "context": point.context,
                "max_tokens": max_tokens,
                "records": recs,
                "batch_check": bc.model_dump(),
            }
        )

    # -- API behaviour

    async def seeds(self, batch: int) -> None:
        pid = self._point(batch)
        seeds = [4242 + i for i in range(max(batch, 1))]
        prompts = [self.prompts[(i * 5) % len(self.prompts)].prompt for i in range(len(seeds))]

        async def run(order: list[int]) -> dict[str, list[int]]:
            res = await self._gather(
                [
                    self.client.complete(prompts[i], max_tokens=12, temperature=1.0, seed=seeds[i], ignore_eos=True)
                    for i in order
                ]
            )
            out = {}
            for i, r in zip(order, res, strict=False):
                if isinstance(r, BaseException):
                    raise _FeatureError(f"a seeded request failed: {_err(r)}")
                out[str(seeds[i])] = list(r.token_ids or [])
            return out

        idx = list(range(len(seeds)))
        first = await run(idx)
        second = await run(idx[::-1])
        self.side.data["seeded_sampling"] = {
            "point": pid,
            "points": [pid],
            "seeds": seeds,
            "first": first,
            "second": second,
        }

    async def stop(self, batch: int) -> None:
        pid = self._point(batch)
        prompt = self.prompts[3].prompt
        g = await self.client.complete(prompt, max_tokens=16, temperature=0.0, ignore_eos=True)
        ids = list(g.token_ids or [])
        base = (self.base.data.get("stop_sequences") if self.base is not None else None) or {}
        stop = base.get("stop")
        if stop is None:
            stop = await _pick_stop(self.tok, ids, g.text)
        r = await self.client.complete(prompt, max_tokens=16, temperature=0.0, ignore_eos=True, stop=[stop])
        self.side.data["stop_sequences"] = {
            "point": pid,
            "points": [pid],
            "stop": stop,
            "greedy_text": g.text,
            "text": r.text,
            "finish_reason": r.finish_reason,
            "stop_reason": r.choice.stop_reason,
        }

    async def max_tokens(self, batch: int) -> None:
        pid = self._point(batch)
        limits = [(3, 7, 11)[i % 3] + 4 * (i // 3) for i in range(max(batch, 1))]
        prompts = [self.prompts[(i * 3 + 1) % len(self.prompts)].prompt for i in range(len(limits))]
        res = await self._gather(
            [
                self.client.complete(p, max_tokens=m, temperature=0.0, ignore_eos=True)
                for p, m in zip(prompts, limits, strict=False)
            ]
        )
        reqs = []
        for m, r in zip(limits, res, strict=False):
            if isinstance(r, BaseException):
                reqs.append({"max_tokens": m, "n_tokens": -1, "usage": -1, "finish_reason": f"error: {_err(r)}"})
            else:
                reqs.append(
                    {
                        "max_tokens": m,
                        "n_tokens": len(r.token_ids or []),
                        "usage": r.usage.completion_tokens if r.usage else -1,
                        "finish_reason": r.finish_reason,
                    }
                )
        self.side.data["max_tokens"] = {"point": pid, "points": [pid], "requests": reqs}

    async def n_best(self, batch: int) -> None:
        pid = self._point(batch)
        n, mt, t = max(batch, 2), 8, 0.8
        prompt = self.prompts[7].prompt
        outs = []
        for _ in range(2):
            r = await self.client.complete(prompt, max_tokens=mt, temperature=t, seed=99, n=n, ignore_eos=True)
            outs.append([_choice_ids(c) for c in r.choices])
        self.side.data["n_best"] = {
            "point": pid,
            "points": [pid],
            "n": n,
            "max_tokens": mt,
            "temperature": t,
            "first": outs[0],
            "second": outs[1],
        }

    async def logprobs(self, batch: int) -> None:
        eq = self.ctx.scope.gates.equivalence
        pid = self._point(batch)
        prompt = self.prompts[11].prompt
        r = await self.client.complete(
            prompt, max_tokens=8, temperature=0.0, logprobs=eq.top_k, tokens_as_ids=True, ignore_eos=True
        )
        pos = r.logprobs or []
        self.side.data["logprobs"] = {
            "point": pid,
            "points": [pid],
            "token_ids": list(r.token_ids or []),
            "logprobs": [p.logprob for p in pos],
            "top": [[(t.token_id, t.logprob) for t in p.top if t.token_id is not None] for p in pos],
        }

    async def speculative(self, batch: int) -> None:
        from fasttrack.engine import metrics_diff, scrape_metrics

        pid = self._point(batch)
        before = await scrape_metrics(self.session.engine)
        for i in range(SPEC_ACCEPTANCE_PROMPTS):
            await self._gather(
                [
                    self.client.complete(
                        self.prompts[(i * batch + j) % len(self.prompts)].prompt,
                        max_tokens=SPEC_ACCEPTANCE_TOKENS,
                        temperature=0.0,
                        ignore_eos=True,
                    )
                    for j in range(batch)
                ]
            )
        d = metrics_diff(before, await scrape_metrics(self.session.engine))
        self.side.data["speculative_acceptance"] = {
            "point": pid,
            "points": [pid],
            "drafts": d.delta("vllm:spec_decode_num_drafts_total") or d.delta("vllm:spec_decode_num_drafts"),
            "draft_tokens": d.delta("vllm:spec_decode_num_draft_tokens_total")
            or d.delta("vllm:spec_decode_num_draft_tokens"),
            "accepted_tokens": (
                d.delta("vllm:spec_decode_num_accepted_tokens_total") or d.delta("vllm:spec_decode_num_accepted_tokens")
            ),
        }


class _FeatureError(FasttrackError):
    """A feature's requests could not produce the measurements the test needs."""


async def _pick_stop(tok: TokenizerClient, ids: list[int], text: str) -> str:
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


def _validate_json(text: str, validator: Any, finish_reason: str | None) -> dict[str, Any]:
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
