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
runs; with ``gates.perf.interleave`` the two sides' engines are up together, pinned to
their own cores, their runs in A B B A blocks, and run pairs are resampled together),
Bonferroni-corrected over the planned looks; pass iff its lower end is at least
``1 - noise_margin`` (``require: strictly_better``: above 1; ``fasttrack.perf.outcomes``).
Overall: every point must pass (intersection-union). A pass whose whole interval lies
below 1 is "measured slower, within margin". Goodput at the scope's SLO and curve
dominance of a ``concurrency_sweep`` can be further conditions. Every row carries its
minimum detectable effect at 80% power and raw per-run values; the ``runs`` table keeps
every request's samples, ``tails`` the p50/p90/p99 of TTFT, ITL and TPOT per side with
intervals, ``curves`` each side's interactivity-throughput curve. With one lifetime per
side (smoke) the result says that its intervals ignore lifetime variance. Claims in the
scope are matched to the measured points (``fasttrack.perf.claims``). A run stopped part
way gets :meth:`PerfCheck.judge_partial`: every decided point kept.

Metric definitions: ``fasttrack.perf.metrics`` and docs/perf.md.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrack import attrs
from fasttrack.checks.base import Blocker, PairedCheck, TierView, register
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.perf.calibrated import apply_calibration
from fasttrack.checks.perf.cost import COST
from fasttrack.checks.perf.declare import perf_blockers, planned_workloads
from fasttrack.checks.perf.judge import judge, perf_gate
from fasttrack.checks.perf.measure import engine_gpus, measure_drift, measure_item, measure_pair, pair_order
from fasttrack.checks.perf.state import CHECK, PerfState
from fasttrack.engine.errors import EngineCrashed, EngineUnreachable
from fasttrack.engine.pinning import measuring_half, place, swap_cpus
from fasttrack.errors import FasttrackError
from fasttrack.inputs import PASSAGES, TokenizerClient, load_prompt_set, prompt_set_path
from fasttrack.perf.analysis import ItemState
from fasttrack.perf.loadgen import PerfClient, timed
from fasttrack.perf.metrics import RunMetrics, compute_run_metrics
from fasttrack.perf.schedule import LookSchedule
from fasttrack.perf.slo import with_goodput
from fasttrack.perf.tokens import TokenPool, pool_from_engine
from fasttrack.perf.trace import TraceError, load_trace
from fasttrack.perf.workloads import RunInputs, WorkItem, execute, plan_items, warm_up
from fasttrack.planning.plan import EngineGroup
from fasttrack.results import SIDES, CheckResult, Gate, Side
from fasttrack.scope import ServiceLevel, WorkloadSpec
from fasttrack.scope.gates import PerfGate

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle


