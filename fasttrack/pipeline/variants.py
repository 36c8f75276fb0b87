"""The reference variants' engines (``gates.equivalence.reference``): stock's own builds, beside the baseline.

After an engine group's lifetimes, one engine per variant starts, one at a time like the plan's engines: the
baseline's arguments with the variant's appended (``--enforce-eager``, ``--dtype float32``), the baseline's
environment, no profiler (a variant needs no path evidence). Every check that measures variants
(:class:`~fasttrack.checks.equivalence.reference.VariantCollector`: equivalence, and the features whose judgement
the variants calibrate) sends it the baseline's requests, then it stops. Each variant's lifetime is recorded
like any engine's (side ``baseline``, its ``variant`` named), so the run summary gives its start and its
checks' seconds (the plan prices them on the ``reference variants`` line, :mod:`fasttrack.planning.cost`).

A variant that cannot start, or crashes, does not end the run: the checks are told why it has no outputs (the
points it was to calibrate are ``not_run``, saying so), and the run goes on. A baseline attached by URL gets its
variants started on this host from the scope's model and arguments (each engine record names the vLLM build it
served, so a variant of another build than the attached baseline's shows in the bundle's provenance).

A variant attached by URL (``validate --reference-url NAME=URL``, ``references``) is not started: its engine is
measured where it runs, like an attached baseline (its hardware checked before the run, its served build recorded,
never stopped: ``owned: false``), by every engine group of the run. It should be the baseline's arguments with the
variant's appended, as fasttrack would start it; what it was started with is its owner's to say.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrack.checks.base import EngineCheck
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.equivalence.reference import VariantCollector
from fasttrack.errors import FasttrackError
from fasttrack.pipeline.engines import RunState
from fasttrack.pipeline.launch import EngineLaunch, _node_launcher, attached, recorded, relative
from fasttrack.results import Side

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle, Launcher, ManagedEngine
    from fasttrack.planning.plan import EngineGroup

Collector = tuple[str, VariantCollector]
"""A check that measures variants: its name and the check."""


def run_variants(
    ctx: RunContext,
    group: EngineGroup,
    checks: list[EngineCheck],
    state: RunState,
    *,
    attach: Mapping[Side, str | None],
    progress: Callable[[str], None],
    launcher: Launcher | None,
    references: Mapping[str, str] | None = None,
) -> None:
    """Start each reference variant of ``group`` in turn (or attach it: ``references``, name -> URL) and let the
    checks that want it measure it (see the module docstring); a variant without outputs is reported to them with
    the reason."""
    from fasttrack.engine import EngineError

    ref = ctx.scope.gates.equivalence.reference
    if ref is None:
        return
    collectors: list[Collector] = [
        (c.name, c) for c in checks if isinstance(c, VariantCollector) and c.wants_variant(ctx, group)
    ]
    if not collectors:
        return
    for name, extra in ref.variants.items():
        label = f"{group.id} reference variant {name}"
        url = (references or {}).get(name)
        why = None if url else _cannot_start(ctx, attach)
        if why is not None:
            ctx.log(f"{label}: not started: {why}")
            for _, c in collectors:
                c.variant_missing(ctx, group, name, why)
            continue
        record = EngineLaunch(side="baseline", group=group.id, lifetime=0, checks=[n for n, _ in collectors])
        record.variant = name
        state.engines.append(record)
        if url:
            progress(f"{label}: attaching the engine at {url} (--reference-url)")
        else:
            progress(f"{label}: starting engine (the baseline's arguments + {' '.join(extra)})")
        try:
            with _variant_engine(ctx, group, name, list(extra), record, launcher, url=url) as engine:
                progress(f"{label}: engine up at {engine.base_url}")
                _collect(ctx, group, name, engine, collectors, record, progress, label)
        except EngineError as exc:
            first = exc.message.splitlines()[0]
            log_path = getattr(exc, "log_path", None)
            if log_path and record.log is None:
                record.log = relative(Path(log_path), ctx.run_dir)
            what = f"its engine at {url} (--reference-url)" if url else "its engine"
            reason = f"{what} failed ({type(exc).__name__}: {first}; log: {record.log})"
            ctx.log(f"{label}: {reason}")
            for _, c in collectors:
                c.variant_missing(ctx, group, name, reason)


def _cannot_start(ctx: RunContext, attach: Mapping[Side, str | None]) -> str | None:
    """Why fasttrack cannot start the variants (None when it can). An attached baseline's variants start on this
    host from the scope's model and arguments, like an owned baseline's (each records the vLLM build it served)."""
    if ctx.model is not None:
        return None
    from fasttrack.host.models import resolve_model

    try:
        ctx.model = resolve_model(ctx.scope, base_dir=ctx.base_dir, log=ctx.log)
    except FasttrackError as exc:
        why = "attached by URL, " if attach.get("baseline") else ""
        return f"the baseline is {why}and the scope's model could not be resolved to start its variants: {exc.message}"
    return None


def _collect(
    ctx: RunContext,
    group: EngineGroup,
    name: str,
    engine: EngineHandle,
    collectors: list[Collector],
    record: EngineLaunch,
    progress: Callable[[str], None],
    label: str,
) -> None:
    """Every collector measures the variant's engine, one after another (each one's seconds recorded)."""
    from fasttrack.perf.loadgen import run_loop

    async def collect() -> None:
        session = EngineSession(side="baseline", group=group, lifetime=0, engine=engine)
        for check, c in collectors:
            progress(f"{label}: {check}")
            t0 = time.perf_counter()
            await c.collect_variant(ctx, session, name)
            record.check_seconds[check] = round(time.perf_counter() - t0, 3)
            engine.check_alive()

    run_loop(collect())


@contextlib.contextmanager
def _variant_engine(
    ctx: RunContext,
    group: EngineGroup,
    name: str,
    extra: list[str],
    record: EngineLaunch,
    launcher: Launcher | None,
    *,
    url: str | None = None,
) -> Iterator[EngineHandle]:
    """Start the variant's engine, or attach the one at ``url`` (recorded in ``record``); an owned one is always
    stopped when the block exits, an attached one never."""
    engine: Any
    if url:
        engine = attached("baseline", url, record)
    else:
        engine = _start_variant(ctx, group, name, extra, record, launcher)
    with recorded(engine, record) as up:
        yield up


def _start_variant(
    ctx: RunContext, group: EngineGroup, name: str, extra: list[str], record: EngineLaunch, launcher: Launcher | None
) -> ManagedEngine:
    """The baseline's engine with the variant's arguments appended, its environment, no path evidence."""
    from fasttrack.engine import start_engine
    from fasttrack.engine.cmdline import serve_spec

    assert ctx.model is not None, "the model is resolved before the first engine starts"
    log_name = f"{group.id}.baseline.reference-{name}"
    base_args = [*group.args["baseline"], *extra]
    spec = serve_spec(
        ctx.scope,
        group,
        "baseline",
        model=ctx.model.model,
        run_dir=ctx.run_dir,
        name=log_name,
        args=base_args,
        evidence=False,
    )
    args = list(spec.args)
    record.owned, record.args, record.env = True, args, dict(group.env["baseline"])
    nodes = group.side_nodes.get("baseline", group.nodes)
    gpu_scope = ctx.scope.hardware is not None and ctx.scope.hardware.device == "gpu"

    def on_progress(p: Any) -> None:
        ctx.log(f"  reference variant {name} starting ({p.elapsed_s:.0f} s): {p.line()}")

    try:
        engine = start_engine(
            side="baseline",
            model=ctx.model.model,
            args=args,
            env=dict(spec.env),
            log_dir=ctx.run_dir / "logs",
            log_name=log_name,
            startup_timeout=ctx.scope.engine.startup_timeout_s,
            progress=on_progress,
            exclusive=True,
            nodes=nodes,
            launcher=_node_launcher(ctx, group, "baseline", record, nodes, launcher),
            gpus_per_node=group.gpus_per_node if gpu_scope else None,
        )
    except KeyboardInterrupt as exc:  # Ctrl-C or a termination signal: the engine stopped itself
        record.stop = f"stopped while starting ({str(exc) or 'interrupted by Ctrl-C'})"
        raise
    if engine.log_path is not None:
        record.log = relative(Path(engine.log_path), ctx.run_dir)
    record.startup_s = engine.startup_s
    return engine
