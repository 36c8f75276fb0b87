"""``fasttrack validate``: scope -> host check -> plan -> checks over real engines -> bundle.

Engines are brought up one at a time: for each engine group, each side in the
group's order (baseline, candidate, baseline, ...), the engine starts, every check
that has work on it collects, and the engine stops before the next one starts.
When a check measures both sides together (perf with ``gates.perf.interleave``),
the k-th baseline and k-th candidate engines of a group are up together instead
(:func:`engine_slots`): the other checks collect on each in turn, then the pairing
check gets both (``collect_pair``).
After the last engine, each check judges its evidence. An engine crash or Ctrl-C
stops the run: every engine is torn down, the checks that could not finish are
``not_run`` with the reason, and a partial bundle with the logs is still written.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fasttrack import __version__
from fasttrack.checks.base import (
    SIDES,
    Check,
    CheckResult,
    EngineSession,
    RunContext,
    Verdict,
    overall_verdict,
    registry,
)
from fasttrack.errors import FasttrackError, HardwareMismatch, ScopeError
from fasttrack.hardware import HostInfo, detect_host, match_hardware
from fasttrack.isolation import IsolationResult, check_isolation
from fasttrack.plan import EngineGroup, Plan, build_plan
from fasttrack.results import bundle_verdict, ordered_checks
from fasttrack.scope import LoadedScope, load_scope


@dataclass
class ValidateOptions:
    """Everything ``fasttrack validate`` was asked to do."""

    model: str
    tier: str = "smoke"
    shard: str | None = None
    out: Path = Path("runs/latest")
    checks: list[str] | None = None
    allow_hardware_mismatch: bool = False
    baseline_url: str | None = None
    candidate_url: str | None = None
    sign_keys: list[Path] = field(default_factory=list)
    repo: Path | None = None
    base: str | None = None
    head: str | None = None
    pr_repository: str | None = None
    pr_number: int | None = None
    force: bool = False


@dataclass
class RunState:
    """What happened, for the bundle (also when the run is cut short)."""

    results: dict[str, CheckResult] = field(default_factory=dict)
    engines: list[dict[str, Any]] = field(default_factory=list)
    """One record per engine lifetime: side, group, lifetime, owned, log, args, environment, timings."""
    crash: dict[str, Any] | None = None
    interrupted: bool = False
    started: float = field(default_factory=time.time)
    finished: float | None = None


@dataclass
class ValidateOutcome:
    run_dir: Path
    verdict: str
    results: list[CheckResult]
    bundle: Path | None
    rehearsal: bool
    state: RunState


def prepare(opts: ValidateOptions, *, log: Callable[[str], None]) -> tuple[LoadedScope, HostInfo, bool, str | None]:
    """Load the scope and check the host. Returns (scope, host, rehearsal, reason)."""
    loaded = load_scope(opts.model)
    scope = loaded.scope
    if not scope.is_complete:
        raise ScopeError(
            f"scope {scope.name!r} is incomplete, so it cannot be validated; missing:\n  "
            + "\n  ".join(scope.missing_report()),
            hint=f"Fill these in suites/{scope.name}/scope.yaml (see 'fasttrack plan --model {scope.name}').",
        )
    host = detect_host()
    assert scope.hardware is not None
    match = match_hardware(scope.hardware, host)
    if match.ok:
        return loaded, host, False, None
    reason = f"requires {match.required}; found {match.found} ({'; '.join(match.problems)})"
    if not opts.allow_hardware_mismatch:
        raise HardwareMismatch(
            f"this host does not match scope {scope.name!r}: it requires {match.required}, and this host has "
            f"{match.found} ({'; '.join(match.problems)}).",
            hint=f"Run it on matching hardware. To see what the run involves: fasttrack plan --model {scope.name} "
            f"--tier {opts.tier}. To rehearse anyway (not valid evidence): add --allow-hardware-mismatch.",
        )
    log(f"rehearsal: hardware mismatch: {reason}. Results will be marked as a rehearsal, not valid evidence.")
    return loaded, host, True, reason


def select_checks(plan: Plan, wanted: list[str] | None) -> tuple[list[Check], dict[str, str]]:
    """Instantiate the checks to run; return (checks, {name: why not selected})."""
    reg = registry()
    unknown = sorted(set(wanted or []) - set(reg))
    if unknown:
        raise FasttrackError(f"unknown check(s) {unknown}.", hint=f"Registered checks: {', '.join(reg) or '(none)'}.")
    skipped: dict[str, str] = {}
    out: list[Check] = []
    for name, cls in reg.items():
        if wanted is not None and name not in wanted:
            skipped[name] = "not selected with --checks"
            continue
        if plan.checks is not None and name not in plan.checks:
            skipped[name] = f"the {plan.tier} tier does not run it"
            continue
        out.append(cls())
    return out, skipped


def _prepare_run_dir(out: Path, force: bool) -> Path:
    if out.exists() and any(out.iterdir()):
        if not force:
            raise FasttrackError(
                f"output folder {str(out)!r} exists and is not empty.",
                hint="Choose another --out, or pass --force to replace it.",
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_validate(
    opts: ValidateOptions, *, log: Callable[[str], None] = print, progress: Callable[[str], None] | None = None
) -> ValidateOutcome:
    progress = progress or log
    loaded, host, rehearsal, rehearsal_reason = prepare(opts, log=log)
    scope = loaded.scope
    plan = build_plan(scope, tier=opts.tier, shard=opts.shard, scope_sha256=loaded.sha256)
    isolation: IsolationResult | None = None
    if opts.repo is not None:
        if not (opts.base and opts.head):
            raise FasttrackError(
                "--repo needs --base and --head.", hint="e.g. --repo ../vllm --base main --head pr-123"
            )
        isolation = check_isolation(opts.repo, opts.base, opts.head, scope.isolation)  # type: ignore[arg-type]
        log(f"isolation: {isolation.verdict}: {isolation.message}")
    if opts.sign_keys:
        from fasttrack.bundle.integration import load_sign_keys

        load_sign_keys(opts.sign_keys)  # a bad key fails now, not after the engines ran
    run_dir = _prepare_run_dir(Path(opts.out), opts.force)
    (run_dir / "logs").mkdir(exist_ok=True)
    checks, skipped = select_checks(plan, opts.checks)
    ctx = RunContext(
        scope=scope,
        plan=plan,
        tier=opts.tier,
        run_dir=run_dir,
        rehearsal=rehearsal,
        selected_checks=tuple(c.name for c in checks),
        log=log,
    )
    ctx.shared["loaded_scope"] = loaded
    ctx.shared["host"] = host
    state = RunState()
    for name, why in skipped.items():
        cls = registry()[name]
        state.results[name] = CheckResult.not_run(name, why, required=cls.required)

    active: list[Check] = []
    for chk in checks:
        why = chk.skip_reason(ctx)
        if why:
            state.results[chk.name] = CheckResult.not_run(chk.name, why, required=chk.required)
        else:
            active.append(chk)

    try:
        for chk in [c for c in active if not c.needs_engine]:
            progress(f"check {chk.name}: running")
            state.results[chk.name] = _guard(chk, lambda c=chk: c.run(ctx))
        engine_checks = [c for c in active if c.needs_engine]
        if engine_checks:
            _drive_engines(opts, ctx, plan, engine_checks, state, progress=progress, log=log)
            for chk in engine_checks:
                if chk.name in state.results:
                    continue
                progress(f"check {chk.name}: judging")
                state.results[chk.name] = _guard(chk, lambda c=chk: c.judge(ctx))
    except KeyboardInterrupt:
        state.interrupted = True
        log("interrupted: engines were stopped; writing a partial bundle")
        for chk in active:
            state.results.setdefault(
                chk.name,
                CheckResult.not_run(
                    chk.name, "the run was interrupted (Ctrl-C) before this check finished", required=chk.required
                ),
            )
    finally:
        state.finished = time.time()

    results = _ordered(state.results)
    verdict = overall_verdict(results)
    bundle_path = _write_outputs(
        opts, ctx, loaded, plan, host, rehearsal, rehearsal_reason, isolation, results, state, log=log
    )
    if state.interrupted:
        raise KeyboardInterrupt
    return ValidateOutcome(
        run_dir=run_dir,
        verdict=bundle_verdict(verdict),
        results=results,
        bundle=bundle_path,
        rehearsal=rehearsal,
        state=state,
    )


def _guard(chk: Check, fn: Callable[[], CheckResult]) -> CheckResult:
    """A check that raises is a failure of the harness, not a pass: report it as not run."""
    try:
        res = fn()
    except FasttrackError as exc:
        return CheckResult.not_run(chk.name, f"{type(exc).__name__}: {exc.message}", required=chk.required)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001
        tb = traceback.format_exc(limit=8)
        return CheckResult(
            check=chk.name,
            verdict=Verdict.NOT_RUN,
            required=chk.required,
            reason=f"the check raised {type(exc).__name__}: {exc}",
            summary={"traceback": tb},
        )
    if res.check != chk.name:
        res = res.model_copy(update={"check": chk.name})
    return res


def _ordered(results: dict[str, CheckResult]) -> list[CheckResult]:
    return [results[n] for n in ordered_checks(results)]


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
    return [sorted(v, key=lambda t: SIDES.index(t[0])) for v in slots.values()]  # type: ignore[arg-type]


def _drive_engines(
    opts: ValidateOptions,
    ctx: RunContext,
    plan: Plan,
    checks: list[Check],
    state: RunState,
    *,
    progress: Callable[[str], None],
    log: Callable[[str], None],
) -> None:
    from fasttrack.engine import EngineCrashed, EngineError
    from fasttrack.models import resolve_model

    attach = {"baseline": opts.baseline_url, "candidate": opts.candidate_url}
    resolved = None
    if not all(attach.values()):
        resolved = resolve_model(ctx.scope, log=log)
        ctx.shared["model"] = resolved
    pairing = [c for c in checks if c.paired(ctx)]
    total = sum(len(g.order) for g in plan.groups)
    n = 0
    for group in plan.groups:
        for slot in engine_slots(group.order, paired=bool(pairing)):
            lifetime = slot[0][1]
            wanted = {
                side: [
                    c for c in checks if c.wants(ctx, EngineSession(side=side, group=group, lifetime=lt, engine=None))
                ]
                for side, lt in slot
            }
            pair_checks = [c for c in pairing if len(slot) == 2 and c.wants_pair(ctx, group, lifetime)]
            labels = {}
            for side, lt in slot:
                n += 1
                labels[side] = f"[{n}/{total}] {group.id} {side} (lifetime {lt + 1}/{group.lifetimes_per_side})"
            sides_up = [side for side, _ in slot if wanted[side] or pair_checks]
            # both engines together only for a pairing check; otherwise one at a time, as always
            launches = [sides_up] if pair_checks else [[side] for side in sides_up]
            for up in launches:
                current: str | None = None
                failing: str | None = None
                records: dict[str, dict[str, Any]] = {}
                try:
                    with contextlib.ExitStack() as stack:
                        engines: dict[str, Any] = {}
                        for side in up:
                            failing = side
                            record: dict[str, Any] = {
                                "side": side,
                                "group": group.id,
                                "lifetime": lifetime,
                                "checks": [c.name for c in wanted[side]]
                                + [c.name for c in pair_checks if c not in wanted[side]],
                            }
                            if len(up) > 1:
                                record["up_with"] = [o for o in up if o != side]
                            records[side] = record
                            state.engines.append(record)
                            progress(
                                f"{labels[side]}: starting engine"
                                + (" (up together with the other side)" if len(up) > 1 else "")
                            )
                            engines[side] = stack.enter_context(
                                _launch(
                                    ctx, group, side, lifetime, attach[side], resolved, record, exclusive=not engines
                                )
                            )
                            progress(f"{labels[side]}: engine up at {engines[side].base_url}")
                        for side in up:
                            failing = side
                            for chk in wanted[side]:
                                current = chk.name
                                progress(f"{labels[side]}: {chk.name}")
                                t0 = time.perf_counter()
                                chk.collect(
                                    ctx, EngineSession(side=side, group=group, lifetime=lifetime, engine=engines[side])
                                )
                                records[side].setdefault("check_seconds", {})[chk.name] = round(
                                    time.perf_counter() - t0, 3
                                )
                                engines[side].check_alive()
                        current = None
                        for chk in pair_checks:  # non-empty only when both sides are up together
                            current = chk.name
                            failing = None
                            progress(
                                f"[{n}/{total}] {group.id} baseline + candidate (lifetime {lifetime + 1}/"
                                f"{group.lifetimes_per_side}): {chk.name}, runs interleaved"
                            )
                            t0 = time.perf_counter()
                            chk.collect_pair(
                                ctx,
                                {
                                    side: EngineSession(side=side, group=group, lifetime=lifetime, engine=engines[side])
                                    for side in up
                                },
                            )
                            for side in up:
                                records[side].setdefault("check_seconds", {})[chk.name] = round(
                                    time.perf_counter() - t0, 3
                                )
                            for side in up:
                                failing = side
                                engines[side].check_alive()
                        current = None
                except EngineError as exc:
                    side = getattr(exc, "side", None) or failing or up[0]
                    record = records.get(side) or records[up[0]]
                    if getattr(exc, "log_path", None) and "log" not in record:
                        try:
                            record["log"] = str(Path(exc.log_path).resolve().relative_to(ctx.run_dir.resolve()))
                        except ValueError:
                            record["log"] = str(exc.log_path)
                    is_crash = isinstance(exc, EngineCrashed)
                    what = "crashed" if is_crash else "failed"
                    where = f"{group.id}/{side} lifetime {lifetime + 1}" + (
                        f" during {current}" if current else " at start"
                    )
                    state.crash = {
                        "group": group.id,
                        "side": side,
                        "lifetime": lifetime,
                        "check": current,
                        "error": type(exc).__name__,
                        "message": exc.message.splitlines()[0],
                        "exit_code": getattr(exc, "exit_code", None),
                        "log": record.get("log"),
                    }
                    log(f"engine {what} ({where}): {exc.message.splitlines()[0]}")
                    reason = f"engine {what} in {where}: {exc.message.splitlines()[0]} (log: {record.get('log')})"
                    for chk in checks:
                        state.results.setdefault(
                            chk.name,
                            CheckResult(
                                check=chk.name,
                                verdict=Verdict.NOT_RUN,
                                required=chk.required,
                                reason=reason,
                                summary={"engine_failure": state.crash},
                            ),
                        )
                    return


@contextlib.contextmanager
def _launch(
    ctx: RunContext,
    group: EngineGroup,
    side: str,
    lifetime: int,
    url: str | None,
    resolved,
    record: dict[str, Any],
    *,
    exclusive: bool = True,
):
    """Start (or attach to) one side's engine; always torn down when the block exits.

    ``exclusive=False`` lets it start while the other side's engine is up (interleaved perf)."""
    from fasttrack.engine import attach_engine, per_request_metrics_args, profiler_args, start_engine

    if url:
        record.update(owned=False, base_url=url)
        engine = attach_engine(side=side, url=url)
    else:
        log_dir = ctx.run_dir / "logs"
        log_name = f"{group.id}.{side}.{lifetime}"
        prof_dir = ctx.run_dir / "profiles" / log_name
        args = list(group.args[side])
        served = ctx.scope.model.served_name
        if served and "--served-model-name" not in args:
            args += ["--served-model-name", served]
        args += profiler_args(prof_dir)
        args += per_request_metrics_args(args)  # the engine core's own per-request timing (perf)
        record.update(owned=True, args=args, env=group.env[side])

        def on_progress(p) -> None:
            ctx.log(f"  {side} engine starting ({p.elapsed_s:.0f} s): {p.last_log_line[-120:]}")

        engine = start_engine(
            side=side,
            model=resolved.model,
            args=args,
            env=group.env[side],
            log_dir=log_dir,
            log_name=log_name,
            startup_timeout=ctx.scope.engine.startup_timeout_s,
            progress=on_progress,
            exclusive=exclusive,
        )
        if engine.log_path is not None:
            record["log"] = str(Path(engine.log_path).resolve().relative_to(ctx.run_dir.resolve()))
        record["startup_s"] = engine.startup_s
    try:
        record["base_url"] = engine.base_url
        try:
            record["environment"] = engine.environment().model_dump(mode="json")
        except Exception as exc:  # noqa: BLE001  (environment capture must not kill the run)
            record["environment_error"] = f"{type(exc).__name__}: {exc}"
        yield engine
    finally:
        rep = engine.stop()
        if rep is not None:
            record["stop"] = rep.model_dump(mode="json") if hasattr(rep, "model_dump") else str(rep)


