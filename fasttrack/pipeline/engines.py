"""Driving the engine checks over real engines: launch slots, one event loop per launch, crash handling.

For each engine group, each side in the group's order (baseline, candidate, ...), the
engine starts, every check that wants that lifetime collects on it, and the engine stops
before the next one starts. When a :class:`~fasttrack.checks.base.PairedCheck` measures
both sides together (perf with ``gates.perf.interleave``), the k-th baseline and k-th
candidate engines of a group are up together instead (:func:`engine_slots`): the other
checks collect on each in turn, then the pairing check gets both (``collect_pair``).
Every launch's collection runs on one event loop the pipeline owns (``run_loop``). Starting each engine is
:mod:`fasttrack.pipeline.launch`'s.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrack.checks.base import DeploymentCheck, EngineCheck, PairedCheck
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.pipeline.launch import EngineLaunch, deploy, engine_for, pair_cpus_for, relative
from fasttrack.results import SIDES, CheckResult, Side, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle, Launcher
    from fasttrack.planning.plan import EngineGroup, Plan


@dataclass
class RunState:
    """What happened, for the bundle (also when the run is cut short)."""

    results: dict[str, CheckResult] = field(default_factory=dict)
    engines: list[EngineLaunch] = field(default_factory=list)
    """One record per engine lifetime."""
    crash: dict[str, Any] | None = None
    interrupted: bool = False
    started: float = field(default_factory=time.time)
    finished: float | None = None
    check_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds each engine-less check ran and each engine check took to judge (the cost model reads them from the
    run summary; what a check collected on an engine is in that engine's record)."""


def engine_slots(order: list[str], *, paired: bool) -> list[list[tuple[str, int]]]:
    """The launch slots of one engine group: each slot lists the engines up together, as (side, lifetime).

    Not paired: one engine per slot, in the group's order. Paired: the k-th baseline and the k-th
    candidate lifetime share a slot (baseline first); a lifetime without a partner (a trailing
    drift-only baseline) has a slot of its own. Slots keep the order's sequence."""
    seen: dict[str, int] = {}
    tagged: list[tuple[str, int]] = []
    for side in order:
        tagged.append((side, seen.get(side, 0)))
        seen[side] = seen.get(side, 0) + 1
    if not paired:
        return [[t] for t in tagged]
    slots: dict[int, list[tuple[str, int]]] = {}
    for side, lt in tagged:
        slots.setdefault(lt, []).append((side, lt))
    order_of: dict[str, int] = {s: i for i, s in enumerate(SIDES)}
    return [sorted(v, key=lambda t: order_of.get(t[0], len(order_of))) for v in slots.values()]


@dataclass
class _Launch:
    """One launch: the engines up together, and what each of them is for."""

    group: EngineGroup
    lifetime: int
    up: list[Side]
    wanted: dict[Side, list[EngineCheck]]
    pair_checks: list[PairedCheck]
    labels: dict[Side, str]
    pair_label: str
    records: dict[Side, EngineLaunch] = field(default_factory=dict)
    current: str | None = None
    """The check collecting now (for the crash report)."""
    failing: Side | None = None
    """The side whose engine was in use when an engine error came."""


