"""Starting one engine for a run: fasttrack's own (its command line, environment, nodes, cores, seed and logs,
recorded) or an attached one; and an engine a check asks for outside the envelope (a deployment probe).

:mod:`fasttrack.pipeline.engines` drives the engine checks over the engines these start.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrack.checks.base import Deployment
from fasttrack.checks.context import RunContext
from fasttrack.engine.flags import arg_values
from fasttrack.results import Side

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle, Launcher, ManagedEngine
    from fasttrack.host.models import ResolvedModel
    from fasttrack.planning.plan import EngineGroup


@dataclass
class EngineLaunch:
    """One engine lifetime as the run recorded it (the run summary lists them; the bundle's provenance too)."""

    side: Side
    group: str
    lifetime: int
    checks: list[str]
    """Checks that collected on it."""
    up_with: list[str] | None = None
    """The other side(s) up at the same time (interleaved measurement)."""
    variant: str | None = None
    """The reference variant of the baseline it ran (``gates.equivalence.reference``; :mod:`.variants`)."""
    cpus: list[int] | None = None
    """The CPU cores its processes were pinned to (engines up together: ``engine.cpu_pinning``)."""
    owned: bool | None = None
    """Whether fasttrack started it (False: attached by URL)."""
    base_url: str | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    log: str | None = None
    """The engine log, relative to the run folder (a multi-node engine's: node 0's)."""
    nodes: int | None = None
    """Nodes a multi-node engine spans (None: one)."""
    launcher: str | None = None
    """How a multi-node engine's node processes were started (``local``, ``slurm``)."""
    node_logs: list[str] | None = None
    """Every node's log, relative to the run folder (multi-node engines)."""
    startup_s: float | None = None
    environment: dict[str, Any] | None = None
    environment_error: str | None = None
    stop: dict[str, Any] | str | None = None
    """How it was stopped."""
    check_seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self, *, redact: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, Any]:
        """The record for the run summary (unset fields left out; ``env`` passed through ``redact``)."""
        out = {k: v for k, v in asdict(self).items() if v is not None and v != {}}
        if self.env is not None:
            out["env"] = redact(self.env)
        return out


def deploy(ctx: RunContext, dep: Deployment, records: list[EngineLaunch], check: str, launcher: Launcher | None) -> Any:
    """Start one engine outside the envelope (:class:`~fasttrack.checks.base.Deployment`) and record it (in
    ``records``, the run's engines)."""
    from fasttrack.engine import get_launcher
    from fasttrack.engine.cmdline import serve_spec
    from fasttrack.engine.deployment import probe_deployment
    from fasttrack.planning.plan import effective_tp

    group = next(g for g in ctx.plan.groups if g.id == dep.group)
    assert ctx.model is not None, "the model is resolved before the first engine starts"
    log_name = f"{dep.group}.{dep.side}.{dep.name}"
    spec = serve_spec(
        ctx.scope,
        group,
        dep.side,
        model=ctx.model.model,
        run_dir=ctx.run_dir,
        name=log_name,
        args=dep.args,
        evidence=False,
    )
    args = list(spec.args)
    hw = ctx.scope.hardware
    nodes = hw.nodes_for(effective_tp(args, group.tp)) if hw is not None else 1
    record = EngineLaunch(side=dep.side, group=dep.group, lifetime=0, checks=[check], owned=True, args=args)
    record.env = dict(group.env[dep.side])
    records.append(record)
    fb = ctx.scope.fallback
    outcome = probe_deployment(
        side=dep.side,
        model=spec.model,
        args=args,
        env=dict(spec.env),
        log_dir=ctx.run_dir / "logs",
        log_name=log_name,
        startup_timeout=ctx.scope.engine.startup_timeout_s,
        served_model=ctx.scope.model.served_name,
        reject_regex=fb.reject_regex if fb else None,
        log_regex=fb.log_regex if fb else None,
        nodes=nodes,
        launcher=(launcher or get_launcher(None)) if nodes > 1 else None,
    )
    if outcome.log:
        record.log = relative(Path(outcome.log), ctx.run_dir)
    record.startup_s = outcome.seconds
    record.stop = "refused to start" if not outcome.started else "stopped after the probe requests"
    ctx.log(
        f"{dep.name}: the {dep.side} engine "
        + (
            f"refused to start (exit {outcome.exit_code})"
            if not outcome.started
            else f"served {outcome.served} request(s)"
        )
    )
    return outcome


