"""Report subcommands: ``report`` and ``dashboard build|serve``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer

from fasttrack import registry, terminal
from fasttrack.bundle.cli import shown
from fasttrack.bundle.outfile import check_target
from fasttrack.errors import FasttrackError

TRUST_ENV = "FASTTRACK_TRUST_DIR"

KEYS_OPT = typer.Option([], "--key", "-k", help="Trusted public key file (repeatable).")
TRUST_OPT = typer.Option(
    None, "--trust", help=f"Directory of trusted *.pub keys (default: ${TRUST_ENV} when no --key)."
)
TRUSTED_SCOPE_OPT = typer.Option(
    None, "--trusted-scope", help="Hold the recorded scope against this one (as `fasttrack verify` does)."
)
MIN_TIER_OPT = typer.Option(None, "--min-tier", help="The lowest tier accepted (smoke < standard < full).")

console = terminal.console()
err_console = terminal.console(stderr=True)
dashboard_app = typer.Typer(help="The maintainer dashboard over many bundles.", no_args_is_help=True)


def _trust(key: list[Path], trust: Optional[Path]) -> Optional[Path]:
    if not key and trust is None and os.environ.get(TRUST_ENV):
        return Path(os.environ[TRUST_ENV])
    return trust


def _trusted(key: list[Path], trust: Optional[Path]) -> dict[str, Any]:
    """``keys`` and ``trust_dir`` as the renderers take them: the keys given, else the trust folder (``--trust``,
    else ``$FASTTRACK_TRUST_DIR``)."""
    return {"keys": key, "trust_dir": _trust(key, trust)}


def report_cmd(
    bundle: Path = typer.Argument(..., help="Bundle directory or .tar.gz."),
    out: Path = typer.Option(..., "-o", "--out", help="The HTML report to write."),
    comment: Optional[Path] = typer.Option(None, "--comment", help="Also write the PR comment (GitHub Markdown) here."),
    key: list[Path] = KEYS_OPT,
    trust: Optional[Path] = TRUST_OPT,
    pr_head: Optional[str] = typer.Option(
        None, "--pr-head", help="The PR's current head commit, to check the bundle against."
    ),
    report_url: Optional[str] = typer.Option(
        None, "--report-url", help="Where the report will be published (linked from the comment)."
    ),
    trusted_scope: Optional[str] = TRUSTED_SCOPE_OPT,
    min_tier: Optional[str] = MIN_TIER_OPT,
    require_verified: bool = typer.Option(
        False, "--require-verified", help="Exit 1 when the bundle does not verify (the report is still written)."
    ),
) -> None:
    """Verify a bundle and render its report (one self-contained HTML file) and PR comment."""
    from fasttrack.bundle.consistency import pr_head_argument, tier_argument
    from fasttrack.report.report import render_report

    pr_head = pr_head_argument(pr_head)
    tier_argument(min_tier)
    for target in (out, comment):  # a FIFO, a device or a link is refused before anything is read
        if target is not None and (target.exists() or target.is_symlink()):
            check_target(target)
    if not bundle.exists():
        raise FasttrackError(
            f"{bundle} does not exist", hint="Give a bundle directory or a .tar.gz written by fasttrack validate."
        )
    data = render_report(
        bundle,
        out,
        **_trusted(key, trust),
        pr_head=pr_head,
        trusted_scope=trusted_scope,
        min_tier=min_tier,
        comment_path=comment,
        report_url=report_url,
    )
    v = "[green]verified[/]" if data.verification.verified else "[bold red]NOT verified[/]"
    console.print(
        shown(f"wrote {out}" + (f" and {comment}" if comment else ""))
        + f": verdict [bold]{shown(data.verdict)}[/], {v}",
        highlight=False,
        soft_wrap=True,
    )
    if not data.verification.verified:
        err_console.print(shown(data.verification.headline), highlight=False, soft_wrap=True)
        if require_verified:
            raise typer.Exit(1)


@dashboard_app.command("build")
def dashboard_build(
    bundles: Path = typer.Option(
        ..., "--bundles", help="Folder of bundles (directories or .tar.gz, searched recursively)."
    ),
    out: Path = typer.Option(..., "-o", "--out", help="The site folder to write (index.html, reports/, index.json)."),
    key: list[Path] = KEYS_OPT,
    trust: Optional[Path] = TRUST_OPT,
    cache: Optional[Path] = typer.Option(None, "--cache", help="SQLite index file (default: SITE/index.sqlite)."),
    artifacts: str = typer.Option(
        "copy", "--artifacts", help="copy: publish verified bundle files with the site; none: link nothing."
    ),
    jobs: Optional[int] = typer.Option(
        None, "--jobs", "-j", min=1, help="Bundles processed in parallel (default: CPU count, at most 8)."
    ),
    force: bool = typer.Option(False, "--force", help="Re-read every bundle, ignoring the index."),
) -> None:
    """Build (or update) the static dashboard: only new or changed bundles are re-read."""
    from fasttrack.report.site import build_site

    if artifacts not in ("copy", "none"):
        raise FasttrackError(f"--artifacts {artifacts!r} must be 'copy' or 'none'")
    stats = build_site(
        bundles,
        out,
        **_trusted(key, trust),
        cache=cache,
        artifacts=artifacts,  # type: ignore[arg-type]
        jobs=jobs,
        force=force,
    )
    console.print(
        f"{stats.bundles} bundles in {shown(out)}/index.html: {stats.read} read, {stats.reused} unchanged, "
        f"{stats.removed} removed in {stats.seconds:.1f} s",
        highlight=False,
        soft_wrap=True,
    )
    for e in stats.errors[:20]:
        err_console.print(f"[yellow]skipped[/] {shown(e)}", highlight=False, soft_wrap=True)


@dashboard_app.command("serve")
def dashboard_serve(
    bundles: Path = typer.Option(..., "--bundles", help="Folder of bundles (directories or .tar.gz)."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any free port)."),
    out: Optional[Path] = typer.Option(
        None, "-o", "--out", help="Site folder (default: a cache folder per bundles folder)."
    ),
    key: list[Path] = KEYS_OPT,
    trust: Optional[Path] = TRUST_OPT,
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Bundles processed in parallel."),
) -> None:
    """Serve the dashboard on 127.0.0.1, rebuilding it when bundles change."""
    from fasttrack.report.server import serve

    t = _trust(key, trust)
    serve(
        bundles,
        site=out,
        port=port,
        keys=[str(k) for k in key],
        trust_dir=str(t) if t else None,
        jobs=jobs,
        log=lambda m: console.print(shown(m), highlight=False, soft_wrap=True),
    )


@registry.component("subcommand", "report")
def register(app: typer.Typer) -> None:
    """Add ``report`` and ``dashboard`` to the ``fasttrack`` app."""
    app.command("report")(report_cmd)
    app.add_typer(dashboard_app, name="dashboard")
