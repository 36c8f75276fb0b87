"""``fasttrack validate``: scope -> host check -> plan -> checks over real engines -> bundle.

After the last engine, each engine check judges its evidence. An engine crash, Ctrl-C or
a termination signal (SIGTERM, SIGHUP: a scheduler's scancel, time limit or pod deletion)
stops the run: every engine is torn down, the checks that could not finish are
``not_run`` with the reason ("terminated by signal 15 (SIGTERM)"), and a partial bundle
with the logs is still written; after a signal the process exits with 128 + its number.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from fasttrack import attrs, registry
from fasttrack.change.diff import resolve_refs
from fasttrack.checks.base import Check, EngineCheck, EnginelessCheck, build_run_plan, registered_checks
from fasttrack.checks.context import ChangeRequest, RunContext
from fasttrack.checks.isolation import bind_served_builds, engine_builds
from fasttrack.checks.passability import analyze, engine_arg_check
from fasttrack.engine.argcheck import raise_for_issues
from fasttrack.engine.launchers import get_launcher
from fasttrack.errors import FasttrackError, HardwareMismatch, ScopeError
from fasttrack.host.hardware import HostInfo, detect_host, match_hardware
from fasttrack.pipeline.engines import RunState, drive_engines, stopped_result
from fasttrack.pipeline.options import ValidateOptions
from fasttrack.pipeline.record import RunFacts, write_outputs
from fasttrack.pipeline.variants import run_variants
from fasttrack.planning.plan import Plan
from fasttrack.results import ISOLATION, CheckResult, Side, Verdict, bundle_verdict, ordered_checks, overall_verdict
from fasttrack.scope import LoadedScope, Scope, load_scope


@dataclass
class ValidateOutcome:
    run_dir: Path
    verdict: str
    results: list[CheckResult]
    bundle: Path | None
    rehearsal: bool
    state: RunState | None


def load_complete_scope(opts: ValidateOptions) -> LoadedScope:
    """The scope ``opts.model`` names, refused when it is incomplete (it cannot be validated then)."""
    registered_checks()  # every check registered first: a check's gate model makes its section of the scope's gates
    loaded = load_scope(opts.model, base_dir=opts.scope_base_dir)
    scope = loaded.scope
    if not scope.is_complete:
        raise ScopeError(
            f"scope {scope.name!r} is incomplete, so it cannot be validated; missing:\n  "
            + "\n  ".join(scope.missing_report()),
            hint=f"Fill these in suites/{scope.name}/scope.yaml (see 'fasttrack plan --model {scope.name}').",
        )
    return loaded


class HostCheck(NamedTuple):
    """What :func:`check_hardware` found."""

    host: HostInfo
    """The host recorded for the run."""
    rehearsal: bool
    """The hardware does not match the scope's (allowed with ``allow_hardware_mismatch``): not valid evidence."""
    reason: str | None
    """Why it is a rehearsal (None when the hardware matches)."""


def check_hardware(loaded: LoadedScope, plan: Plan, opts: ValidateOptions, *, log: Callable[[str], None]) -> HostCheck:
    """Check the hardware the engines run on: the host, whether the run is a rehearsal, and why.

    Engines fasttrack starts run here (or on this allocation's nodes): this host is checked. An engine attached
    by URL runs elsewhere: the check runs against what it reports (:mod:`fasttrack.engine.nodes`: every node's
    report, else vLLM's ``/server_info``), so a driver without a GPU can drive GPU engines; the host recorded is
    then the first attached engine's first node."""
    scope = loaded.scope
    assert scope.hardware is not None
    # the GPUs of the engines this run starts (a tier of TP8 engines needs fewer nodes than one of TP16)
    engine_gpus = sorted({g.gpus for g in plan.groups if g.gpus}) or None
    attached = {s: u for s, u in (("baseline", opts.baseline_url), ("candidate", opts.candidate_url)) if u}
    if attached or opts.reference_urls:
        from fasttrack.engine.nodes import attached_hardware

        host, match = attached_hardware(
            scope.hardware, plan, attached, engine_gpus, references=opts.reference_urls, log=log
        )
    else:
        host = detect_host()
        match = match_hardware(scope.hardware, host, engine_gpus=engine_gpus)
    if match.ok:
        return HostCheck(host, False, None)
    reason = f"requires {match.required}; found {match.found} ({'; '.join(match.problems)})"
    if not opts.allow_hardware_mismatch:
        where = "the attached engines do" if attached or opts.reference_urls else "this host does"
        raise HardwareMismatch(
            f"{where} not match scope {scope.name!r}: it requires {match.required}, and {match.found} "
            f"({'; '.join(match.problems)}).\nFound: " + "; ".join(match.facts) + ".",
            hint=f"Run it on matching hardware. To see what the run involves: fasttrack plan --model {scope.name} "
            f"--tier {opts.tier}. To rehearse anyway (not valid evidence): add --allow-hardware-mismatch.",
        )
    log(f"rehearsal: hardware mismatch: {reason}. Results will be marked as a rehearsal, not valid evidence.")
    return HostCheck(host, True, reason)


