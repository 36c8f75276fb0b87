"""``fasttrack kernels``: run a model's kernel suites and print (or write) the kernels check result."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

import typer

from fasttrack import registry
from fasttrack.errors import FasttrackError
from fasttrack.kernels.defects import KNOWN as KNOWN_DEFECTS
from fasttrack.kernels.env import TIERS

EXIT_CODES = {"pass": 0, "fail": 1, "not_run": 4}
DEFECT_HELP = f"Plant a defect in the shipped example candidates ({', '.join(sorted(KNOWN_DEFECTS))})."


class KernelSuiteError(FasttrackError):
    """The kernel suites named on the command line (or in the scope) cannot be run."""


def _specs(model: Optional[str], suites: list[Path], candidate: Optional[str]):
    from fasttrack.kernels.spec import adhoc, from_scope_section

    if suites:
        missing = [str(s) for s in suites if not s.is_dir()]
        if missing:
            raise KernelSuiteError(
                f"suite director{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)} not found.",
                hint="Pass --suite with a folder that holds the suite's test_*.py modules.",
            )
        return [adhoc(s, candidate=candidate) for s in suites]
    if not model:
        raise KernelSuiteError("name a model (--model NAME) or a suite directory (--suite DIR).")
    from fasttrack.scope import load_scope

    loaded = load_scope(model)
    section = list(getattr(loaded.scope, "kernels", None) or [])
    if not section:
        raise KernelSuiteError(
            f"scope {str(loaded.path)!r} declares no kernel suites.",
            hint=(
                "Add a 'kernels:' entry (name, path, candidate, requires_gpu, dtypes, tolerances, dims) "
                "or pass --suite DIR."
            ),
        )
    try:
        specs = from_scope_section(section, base_dir=loaded.base_dir)
    except ValueError as exc:
        raise KernelSuiteError(f"{loaded.path}: {exc}") from None
    if candidate:
        from dataclasses import replace

        specs = [replace(s, candidate=candidate) for s in specs]
    return specs


def kernels(
    model: Optional[str] = typer.Option(
        None, "--model", "-m", help="Suite/model name (suites/<NAME>/scope.yaml) or a scope file."
    ),
    suite: list[Path] = typer.Option(
        [], "--suite", help="Run this suite directory instead of the scope's (repeatable)."
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Directory for the rows JSON and kernels.json (default: a temporary directory)."
    ),
    tier: str = typer.Option("standard", "--tier", help=f"Case matrix size: {', '.join(TIERS)}."),
    candidate: Optional[str] = typer.Option(
        None, "--candidate", help="Candidate module (dotted name or .py path) replacing the scope's."
    ),
    defect: list[str] = typer.Option([], "--defect", help=DEFECT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the check result as JSON."),
) -> None:
    """Run kernel suites: numerics against float64 references, determinism, races, sanitizers, speed of light."""
    from rich.table import Table

    from fasttrack import terminal
    from fasttrack.kernels.suites import judge, run_suite

    if tier not in TIERS:
        raise KernelSuiteError(f"--tier {tier!r} is not one of {', '.join(TIERS)}.")
    bad = sorted(set(defect) - set(KNOWN_DEFECTS))
    if bad:
        raise KernelSuiteError(f"unknown planted defect(s) {bad}.", hint=f"Known: {', '.join(sorted(KNOWN_DEFECTS))}.")
    specs = _specs(model, suite, candidate)
    console = terminal.console(stderr=as_json)
    out_dir = out or Path(tempfile.mkdtemp(prefix="fasttrack-kernels-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    docs = [
        run_suite(s, tier=tier, out_dir=out_dir, log=lambda m: console.print(m, highlight=False), defects=defect)
        for s in specs
    ]
    result = judge(docs, run_dir=out_dir)
    (out_dir / "kernels.json").write_text(result.model_dump_json(indent=1), encoding="utf-8")
    if as_json:
        typer.echo(result.model_dump_json(indent=1))
    else:
        t = Table(title=f"kernels: {result.verdict.value}")
        for col in ("suite", "kernel/output", "dtype", "cases", "failed", "max abs err", "max rel err", "max ULP"):
            t.add_column(col)
        for k in result.summary.get("per_kernel", []):
            t.add_row(
                k["suite"],
                f"{k['kernel']}/{k['output']}",
                k["dtype"],
                str(k["cases"]),
                str(k["failed"]),
                f"{k['max_abs_err']:.3g}",
                f"{k['max_rel_err']:.3g}",
                str(k["max_ulp"]),
            )
        if result.summary.get("per_kernel"):
            console.print(t)
        for s in result.summary.get("speed_of_light", []):
            console.print(
                f"speed of light {s['suite']} {s['kernel']} [{s['shape']}]: {s['time_us']:.2f} us, "
                f"{s['pct_peak_bandwidth']:.1f}% of peak bandwidth, {s['pct_peak_flops']:.2f}% of peak bf16 FLOP/s",
                highlight=False,
            )
        for f in result.failures[:20]:
            console.print(f"[red]FAIL[/] {f}", highlight=False)
        console.print(f"{result.verdict.value}: {result.reason}", highlight=False)
        console.print(f"rows and kernels.json in {out_dir}", highlight=False)
    raise typer.Exit(EXIT_CODES[result.verdict.value])


@registry.component("subcommand", "kernels")
def register(app: typer.Typer) -> None:
    app.command("kernels")(kernels)
