"""Performance: every workload at every config point it covers, both sides, gated per point.

For each engine lifetime the pipeline hands over (or, interleaved, each pair of
lifetimes: ``collect_pair``), the check measures the tier's
workloads (``fasttrack.perf.workloads``) at the group's points with the lean load
generator (``fasttrack.perf.loadgen``): one discarded warm-up wave per point, then
runs. The engine lifetime is the unit of replication; runs within it are repeated
measurements. Adaptive repetition (``fasttrack.perf.schedule``) adds runs to an
undecided point on the lifetimes where looks are allowed and skips decided points
on later lifetimes; every row says how many runs it took.

The gate (``fasttrack.perf.analysis``), per (workload, point): the hierarchical
bootstrap interval of the speedup of ``gates.perf.gated_metric`` (lifetimes, then
runs; with ``gates.perf.interleave`` the two sides' engines are up together, their
runs alternate, and run pairs are resampled together), Bonferroni-corrected over the
planned looks; pass iff its lower end is at
least ``1 - noise_margin``. Overall: every point must pass (intersection-union);
"strictly better" (lower end > 1 everywhere) is reported separately. Every row
carries its minimum detectable effect at 80% power, raw per-run values, and the
``runs`` table keeps every request's samples. With one lifetime per side (smoke)
the result says that its intervals ignore lifetime variance. Claims in the scope are
matched to the measured points (``fasttrack.perf.claims``).

Metric definitions: ``fasttrack.perf.metrics`` and docs/perf.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fasttrack.checks.base import SIDES, Check, CheckResult, EngineSession, Gate, RunContext, Verdict, register
from fasttrack.engine.errors import EngineCrashed, EngineUnreachable
from fasttrack.errors import FasttrackError
from fasttrack.perf.analysis import ItemState, drift_row, judge_item, look, look_summary
from fasttrack.perf.claims import MeasuredMetric, match_claims
from fasttrack.perf.loadgen import PerfClient, run_loop, timed
from fasttrack.perf.metrics import METRICS, RunMetrics, compute_run_metrics
from fasttrack.perf.schedule import LookSchedule
from fasttrack.perf.tokens import TokenPool, pool_from_engine
from fasttrack.perf.trace import Trace, TraceError, load_trace
from fasttrack.perf.workloads import RunInputs, WorkItem, execute, plan_items, warm_up

NAME = "perf"


@dataclass
class _State:
    prepared: bool = False
    items: dict[str, ItemState] = field(default_factory=dict)
    """By item key, in measurement order."""
    schedules: dict[str, LookSchedule] = field(default_factory=dict)
    """By engine group id."""
    traces: dict[str, Trace] = field(default_factory=dict)
    """By workload name."""
    prompt_set: str | None = None
    notes: list[str] = field(default_factory=list)
    lifetimes: list[dict[str, Any]] = field(default_factory=list)
    """One record per engine lifetime measured: side, group, lifetime, seconds, runs, items skipped."""
    errors: list[str] = field(default_factory=list)
    """Harness-side failures that ended a lifetime's measurements early."""


def gpus_from_args(args: list[str], default: int) -> int:
    """GPUs one engine uses: tensor x pipeline x data parallel sizes from its arguments (``default`` without them)."""

    def last(*names: str) -> int | None:
        val = None
        for i, a in enumerate(args):
            for n in names:
                if a == n and i + 1 < len(args):
                    val = args[i + 1]
                elif a.startswith(n + "="):
                    val = a.split("=", 1)[1]
        try:
            return int(val) if val is not None else None
        except ValueError:
            return None

    tp = last("--tensor-parallel-size", "-tp")
    if tp is None:
        return default
    pp = last("--pipeline-parallel-size", "-pp") or 1
    dp = last("--data-parallel-size", "-dp") or 1
    return tp * pp * dp


def _engine_gpus(engine: Any, group: Any) -> int:
    """GPUs one engine of ``group`` uses (0 on CPU hosts)."""
    return gpus_from_args(list(getattr(engine, "args", []) or []), group.gpus) if group.gpus else 0