def preflight(loaded: LoadedScope, plan: Plan, opts: ValidateOptions, *, log: Callable[[str], None]) -> None:
    """Before any engine starts: the passability analysis of the tier (refused unless ``run_anyway``)
    and the engine arguments against the installed vLLM's own parser (when engines will be started)."""
    scope = loaded.scope
    reg = registered_checks()
    selected = [n for n in reg if (opts.checks is None or n in opts.checks) and plan.runs_check(n)]
    analysis = analyze(scope, build_run_plan(scope, tier=opts.tier), base_dir=loaded.base_dir)
    blockers = [b for b in analysis.blockers if b.check in selected]
    if blockers:
        lines = "\n  ".join(b.line() for b in blockers)
        if not opts.run_anyway:
            raise FasttrackError(
                f"the {opts.tier} tier of {scope.name!r} can never pass: these required items cannot run:\n  {lines}",
                hint="Fix the scope (see 'fasttrack plan'), or pass --run-anyway for a run whose bundle is incomplete.",
            )
        log(f"--run-anyway: the {opts.tier} tier cannot pass (the bundle will be incomplete):\n  {lines}")
    owned = not (opts.baseline_url and opts.candidate_url)
    if owned and any(reg[n].needs_engine for n in selected):
        if opts.launcher is not None:
            registry.get("launcher", opts.launcher)  # an unknown name is an error listing the registered ones
        args = engine_arg_check(plan)
        if args.skipped:
            log(f"engine arguments not checked: {args.skipped}")
        raise_for_issues(args, scope_name=scope.name, scope_path=loaded.path)


def check_reference_urls(scope: Scope, urls: Mapping[str, str]) -> None:
    """``--reference-url NAME=URL``: every NAME is a reference variant the scope declares
    (``gates.equivalence.reference.variants``); an input error naming the declared ones otherwise."""
    if not urls:
        return
    ref = scope.gates.equivalence.reference
    declared = list(ref.variants) if ref is not None else []
    unknown = [n for n in urls if n not in declared]
    if unknown:
        raise FasttrackError(
            f"--reference-url {', '.join(unknown)}: not a reference variant of scope {scope.name!r}.",
            hint=f"Its reference variants (gates.equivalence.reference.variants): {', '.join(declared)}."
            if declared
            else "The scope declares no reference variants (gates.equivalence.reference): leave out --reference-url.",
        )


def select_groups(plan: Plan, ids: list[str] | None) -> Plan:
    """The plan whose engine groups ``validate --group`` starts: ``plan`` itself without a selection, else a copy
    with only the named groups (their order kept). An id the plan does not have is an input error naming them."""
    if ids is None:
        return plan
    known = [g.id for g in plan.groups]
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise FasttrackError(
            f"--group {', '.join(unknown)}: not an engine group of this plan.",
            hint=f"Engine groups of the {plan.tier} tier: {', '.join(known) or '(none)'} (see 'fasttrack plan').",
        )
    return plan.model_copy(update={"groups": [g for g in plan.groups if g.id in ids]})


def change_request(opts: ValidateOptions) -> ChangeRequest | None:
    """The PR the run is tied to (None without ``--repo``/``--base``/``--head``). With ``--repo``, its refs are
    resolved here, so a wrong path or ref fails before any engine starts."""
    if opts.repo is not None:
        if not (opts.base and opts.head):
            raise FasttrackError(
                "--repo needs --base and --head.", hint="e.g. --repo ../vllm --base main --head pr-123"
            )
        resolve_refs(opts.repo, opts.base, opts.head)
        return ChangeRequest(repo=Path(opts.repo), base=opts.base, head=opts.head)
    if opts.head:
        return ChangeRequest(repo=None, base=opts.base, head=opts.head)
    return None