def _write_outputs(opts, ctx, loaded, plan, host, rehearsal, rehearsal_reason, isolation, results, state, *, log):
    """Write the summary, the bundle (and sign it) where the bundle layer is available."""
    summary = {
        "fasttrack_version": __version__,
        "scope": loaded.scope.name,
        "tier": plan.tier,
        "shard": plan.shard,
        "rehearsal": rehearsal,
        "rehearsal_reason": rehearsal_reason,
        "verdict": bundle_verdict(overall_verdict(results)),
        "checks": {r.check: {"verdict": r.verdict.value, "reason": r.reason} for r in results},
        "engines": state.engines,
        "crash": state.crash,
        "interrupted": state.interrupted,
    }
    (ctx.run_dir / "run-summary.json").write_text(json.dumps(summary, indent=2, default=str))
    try:
        from fasttrack.bundle.integration import write_run_bundle
    except ImportError:
        return None
    tarball = write_run_bundle(
        opts=opts,
        ctx=ctx,
        loaded=loaded,
        plan=plan,
        host=host,
        rehearsal=rehearsal,
        rehearsal_reason=rehearsal_reason,
        isolation=isolation,
        results=results,
        state=state,
        log=log,
    )
    _write_report(opts, ctx, isolation, log=log)
    return tarball


def _write_report(opts: ValidateOptions, ctx: RunContext, isolation: IsolationResult | None, *, log) -> None:
    """report.html and pr-comment.md next to the bundle, rendered from the bundle alone (verified first)."""
    from fasttrack.bundle.integration import load_sign_keys
    from fasttrack.report.report import render_report

    bundle_dir = ctx.run_dir / "bundle"
    if not bundle_dir.is_dir():
        return
    keys = [k.public for k in load_sign_keys(opts.sign_keys)] if opts.sign_keys else []
    try:
        render_report(
            bundle_dir,
            ctx.run_dir / "report.html",
            keys=keys,
            pr_head=isolation.head_sha if isolation else None,
            comment_path=ctx.run_dir / "pr-comment.md",
        )
        log(f"report: {ctx.run_dir / 'report.html'}  PR comment: {ctx.run_dir / 'pr-comment.md'}")
    except FasttrackError as exc:
        log(f"report not written: {exc.message}")