async def measure_item(
    s: ItemState,
    *,
    side: str,
    lifetime: int,
    looks_here: bool,
    sched: LookSchedule,
    gate: Any,
    run_once: Callable[[int], Awaitable[RunMetrics]],
) -> int:
    """Take the runs of one item on one lifetime (adaptive repetition); returns the number of runs taken.

    Without looks on this lifetime: ``min_runs`` runs. With looks: ``min_runs`` runs,
    then a look after every run until a look is final or ``max_runs`` runs were taken.
    """
    runs_here = 0
    limit = gate.max_runs if looks_here else gate.min_runs
    while runs_here < limit:
        try:
            rm = await run_once(runs_here)
        except (EngineCrashed, EngineUnreachable):
            raise
        except Exception as exc:  # noqa: BLE001 - a harness-side failure is recorded, not raised
            s.errors.append(f"{side} lifetime {lifetime} run {runs_here}: {type(exc).__name__}: {exc}")
            break
        s.add(rm)
        runs_here += 1
        if looks_here and runs_here >= gate.min_runs and take_look(s, gate=gate, sched=sched):
            break
    return runs_here


def take_look(s: ItemState, *, gate: Any, sched: LookSchedule) -> bool:
    """One sequential look at the gated metric, once both sides have samples of it; True when it is final."""
    if not (s.has_samples("baseline", gate.gated_metric) and s.has_samples("candidate", gate.gated_metric)):
        return False
    d = look(
        s,
        metric=gate.gated_metric,
        noise_margin=gate.noise_margin,
        confidence=gate.confidence,
        look_no=len(s.looks) + 1,
        planned_looks=sched.planned_looks,
        interval=gate.interval,
    )
    s.looks.append(look_summary(d, s))
    s.decision, s.final = d.decision, d.final
    return d.final


PAIR_ORDERS = (("baseline", "candidate"), ("candidate", "baseline"))
"""Interleaved runs: pair k runs the sides in ``PAIR_ORDERS[k % 2]`` (B C, C B, B C, ...), so neither side
always goes first and a steady drift of the host cancels over two pairs."""


async def measure_pair(
    s: ItemState,
    *,
    lifetime: int,
    looks_here: bool,
    sched: LookSchedule,
    gate: Any,
    run_once: dict[str, Callable[[int], Awaitable[RunMetrics]]],
) -> dict[str, int]:
    """Interleaved runs of one item on one pair of lifetimes (both engines up); returns runs per side.

    Pair k is one run of each side, back to back (order alternating, ``PAIR_ORDERS``), with
    ``gate.interleave_settle_s`` between consecutive runs (the engine that just ran settles
    before the other one starts).
    Without looks on this pair: ``min_runs`` pairs. With looks: ``min_runs`` pairs, then a
    look after every pair until a look is final or ``max_runs`` pairs were taken. A
    harness-side failure ends the item's runs on this pair (recorded); a pair left
    incomplete makes the sides' layouts differ, and the interval then says it was not
    paired.
    """
    s.interleaved = True
    taken = {"baseline": 0, "candidate": 0}
    limit = gate.max_runs if looks_here else gate.min_runs
    settle = gate.interleave_settle_s
    for k in range(limit):
        for i, side in enumerate(PAIR_ORDERS[k % 2]):
            if settle and (k or i):
                await asyncio.sleep(settle)
            try:
                rm = await run_once[side](k)
            except (EngineCrashed, EngineUnreachable):
                raise
            except Exception as exc:  # noqa: BLE001 - a harness-side failure is recorded, not raised
                s.errors.append(f"{side} lifetime {lifetime} run {k}: {type(exc).__name__}: {exc}")
                return taken
            s.add(rm)
            taken[side] += 1
        if looks_here and k + 1 >= gate.min_runs and take_look(s, gate=gate, sched=sched):
            break
    return taken


async def measure_drift(s: ItemState, *, gate: Any, run_once: Callable[[int], Awaitable[RunMetrics]]) -> int:
    """A drift-only lifetime: ``min_runs`` baseline runs kept apart from the gate's data."""
    n = 0
    for k in range(gate.min_runs):
        try:
            s.drift_runs.append(await run_once(k))
        except (EngineCrashed, EngineUnreachable):
            raise
        except Exception as exc:  # noqa: BLE001
            s.errors.append(f"drift lifetime run {k}: {type(exc).__name__}: {exc}")
            break
        n += 1
    return n