def select_checks(plan: Plan, wanted: list[str] | None) -> tuple[list[Check], dict[str, str]]:
    """Instantiate the checks to run; return (checks, {name: why not selected})."""
    reg = registered_checks()
    unknown = sorted(set(wanted or []) - set(reg))
    if unknown:
        raise FasttrackError(f"unknown check(s) {unknown}.", hint=f"Registered checks: {', '.join(reg) or '(none)'}.")
    unknown_tier = sorted(set(plan.checks or []) - set(reg))
    if unknown_tier:
        raise FasttrackError(
            f"the {plan.tier} tier's checks list names unknown check(s) {unknown_tier}.",
            hint=f"Registered checks: {', '.join(reg)}.",
        )
    skipped: dict[str, str] = {}
    out: list[Check] = []
    for name, cls in reg.items():
        if not plan.runs_check(name) and not cls.every_tier:
            runs = ", ".join(plan.checks or [])
            skipped[name] = f"the {plan.tier} tier does not run it (its checks: {runs}), so it is not required"
            continue
        if wanted is not None and name not in wanted:
            skipped[name] = "not selected with --checks"
            continue
        out.append(cls())
    return out, skipped


def _check_run_dir(out: Path, force: bool) -> None:
    """Input errors of ``--out``, found without touching it: a file, or a folder in use without ``--force``."""
    if out.exists() and not out.is_dir():
        raise FasttrackError(f"output folder {str(out)!r} is a file.", hint="Choose another --out.")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FasttrackError(
            f"output folder {str(out)!r} exists and is not empty.",
            hint="Choose another --out, or pass --force to replace it.",
        )


def _prepare_run_dir(out: Path, force: bool) -> Path:
    """The run folder, empty: ``--out`` as :func:`_check_run_dir` allows it, a folder in use replaced (--force)."""
    _check_run_dir(out, force)
    if out.exists() and any(out.iterdir()):
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (scancel, a time limit, pod deletion, a closed terminal): stop like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def reason(self) -> str:
        return f"terminated by signal {self.signum} ({signal.Signals(self.signum).name})"