def relative(path: Path, run_dir: Path) -> str:
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)


def pair_cpus_for(ctx: RunContext, side: str, lifetime: int) -> list[int] | None:
    """The cores of ``side``'s engine when both sides are up together (``engine.cpu_pinning``; None: unpinned)."""
    from fasttrack.engine.pinning import pair_cpus

    pin = ctx.scope.engine.cpu_pinning
    if pin.mode == "off":
        return None
    return pair_cpus(side, lifetime, cores=pin.cores, alternate=pin.alternate != "off")


def engine_seed(args: list[str]) -> int | None:
    """The ``--seed`` an engine was started with (vLLM's global seed), or None."""
    seeds = arg_values(args, "--seed")
    try:
        return int(seeds[-1]) if seeds else None
    except ValueError:
        return None


@contextlib.contextmanager
def engine_for(
    ctx: RunContext,
    group: EngineGroup,
    side: Side,
    lifetime: int,
    url: str | None,
    record: EngineLaunch,
    *,
    exclusive: bool = True,
    launcher: Launcher | None = None,
    cpus: list[int] | None = None,
) -> Iterator[EngineHandle]:
    """Start (or attach to) one side's engine; always torn down when the block exits.

    ``exclusive=False`` lets it start while the other side's engine is up (interleaved perf). A side
    that spans several nodes (``group.side_nodes``) starts one process per node through ``launcher``.
    ``cpus``: the cores its processes are pinned to (:func:`pair_cpus_for`)."""
    engine: ManagedEngine | Any
    if url:
        engine = attached(side, url, record)
    else:
        engine = _start_owned(ctx, group, side, lifetime, record, exclusive=exclusive, launcher=launcher, cpus=cpus)
    with recorded(engine, record) as up:
        yield up


def attached(side: Side, url: str, record: EngineLaunch) -> Any:
    """The engine already running at ``url`` (not owned: never started or stopped here), marked so in ``record``."""
    from fasttrack.engine import attach_engine

    record.owned, record.base_url = False, url
    return attach_engine(side=side, url=url)


@contextlib.contextmanager
def recorded(engine: Any, record: EngineLaunch) -> Iterator[Any]:
    """``engine``, its URL, environment and stop report written into ``record``; always stopped when the block
    exits."""
    try:
        record.base_url = engine.base_url
        try:
            record.environment = engine.environment().model_dump(mode="json")
        except Exception as exc:  # noqa: BLE001 - environment capture must not kill the run
            record.environment_error = f"{type(exc).__name__}: {exc}"
        yield engine
    finally:
        rep = engine.stop()
        if rep is not None:
            record.stop = rep.model_dump(mode="json") if hasattr(rep, "model_dump") else str(rep)


