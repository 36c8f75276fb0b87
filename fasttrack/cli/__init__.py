"""The ``fasttrack`` command line."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import typer

from fasttrack import __version__, registry, terminal
from fasttrack.errors import FasttrackError
from fasttrack.pipeline.options import option

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.pipeline import ValidateOptions, ValidateOutcome

app = typer.Typer(
    name="fasttrack",
    help="Validate fast-track vLLM optimizations and package signed evidence bundles.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
#: validate's --model and --tier, as fasttrack.pipeline.options declares them (plan, doctor and isolation read the
#: scope and tier validate would run)
MODEL = option("model")
TIER = option("tier")
#: validate's --reference-url, for reproduce (the recorded scope's variants)
REFERENCE_URL = option(
    "reference_urls",
    help="NAME=URL: attach a running engine of the recorded scope's reference variant NAME instead of starting it; "
    "repeatable.",
)
console = terminal.console()
err_console = terminal.console(stderr=True, soft_wrap=True)

registry.BUILTIN_MODULES["subcommand"] = (
    "fasttrack.bundle.cli",
    "fasttrack.report.cli",
    "fasttrack.kernels.cli",
    "fasttrack.pr.cli",
    "fasttrack.executors.cli",
    "fasttrack.pipeline.calibrate_cli",
)
"""The modules that add the shipped subcommand groups: each registers (kind ``subcommand``) a function that adds
its commands to the app; another package's are named in its ``fasttrack`` entry-point group."""


@app.callback(invoke_without_command=True)
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    if version:
        console.print(f"fasttrack {__version__}")
        raise typer.Exit(0)


_registered: list[str] = []


def _register_subcommands(argv: list[str] | None = None) -> None:
    """Add every registered subcommand group to ``app``, once (``main`` may run many times in one process): the
    shipped ones, and other packages' (their entry points loaded) unless the command is a shipped one."""
    _add_subcommands(registry.entries("subcommand", outside=False))
    command = _command(argv)
    if command is None or command not in _command_names():
        _add_subcommands(registry.entries("subcommand"))


def _add_subcommands(found: dict[str, Any]) -> None:
    for name, add in found.items():
        if name not in _registered:
            add(app)
            _registered.append(name)


def _command(argv: list[str] | None) -> str | None:
    """The subcommand ``argv`` names (its first word that is not an option), or None."""
    args = sys.argv[1:] if argv is None else argv
    return next((a for a in args if not a.startswith("-")), None)


def _command_names() -> set[str]:
    """The names of the commands and command groups ``app`` has."""
    names = {c.name or (c.callback.__name__.replace("_", "-") if c.callback else "") for c in app.registered_commands}
    return names | {g.name or "" for g in app.registered_groups}


#: Commands that load scopes: the checks are registered first, since a check's gate model makes its section of a
#: scope's ``gates`` (verifying and rendering bundles load no scope, and no check).
SCOPE_COMMANDS = frozenset(
    {"plan", "doctor", "isolation", "schemas", "validate", "reproduce", "kernels", "slurm", "k8s"}
)


def _load_checks_for(argv: list[str] | None) -> None:
    if _command(argv) in SCOPE_COMMANDS:
        from fasttrack.checks.base import registered_checks

        registered_checks()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one paragraph and exit code 2."""
    try:
        _register_subcommands(argv)
        _load_checks_for(argv)
        rc = app(args=argv, standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except FasttrackError as exc:
        from fasttrack.bundle.cli import shown

        # messages quote user and bundle text (file and member names): printed as text, never as
        # console markup, and with no control character (no escape sequence reaches the terminal)
        err_console.print(f"[bold red]error:[/] {shown(exc.message)}", highlight=False)
        if exc.hint:
            err_console.print(shown(exc.hint), highlight=False)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except RecursionError:
        # every input that is parsed is bounded first (fasttrack.limits); this is the net under them
        err_console.print(
            "[bold red]error:[/] the input nests too deeply to read (a hostile or corrupt file?); "
            "see README.md, 'Security', for the limits",
            highlight=False,
        )
        sys.exit(2)
    except MemoryError:
        err_console.print(
            "[bold red]error:[/] out of memory reading the input; see README.md, 'Security', for the limits",
            highlight=False,
        )
        sys.exit(2)
    except OSError as exc:
        # a path given on the command line that cannot be read or written (the commands name the
        # paths they expect; this covers devices, full disks and permissions they do not foresee)
        from fasttrack.bundle.cli import shown

        where = f" {exc.filename}" if exc.filename else ""
        err_console.print(f"[bold red]error:[/] {shown(f'cannot use{where}: {exc.strerror or exc}')}", highlight=False)
        sys.exit(2)
    except Exception as exc:  # click usage errors (click's own classes, or the copy typer ships)
        from rich.errors import MarkupError

        if isinstance(exc, MarkupError):
            # text from a scope or bundle that looks like console markup reached a print that does not
            # escape it; refuse with the reason rather than a traceback
            err_console.print(
                "[bold red]error:[/] text from the scope or bundle holds console markup (square brackets such "
                "as '\\[/x]') that cannot be printed; remove the brackets from it",
                highlight=False,
            )
            sys.exit(2)
        clicks = _click_exception_modules()
        if any(isinstance(exc, m.ClickException) for m in clicks):
            exc.show()  # type: ignore[attr-defined]  # a ClickException: one paragraph, with the usage line
            sys.exit(2 if any(isinstance(exc, m.UsageError) for m in clicks) else exc.exit_code)  # type: ignore[attr-defined]
        if isinstance(exc, typer.Abort) or any(isinstance(exc, getattr(m, "Abort", ())) for m in clicks):
            sys.exit(130)
        raise


def _click_exception_modules() -> list[Any]:
    """``click.exceptions`` and, where typer carries its own copy of click, that copy's."""
    import click

    mods: list[Any] = [click.exceptions]
    try:
        from typer._click import exceptions as typer_click_exceptions  # typer >= 0.24 ships click inside
    except ImportError:
        pass
    else:
        mods.append(typer_click_exceptions)
    return mods


