"""``fasttrack calibrate``'s command line (:mod:`fasttrack.pipeline.calibrate` does the work; it is imported when
the command runs, so that every other command, ``verify`` among them, loads none of the statistics behind it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fasttrack import registry


@registry.component("subcommand", "calibrate")
def register(app: Any) -> None:
    import typer

    from fasttrack.pipeline.options import option

    model_opt = option("model", default=None, help="The scope (suite name or scope.yaml) to measure.")
    tier_opt = option("tier", help="The tier whose perf points are calibrated.")

    @app.command("calibrate")
    def calibrate_cmd(
        model: str | None = model_opt,
        tier: str = tier_opt,
        pairs: int = typer.Option(4, "--pairs", min=2, max=64, help="A/A pairs of engine lifetimes to measure."),
        out: Path = typer.Option(..., "--out", help="Folder for the A/A bundle, the record and the figures."),
        sign_key: Path = typer.Option(..., "--sign-key", help="Ed25519 private key that signs the record."),
        from_bundle: list[Path] = typer.Option([], "--from-bundle", help="A/A bundles measured before (no run)."),
        margin: float | None = typer.Option(None, "--margin", help="Margin the A/A comparisons are counted at."),
    ) -> None:
        """Measure this host class's lifetime variance per perf point (A/A lifetimes of the stock path) and write
        a signed calibration record for the scope's gates.perf.calibration."""
        from fasttrack.pipeline.calibrate import calibrate
        from fasttrack.scope.loading import find_scope

        scope_path = find_scope(model) if model else None
        raise typer.Exit(
            calibrate(
                scope_path=scope_path,
                tier=tier,
                pairs=pairs,
                out=out,
                sign_key=sign_key,
                from_bundles=list(from_bundle),
                margin=margin,
                extra=[],
            )
        )