def drive_engines(
    ctx: RunContext,
    plan: Plan,
    checks: list[EngineCheck],
    state: RunState,
    *,
    attach: Mapping[Side, str | None],
    progress: Callable[[str], None],
    log: Callable[[str], None],
    launcher: Launcher | None = None,
    after_group: Callable[[EngineGroup], None] | None = None,
) -> None:
    """Run every engine check's ``collect`` over the plan's engine lifetimes (see the module docstring), and
    ``after_group`` after each group's (the reference variants' engines, :mod:`fasttrack.pipeline.variants`).

    An engine group whose side spans several nodes starts its node processes with ``launcher``
    (default: ``slurm`` inside a Slurm allocation of several nodes, else all on this host).

    An engine that fails to start or crashes ends the drive: the checks without a result are
    ``not_run`` with the reason, and ``state.crash`` says what happened."""
    from fasttrack.engine import EngineCrashed, EngineError
    from fasttrack.host.models import resolve_model

    if not all(attach.values()):
        ctx.model = resolve_model(ctx.scope, base_dir=ctx.base_dir, log=log)
    pairing = [c for c in checks if isinstance(c, PairedCheck) and c.paired(ctx)]
    total = sum(len(g.order) for g in plan.groups)
    n = 0
    for group in plan.groups:
        for slot in engine_slots(group.order, paired=bool(pairing)):
            n, launches = _slot_launches(ctx, group, slot, checks, pairing, n=n, total=total)
            for launch in launches:
                try:
                    _run_launch(ctx, launch, state, attach=attach, progress=progress, launcher=launcher)
                except EngineError as exc:
                    _record_crash(ctx, launch, exc, checks, state, crashed=isinstance(exc, EngineCrashed), log=log)
                    return
        if after_group is not None:
            after_group(group)
    for chk in checks:
        if isinstance(chk, DeploymentCheck):
            for dep in chk.deployments(ctx):
                if attach.get(dep.side):
                    chk.record_deployment(ctx, dep, None, f"not probed: the {dep.side} engine is attached by URL")
                    continue
                progress(f"{dep.name}: starting the {dep.side} engine outside its envelope ({dep.group})")
                chk.record_deployment(ctx, dep, deploy(ctx, dep, state.engines, chk.name, launcher), "")


def _slot_launches(
    ctx: RunContext,
    group: EngineGroup,
    slot: list[tuple[str, int]],
    checks: list[EngineCheck],
    pairing: list[PairedCheck],
    *,
    n: int,
    total: int,
) -> tuple[int, list[_Launch]]:
    """The launches of one slot (one side's lifetime, or both sides' k-th lifetimes for a pairing check): the sides
    some check wants, one at a time, or both up together for a pairing check. Returns the launch counter too."""
    lifetime = slot[0][1]
    sides: list[Side] = [s for s, _ in slot]  # type: ignore[misc]  # group orders name sides only
    wanted = {side: [c for c in checks if c.wants(ctx, group, side, lifetime)] for side in sides}
    pair_checks = [c for c in pairing if len(slot) == 2 and c.wants_pair(ctx, group, lifetime)]
    labels: dict[Side, str] = {}
    for side in sides:
        n += 1
        labels[side] = f"[{n}/{total}] {group.id} {side} (lifetime {lifetime + 1}/{group.lifetimes_per_side})"
    pair_label = f"[{n}/{total}] {group.id} baseline + candidate (lifetime {lifetime + 1}/{group.lifetimes_per_side})"
    sides_up = [side for side in sides if wanted[side] or pair_checks]
    # both engines together only for a pairing check; otherwise one at a time, as always
    ups = [sides_up] if pair_checks else [[side] for side in sides_up]
    return n, [_Launch(group, lifetime, up, wanted, pair_checks, labels, pair_label) for up in ups]


def _run_launch(
    ctx: RunContext,
    launch: _Launch,
    state: RunState,
    *,
    attach: Mapping[Side, str | None],
    progress: Callable[[str], None],
    launcher: Launcher | None,
) -> None:
    """Start the launch's engines (recording each), let every check collect on them, stop them."""
    from fasttrack.perf.loadgen import run_loop

    group, lifetime, up = launch.group, launch.lifetime, launch.up
    with contextlib.ExitStack() as stack:
        engines: dict[Side, EngineHandle] = {}
        for side in up:
            launch.failing = side
            record = EngineLaunch(
                side=side,
                group=group.id,
                lifetime=lifetime,
                checks=[c.name for c in launch.wanted[side]]
                + [c.name for c in launch.pair_checks if c not in launch.wanted[side]],
                up_with=[o for o in up if o != side] if len(up) > 1 else None,
            )
            launch.records[side] = record
            state.engines.append(record)
            together = " (up together with the other side)" if len(up) > 1 else ""
            progress(f"{launch.labels[side]}: starting engine{together}")
            engines[side] = stack.enter_context(
                engine_for(
                    ctx,
                    group,
                    side,
                    lifetime,
                    attach.get(side),
                    record,
                    exclusive=not engines,
                    launcher=launcher,
                    cpus=pair_cpus_for(ctx, side, lifetime) if len(up) > 1 else None,
                )
            )
            progress(f"{launch.labels[side]}: engine up at {engines[side].base_url}")
        run_loop(_collect_launch(ctx, launch, engines, progress))