# --------------------------------------------------------------------------- plan


def _print_json(obj: object) -> None:
    import json

    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def _comma_list(text: str) -> list[str]:
    """The names of a comma-separated option (``--checks a,b``), blanks dropped."""
    return [x.strip() for x in text.split(",") if x.strip()]


@app.command("plan")
def plan_cmd(
    model: str = MODEL,
    tier: str = TIER,
    shard: str = typer.Option(None, "--shard", help="Run only shard i of n, e.g. 2/3."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    no_arg_check: bool = typer.Option(
        False, "--no-arg-check", help="Do not check the engine arguments against the installed vLLM's parser."
    ),
) -> None:
    """Expand a scope's envelope into config points, engine groups and a cost estimate; list the checks the tier
    runs and what it can never run, and check the engine arguments against the installed vLLM's own parser."""
    from fasttrack.checks.base import build_run_plan
    from fasttrack.checks.passability import analyze, engine_arg_check, tier_checks
    from fasttrack.engine.argcheck import raise_for_issues
    from fasttrack.scope import load_scope

    loaded = load_scope(model)
    plan = build_run_plan(loaded.scope, tier=tier, shard=shard, scope_sha256=loaded.sha256)
    whole = build_run_plan(loaded.scope, tier=tier)
    passing = analyze(loaded.scope, whole, base_dir=loaded.base_dir)
    checks = tier_checks(loaded.scope, whole, base_dir=loaded.base_dir)
    args_check = None if no_arg_check else engine_arg_check(plan)
    if args_check is not None:
        raise_for_issues(args_check, scope_name=loaded.scope.name, scope_path=loaded.path)
    if as_json:
        doc = plan.model_dump(mode="json")
        doc["checks_planned"] = [c.model_dump(mode="json") for c in checks]
        doc["passability"] = passing.model_dump(mode="json") | {"ok": passing.ok}
        doc["engine_args"] = args_check.model_dump(mode="json") if args_check is not None else None
        _print_json(doc)
        return
    s = loaded.scope
    console.print(f"[bold]{s.title}[/]  scope={s.name} tier={plan.tier} shard={plan.shard}")
    from fasttrack.cli.plan_view import print_arg_check, print_plan_checks, print_plan_groups

    print_plan_groups(console, plan)
    print_plan_checks(console, plan.tier, checks)
    print_arg_check(console, args_check)
    if passing.ok:
        console.print(f"passability: every required item of the {plan.tier} tier can run")
    else:
        console.print(
            f"[bold yellow]passability: the {plan.tier} tier can never pass; these required items cannot run "
            "(validate refuses it unless --run-anyway):[/]"
        )
        for line in passing.lines():
            console.print(f"  - {line}", highlight=False)


# --------------------------------------------------------------------------- doctor


@app.command("doctor")
def doctor_cmd(
    model: str = MODEL,
    tier: str = TIER,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    no_arg_check: bool = typer.Option(
        False, "--no-arg-check", help="Do not check the engine arguments against the installed vLLM's parser."
    ),
) -> None:
    """Preflight for this host or allocation: can `fasttrack validate` run the scope here? Exit 0 only if so."""
    from fasttrack.host.doctor import diagnose
    from fasttrack.scope import load_scope

    loaded = load_scope(model)
    rep = diagnose(
        loaded,
        tier=tier,
        check_args=not no_arg_check,
        progress=lambda m: err_console.print(f"[dim]{m}[/]", highlight=False),
    )
    if as_json:
        _print_json(rep.model_dump(mode="json") | {"ok": rep.ok})
    else:
        style = {"ok": "green", "problem": "bold red", "note": "dim"}
        for f in rep.findings:
            line = f"[{style[f.status]}]{f.status:<8}[/]{f.topic}: {f.found}"
            if f.fix and f.status != "ok":
                line += f"\n{'':8}fix: {f.fix}"
            console.print(line, highlight=False)
        n = sum(1 for f in rep.findings if f.status == "problem")
        if rep.ok:
            console.print(f"[bold green]validate can run {loaded.scope.name} ({tier}) here[/]")
        else:
            console.print(f"[bold red]validate cannot run {loaded.scope.name} ({tier}) here: {n} problem(s)[/]")
    raise typer.Exit(0 if rep.ok else 1)


# --------------------------------------------------------------------------- isolation


@app.command("isolation")
def isolation_cmd(
    model: str = MODEL,
    repo: str = typer.Option(..., "--repo", help="Path to the git repository holding the change (a vLLM clone)."),
    base: str = typer.Option(..., "--base", help="Base ref (the PR's target)."),
    head: str = typer.Option(..., "--head", help="Head ref (the PR's head commit)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Classify every changed path as owned / shared component / elsewhere, by the rule of validate's isolation
    row: exit 0 when every path is owned or allowed, 1 when a shared component or any other path changed."""
    from pathlib import Path

    from rich.table import Table

    from fasttrack.change.diff import check_isolation
    from fasttrack.errors import ScopeError
    from fasttrack.scope import load_scope

    loaded = load_scope(model)
    if loaded.scope.isolation is None:
        raise ScopeError(
            f"scope {loaded.scope.name!r} ({loaded.path}) declares no isolation section (owned paths are unknown)."
        )
    res = check_isolation(Path(repo), base, head, loaded.scope.isolation)
    if as_json:
        _print_json(res.model_dump(mode="json"))
    else:
        from fasttrack.bundle.cli import shown

        table = Table(title=f"changed paths {res.base_sha[:10]}..{res.head_sha[:10]}")
        for col in ("path", "status", "class", "component / glob"):
            table.add_column(col)
        style = {"owned": "green", "shared": "bold red", "elsewhere": "yellow"}
        for c in res.changed:
            cls = "allowed" if c.allowed else c.classification
            table.add_row(
                shown(c.path + (f" (from {c.old_path})" if c.old_path else "")),
                c.status,
                f"[{style[c.classification]}]{cls}[/]",
                shown(c.component or c.matched or ""),
            )
        console.print(table)
        color = "green" if res.verdict == "pass" else "red"
        console.print(f"[bold {color}]{res.verdict.upper()}[/]: {shown(res.message)}", highlight=False)
        for f in res.failures:
            console.print(f"  - {shown(f)}", highlight=False)
        console.print(f"[dim]diff sha256 {res.diff_sha256}[/]")
    raise typer.Exit(res.exit_code)


# --------------------------------------------------------------------------- schemas


@app.command("schemas")
def schemas_cmd(
    write: bool = typer.Option(False, "--write", help="Regenerate the files under schemas/."),
    check: bool = typer.Option(False, "--check", help="Exit 1 when a checked-in schema is out of date."),
) -> None:
    """Generate (or check) the JSON Schemas in schemas/ from the pydantic models."""
    from fasttrack.schemas import check_schemas, write_schemas

    if write:
        for p in write_schemas():
            console.print(f"wrote {p}")
    stale = check_schemas()
    if stale:
        console.print("out of date: " + ", ".join(stale) + "  (run: fasttrack schemas --write)")
        if check:
            raise typer.Exit(1)
    else:
        console.print("schemas are in sync")


# --------------------------------------------------------------------------- validate


def _validate_options(command: Any) -> Any:
    """Give ``command`` validate's options, as :class:`~fasttrack.pipeline.options.ValidateOptions` declares them
    (typer reads a command's options from its signature)."""
    import inspect

    from fasttrack.pipeline.options import typer_options

    setattr(command, "__signature__", inspect.Signature(typer_options()))  # noqa: B010
    return command


@app.command("validate")
@_validate_options
def validate_cmd(**given: Any) -> None:
    """Run the scope's checks on baseline and candidate engines and write a bundle."""
    from fasttrack.pipeline.options import ValidateOptions

    opts = ValidateOptions.from_cli(**given)
    outcome = _run_validate_with_progress(opts)
    _print_validate_outcome(outcome, title=f"fasttrack validate {opts.model} ({opts.tier})")
    raise typer.Exit(0 if outcome.verdict == "pass" else 1)


def _run_validate_with_progress(opts: ValidateOptions) -> ValidateOutcome:
    """Run validate, showing each step on stderr (a spinner with the step, and a log line)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from fasttrack.pipeline import run_validate

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err_console, transient=True
    ) as prog:
        task = prog.add_task("preparing", total=None)

        def progress(msg: str) -> None:
            prog.update(task, description=msg)
            prog.console.print(f"[dim]{msg}[/]", highlight=False)

        return run_validate(opts, log=lambda m: prog.console.print(m, highlight=False), progress=progress)


def _print_validate_outcome(outcome: ValidateOutcome, *, title: str) -> None:
    """The table of check verdicts, the bundle verdict, and where the run folder and bundle are."""
    from rich.table import Table

    table = Table(title=title + (" [REHEARSAL]" if outcome.rehearsal else ""))
    for col in ("check", "verdict", "reason"):
        table.add_column(col)
    color = {"pass": "green", "fail": "red", "not_run": "yellow"}
    for r in outcome.results:
        table.add_row(r.check, f"[{color[r.verdict.value]}]{r.verdict.value}[/]", r.reason)
    console.print(table)
    vcolor = {"pass": "green", "fail": "red", "incomplete": "yellow", "rehearsal": "yellow"}[outcome.verdict]
    console.print(
        f"verdict: [bold {vcolor}]{outcome.verdict.upper()}[/]"
        + (
            " (every check passed on hardware the scope does not declare: not valid evidence)"
            if outcome.verdict == "rehearsal"
            else " (rehearsal: not valid evidence)"
            if outcome.rehearsal
            else ""
        )
    )
    console.print(f"run folder: {outcome.run_dir}" + (f"\nbundle: {outcome.bundle}" if outcome.bundle else ""))


# --------------------------------------------------------------------------- reproduce


@app.command("reproduce")
def reproduce_cmd(
    bundle: str = typer.Argument(..., help="Bundle directory or .tar.gz."),
    checks: str = typer.Option(..., "--checks", help="Comma-separated checks to rerun, e.g. equivalence,perf."),
    out: str = typer.Option("runs/reproduce", "--out", "-o", help="Run folder for the rerun."),
    key: list[str] = typer.Option(None, "--key", help="Trusted public key (repeatable)."),
    trust: str = typer.Option(None, "--trust", help="Folder of trusted public keys."),
    allow_unverified: bool = typer.Option(
        False, "--allow-unverified", help="Rerun even if the bundle does not verify."
    ),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty --out folder."),
    baseline_url: str = typer.Option(None, "--baseline-url", help="Attach a running baseline engine."),
    candidate_url: str = typer.Option(None, "--candidate-url", help="Attach a running candidate engine."),
    reference_url: list[str] = REFERENCE_URL,
    trust_bundle_env: bool = typer.Option(
        False,
        "--trust-bundle-env",
        help="Hand the recorded scope's engine environment and code-loading arguments to the engines as "
        "recorded (by default only the allow-list in docs/security.md passes; read the scope first).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Rerun chosen checks with a bundle's recorded settings and report agreement."""
    from pathlib import Path

    from rich.table import Table

    from fasttrack.bundle.cli import shown
    from fasttrack.pipeline.options import from_words
    from fasttrack.pipeline.reproduce import reproduce

    res = reproduce(
        Path(bundle),
        checks=_comma_list(checks),
        out=Path(out),
        keys=[Path(k) for k in (key or [])],
        trust=Path(trust) if trust else None,
        allow_unverified=allow_unverified,
        force=force,
        baseline_url=baseline_url,
        candidate_url=candidate_url,
        reference_urls=from_words("reference_urls", reference_url),
        trust_bundle_env=trust_bundle_env,
        log=lambda m: err_console.print(shown(m), highlight=False),
    )
    if as_json:
        _print_json(res.model_dump(mode="json") | {"all_agree": res.all_agree})
    else:
        table = Table(title=shown(f"reproduce {bundle}") + ("" if res.verified else " (UNVERIFIED bundle)"))
        for col in ("check", "recorded", "now", "agrees", "detail"):
            table.add_column(col)
        for a in res.agreements:
            table.add_row(
                shown(a.check),
                shown(a.recorded_verdict),
                shown(a.new_verdict),
                "yes" if a.agrees else "[red]no[/]",
                shown(a.detail),
            )
        console.print(table)
    raise typer.Exit(0 if res.all_agree else 1)