@register
class PerfCheck(
    PairedCheck, name=CHECK, title="Performance", report_view="perf", after=("evals",), gate_model=PerfGate
):
    """Performance of every workload at every config point it covers, both sides, gated per point."""

    cost = COST

    @classmethod
    def passability(cls, tier: TierView) -> list[Blocker]:
        return perf_blockers(tier)

    @classmethod
    def planned(cls, tier: TierView) -> list[str]:
        return planned_workloads(tier)

    def __init__(self) -> None:
        self.state = PerfState()

    def _workloads(self, ctx: RunContext) -> list[WorkloadSpec]:
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
        for w in self._workloads(ctx):
            if w.kind == "trace_replay":
                if not w.trace:
                    raise TraceError(
                        f"workload {w.name!r} is a trace_replay without a 'trace' file.",
                        hint="Set workloads[].trace to a JSONL trace relative to the scope file (docs/perf.md).",
                    )
                path = ctx.resolve(w.trace)
                tr = load_trace(path)
                ctx.provenance.input_file(path)
                if w.requests_per_run:
                    tr = tr.head(w.requests_per_run)
                st.traces[w.name] = tr
            elif w.kind == "mixed" and not w.arrival_rate:
                raise FasttrackError(
                    f"workload {w.name!r} is 'mixed' but has no arrival_rate.",
                    hint="Give arrival_rate (requests/s of the seeded Poisson arrivals).",
                )
        ctx.provenance.input_file(PASSAGES)  # the token pool of synthetic prompts
        if any(w.kind == "prompts" for w in self._workloads(ctx)):
            path = prompt_set_path(ctx.scope, ctx.base_dir)
            load_prompt_set(path)  # validates
            ctx.provenance.input_file(path)
            st.prompt_set = str(path)
            for w in self._workloads(ctx):
                if w.kind == "prompts" and w.prompts and not ctx.resolve(w.prompts).is_file():
                    st.notes.append(
                        f"workload {w.name!r}: prompt set {w.prompts} does not exist; the shipped set {path} was used"
                    )
        mml = self._max_model_len(ctx)
        for g in ctx.plan.groups:
            st.schedules[g.id] = LookSchedule.for_group(
                g.order,
                min_runs=gate.min_runs,
                max_runs=gate.max_runs,
                interleaved=gate.interleave,
                fixed=not gate.adaptive,
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
        apply_calibration(ctx, st)

    def skip_reason(self, ctx: RunContext) -> str | None:
        if not ctx.scope.workloads:
            return "the scope declares no perf workloads"
        if not self._workloads(ctx):
            return f"the {ctx.tier} tier selects no perf workload"
        try:
            self._prepare(ctx)
        except FasttrackError as exc:
            self.state = PerfState()
            return exc.message
        if not self.state.items:
            return "the plan has no config point for the selected workloads"
        return None

    def gate(self, ctx: RunContext) -> Gate:
        self._prepare(ctx)
        return perf_gate(ctx.scope.gates.perf, self.state.schedules)

    def paired(self, ctx: RunContext) -> bool:
        return ctx.scope.gates.perf.interleave

    def wants(self, ctx: RunContext, group: EngineGroup, side: Side, lifetime: int) -> bool:
        self._prepare(ctx)
        if self.state.schedules[group.id].is_drift_lifetime(side, lifetime):
            return True
        if self.paired(ctx):
            return False  # measured on pairs of engines (collect_pair)
        return self._undecided(group.id)

    def wants_pair(self, ctx: RunContext, group: EngineGroup, lifetime: int) -> bool:
        self._prepare(ctx)
        return self.paired(ctx) and self._undecided(group.id)

    def _undecided(self, group_id: str) -> bool:
        return any(s.item.group == group_id and not s.final for s in self.state.items.values())

    async def collect(self, ctx: RunContext, session: EngineSession) -> None:
        self._prepare(ctx)
        try:
            await self._collect(ctx, session)
        except (EngineCrashed, EngineUnreachable):
            raise  # the pipeline reports dead engines
        except Exception as exc:  # noqa: BLE001 - recorded; points without data are reported as not measured
            msg = f"{session.group.id} {session.side} lifetime {session.lifetime}: {type(exc).__name__}: {exc}"
            self.state.errors.append(msg)
            ctx.log(f"  perf: measurement stopped early: {msg}")

    async def collect_pair(self, ctx: RunContext, sessions: Mapping[Side, EngineSession]) -> None:
        """Interleaved measurement on the ``lifetime``-th engines of both sides, both up."""
        self._prepare(ctx)
        try:
            await self._collect_pair(ctx, sessions)
        except (EngineCrashed, EngineUnreachable):
            raise
        except Exception as exc:  # noqa: BLE001 - recorded; points without data are reported as not measured
            b = sessions["baseline"]
            msg = f"{b.group.id} interleaved lifetime {b.lifetime}: {type(exc).__name__}: {exc}"
            self.state.errors.append(msg)
            ctx.log(f"  perf: measurement stopped early: {msg}")

    def _lifetime_record(
        self,
        group: EngineGroup,
        side: str,
        lifetime: int,
        looks_allowed: bool,
        drift_only: bool,
        *,
        n_items: int,
        todo: list[ItemState],
    ) -> dict[str, Any]:
        """The record of one engine lifetime (``side``: a side, or ``interleaved`` for a pair), added to the
        state's lifetimes: ``todo`` of the group's ``n_items`` items run in it (the rest are decided); its
        ``runs`` count up as it measures."""
        record: dict[str, Any] = {
            "group": group.id,
            "side": side,
            "lifetime": lifetime,
            "looks_allowed": looks_allowed,
            "drift_only": drift_only,
            "items": len(todo),
            "skipped_decided": n_items - len(todo),
            "runs": 0,
        }
        self.state.lifetimes.append(record)
        return record

    async def _collect_pair(self, ctx: RunContext, sessions: Mapping[Side, EngineSession]) -> None:
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
        gpus: dict[str, int] = {side: engine_gpus(e, group) for side, e in engines.items()}
        t_life = time.perf_counter()
        record = self._lifetime_record(group, "interleaved", lifetime, looks_here, False, n_items=len(items), todo=todo)
        inputs = {side: await self._inputs(ctx, e, todo) for side, e in engines.items()}
        swapper = self._core_swapper(ctx, engines, record)
        placer = self._core_placer(ctx, engines, record)
        async with (
            PerfClient(engines["baseline"].base_url, model=engines["baseline"].model) as cb,
            PerfClient(engines["candidate"].base_url, model=engines["candidate"].model) as cc,
        ):
            clients: dict[Side, PerfClient] = {"baseline": cb, "candidate": cc}
            for s in todo:
                it = s.item
                s.gpus.update(gpus)
                if it.mode == "trace":
                    for side in SIDES:
                        inputs[side].trace = st.traces[it.workload]
                t_item = time.perf_counter()
                n_warm = await self._warm_pair(s, clients, inputs, lifetime=lifetime, placer=placer)
                if n_warm is None:
                    continue
                run_once: dict[str, Callable[[int], Awaitable[RunMetrics]]] = {
                    side: self._runner(
                        clients[side],
                        engines[side],
                        it,
                        inputs[side],
                        side=side,
                        lifetime=lifetime,
                        gpus=gpus[side],
                        n_warm=n_warm[side],
                        slo=gate.slo,
                    )
                    for side in SIDES
                }
                taken = await measure_pair(
                    s,
                    lifetime=lifetime,
                    looks_here=looks_here,
                    sched=sched,
                    gate=gate,
                    run_once=run_once,
                    between_blocks=swapper,
                    before_run=placer,
                )
                record["runs"] += sum(taken.values())
                ctx.log(
                    f"  perf {it.key} interleaved lifetime {lifetime}: {taken['baseline']}+{taken['candidate']} "
                    f"run(s) in {time.perf_counter() - t_item:.1f} s" + (f", {s.decision}" if s.looks else "")
                )
        record["seconds"] = round(time.perf_counter() - t_life, 2)

    @staticmethod
    async def _warm_pair(
        s: ItemState,
        clients: Mapping[Side, PerfClient],
        inputs: Mapping[Side, RunInputs],
        *,
        lifetime: int,
        placer: Callable[[str, int], None] | None,
    ) -> dict[str, int] | None:
        """One discarded warm-up wave per side before an item's interleaved runs, the side that opens the
        lifetime pair's blocks first (on the measuring cores with ``alternate: runs``); warm-up requests per
        side, or None when a warm-up could not be sent (recorded on the item)."""
        n_warm: dict[str, int] = {}
        try:
            for side in pair_order(0, lifetime):
                if placer is not None:
                    placer(side, 0)
                n_warm[side] = await warm_up(clients[side], s.item, inputs[side])
        except Exception as exc:  # noqa: BLE001 - a harness-side failure is recorded, not raised
            s.errors.append(f"interleaved lifetime {lifetime}: warm-up could not be sent: {type(exc).__name__}: {exc}")
            return None
        return n_warm

    @staticmethod
    def _core_swapper(
        ctx: RunContext, engines: Mapping[Side, Any], record: dict[str, Any]
    ) -> Callable[[], None] | None:
        """With ``engine.cpu_pinning.alternate: blocks``, the engines trade their cores between A B B A blocks
        (``fasttrack.engine.pinning``); the lifetime record counts the trades. None otherwise."""
        if ctx.scope.engine.cpu_pinning.mode == "off" or ctx.scope.engine.cpu_pinning.alternate != "blocks":
            return None
        pids = {side: list(getattr(e, "group_pids", lambda: [])()) for side, e in engines.items()}
        if not pids["baseline"] or not pids["candidate"]:
            return None
        record["core_swaps"] = 0

        def swap() -> None:
            now = swap_cpus(pids["baseline"], pids["candidate"])
            if now is not None:
                record["core_swaps"] += 1
                record["cores_now"] = {"baseline": now[0], "candidate": now[1]}

        return swap

    @staticmethod
    def _core_placer(
        ctx: RunContext, engines: Mapping[Side, Any], record: dict[str, Any]
    ) -> Callable[[str, int], None] | None:
        """With ``engine.cpu_pinning.alternate: runs``, the engine about to run moves onto the measuring half and
        the other one off it before every run (``fasttrack.engine.pinning.place``; the measuring half alternates
        between A B B A blocks); the lifetime record counts the moves. None otherwise."""
        pin = ctx.scope.engine.cpu_pinning
        if pin.mode == "off" or pin.alternate != "runs":
            return None
        pids: dict[str, list[int]] = {side: list(getattr(e, "group_pids", lambda: [])()) for side, e in engines.items()}
        if not pids["baseline"] or not pids["candidate"]:
            return None
        record["core_moves"] = 0

        def before_run(side: str, k: int) -> None:
            halves = measuring_half(k // 2, cores=pin.cores)
            if halves is None:
                return
            other = "candidate" if side == "baseline" else "baseline"
            if place(pids[side], pids[other], halves[0], halves[1]):
                record["core_moves"] += 1
                record["measuring_cores"] = halves[0]

        return before_run

    @staticmethod
    def _runner(
        client: Any,
        engine: Any,
        it: WorkItem,
        inputs: RunInputs,
        *,
        side: Side,
        lifetime: int,
        gpus: int,
        n_warm: int,
        slo: ServiceLevel | None = None,
    ) -> Callable[[int], Awaitable[RunMetrics]]:
        """One run of ``it`` on one engine, as RunMetrics with goodput at ``slo`` (an engine that died raises
        EngineCrashed)."""

        async def run_once(k: int) -> RunMetrics:
            (recs, extra), tm = await timed(lambda: execute(client, it, k, inputs))
            rm = compute_run_metrics(
                recs,
                **attrs(it, "workload", "point"),
                side=side,
                lifetime=lifetime,
                run=k,
                **attrs(tm, "t_start", "t_end"),
                gpus=gpus,
                client_cpu_s=tm.cpu_s,
                warmup_requests=n_warm if k == 0 else 0,
                extra=extra,
                started_at=tm.wall_start,
            )
            if rm.failed:
                engine.check_alive()  # an engine that died ends the run (EngineCrashed)
            return with_goodput(rm, slo)

        return run_once

    async def _inputs(self, ctx: RunContext, engine: EngineHandle, items: list[ItemState]) -> RunInputs:
        pool: TokenPool = await pool_from_engine(engine)
        real: list[list[int]] = []
        if any(s.item.kind == "prompts" for s in items) and self.state.prompt_set:
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
        gpus = engine_gpus(engine, group)
        t_life = time.perf_counter()
        record = self._lifetime_record(group, side, lifetime, looks_here, drift_only, n_items=len(items), todo=todo)
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
                    client, engine, it, inputs, side=side, lifetime=lifetime, gpus=gpus, n_warm=n_warm, slo=gate.slo
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

    def judge(self, ctx: RunContext) -> CheckResult:
        self._prepare(ctx)
        return judge(ctx, self.state)

    def judge_partial(self, ctx: RunContext, why: str) -> CheckResult:
        """The run stopped early (``why``: Ctrl-C, a termination signal, an engine crash): the points decided so
        far keep their runs, intervals and verdicts, the others their runs ("k of n points measured")."""
        self._prepare(ctx)
        return judge(ctx, self.state, stopped=why)