_TERM_SIGNALS = tuple(s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


def _termination_handlers() -> tuple[Callable[[], None], Callable[[], int | None]]:
    """SIGTERM/SIGHUP raise :class:`Terminated` (once; later ones are ignored while the partial bundle is
    written). Engines stop fast first, so a scheduler's grace period (Slurm's KillWait and Kubernetes'
    terminationGracePeriodSeconds, 30 s by default) covers the teardown and the bundle. Returns ``disarm``
    (from then on a signal is only recorded: the outputs get written) and ``restore`` (the previous
    handlers back; returns the signal recorded while disarmed, if any)."""
    armed = [True]
    if threading.current_thread() is not threading.main_thread():
        return (lambda: None), (lambda: None)
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if fired:
            return
        fired.append(signum)
        if not armed[0]:  # the outputs are being written: let them finish, exit afterwards
            return
        from fasttrack.engine import stop_all_engines

        stop_all_engines(fast=True)
        raise Terminated(signum)

    prev = {}
    for sig in _TERM_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_IGN:  # e.g. SIGHUP under nohup: keep ignoring it
            continue
        prev[sig] = signal.signal(sig, handler)

    def disarm() -> None:
        armed[0] = False

    def restore() -> int | None:
        for sig, h in prev.items():
            signal.signal(sig, h)
        return fired[0] if fired and not armed[0] else None

    return disarm, restore


def run_validate(
    opts: ValidateOptions, *, log: Callable[[str], None] = print, progress: Callable[[str], None] | None = None
) -> ValidateOutcome:
    progress = progress or log
    run = _set_up(opts, log=log)
    ctx, plan = run.ctx, run.ctx.plan
    state = RunState()
    active = _declare_inactive(ctx, run.checks, run.skipped, state)
    disarm_signals, restore_signals = _termination_handlers()
    terminated: Terminated | None = None
    try:
        _run_checks(ctx, run.driven, active, state, opts, progress=progress, log=log)
    except KeyboardInterrupt as exc:
        terminated = _cut_short(ctx, active, state, exc, log=log)
    except BaseException:
        restore_signals()
        raise
    finally:
        state.finished = time.time()
        disarm_signals()  # from here a termination signal waits until the outputs are written

    _bind_pr_head(state, log)
    _apply_blocks(registered_checks(), state)
    results = [state.results[n] for n in ordered_checks(state.results, plan.check_order)]
    try:
        bundle_path = write_outputs(run.facts, ctx, results, state, log=log)
    finally:
        late = restore_signals()
    if terminated is None and late is not None:  # the signal came while the outputs were written
        terminated = Terminated(late)
    if terminated is not None:
        log(f"{terminated.reason}: partial bundle {bundle_path}")
        raise SystemExit(128 + terminated.signum)
    if state.interrupted:
        raise KeyboardInterrupt
    return ValidateOutcome(
        run_dir=ctx.run_dir,
        verdict=bundle_verdict(overall_verdict(results), rehearsal=run.facts.rehearsal),
        results=results,
        bundle=bundle_path,
        rehearsal=run.facts.rehearsal,
        state=state,
    )


@dataclass
class _Run:
    """A run set up: its context (scope, plan, run folder), the engine groups it starts, the checks it runs and
    those it does not (with why), and the facts the bundle records."""

    ctx: RunContext
    driven: Plan
    checks: list[Check]
    skipped: dict[str, str]
    facts: RunFacts


def _set_up(opts: ValidateOptions, *, log: Callable[[str], None]) -> _Run:
    """Everything before the first check: scope and host, plan, preflight, PR refs, keys, run folder, checks.
    Every input error is raised here, before any engine starts and before the run folder is touched."""
    loaded = load_complete_scope(opts)
    scope = loaded.scope
    plan = build_run_plan(scope, tier=opts.tier, shard=opts.shard, scope_sha256=loaded.sha256)
    driven = select_groups(plan, opts.groups)  # the groups to start; an unknown group fails before anything else
    check_reference_urls(scope, opts.reference_urls)
    preflight(loaded, plan, opts, log=log)
    change = change_request(opts)
    from fasttrack.bundle.keys import load_private_key
    from fasttrack.checks.evals.check import check_eval_data_names

    check_eval_data_names(scope, opts.eval_data)

    sign_keys = [load_private_key(p) for p in opts.sign_keys]  # loaded once; a bad key fails before any engine
    _check_run_dir(Path(opts.out), opts.force)
    # last of the input checks: it may ask attached engines what they run on
    hw = check_hardware(loaded, plan, opts, log=log)
    run_dir = _prepare_run_dir(Path(opts.out), opts.force)
    (run_dir / "logs").mkdir(exist_ok=True)
    checks, skipped = select_checks(plan, opts.checks)
    ctx = RunContext(
        scope=scope,
        plan=plan,
        run_dir=run_dir,
        loaded=loaded,
        host=hw.host,
        eval_data=dict(opts.eval_data),
        rehearsal=hw.rehearsal,
        log=log,
        change=change,
    )
    facts = RunFacts(
        **attrs(ctx, "loaded", "plan", "host", "rehearsal"),
        **attrs(opts, "pr_repository", "pr_number", "base", "head"),
        rehearsal_reason=hw.reason,
        sign_keys=sign_keys,
    )
    return _Run(ctx=ctx, driven=driven, checks=checks, skipped=skipped, facts=facts)


def _declare_inactive(ctx: RunContext, checks: list[Check], skipped: dict[str, str], state: RunState) -> list[Check]:
    """Record the checks that do not run (not selected, or skipping themselves) as ``not_run``; return the rest."""
    reg = registered_checks()
    plan = ctx.plan
    for name, why in skipped.items():
        # A check the scope's tier leaves out is not part of that tier's verdict (the tier and its check list are
        # in the bundle); one left out with --checks stays required, so a partial run never passes.
        required = reg[name].required_in(ctx) and (plan.runs_check(name) or reg[name].every_tier)
        state.results[name] = _declared(reg[name], CheckResult.not_run(name, why, required=required))
    active: list[Check] = []
    for chk in checks:
        if isinstance(chk, EngineCheck) and not plan.groups and plan.shard != "1/1":
            # a shard that holds none of the plan's engine groups: the other shards run this check
            why = f"shard {plan.shard} holds none of the plan's engine groups: the other shards run this check"
            state.results[chk.name] = _declared(chk, CheckResult.not_run(chk.name, why, required=False))
            continue
        skip = chk.skip_reason(ctx)
        if skip:
            state.results[chk.name] = _declared(chk, CheckResult.not_run(chk.name, skip, required=chk.required_in(ctx)))
        else:
            active.append(chk)
    return active


def _run_checks(
    ctx: RunContext,
    driven: Plan,
    active: list[Check],
    state: RunState,
    opts: ValidateOptions,
    *,
    progress: Callable[[str], None],
    log: Callable[[str], None],
) -> None:
    """The engineless checks, then the engine checks over every engine of ``driven``, then their judgements."""
    for echk in [c for c in active if isinstance(c, EnginelessCheck)]:
        progress(f"check {echk.name}: running")
        t0 = time.perf_counter()
        state.results[echk.name] = _guard(echk, lambda c=echk: c.run(ctx))  # type: ignore[misc]
        state.check_seconds[echk.name] = round(time.perf_counter() - t0, 3)
    engine_checks = [c for c in active if isinstance(c, EngineCheck)]
    if not engine_checks:
        return
    attach: dict[Side, str | None] = {"baseline": opts.baseline_url, "candidate": opts.candidate_url}
    launcher = get_launcher(opts.launcher) if opts.launcher else None
    plan = ctx.plan
    if driven is not plan:
        left = [g.id for g in plan.groups if g not in driven.groups]
        log(f"--group: starting {', '.join(g.id for g in driven.groups)} only; not exercised: {', '.join(left)}")
    drive_engines(
        ctx, driven, engine_checks, state, attach=attach, progress=progress, log=log, launcher=launcher,
        after_group=lambda g: run_variants(ctx, g, engine_checks, state, attach=attach, progress=progress,
                                           launcher=launcher, references=opts.reference_urls),
    )  # fmt: skip
    for chk in engine_checks:
        if chk.name in state.results:
            state.results[chk.name] = _declared(chk, state.results[chk.name])
            continue
        progress(f"check {chk.name}: judging")
        t0 = time.perf_counter()
        state.results[chk.name] = _guard(chk, lambda c=chk: c.judge(ctx))  # type: ignore[misc]
        state.check_seconds[chk.name] = round(time.perf_counter() - t0, 3)


def _cut_short(
    ctx: RunContext, active: list[Check], state: RunState, exc: KeyboardInterrupt, *, log: Callable[[str], None]
) -> Terminated | None:
    """Ctrl-C or a termination signal: the checks that did not finish are ``not_run`` saying so (the engines were
    already stopped). Returns the termination, if it was one."""
    state.interrupted = True
    terminated = exc if isinstance(exc, Terminated) else None
    if terminated is not None:
        why_stopped = f"the run was {terminated.reason} before this check finished"
        log(f"{terminated.reason}: engines were stopped; writing a partial bundle")
    else:
        why_stopped = "the run was interrupted (Ctrl-C) before this check finished"
        log("interrupted: engines were stopped; writing a partial bundle")
    for chk in active:
        if chk.name in state.results:
            continue
        # an engine check keeps what it measured before the stop (its partial judgement), never a pass
        stopped = (
            stopped_result(chk, ctx, why_stopped, required=chk.required_in(ctx))
            if isinstance(chk, EngineCheck)
            else CheckResult.not_run(chk.name, why_stopped, required=chk.required_in(ctx))
        )
        state.results[chk.name] = _declared(chk, stopped)
    return terminated


def _apply_blocks(reg: dict[str, type[Check]], state: RunState) -> None:
    """A check whose ``blocked_by`` check ran and did not pass is ``not_run``, naming it (in check order, so a block
    passes down a chain)."""
    for name, cls in reg.items():
        res = state.results.get(name)
        if res is None or res.verdict is Verdict.NOT_RUN:
            continue
        failed = [
            f"{b} {state.results[b].verdict.value}"
            for b in cls.blocked_by
            if b in state.results and state.results[b].verdict is not Verdict.PASS
        ]
        if failed:
            why = f"blocked: {', '.join(failed)}, and this check's result depends on it (it said: {res.reason})"
            state.results[name] = res.model_copy(update={"verdict": Verdict.NOT_RUN, "reason": why})


def _bind_pr_head(state: RunState, log: Callable[[str], None]) -> None:
    """The isolation row, when the run has a PR link, with the PR head compared to the build every engine served."""
    iso = state.results.get(ISOLATION)
    if iso is None or not iso.summary.get("pr_link"):
        return
    records = [
        {
            "group": e.group,
            "side": e.side,
            "lifetime": e.lifetime,
            "environment": e.environment,
            "environment_error": e.environment_error,
        }
        for e in state.engines
    ]
    bound = bind_served_builds(iso, engine_builds(records))
    state.results[ISOLATION] = bound
    log(f"isolation: PR head {bound.summary.get('head_binding')}: {bound.summary.get('head_binding_reason')}")


def _declared(chk: Check | type[Check], res: CheckResult) -> CheckResult:
    """The result under the check's own name, with the title and report view the check declares."""
    return res.model_copy(update={"check": chk.name, "title": chk.title, "view": chk.report_view})


def _guard(chk: Check, fn: Callable[[], CheckResult]) -> CheckResult:
    """A check that raises is a failure of the harness, not a pass: report it as not run."""
    try:
        res = fn()
    except FasttrackError as exc:
        res = CheckResult.not_run(chk.name, f"{type(exc).__name__}: {exc.message}", required=chk.required)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - any other error is the harness's, reported with its traceback
        res = CheckResult(
            check=chk.name,
            verdict=Verdict.NOT_RUN,
            required=chk.required,
            reason=f"the check raised {type(exc).__name__}: {exc}",
            summary={"traceback": traceback.format_exc(limit=8)},
        )
    return _declared(chk, res)