async def _collect_launch(
    ctx: RunContext, launch: _Launch, engines: Mapping[Side, EngineHandle], progress: Callable[[str], None]
) -> None:
    """Every wanted check collects on each engine of the launch, then the pairing checks get both."""
    group, lifetime = launch.group, launch.lifetime
    for side in launch.up:
        launch.failing = side
        for chk in launch.wanted[side]:
            launch.current = chk.name
            progress(f"{launch.labels[side]}: {chk.name}")
            t0 = time.perf_counter()
            await chk.collect(ctx, EngineSession(side=side, group=group, lifetime=lifetime, engine=engines[side]))
            launch.records[side].check_seconds[chk.name] = round(time.perf_counter() - t0, 3)
            engines[side].check_alive()
    launch.current = None
    for pchk in launch.pair_checks:  # non-empty only when both sides are up together
        launch.current = pchk.name
        launch.failing = None
        progress(f"{launch.pair_label}: {pchk.name}, runs interleaved")
        t0 = time.perf_counter()
        sessions = {
            side: EngineSession(side=side, group=group, lifetime=lifetime, engine=engines[side]) for side in launch.up
        }
        await pchk.collect_pair(ctx, sessions)
        for side in launch.up:
            launch.records[side].check_seconds[pchk.name] = round(time.perf_counter() - t0, 3)
        for side in launch.up:
            launch.failing = side
            engines[side].check_alive()
    launch.current = None


def _record_crash(
    ctx: RunContext,
    launch: _Launch,
    exc: Any,
    checks: list[EngineCheck],
    state: RunState,
    *,
    crashed: bool,
    log: Callable[[str], None],
) -> None:
    """An engine failed to start or crashed: say where, and make every check without a result ``not_run``."""
    side: Side = getattr(exc, "side", None) or launch.failing or launch.up[0]
    record = launch.records.get(side) or launch.records[launch.up[0]]
    log_path = getattr(exc, "log_path", None)
    if log_path and record.log is None:
        record.log = relative(Path(log_path), ctx.run_dir)
    # the log of the process that failed (a multi-node engine's failing node, not node 0)
    failed_log = relative(Path(log_path), ctx.run_dir) if log_path else record.log
    what = "crashed" if crashed else "failed"
    current = launch.current
    where = f"{launch.group.id}/{side} lifetime {launch.lifetime + 1}" + (
        f" during {current}" if current else " at start"
    )
    first_line = exc.message.splitlines()[0]
    state.crash = {
        "group": launch.group.id,
        "side": side,
        "lifetime": launch.lifetime,
        "check": current,
        "error": type(exc).__name__,
        "message": first_line,
        "process_exit_code": getattr(exc, "process_exit_code", None),
        "node": getattr(exc, "node", None),
        "log": failed_log,
    }
    log(f"engine {what} ({where}): {first_line}")
    reason = f"engine {what} in {where}: {first_line}" + ("" if "(log: " in first_line else f" (log: {failed_log})")
    for chk in checks:
        if chk.name in state.results:
            continue
        res = stopped_result(chk, ctx, reason, required=chk.required)
        state.results[chk.name] = res.model_copy(update={"summary": {**res.summary, "engine_failure": state.crash}})


def stopped_result(chk: EngineCheck, ctx: RunContext, why: str, *, required: bool) -> CheckResult:
    """The result of a check the run stopped before it could judge (``why``: an interrupt, a termination signal,
    an engine crash): its partial judgement when it offers one (``judge_partial(ctx, why)``: the perf check keeps
    every decided point), else ``not_run`` with ``why``. A partial judgement that raises is ``not_run`` too."""
    partial = getattr(chk, "judge_partial", None)
    if partial is not None:
        try:
            res = partial(ctx, why)
        except Exception as exc:  # noqa: BLE001 - the run is stopping: what was measured is reported, or why not
            why = f"{why}; its partial results could not be judged ({type(exc).__name__}: {exc})"
        else:
            if isinstance(res, CheckResult):
                return res.model_copy(update={"required": required})
    return CheckResult(check=chk.name, verdict=Verdict.NOT_RUN, required=required, reason=why)