def _start_owned(
    ctx: RunContext,
    group: EngineGroup,
    side: Side,
    lifetime: int,
    record: EngineLaunch,
    *,
    exclusive: bool,
    launcher: Launcher | None,
    cpus: list[int] | None,
) -> ManagedEngine:
    """Start one side's engine that fasttrack owns (see :func:`engine_for`), recording its command line, environment,
    nodes, cores, logs and startup time in ``record``."""
    from fasttrack.engine import MultiNodeEngine, start_engine
    from fasttrack.engine.cmdline import serve_spec
    from fasttrack.engine.pinning import pinned

    resolved: ResolvedModel | None = ctx.model
    assert resolved is not None, "the model is resolved before the first engine starts"
    log_name = f"{group.id}.{side}.{lifetime}"
    spec = serve_spec(ctx.scope, group, side, model=resolved.model, run_dir=ctx.run_dir, name=log_name)
    args = list(spec.args)
    record.owned, record.args, record.env = True, args, dict(group.env[side])
    seed = engine_seed(args)
    if seed is not None:
        ctx.provenance.seed(f"engine/{group.id}/{side}", seed)

    def on_progress(p: Any) -> None:
        ctx.log(f"  {side} engine starting ({p.elapsed_s:.0f} s): {p.line()}")

    env: dict[str, str | None] = dict(spec.env)
    _fresh_device_counters(env)
    nodes = group.side_nodes.get(side, group.nodes)
    gpu_scope = ctx.scope.hardware is not None and ctx.scope.hardware.device == "gpu"
    node_launcher = _node_launcher(ctx, group, side, record, nodes, launcher)
    if cpus:  # engines up together: this one's cores, and the settings that keep its threads on them
        _pin(ctx, env, record, cpus)
    try:
        with pinned(cpus):
            engine = start_engine(
                side=side,
                model=resolved.model,
                args=args,
                env=env,
                log_dir=ctx.run_dir / "logs",
                log_name=log_name,
                startup_timeout=ctx.scope.engine.startup_timeout_s,
                progress=on_progress,
                exclusive=exclusive,
                nodes=nodes,
                launcher=node_launcher,
                # GPUs to ask each node's task for; a CPU scope's node model counts ranks, not GPUs
                gpus_per_node=group.gpus_per_node if gpu_scope else None,
            )
    except KeyboardInterrupt as exc:  # Ctrl-C or a termination signal: the engine stopped itself
        record.stop = f"stopped while starting ({str(exc) or 'interrupted by Ctrl-C'})"
        raise
    if engine.log_path is not None:
        record.log = relative(Path(engine.log_path), ctx.run_dir)
    if isinstance(engine, MultiNodeEngine):
        record.node_logs = [relative(p, ctx.run_dir) for p in engine.node_logs.values()]
    record.startup_s = engine.startup_s
    return engine


def _fresh_device_counters(env: Mapping[str, str | None]) -> None:
    """The device counters' folder (``serve_spec`` names it in ``env``): a fresh, empty one per engine."""
    from fasttrack.engine.cmdline import DEVICE_COUNTERS_ENV

    counters = env.get(DEVICE_COUNTERS_ENV)
    if counters:
        shutil.rmtree(counters, ignore_errors=True)
        Path(counters).mkdir(parents=True)


def _node_launcher(
    ctx: RunContext, group: EngineGroup, side: Side, record: EngineLaunch, nodes: int, launcher: Launcher | None
) -> Launcher | None:
    """How a side spanning ``nodes`` > 1 nodes starts its node processes (recorded); None for one node."""
    from fasttrack.engine import get_launcher

    if nodes <= 1:
        return None
    node_launcher = launcher or get_launcher(None)
    record.nodes, record.launcher = nodes, node_launcher.name
    ctx.log(f"{group.id} {side}: the engine spans {nodes} nodes (launcher {node_launcher.name})")
    return node_launcher


def _pin(ctx: RunContext, env: dict[str, str | None], record: EngineLaunch, cpus: list[int]) -> None:
    """Pin an engine to ``cpus``: add to ``env`` the settings that keep its threads on them (recorded)."""
    from fasttrack.engine.pinning import pinning_env

    hw = ctx.scope.hardware
    pin_env = pinning_env(cpus, env, cpu_device=hw is not None and hw.device == "cpu")
    env.update(pin_env)
    record.cpus = list(cpus)
    record.env = {**(record.env or {}), **{k: v for k, v in pin_env.items() if v is not None}}
