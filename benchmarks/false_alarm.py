"""False-regression rate of the perf gate with real engines: candidate = baseline (figures, not a test).

Every "side" here is the same configuration (the demo model's stock path). The script
starts ``--lifetimes`` engines one after another and measures, on each, the pure-decode
workload at ``--batches`` (prompt ``--context`` tokens, ``--output-len`` output tokens,
``--requests`` requests per run) with ``--runs`` runs per point, through the perf
check's own code (warm-up wave, ``execute``, ``compute_run_metrics``).

Then it forms pseudo-comparisons from disjoint sets of lifetimes, "baseline" and
"candidate", and applies the perf check's adaptive procedure to them exactly as the
check would (``fasttrack.checks.perf.measure_item`` with the stored runs in order:
``min_runs`` runs on lifetimes without looks, then looks after every run up to
``max_runs``, Bonferroni over the planned looks) for two designs:

* ``smoke``: one lifetime per side (every ordered pair of lifetimes);
* ``standard``: two lifetimes per side, in the order B C B C (a seeded sample of the
  possible assignments, at most ``--max-comparisons``).

Printed per design and point, and over all points (intersection-union: a comparison
is a false alarm when any point fails):

* the **false-regression rate**: how often the identical candidate fails the gate at
  the scope's noise margin, with a Wilson interval (the comparisons share lifetimes, so
  they are not independent and the interval is optimistic), next to the normal-model
  prediction from the bootstrap SE and the gate's nominal one-sided level
  (1 - confidence)/2. A non-inferiority gate does not bound this rate by its level:
  at parity it is 1 - power and depends on the noise and the margin, so the
  prediction is the figure to compare with;
* the same rate at other margins (fixed design: ``min_runs`` runs per lifetime, nominal
  confidence);
* the interval's miscoverage at parity (upper end below 1, lower end above 1; nominal
  (1 - confidence)/2 each): what the hierarchical bootstrap's calibration looks like
  with this host's lifetime-to-lifetime variance.

``--interleaved N`` measures the interleaved design instead (``gates.perf.interleave``):
N pairs of engines of the same stock configuration, the two engines of a pair up
together, each point's runs alternating between them (B C, C B, ...) with the scope's
settle pause, exactly as the check takes them. Each pair is one comparison, in both
orientations (so 2N comparisons, two by two dependent), replayed through the check's
``measure_pair`` with the paired bootstrap; the margins table uses ``min_runs`` pairs.

Run (about 10 minutes with the defaults on the 2-core hosts; one engine at a time on the machine)::

    flock /tmp/ft-engine.lock python benchmarks/false_alarm.py --json /tmp/false_alarm.json
    python benchmarks/false_alarm.py --from-json /tmp/false_alarm.json     # re-analyse, no engines
    flock /tmp/ft-engine.lock python benchmarks/false_alarm.py --interleaved 4 --json /tmp/fa-pairs.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fasttrack.checks.perf.measure import measure_item, measure_pair, pair_order  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.engine.pinning import (  # noqa: E402 - the repository root goes on sys.path first
    measuring_half,
    pair_cpus,
    pinned,
    pinning_env,
    place,
    process_cpus,
    swap_cpus,
)
from fasttrack.perf.analysis import ItemState, estimate  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.perf.loadgen import PerfClient, run_loop, timed  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.perf.metrics import METRICS, RunMetrics, compute_run_metrics  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.perf.schedule import LookSchedule  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.perf.tokens import pool_from_engine  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.perf.workloads import RunInputs, WorkItem, execute, plan_items, warm_up  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.stats import mde_for_estimate, wilson_interval  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.stats.lifetime import AAPair, LifetimeVariance, variance_of_pairs  # noqa: E402 - the repository root goes on sys.path first

MARGINS = (0.05, 0.10, 0.25, 0.3, 0.33, 0.4, 0.5, 0.6)
LOG_DIR = Path("/tmp") / "fasttrack-false-alarm-logs"


def _items(ns: argparse.Namespace) -> tuple[Any, list[WorkItem], Any]:
    from fasttrack.checks.base import build_run_plan
    from fasttrack.scope import WorkloadSpec, load_scope

    loaded = load_scope("demo-llama")
    scope = loaded.scope.model_copy(deep=True)
    scope.tiers["smoke"].batch = [int(b) for b in ns.batches.split(",")]
    scope.tiers["smoke"].context = [ns.context]
    plan = build_run_plan(scope, tier="smoke")
    wl = WorkloadSpec(name="decode", kind="pure_decode", output_len=ns.output_len, requests_per_run=ns.requests)
    items = plan_items(plan, plan.groups[0], [wl], max_model_len=scope.envelope.context.max_model_len)
    return loaded, items, plan.groups[0]


def _engine_setup(ns: argparse.Namespace) -> tuple[Any, list[WorkItem], Any, Any]:
    """(loaded scope, work items, engine group, model folder)."""
    from fasttrack.host.models import resolve_model

    loaded, items, group = _items(ns)
    model_dir = resolve_model(loaded.scope, base_dir=loaded.base_dir, log=lambda m: print(m, file=sys.stderr)).model
    return loaded, items, group, model_dir


def _stock_engine(loaded: Any, group: Any, model_dir: Any, name: str) -> tuple[list[str], dict[str, str | None]]:
    """Arguments and environment of one stock engine, exactly as ``fasttrack validate`` serves the baseline
    (``fasttrack.engine.cmdline.serve_spec``: profiler configuration, per-request metrics, the scope's device
    counters' folder, a fresh one per engine)."""
    import shutil

    from fasttrack.engine.cmdline import DEVICE_COUNTERS_ENV, serve_spec

    spec = serve_spec(loaded.scope, group, "baseline", model=model_dir, run_dir=LOG_DIR, name=name)
    env: dict[str, str | None] = dict(spec.env)
    counters = env.get(DEVICE_COUNTERS_ENV)
    if counters:
        shutil.rmtree(counters, ignore_errors=True)
        Path(counters).mkdir(parents=True)
    return list(spec.args), env


async def _one_run(client: Any, it: WorkItem, k: int, inputs: RunInputs, *, side: str, lifetime: int) -> RunMetrics:
    """One run of ``it``, measured as the check measures it; failed requests end the benchmark (SystemExit,
    which ``measure_pair`` does not catch)."""
    (recs, extra), tm = await timed(lambda: execute(client, it, k, inputs))
    rm = compute_run_metrics(
        recs,
        workload=it.workload,
        point=it.point,
        side=side,  # type: ignore[arg-type] - always "baseline" or "candidate", the sides the callers loop over
        lifetime=lifetime,
        run=k,
        t_start=tm.t_start,
        t_end=tm.t_end,
        gpus=0,
        client_cpu_s=tm.cpu_s,
        extra=extra,
        started_at=tm.wall_start,
    )
    if rm.failed:
        raise SystemExit(f"requests failed: {rm.errors}")
    return rm


def collect(ns: argparse.Namespace) -> dict[str, Any]:
    from fasttrack.engine import start_engine

    loaded, items, group, model_dir = _engine_setup(ns)
    runs: list[dict[str, Any]] = []
    timing: list[dict[str, float]] = []
    t_all = time.perf_counter()
    for lt in range(ns.lifetimes):
        t0 = time.perf_counter()
        args, env = _stock_engine(loaded, group, model_dir, f"baseline.{lt}")
        eng = start_engine(side="baseline", model=model_dir, args=args, env=env, log_dir=LOG_DIR)
        up = time.perf_counter() - t0
        try:

            async def measure(eng: Any = eng, lt: int = lt) -> None:
                inputs = RunInputs(
                    pool=await pool_from_engine(eng), max_model_len=loaded.scope.envelope.context.max_model_len
                )
                async with PerfClient(eng.base_url, model=eng.model) as client:
                    for it in items:
                        await warm_up(client, it, inputs)
                        for k in range(ns.runs):
                            runs.append(
                                (await _one_run(client, it, k, inputs, side="baseline", lifetime=lt)).model_dump(
                                    mode="json"
                                )
                            )

            t1 = time.perf_counter()
            run_loop(measure())
            took = time.perf_counter() - t1
        finally:
            eng.stop()
        timing.append({"start_s": round(up, 1), "measure_s": round(took, 1)})

        def med(it: WorkItem, field: str, lt: int = lt) -> float:
            vals = [
                statistics.median(r[field])
                for r in runs
                if r["lifetime"] == lt and r["point"] == it.point and r.get(field)
            ]
            return statistics.median(vals) if vals else float("nan")

        print(
            f"lifetime {lt + 1}/{ns.lifetimes}: start {up:.0f} s, measure {took:.0f} s, median TPOT client / engine "
            + ", ".join(f"b{it.batch} {med(it, 'tpot_ms'):.3f} / {med(it, 'engine_tpot_ms'):.3f} ms" for it in items),
            file=sys.stderr,
        )
    return {
        "args": {k: v for k, v in vars(ns).items() if k not in ("json", "from_json")},
        "runs": runs,
        "timing": timing,
        "wall_s": round(time.perf_counter() - t_all, 1),
    }


def _start_retrying(*, side: str, cpus: list[int] | None, **kw: Any) -> Any:
    """Start one engine pinned to ``cpus``; a start that fails is tried twice more (on a shared host another
    user's package install can break an engine's imports for a few seconds)."""
    from fasttrack.engine import EngineStartError, start_engine

    for attempt in range(3):
        try:
            with pinned(cpus):
                return start_engine(side=side, log_dir=LOG_DIR, **kw)
        except EngineStartError as exc:
            if attempt == 2:
                raise
            print(f"{side} engine did not start ({exc.message.splitlines()[0]}); trying again", file=sys.stderr)
            time.sleep(20)
    raise AssertionError("unreachable")


def collect_interleaved(ns: argparse.Namespace) -> dict[str, Any]:
    """``ns.interleaved`` pairs of stock engines, both up, runs alternating as the check takes them."""

    loaded, items, group, model_dir = _engine_setup(ns)
    # the check's own interleaving (order, settle pause), with a fixed number of run pairs and no looks
    settle = loaded.scope.gates.perf.interleave_settle_s if ns.settle is None else ns.settle
    fixed = loaded.scope.gates.perf.model_copy(
        update={"min_runs": ns.runs, "max_runs": ns.runs, "interleave_settle_s": settle}
    )
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=ns.runs, max_runs=ns.runs, interleaved=True)
    runs: list[dict[str, Any]] = []
    timing: list[dict[str, float]] = []
    t_all = time.perf_counter()
    pins: list[dict[str, Any]] = []
    alternate = "blocks" if ns.swap_blocks else ns.alternate
    for lt in range(ns.interleaved):
        t0 = time.perf_counter()
        engines: dict[str, Any] = {}
        pin: dict[str, Any] = {}
        try:
            order = ("candidate", "baseline") if ns.alternate_start and lt % 2 else ("baseline", "candidate")
            for side in order:
                # the check's own pinning: each engine of the pair on its own cores, halves swapped per pair
                cpus = None if ns.no_pin else pair_cpus(side, lt)
                args, env = _stock_engine(loaded, group, model_dir, f"{side}.{lt}")
                env.update(pinning_env(cpus, env, cpu_device=True))
                engines[side] = _start_retrying(
                    side=side, cpus=cpus, model=model_dir, args=args, env=env, exclusive=not engines
                )
                pin[side] = process_cpus(engines[side].pid) if engines[side].pid else None
            pins.append(pin)
            up = time.perf_counter() - t0

            pids = {sd: e.group_pids() for sd, e in engines.items()}

            def swap(pids: dict[str, list[int]] = pids) -> None:
                swap_cpus(pids["baseline"], pids["candidate"])

            def before_run(side: str, k: int, pids: dict[str, list[int]] = pids) -> None:
                halves = measuring_half(k // 2)
                if halves is not None:
                    place(pids[side], pids["candidate" if side == "baseline" else "baseline"], *halves)

            swapper = swap if alternate == "blocks" and not ns.no_pin else None
            placer = before_run if alternate == "runs" and not ns.no_pin else None

            async def measure(
                engines: dict[str, Any] = engines, lt: int = lt, swapper: Any = swapper, placer: Any = placer
            ) -> None:
                mml = loaded.scope.envelope.context.max_model_len
                inputs = {sd: RunInputs(pool=await pool_from_engine(e), max_model_len=mml) for sd, e in engines.items()}
                async with (
                    PerfClient(engines["baseline"].base_url, model=engines["baseline"].model) as cb,
                    PerfClient(engines["candidate"].base_url, model=engines["candidate"].model) as cc,
                ):
                    clients = {"baseline": cb, "candidate": cc}
                    for it in items:
                        for sd in pair_order(0, lt):  # as the check: the side that opens the blocks first
                            if placer is not None:
                                placer(sd, 0)
                            await warm_up(clients[sd], it, inputs[sd])

                        def runner(sd: str, it: WorkItem = it):
                            async def run_once(k: int) -> RunMetrics:
                                rm = await _one_run(clients[sd], it, k, inputs[sd], side=sd, lifetime=lt)
                                runs.append(rm.model_dump(mode="json"))
                                return rm

                            return run_once

                        await measure_pair(
                            ItemState(item=it),
                            lifetime=lt,
                            looks_here=False,
                            sched=sched,
                            gate=fixed,
                            run_once={sd: runner(sd) for sd in ("baseline", "candidate")},
                            between_blocks=swapper,
                            before_run=placer,
                        )

            t1 = time.perf_counter()
            run_loop(measure())
            took = time.perf_counter() - t1
        finally:
            for e in engines.values():
                e.stop()
        timing.append({"start_s": round(up, 1), "measure_s": round(took, 1)})

        def med(it: WorkItem, sd: str, lt: int = lt) -> float:
            vals = [
                statistics.median(r["engine_tpot_ms"])
                for r in runs
                if r["lifetime"] == lt and r["point"] == it.point and r["side"] == sd and r.get("engine_tpot_ms")
            ]
            return statistics.median(vals) if vals else float("nan")

        print(
            f"pair {lt + 1}/{ns.interleaved}: start {up:.0f} s, measure {took:.0f} s, cores A {pin.get('baseline')} "
            f"B {pin.get('candidate')}, load {os.getloadavg()[0]:.2f}, median engine TPOT A / B "
            + ", ".join(f"b{it.batch} {med(it, 'baseline'):.3f} / {med(it, 'candidate'):.3f} ms" for it in items),
            file=sys.stderr,
        )
    return {
        "args": {k: v for k, v in vars(ns).items() if k not in ("json", "from_json")},
        "design": "interleaved",
        "pinning": pins,
        "swap_blocks": alternate == "blocks" and not ns.no_pin,
        "alternate": "off" if ns.no_pin else alternate,
        "settle_s": settle,
        "alternate_start": bool(ns.alternate_start),
        "runs": runs,
        "timing": timing,
        "wall_s": round(time.perf_counter() - t_all, 1),
    }


def _pair_state(
    item: WorkItem,
    runs: list[RunMetrics],
    flip: bool,
    sched: LookSchedule,
    gate: Any,
    variance: LifetimeVariance | None,
) -> ItemState:
    """Feed one pair's stored interleaved runs to the check's ``measure_pair`` (sides swapped when ``flip``), the
    point calibrated with ``variance`` (from the other pairs)."""
    s = ItemState(item=item, variance={gate.gated_metric: variance} if variance else {})
    by_side = {sd: sorted((r for r in runs if r.side == sd), key=lambda r: r.run) for sd in ("baseline", "candidate")}
    if flip:
        by_side = {"baseline": by_side["candidate"], "candidate": by_side["baseline"]}

    def make(sd: str):
        async def run_once(j: int) -> RunMetrics:
            if j >= len(by_side[sd]):
                raise IndexError(f"only {len(by_side[sd])} stored runs per side; use --runs >= max_runs")
            return by_side[sd][j].model_copy(update={"side": sd, "lifetime": 0})

        return run_once

    no_settle = gate.model_copy(update={"interleave_settle_s": 0.0})
    asyncio.run(
        measure_pair(
            s,
            lifetime=0,
            looks_here=sched.pair_looks_allowed(0),
            sched=sched,
            gate=no_settle,
            run_once={sd: make(sd) for sd in ("baseline", "candidate")},
        )
    )
    return s


def _new_tally(points: list[str]) -> dict[str, dict[str, Any]]:
    return {
        p: {"fail": 0, "inc": 0, "pred": [], "runs": [], "margins": {m: 0 for m in MARGINS}, "low": 0, "high": 0}
        for p in points
    }


def _aa_pair(b_runs: list[RunMetrics], c_runs: list[RunMetrics], metric: str, *, paired: bool) -> AAPair | None:
    """One A/A pair of stored lifetimes at one point: each lifetime's statistic and its runs' (the gate's samples)."""
    md = METRICS[metric]

    def samples(rs: list[RunMetrics]) -> list[list[float]]:
        out = []
        for r in sorted(rs, key=lambda r: r.run):
            v = md.samples(r)
            xs = v if isinstance(v, list) else ([v] if v is not None else [])
            if xs:
                out.append([float(x) for x in xs])
        return out

    b, c = samples(b_runs), samples(c_runs)
    if not b or not c:
        return None
    return AAPair(
        baseline=statistics.median(x for r in b for x in r),
        candidate=statistics.median(x for r in c for x in r),
        baseline_runs=[statistics.median(r) for r in b],
        candidate_runs=[statistics.median(r) for r in c],
        paired=paired,
    )


def _leave_out(pairs: dict[Any, AAPair | None], skip: set[Any]) -> LifetimeVariance | None:
    """The lifetime variance the other A/A pairs give (leave-one-out calibration); None with fewer than two."""
    rest = [p for k, p in pairs.items() if k not in skip and p is not None]
    return variance_of_pairs(rest, source=f"the {len(rest)} other A/A pairs of this measurement")


def _tally(pp: dict[str, Any], s: ItemState, est: Any, gate: Any) -> bool:
    """Count one comparison at one point: the adaptive gate's decision (``s``) and the fixed
    design's estimate (``est``); True when the gate failed the identical candidate (an inconclusive
    point, whose lifetime variance nothing measured, is counted apart)."""
    failed = s.decision == "decided_fail"
    pp["inc"] += s.decision == "inconclusive"
    pp["fail"] += failed
    pp["runs"].append(s.n_runs("baseline") + s.n_runs("candidate"))
    pp["pred"].append(mde_for_estimate(est, noise_margin=gate.noise_margin).gate_fail_probability_at_parity)
    for m in MARGINS:
        pp["margins"][m] += est.ci_low < 1 - m
    pp["low"] += est.ci_high < 1.0
    pp["high"] += est.ci_low > 1.0
    return failed


def _print_rates(per_point: dict[str, dict[str, Any]], points: list[str], n: int, *, nominal: float | None) -> None:
    """The per-point table: false-regression rate, Wilson interval, prediction, (nominal level), runs, margins."""
    print(
        f"  {'point':<26}{'false regr.':>12}{'95% Wilson':>18}{'predicted':>11}"
        + (f"{'nominal':>9}" if nominal is not None else "")
        + f"{'runs':>6}"
        + "".join(f"{'m=' + format(m, 'g'):>9}" for m in MARGINS)
        + f"{'hi<1':>7}{'lo>1':>7}{'inconcl.':>10}"
    )
    for p in points:
        pp = per_point[p]
        w = wilson_interval(pp["fail"], n, confidence=0.95)
        print(
            f"  {p:<26}{pp['fail'] / n:>12.1%}{f'[{w.ci_low:.1%}, {w.ci_high:.1%}]':>18}"
            f"{statistics.mean(pp['pred']):>11.1%}"
            + (f"{nominal:>9.1%}" if nominal is not None else "")
            + f"{statistics.mean(pp['runs']):>6.1f}"
            + "".join(f"{pp['margins'][m] / n:>9.1%}" for m in MARGINS)
            + f"{pp['low'] / n:>7.1%}{pp['high'] / n:>7.1%}{pp['inc'] / n:>10.1%}"
        )


def _aa_pairs_of(data: dict[str, Any], metric: str) -> dict[str, dict[int, AAPair | None]]:
    """The stored interleaved pairs as A/A pairs, by point and pair."""
    runs_all = [_stored(r) for r in data["runs"]]
    out: dict[str, dict[int, AAPair | None]] = {}
    for p in sorted({r.point for r in runs_all}):
        for lt in sorted({r.lifetime for r in runs_all}):
            mine = [r for r in runs_all if r.point == p and r.lifetime == lt]
            out.setdefault(p, {})[lt] = _aa_pair(
                [r for r in mine if r.side == "baseline"],
                [r for r in mine if r.side == "candidate"],
                metric,
                paired=True,
            )
    return out


def analyse_interleaved(data: dict[str, Any], gate: Any, *, variance: LifetimeVariance | None = None) -> None:
    """Replay interleaved A/A pairs through the gate; each comparison is calibrated by the other pairs (leave one
    out), or by ``variance`` when given (a calibration measured elsewhere)."""
    a = data["args"]
    runs_all = [_stored(r) for r in data["runs"]]
    points = sorted({r.point for r in runs_all}, key=lambda p: int(p.split("-b")[1].split("-")[0]))
    pairs = sorted({r.lifetime for r in runs_all})
    metric = gate.gated_metric
    md = METRICS[metric]
    print(
        f"\n{len(pairs)} pairs of engines of the same stock configuration, up together, {a['runs']} interleaved "
        f"run pairs per point ({a['requests']} requests x {a['output_len']} tokens, prompts of {a['context']} tokens); "
        f"gate on {metric}, noise margin {gate.noise_margin:g}, confidence {gate.confidence:g}, runs "
        f"{gate.min_runs}..{gate.max_runs}, paired bootstrap"
    )
    sched = LookSchedule.for_group(
        ["baseline", "candidate"], min_runs=gate.min_runs, max_runs=gate.max_runs, interleaved=True
    )
    print(f"  {'point':<26}{'pair':>5}{'A median':>10}{'B median':>10}{'A/B':>7}   runs A / B (ms)")
    for p in points:
        for lt in pairs:
            mine = {
                sd: sorted(
                    (r for r in runs_all if r.point == p and r.lifetime == lt and r.side == sd), key=lambda r: r.run
                )
                for sd in ("baseline", "candidate")
            }
            vals = {sd: [statistics.median(v) for r in rs if (v := md.samples(r))] for sd, rs in mine.items()}
            ma, mb = statistics.median(vals["baseline"]), statistics.median(vals["candidate"])
            print(
                f"  {p:<26}{lt + 1:>5}{ma:>10.3f}{mb:>10.3f}{ma / mb:>7.2f}   "
                f"{' '.join(f'{v:.2f}' for v in vals['baseline'])} / {' '.join(f'{v:.2f}' for v in vals['candidate'])}"
            )
    comps = [(lt, flip) for lt in pairs for flip in (False, True)]
    n = len(comps)
    any_fail = 0
    per_point = _new_tally(points)
    variance_given = variance
    aa = _aa_pairs_of(data, metric)
    for lt, flip in comps:
        failed_any = False
        for p in points:
            variance = _leave_out(aa[p], {lt}) if variance_given is None else variance_given
            mine = [r for r in runs_all if r.point == p and r.lifetime == lt]
            item = WorkItem(
                key=f"decode@{p}",
                workload="decode",
                kind="pure_decode",
                point=p,
                group="g",
                batch=int(p.split("-b")[1].split("-")[0]),
                context=a["context"],
                full_context=False,
                prompt_len=a["context"],
                output_len=a["output_len"],
                requests_per_run=a["requests"],
                mode="waves",
            )
            s = _pair_state(item, mine, flip, sched, gate, variance)
            fx = ItemState(item=item, interleaved=True, variance={metric: variance} if variance else {})
            for sd, other in (("baseline", "candidate"), ("candidate", "baseline")):
                src = other if flip else sd
                for r in sorted((r for r in mine if r.side == src), key=lambda r: r.run)[: gate.min_runs]:
                    fx.add(r.model_copy(update={"side": sd, "lifetime": 0}))
            est = estimate(fx, metric, confidence=gate.confidence, interval=gate.interval)
            assert est is not None
            failed_any |= _tally(per_point[p], s, est, gate)
        any_fail += failed_any
    alpha1 = (1 - gate.confidence) / 2
    print(
        f"\ninterleaved (1 pair of lifetimes, both orientations, each calibrated by the other pairs' lifetime "
        f"variance, leave-one-out): {n} pseudo-comparisons"
    )
    _print_rates(per_point, points, n, nominal=None)
    w = wilson_interval(any_fail, n, confidence=0.95)
    print(
        f"  overall (any point fails): {any_fail / n:.1%} [{w.ci_low:.1%}, {w.ci_high:.1%}]; the two orientations of "
        f"a pair are not independent, so the Wilson intervals are optimistic; hi<1 / lo>1 = the nominal paired "
        f"interval excludes parity (each nominally {alpha1:.1%})"
    )


def _state(
    item: WorkItem,
    runs: dict[int, list[RunMetrics]],
    b_lts: list[int],
    c_lts: list[int],
    sched: LookSchedule,
    gate: Any,
    variance: LifetimeVariance | None = None,
) -> ItemState:
    """Feed stored runs to the check's adaptive loop, lifetime by lifetime in the schedule's order (the point
    calibrated with ``variance``)."""
    s = ItemState(item=item, variance={gate.gated_metric: variance} if variance else {})
    order = {"baseline": list(b_lts), "candidate": list(c_lts)}
    counts = {"baseline": 0, "candidate": 0}
    for side in sched.order:
        k = counts[side]
        counts[side] += 1
        if s.final:
            continue
        source = runs[order[side][k]]

        async def run_once(j: int, side: str = side, k: int = k, source: list[RunMetrics] = source) -> RunMetrics:
            if j >= len(source):
                raise IndexError(f"only {len(source)} stored runs per lifetime; use --runs >= max_runs")
            return source[j].model_copy(update={"side": side, "lifetime": k})

        asyncio.run(
            measure_item(
                s,
                side=side,
                lifetime=k,
                looks_here=sched.looks_allowed(side, k),
                sched=sched,
                gate=gate,
                run_once=run_once,
            )
        )
    return s


def _fixed(
    item: WorkItem,
    runs: dict[int, list[RunMetrics]],
    b_lts: list[int],
    c_lts: list[int],
    n_runs: int,
    variance: dict[str, LifetimeVariance],
) -> ItemState:
    s = ItemState(item=item, variance=variance)
    for side, lts in (("baseline", b_lts), ("candidate", c_lts)):
        for k, lt in enumerate(lts):
            for r in runs[lt][:n_runs]:
                s.add(r.model_copy(update={"side": side, "lifetime": k}))
    return s


def analyse(data: dict[str, Any], ns: argparse.Namespace) -> None:
    from fasttrack.scope import load_scope

    gate = load_scope("demo-llama").scope.gates.perf
    if ns.margin is not None:
        gate = gate.model_copy(update={"noise_margin": ns.margin})
    if ns.metric is not None:
        gate = gate.model_copy(update={"gated_metric": ns.metric})
    if ns.interval is not None:
        gate = gate.model_copy(update={"interval": ns.interval})
    if ns.min_runs is not None or ns.max_runs is not None:
        gate = gate.model_copy(
            update={"min_runs": ns.min_runs or gate.min_runs, "max_runs": ns.max_runs or gate.max_runs}
        )
    if data.get("design") == "interleaved":
        analyse_interleaved(data, gate)
        return
    a = data["args"]
    runs_all = [_stored(r) for r in data["runs"]]
    points = sorted({r.point for r in runs_all}, key=lambda p: int(p.split("-b")[1].split("-")[0]))
    lifetimes = sorted({r.lifetime for r in runs_all})
    by: dict[str, dict[int, list[RunMetrics]]] = {p: {lt: [] for lt in lifetimes} for p in points}
    for r in runs_all:
        by[r.point][r.lifetime].append(r)
    items = {
        p: WorkItem(
            key=f"decode@{p}",
            workload="decode",
            kind="pure_decode",
            point=p,
            group="g",
            batch=int(p.split("-b")[1].split("-")[0]),
            context=a["context"],
            full_context=False,
            prompt_len=a["context"],
            output_len=a["output_len"],
            requests_per_run=a["requests"],
            mode="waves",
        )
        for p in points
    }
    metric = gate.gated_metric
    alpha1 = (1 - gate.confidence) / 2
    print(
        f"\n{len(lifetimes)} engine lifetimes of the same stock configuration, {a['runs']} runs per point per lifetime "
        f"({a['requests']} requests x {a['output_len']} tokens, prompts of {a['context']} tokens); gate on {metric}, "
        f"noise margin {gate.noise_margin:g}, confidence {gate.confidence:g}, runs {gate.min_runs}..{gate.max_runs}, "
        f"interval {gate.interval}"
    )
    field = METRICS[metric].field

    def run_samples(r: RunMetrics) -> list[float]:
        v = METRICS[metric].samples(r)  # the gate's own samples: a list, one number per run, or None
        return v if isinstance(v, list) else ([v] if v is not None else [])

    for p in points:
        # runs without samples (e.g. every request burst-delivered, for client-side TPOT) are left out
        lv = [statistics.median(x for r in by[p][lt] for x in run_samples(r)) for lt in lifetimes]
        within = []
        for lt in lifetimes:
            meds = [statistics.median(xs) for r in by[p][lt] if (xs := run_samples(r))]
            within.append(statistics.pstdev(meds) / statistics.mean(meds))
        empty = sum(1 for lt in lifetimes for r in by[p][lt] if not run_samples(r))
        print(
            f"  {p}: {field} median per lifetime {', '.join(f'{v:.3f}' for v in lv)}; between-lifetime CV "
            f"{statistics.pstdev(lv) / statistics.mean(lv):.1%}, mean within-lifetime run CV "
            f"{statistics.mean(within):.1%}" + (f"; {empty} run(s) without samples" if empty else "")
        )
    rng = random.Random(ns.seed)
    designs = {
        "smoke (1 lifetime per side)": (
            ["baseline", "candidate"],
            [([b], [c]) for b, c in itertools.permutations(lifetimes, 2)],
        ),
    }
    pairs2 = [
        (list(bs), list(cs))
        for bs in itertools.combinations(lifetimes, 2)
        for cs in itertools.combinations([x for x in lifetimes if x not in bs], 2)
    ]
    pairs2 = [([b[0], b[1]] if k % 2 == 0 else [b[1], b[0]], c) for k, (b, c) in enumerate(pairs2)]
    if len(pairs2) > ns.max_comparisons:
        pairs2 = rng.sample(pairs2, ns.max_comparisons)
    if pairs2:
        designs["standard (2 lifetimes per side, B C B C)"] = (["baseline", "candidate"] * 2, pairs2)
    for name, (order, comps) in designs.items():
        sched = LookSchedule.for_group(order, min_runs=gate.min_runs, max_runs=gate.max_runs)
        t0 = time.perf_counter()
        any_fail = 0
        per_point = _new_tally(points)
        for b_lts, c_lts in comps:
            failed_any = False
            for p in points:
                rest = [lt for lt in lifetimes if lt not in b_lts and lt not in c_lts]
                others = {
                    k: _aa_pair(by[p][rest[k]], by[p][rest[k + 1]], metric, paired=False)
                    for k in range(0, len(rest) - 1, 2)
                }
                variance = _leave_out(others, set())
                s = _state(items[p], by[p], b_lts, c_lts, sched, gate, variance)
                fx = _fixed(items[p], by[p], b_lts, c_lts, gate.min_runs, {metric: variance} if variance else {})
                est = estimate(fx, metric, confidence=gate.confidence, interval=gate.interval)
                assert est is not None
                failed_any |= _tally(per_point[p], s, est, gate)
            any_fail += failed_any
        n = len(comps)
        print(f"\n{name}: {n} pseudo-comparisons ({time.perf_counter() - t0:.0f} s to analyse)")
        _print_rates(per_point, points, n, nominal=alpha1)
        w = wilson_interval(any_fail, n, confidence=0.95)
        print(
            f"  overall (any point fails): {any_fail / n:.1%} [{w.ci_low:.1%}, {w.ci_high:.1%}] "
            f"over {len(points)} points "
            f"(intersection-union: up to {len(points)} x the per-point rate)"
        )
    print(
        "\ncolumns: false regr. = the identical candidate failed the check's adaptive gate at the scope's margin; "
        "predicted = normal-model gate failure probability at parity from the bootstrap SE; nominal = one-sided level "
        "of the gate, (1 - confidence)/2, which bounds false passes at the margin, not false regressions; runs = runs "
        "used per comparison (both sides); m=... = lower bound < 1 - m (fixed design, nominal confidence); hi<1 and "
        "lo>1 = the nominal interval excludes parity from above or below (each nominally "
        f"{alpha1:.1%})"
    )


def _stored(r: dict[str, Any]) -> RunMetrics:
    """A stored run (fields this version does not know, from other versions of the record, are left out)."""
    return RunMetrics.model_validate({k: v for k, v in r.items() if k in RunMetrics.model_fields})


def _read_json(path: Path) -> dict[str, Any]:
    """A stored measurement (``.json``, or gzip-compressed ``.json.gz`` as kept in ``benchmarks/results``)."""
    import gzip

    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(raw)


def join_runs(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Stored measurements of one design joined into one: lifetimes (pairs) renumbered after each other."""
    if len(parts) == 1:
        return parts[0]
    designs = {p.get("design") for p in parts}
    if len(designs) != 1:
        raise SystemExit(f"--from-json: the files hold different designs ({sorted(map(str, designs))})")
    out = {**parts[0], "runs": [], "timing": [], "pinning": [], "wall_s": 0.0}
    offset = 0
    for p in parts:
        lts = sorted({r["lifetime"] for r in p["runs"]})
        renum = {lt: offset + i for i, lt in enumerate(lts)}
        out["runs"] += [{**r, "lifetime": renum[r["lifetime"]]} for r in p["runs"]]
        out["timing"] += p.get("timing", [])
        out["pinning"] += p.get("pinning", [])
        out["wall_s"] += p.get("wall_s", 0.0)
        offset += len(lts)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--lifetimes", type=int, default=6, help="engine lifetimes to measure (the main cost: ~2 min each here)"
    )
    ap.add_argument("--runs", type=int, default=6, help="runs per point per lifetime (>= the scope's max_runs)")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--margin", type=float, default=None, help="noise margin (default: the demo scope's)")
    ap.add_argument(
        "--metric",
        default=None,
        help="gated metric, e.g. median_tpot_ms or median_engine_tpot_ms (default: the demo scope's)",
    )
    ap.add_argument(
        "--interval",
        choices=["bootstrap", "lifetime_t"],
        default=None,
        help="the gate's interval (default: the demo scope's); lifetime_t applies from three lifetimes in all",
    )
    ap.add_argument("--min-runs", type=int, default=None, help="the gate's min_runs (default: the demo scope's)")
    ap.add_argument("--max-runs", type=int, default=None, help="the gate's max_runs (default: the demo scope's)")
    ap.add_argument(
        "--interleaved",
        type=int,
        default=0,
        metavar="N",
        help="measure N pairs of engines up together, runs interleaved (the interleaved design) instead",
    )
    ap.add_argument(
        "--no-pin",
        action="store_true",
        help="interleaved: leave both engines of a pair on every core (the design before core pinning)",
    )
    ap.add_argument(
        "--settle",
        type=float,
        default=None,
        help="interleaved: pause between one side's run and the other's (default: the demo scope's)",
    )
    ap.add_argument(
        "--alternate-start",
        action="store_true",
        help="interleaved: start the 'candidate' engine of odd pairs first (is the first-started engine slower?)",
    )
    ap.add_argument(
        "--swap-blocks",
        action="store_true",
        help="interleaved: the engines also trade cores between A B B A blocks (same as --alternate blocks)",
    )
    ap.add_argument(
        "--alternate",
        choices=["lifetimes", "blocks", "runs"],
        default="lifetimes",
        help="interleaved: cpu_pinning.alternate (runs: before every run the engine about to run moves to the "
        "measuring core, the other one off it)",
    )
    ap.add_argument("--max-comparisons", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the raw runs here")
    ap.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        help="analyse stored runs (.json or .json.gz) instead of measuring; several files of one design are joined "
        "(lifetimes renumbered)",
    )
    ns = ap.parse_args(argv)
    if ns.from_json:
        data = join_runs([_read_json(p) for p in ns.from_json])
    else:
        data = collect_interleaved(ns) if ns.interleaved else collect(ns)
        if ns.json:
            ns.json.write_text(json.dumps(data))
        what = f"{ns.interleaved} pairs of engines" if ns.interleaved else f"{ns.lifetimes} lifetimes"
        print(f"measured {what} in {data['wall_s']:.0f} s", file=sys.stderr)
    analyse(data, ns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