@register
class PerfCheck(Check):
    name = NAME
    title = "Performance"
    required = True
    needs_engine = True

    def __init__(self) -> None:
        self.state = _State()

    # ------------------------------------------------------------------ planning

    def _workloads(self, ctx: RunContext) -> list[Any]:
        sel = ctx.plan.workloads
        return [w for w in ctx.scope.workloads if sel is None or w.name in sel]

    def _max_model_len(self, ctx: RunContext) -> int:
        env = ctx.scope.envelope
        return env.context.max_model_len if env is not None else 0

    def _prepare(self, ctx: RunContext) -> None:
        st = self.state
        if st.prepared:
            return
        st.prepared = True
        gate = ctx.scope.gates.perf
        loaded = ctx.shared.get("loaded_scope")
        for w in self._workloads(ctx):
            if w.kind == "trace_replay":
                if not w.trace:
                    raise TraceError(
                        f"workload {w.name!r} is a trace_replay without a 'trace' file.",
                        hint="Set workloads[].trace to a JSONL trace relative to the scope file (docs/perf.md).",
                    )
                path = loaded.resolve(w.trace) if loaded is not None else None
                if path is None:
                    raise TraceError(f"workload {w.name!r}: cannot resolve the trace path without the loaded scope.")
                tr = load_trace(path)
                if w.requests_per_run:
                    tr = tr.head(w.requests_per_run)
                st.traces[w.name] = tr
            elif w.kind == "mixed" and not w.arrival_rate:
                raise FasttrackError(
                    f"workload {w.name!r} is 'mixed' but has no arrival_rate.",
                    hint="Give arrival_rate (requests/s of the seeded Poisson arrivals).",
                )
        if any(w.kind == "prompts" for w in self._workloads(ctx)):
            from fasttrack.checks._common import load_prompt_set, prompt_set_path

            path = prompt_set_path(ctx)
            load_prompt_set(path)  # validates
            st.prompt_set = str(path)
            for w in self._workloads(ctx):
                if w.kind == "prompts" and w.prompts and loaded is not None and not loaded.resolve(w.prompts).is_file():
                    st.notes.append(
                        f"workload {w.name!r}: prompt set {w.prompts} does not exist; the shipped set {path} was used"
                    )
        mml = self._max_model_len(ctx)
        for g in ctx.plan.groups:
            st.schedules[g.id] = LookSchedule.for_group(
                g.order, min_runs=gate.min_runs, max_runs=gate.max_runs, interleaved=gate.interleave
            )
            for it in plan_items(ctx.plan, g, self._workloads(ctx), max_model_len=mml):
                st.items[it.key] = ItemState(item=it)
        for w in self._workloads(ctx):
            if w.kind in ("pure_decode", "context_sweep") and w.input_len is not None:
                st.notes.append(
                    f"workload {w.name!r}: input_len {w.input_len} is not used by {w.kind} "
                    "(prompts are each point's context)"
                )
        if gate.gated_metric not in gate.metrics:
            st.notes.append(f"gated_metric {gate.gated_metric} is reported although not listed in gates.perf.metrics")

    def skip_reason(self, ctx: RunContext) -> str | None:
        if not ctx.scope.workloads:
            return "the scope declares no perf workloads"
        if not self._workloads(ctx):
            return f"the {ctx.tier} tier selects no perf workload"
        try:
            self._prepare(ctx)
        except FasttrackError as exc:
            self.state = _State()
            return exc.message
        if not self.state.items:
            return "the plan has no config point for the selected workloads"
        return None

    def paired(self, ctx: RunContext) -> bool:
        return ctx.scope.gates.perf.interleave

    def wants(self, ctx: RunContext, session: EngineSession) -> bool:
        self._prepare(ctx)
        if self.state.schedules[session.group.id].is_drift_lifetime(session.side, session.lifetime):
            return True
        if self.paired(ctx):
            return False  # measured on pairs of engines (collect_pair)
        return self._undecided(session.group.id)

    def wants_pair(self, ctx: RunContext, group: Any, lifetime: int) -> bool:
        self._prepare(ctx)
        return self.paired(ctx) and self._undecided(group.id)

    def _undecided(self, group_id: str) -> bool:
        return any(s.item.group == group_id and not s.final for s in self.state.items.values())

    # ------------------------------------------------------------------ collection

    def collect(self, ctx: RunContext, session: EngineSession) -> None:
        self._prepare(ctx)
        try:
            run_loop(self._collect(ctx, session))
        except (EngineCrashed, EngineUnreachable):
            raise  # the pipeline reports dead engines
        except Exception as exc:  # noqa: BLE001 - recorded; points without data are reported as not measured
            msg = f"{session.group.id} {session.side} lifetime {session.lifetime}: {type(exc).__name__}: {exc}"
            self.state.errors.append(msg)
            ctx.log(f"  perf: measurement stopped early: {msg}")

    def collect_pair(self, ctx: RunContext, sessions: dict[str, EngineSession]) -> None:
        """Interleaved measurement on the ``lifetime``-th engines of both sides, both up."""
        self._prepare(ctx)
        try:
            run_loop(self._collect_pair(ctx, sessions))
        except (EngineCrashed, EngineUnreachable):
            raise
        except Exception as exc:  # noqa: BLE001 - recorded; points without data are reported as not measured
            b = sessions["baseline"]
            msg = f"{b.group.id} interleaved lifetime {b.lifetime}: {type(exc).__name__}: {exc}"
            self.state.errors.append(msg)
            ctx.log(f"  perf: measurement stopped early: {msg}")

    async def _collect_pair(self, ctx: RunContext, sessions: dict[str, EngineSession]) -> None:
        st = self.state
        gate = ctx.scope.gates.perf
        b_sess = sessions["baseline"]
        group, lifetime = b_sess.group, b_sess.lifetime
        if sessions["candidate"].lifetime != lifetime or sessions["candidate"].group.id != group.id:
            raise ValueError("collect_pair needs the same group and lifetime index on both sides")
        sched = st.schedules[group.id]
        looks_here = sched.pair_looks_allowed(lifetime)
        items = [s for s in st.items.values() if s.item.group == group.id]
        todo = [s for s in items if not s.final]
        engines = {side: sessions[side].engine for side in SIDES}
        gpus = {side: _engine_gpus(e, group) for side, e in engines.items()}
        t_life = time.perf_counter()
        record: dict[str, Any] = {
            "group": group.id,
            "side": "interleaved",
            "lifetime": lifetime,
            "looks_allowed": looks_here,
            "drift_only": False,
            "items": len(todo),
            "skipped_decided": len(items) - len(todo),
            "runs": 0,
        }
        st.lifetimes.append(record)
        inputs = {side: await self._inputs(ctx, e, todo) for side, e in engines.items()}
        async with (
            PerfClient(engines["baseline"].base_url, model=engines["baseline"].model) as cb,
            PerfClient(engines["candidate"].base_url, model=engines["candidate"].model) as cc,
        ):
            clients = {"baseline": cb, "candidate": cc}
            for s in todo:
                it = s.item
                s.gpus.update(gpus)
                if it.mode == "trace":
                    for side in SIDES:
                        inputs[side].trace = st.traces[it.workload]
                t_item = time.perf_counter()
                n_warm: dict[str, int] = {}
                try:
                    for side in SIDES:
                        n_warm[side] = await warm_up(clients[side], it, inputs[side])
                except Exception as exc:  # noqa: BLE001 - a harness-side failure is recorded, not raised
                    s.errors.append(
                        f"interleaved lifetime {lifetime}: warm-up could not be sent: {type(exc).__name__}: {exc}"
                    )
                    continue
                run_once = {
                    side: self._runner(
                        clients[side],
                        engines[side],
                        it,
                        inputs[side],
                        side=side,
                        lifetime=lifetime,
                        gpus=gpus[side],
                        n_warm=n_warm[side],
                    )
                    for side in SIDES
                }
                taken = await measure_pair(
                    s, lifetime=lifetime, looks_here=looks_here, sched=sched, gate=gate, run_once=run_once
                )
                record["runs"] += sum(taken.values())
                ctx.log(
                    f"  perf {it.key} interleaved lifetime {lifetime}: {taken['baseline']}+{taken['candidate']} "
                    f"run(s) in {time.perf_counter() - t_item:.1f} s" + (f", {s.decision}" if s.looks else "")
                )
        record["seconds"] = round(time.perf_counter() - t_life, 2)

    @staticmethod
    def _runner(
        client: Any, engine: Any, it: WorkItem, inputs: RunInputs, *, side: str, lifetime: int, gpus: int, n_warm: int
    ) -> Callable[[int], Awaitable[RunMetrics]]:
        """One run of ``it`` on one engine, as RunMetrics (an engine that died raises EngineCrashed)."""

        async def run_once(k: int) -> RunMetrics:
            (recs, extra), tm = await timed(lambda: execute(client, it, k, inputs))
            rm = compute_run_metrics(
                recs,
                workload=it.workload,
                point=it.point,
                side=side,
                lifetime=lifetime,
                run=k,
                t_start=tm.t_start,
                t_end=tm.t_end,
                gpus=gpus,
                client_cpu_s=tm.cpu_s,
                warmup_requests=n_warm if k == 0 else 0,
                extra=extra,
                started_at=tm.wall_start,
            )
            if rm.failed:
                engine.check_alive()  # an engine that died ends the run (EngineCrashed)
            return rm

        return run_once

    async def _inputs(self, ctx: RunContext, engine: Any, items: list[ItemState]) -> RunInputs:
        pool: TokenPool = await pool_from_engine(engine)
        real: list[list[int]] = []
        if any(s.item.kind == "prompts" for s in items) and self.state.prompt_set:
            from pathlib import Path

            from fasttrack.checks._common import TokenizerClient, load_prompt_set

            tok = TokenizerClient(engine)
            for p in load_prompt_set(Path(self.state.prompt_set)):
                real.append(await tok.tokenize(p.prompt, add_special_tokens=True))
        return RunInputs(pool=pool, real_prompts=real, max_model_len=self._max_model_len(ctx))

    async def _collect(self, ctx: RunContext, session: EngineSession) -> None:
        st = self.state
        gate = ctx.scope.gates.perf
        group, side, lifetime, engine = session.group, session.side, session.lifetime, session.engine
        sched = st.schedules[group.id]
        looks_here = sched.looks_allowed(side, lifetime)
        drift_only = sched.is_drift_lifetime(side, lifetime)
        items = [s for s in st.items.values() if s.item.group == group.id]
        todo = items if drift_only else [s for s in items if not s.final]
        gpus = _engine_gpus(engine, group)
        t_life = time.perf_counter()
        record: dict[str, Any] = {
            "group": group.id,
            "side": side,
            "lifetime": lifetime,
            "looks_allowed": looks_here,
            "drift_only": drift_only,
            "items": len(todo),
            "skipped_decided": len(items) - len(todo),
            "runs": 0,
        }
        st.lifetimes.append(record)
        inputs = await self._inputs(ctx, engine, todo)
        async with PerfClient(engine.base_url, model=engine.model) as client:
            for s in todo:
                it = s.item
                s.gpus[side] = gpus
                if it.mode == "trace":
                    inputs.trace = st.traces[it.workload]
                t_item = time.perf_counter()
                try:
                    n_warm = await warm_up(client, it, inputs)
                except Exception as exc:  # noqa: BLE001 - a harness-side failure is recorded, not raised
                    s.errors.append(
                        f"{side} lifetime {lifetime}: warm-up could not be sent: {type(exc).__name__}: {exc}"
                    )
                    continue

                run_once = self._runner(
                    client, engine, it, inputs, side=side, lifetime=lifetime, gpus=gpus, n_warm=n_warm
                )
                if drift_only:
                    runs_here = await measure_drift(s, gate=gate, run_once=run_once)
                else:
                    runs_here = await measure_item(
                        s,
                        side=side,
                        lifetime=lifetime,
                        looks_here=looks_here,
                        sched=sched,
                        gate=gate,
                        run_once=run_once,
                    )
                record["runs"] += runs_here
                ctx.log(
                    f"  perf {it.key} {side} lifetime {lifetime}: {runs_here} run(s) in "
                    f"{time.perf_counter() - t_item:.1f} s" + (f", {s.decision}" if s.looks else "")
                )
        record["seconds"] = round(time.perf_counter() - t_life, 2)

    # ------------------------------------------------------------------ judging

    def judge(self, ctx: RunContext) -> CheckResult:
        self._prepare(ctx)
        st = self.state
        gate = ctx.scope.gates.perf
        m = gate.noise_margin
        metrics = list(dict.fromkeys([gate.gated_metric, *gate.metrics]))
        rows: list[dict[str, Any]] = []
        runs: list[dict[str, Any]] = []
        failures: list[str] = []
        verdicts: dict[str, str] = {}
        strictly: dict[str, bool] = {}
        measured: list[MeasuredMetric] = []
        drift: list[dict[str, Any]] = []
        looks: list[dict[str, Any]] = []
        one_lifetime = False
        for key, s in st.items.items():
            sched = st.schedules[s.item.group]
            j = judge_item(
                s,
                metrics=metrics,
                gated=gate.gated_metric,
                noise_margin=m,
                confidence=gate.confidence,
                planned_looks=sched.planned_looks,
                interval=gate.interval,
            )
            rows.extend(j.rows)
            verdicts[key] = j.verdict
            strictly[key] = j.strictly_better
            if j.failure:
                failures.append(j.failure)
            looks.extend(s.looks)
            for side in ("baseline", "candidate"):
                for lt in sorted(s.runs[side]):
                    runs.extend(r.model_dump(mode="json") for r in s.runs[side][lt])
            runs.extend({**r.model_dump(mode="json"), "drift_only": True} for r in s.drift_runs)
            for r in j.rows:
                if r.get("speedup") is not None:
                    one_lifetime = one_lifetime or bool(r.get("ignores_lifetime_variance"))
                    measured.append(
                        MeasuredMetric(
                            workload=s.item.workload,
                            kind=s.item.kind,
                            point=s.item.point,
                            point_dims=s.item.point_dims,
                            metric=r["metric_name"],
                            speedup=r["speedup"],
                            ci_low=r["nominal_ci_low"],
                            ci_high=r["nominal_ci_high"],
                            confidence=r["nominal_confidence"],
                            baseline_value=r["baseline"],
                            candidate_value=r["candidate"],
                            detectable_slowdown=r.get("detectable_slowdown"),
                            normalized=bool(r.get("per_gpu")),
                        )
                    )
            dr = drift_row(s, metric=gate.gated_metric, confidence=gate.confidence, tolerance=m)
            if dr is not None:
                drift.append(dr)

        kinds = {w.name: w.kind for w in ctx.scope.workloads}
        run_workloads = {s.item.workload for s in st.items.values() if s.n_runs("baseline") or s.n_runs("candidate")}
        claims = match_claims(
            ctx.scope.claims,
            measured,
            workload_kinds=kinds,
            workloads_run=run_workloads,
            noise_margin=m,
            rehearsal=ctx.rehearsal,
        )
        claim_rows = [c.model_dump(mode="json") for c in claims]

        engine_timed = {
            side: sum(len(r.get("engine_tpot_ms") or []) for r in runs if r.get("side") == side)
            for side in ("baseline", "candidate")
        }
        errors = list(st.errors)
        if METRICS[gate.gated_metric].field == "engine_tpot_ms":
            for side, k in engine_timed.items():
                if k == 0 and any(r.get("side") == side for r in runs):
                    errors.insert(
                        0,
                        f"the {side} engine reported no per-request timing, which "
                        f"{gate.gated_metric} needs: start it with --enable-per-request-metrics "
                        "(engines fasttrack starts get it)",
                    )
        n = len(verdicts)
        n_fail = sum(1 for v in verdicts.values() if v == "fail")
        n_not = sum(1 for v in verdicts.values() if v == "not_run")
        n_pass = n - n_fail - n_not
        drifted = [d for d in drift if d["drifted"]]
        unequal = sorted({s.item.group for s in st.items.values() if s.factor() != 1.0})
        runs_per_point = {k: s.n_runs("baseline") + s.n_runs("candidate") for k, s in st.items.items()}
        gated_rows = [r for r in rows if r.get("gated") and r.get("speedup") is not None]
        mde_worst = max(
            (r["gate_detectable_slowdown"] for r in gated_rows if r.get("gate_detectable_slowdown") is not None),
            default=None,
        )
        conf_note = (
            f"{gate.confidence:.0%} nominal, Bonferroni-corrected to "
            f"{min((sc.per_look_confidence(gate.confidence) for sc in st.schedules.values()), default=gate.confidence):.4g} "
            f"per look"
        )
        lifetime_note = (
            "one engine lifetime per side: the intervals cover run-to-run noise only and ignore lifetime-to-lifetime "
            "variance (which is the larger part on noisy hosts); use a tier with lifetimes_per_side >= 2 for evidence"
            if one_lifetime
            else "intervals resample engine lifetimes (the unit of replication), then runs"
        )
        interleaved = bool(gate.interleave)
        if interleaved:
            lifetime_note += (
                "; baseline and candidate runs were interleaved in time (both engines up, alternating "
                "runs, run pairs resampled together), so a host that slowed down slowed both sides alike"
            )
        summary: dict[str, Any] = {
            "interleaved": interleaved,
            "points": n,
            "passed": n_pass,
            "failed": n_fail,
            "not_measured": n_not,
            "strictly_better": bool(n and all(strictly.values())),
            "strictly_better_points": sum(1 for v in strictly.values() if v),
            "gated_metric": gate.gated_metric,
            "metrics": metrics,
            "noise_margin": m,
            "confidence": conf_note,
            "ignores_lifetime_variance": one_lifetime,
            "lifetime_note": lifetime_note,
            "largest_gate_detectable_slowdown": mde_worst,
            "runs_per_point": runs_per_point,
            "min_runs": gate.min_runs,
            "max_runs": gate.max_runs,
            "schedules": {g: sc.describe() for g, sc in st.schedules.items()},
            "drift_checked": len(drift),
            "drift_detected": [f"{d['point']} ({d['workload']})" for d in drifted],
            "equal_resources": not unequal,
            "unequal_resource_groups": unequal,
            "claims": {c.id: c.status for c in claims},
            "lifetimes": st.lifetimes,
            "notes": st.notes,
            "errors": errors,
            "burst_delivered_requests": sum(int(r.get("burst_delivered") or 0) for r in runs),
            "engine_timed_requests": engine_timed,
            "p90_interactivity": METRICS["p90_interactivity"].description,
            "definitions": "docs/perf.md (metric definitions, trace format, statistics)",
        }
        gate_model = Gate(
            statistic=(
                f"per (workload, point): hierarchical-bootstrap lower confidence bound of the speedup of "
                f"{gate.gated_metric} (engine lifetimes, then runs; {conf_note})"
            ),
            threshold=1.0 - m,
            rule=(
                f"pass iff the lower bound >= 1 - noise_margin = {1.0 - m:g} at every point (intersection-union); "
                "strictly better iff the lower bound > 1 at every point (reported, not required)"
            ),
        )
        tables = {
            "points": rows,
            "runs": runs,
            "looks": looks,
            "claims": claim_rows,
            "drift": drift,
            "lifetimes": st.lifetimes,
        }
        if n == 0 or n_pass + n_fail == 0:
            why = "no point was measured on both sides" + (f" ({errors[0]})" if errors else "")
            return CheckResult(
                check=NAME,
                verdict=Verdict.NOT_RUN,
                reason=why,
                gate=gate_model,
                summary=summary,
                failures=failures,
                tables=tables,
            )
        if n_fail:
            verdict = Verdict.FAIL
            reason = f"{n_fail} of {n} point(s) failed the no-regression gate ({gate.gated_metric}, margin {m:g})"
        elif n_not:
            verdict = Verdict.NOT_RUN
            reason = f"{n_not} of {n} point(s) could not be compared; the other {n_pass} passed"
            if errors:
                reason += f" ({errors[0]})"
        else:
            verdict = Verdict.PASS
            reason = f"no regression beyond {m:.0%} at any of {n} point(s) ({gate.gated_metric}); " + (
                "strictly better everywhere"
                if summary["strictly_better"]
                else f"strictly better at {summary['strictly_better_points']} of {n}"
            )
        if one_lifetime:
            reason += "; one lifetime per side, so the intervals ignore lifetime variance"
        if interleaved:
            reason += "; runs interleaved in time"
        if drifted:
            reason += f"; drift between baseline lifetimes at {len(drifted)} point(s)"
        if unequal:
            reason += "; unequal GPU counts, compared per GPU"
        return CheckResult(
            check=NAME,
            verdict=verdict,
            reason=reason,
            gate=gate_model,
            summary=summary,
            failures=failures,
            tables=tables,
        )


__all__ = ["PerfCheck", "gpus_from_args"]
