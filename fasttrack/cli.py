"""The ``fasttrack`` command line."""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console

from fasttrack import __version__
from fasttrack.errors import FasttrackError

app = typer.Typer(
    name="fasttrack",
    help="Validate fast-track vLLM optimizations and package signed evidence bundles.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

#: Modules that add subcommands; each defines ``register(app: typer.Typer) -> None``.
SUBCOMMAND_MODULES: list[str] = []


@app.callback(invoke_without_command=True)
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    if version:
        console.print(f"fasttrack {__version__}")
        raise typer.Exit(0)


def _register_subcommands() -> None:
    for mod in SUBCOMMAND_MODULES:
        importlib.import_module(mod).register(app)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one paragraph and exit code 2."""
    _register_subcommands()
    try:
        app(args=argv, standalone_mode=False)
    except FasttrackError as exc:
        err_console.print(f"[bold red]error:[/] {exc.message}", highlight=False)
        if exc.hint:
            err_console.print(exc.hint, highlight=False)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.UsageError):
            exc.show()
            sys.exit(2)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(130)
        raise
