"""``fasttrack slurm`` and ``fasttrack k8s``: run a plan's shards on a Slurm cluster or Kubernetes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

# The executors (and the plan behind them) load only when one of these commands runs.
from fasttrack import registry
from fasttrack.executors.cli_common import (
    BASE,
    BUILD,
    DRY,
    GPUS,
    HEAD,
    IMAGE,
    MERGE_SIGN,
    MODEL,
    OUT,
    PARALLEL,
    REPO,
    SHARDS,
    SIGN,
    SITE,
    TIER,
    VARG,
    _layout,
    build_image,
    console,
    err_console,
    merge_and_exit,
    shard_options,
    shares_options,
)

if TYPE_CHECKING:
    from fasttrack.executors.shards import ShardLayout

slurm_app = typer.Typer(
    help="Run a plan's shards as Slurm job arrays with a merge job after them (see docs/scale-out.md). "
    "Without a subcommand: render the scripts (--dry-run prints them).",
    invoke_without_command=True,
)


def _check_gpus_per_node(model: str, lay: ShardLayout, requested: Optional[int], source: str) -> list[str]:
    """GPUs requested per node against the scope's node model and what each array's engines use on a node.

    Fewer than the engines use, or more than the scope's node has, contradicts the plan: an input error (exit 2)
    naming both. More than the engines use, within the node, is said (returned as notes), never silent."""
    from fasttrack.errors import FasttrackError
    from fasttrack.scope import load_scope

    if requested is None or not lay.gpu:
        return []
    hw = load_scope(model).scope.hardware
    node = hw.node if hw is not None else None
    if node is not None and requested > node.gpus:
        raise FasttrackError(
            f"{source} {requested} disagrees with the scope's node model: a node ({node.name or 'hardware.node'}) "
            f"has {node.gpus} GPUs, so engines of more GPUs span several nodes of {node.gpus} (see fasttrack plan); "
            f"requesting {requested} per node asks for nodes the scope does not describe",
            hint=f"Leave {source} out (each array asks for what its engines use per node), or fix hardware.node "
            "in the scope if its nodes have more GPUs.",
        )
    notes = []
    for a in lay.arrays:
        if requested < a.gpus_per_node:
            raise FasttrackError(
                f"{source} {requested} is fewer than the {a.gpus_per_node} GPUs per node the engines of array "
                f"{a.key} (shards {','.join(map(str, a.indices))}) use",
                hint=f"Leave {source} out, or give at least {a.gpus_per_node}.",
            )
        if requested > a.gpus_per_node:
            notes.append(
                f"array {a.key}: {source} {requested} requests {requested} GPUs per node; its engines use "
                f"{a.gpus_per_node} of them"
            )
    return notes


def _job_dir(out: Optional[Path], lay: ShardLayout, kind: str) -> Path:
    return (out or Path("runs") / f"{kind}-{lay.scope}-{lay.tier}").resolve()


def _print_files(files: dict[str, str]) -> None:
    for name, text in files.items():
        sys.stdout.write(f"# ==> {name} <==\n{text}")
        if not text.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.write("\n")


def _summary(lay: ShardLayout, arrays: list[Any]) -> None:
    err_console.print(
        f"{lay.scope} {lay.tier}: {lay.count} shard(s) in {len(arrays)} array(s); "
        f"estimate {lay.node_hours:g} node-hours, {lay.gpu_hours:g} GPU-hours",
        highlight=False,
    )
    for r in arrays:
        a = r.array
        err_console.print(
            f"  {r.name}: shards {','.join(map(str, a.indices))} x {a.nodes} node(s)"
            + (f" of {a.gpus_per_node} GPU(s)" if a.gpus_per_node else ""),
            highlight=False,
        )


def _render_slurm(
    model: Optional[str] = MODEL,
    tier: str = TIER,
    shards: str = SHARDS,
    site: Optional[Path] = SITE,
    out: Optional[Path] = OUT,
    sign_keys: Optional[list[Path]] = SIGN,
    gpus: Optional[int] = GPUS,
    image: Optional[str] = IMAGE,
    validate_arg: list[str] = VARG,
    dry_run: bool = DRY,
    repo: Optional[str] = REPO,
    base: Optional[str] = BASE,
    head: Optional[str] = HEAD,
    image_build: Optional[Path] = BUILD,
    max_parallel: Optional[int] = PARALLEL,
) -> tuple[Path, Any]:
    """Render the job folder and write it (``--dry-run``: print it): its folder and the rendered scripts. Its
    parameters are the options of every ``fasttrack slurm`` command that renders (see :func:`shares_options`)."""
    from fasttrack.executors import slurm
    from fasttrack.executors.site import load_site

    lay = _layout(model, tier, shards)
    assert model is not None
    keys = [k.resolve() for k in sign_keys or []]
    validate = shard_options(model, tier, keys, repo, base, head, image_build)
    prof = load_site(site)
    job_dir = _job_dir(out, lay, "slurm")
    source = "--gpus-per-node" if gpus is not None else "the site profile's slurm.gpus_per_node"
    notes = _check_gpus_per_node(model, lay, gpus if gpus is not None else prof.slurm.gpus_per_node, source)
    opts = slurm.SlurmOptions(
        validate,
        job_dir=job_dir,
        gpus_per_node=gpus,
        container_image=build_image(image_build, image),
        validate_args=list(validate_arg),
        max_parallel=max_parallel,
    )
    rendered = slurm.render(lay, prof, opts)
    _summary(lay, rendered.arrays)
    for n in notes:
        err_console.print(f"note: {n}", highlight=False)
    if dry_run:
        _print_files(rendered.texts())
    else:
        slurm.write(rendered, job_dir)
        err_console.print(f"job folder: {job_dir}", highlight=False)
    return job_dir, rendered


_render_options = shares_options(_render_slurm)


@slurm_app.callback()
@_render_options
def slurm_root(ctx: typer.Context, **opts: Any) -> None:
    if ctx.invoked_subcommand is not None:
        return
    if opts["model"] is None:
        console.print(ctx.get_help())
        raise typer.Exit(0)
    _render_slurm(**opts)


@slurm_app.command("render")
@_render_options
def slurm_render(**opts: Any) -> None:
    """Write the job folder: one sbatch script per array, the merge script, submit.sh, fasttrack-job.json."""
    _render_slurm(**opts)


@slurm_app.command("submit")
@_render_options
def slurm_submit(**opts: Any) -> None:
    """Render the job folder and submit it: every array with sbatch, then the merge job (afterany on all)."""
    from fasttrack.executors.slurm_jobs import SLURM

    job_dir, _ = _render_slurm(**opts)
    if opts["dry_run"]:
        err_console.print("--dry-run: nothing submitted", highlight=False)
        return
    ids = SLURM.submit(job_dir)
    arrays = ", ".join(f"{name} -> {jid}" for name, jid in ids["arrays"].items())
    console.print(f"submitted: {arrays}; merge -> {ids['merge']} (afterany)", highlight=False)
    every = ",".join([*ids["arrays"].values(), ids["merge"]])
    console.print(f"watch: fasttrack slurm status {job_dir}   (or: squeue -r -j {every})", highlight=False)


@slurm_app.command("resubmit")
def slurm_resubmit(
    job_dir: Path = typer.Argument(..., help="The job folder."),
    shard: list[int] = typer.Option(..., "--shard", help="Shard number to run again (repeatable)."),
) -> None:
    """Run some shards again (same scripts, same plan) and the merge job after them (afterany)."""
    from fasttrack.executors.slurm_jobs import resubmit

    rec = resubmit(job_dir.resolve(), sorted(set(shard)))
    arrays = ", ".join(f"{name} -> {jid}" for name, jid in rec["arrays"].items())
    console.print(
        f"resubmitted shard(s) {rec['shards']}: {arrays}; merge -> {rec['merge']} (afterany)", highlight=False
    )


@slurm_app.command("status")
def slurm_status(
    job_dir: Path = typer.Argument(..., help="The job folder."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Each shard's Slurm state (squeue/scontrol, not sacct) and bundle; the merge job and the merged bundle."""
    from rich.table import Table

    from fasttrack.executors.slurm_jobs import SLURM

    st = SLURM.status(job_dir.resolve())
    if as_json:
        sys.stdout.write(json.dumps(st, indent=2) + "\n")
        return
    table = Table(title=f"{st['scope']} {st['tier']}: {job_dir}")
    for col in ("shard", "nodes", "Slurm job", "state", "bundle", "log"):
        table.add_column(col)
    for s in st["shards"]:
        table.add_row(
            s["shard"],
            str(s["nodes"]),
            s["job_id"] or "-",
            s["state"] or ("not submitted" if not st["submitted"] else "unknown to Slurm"),
            s["bundle_verdict"] or ("absent" if not s["bundle"] else "?"),
            s["log"] or "-",
        )
    console.print(table)
    m = st["merge"]
    console.print(f"merge job: {m['job_id'] or '-'} {m['state'] or ''}", highlight=False)
    if st["merged"]:
        mg = st["merged"]
        console.print(
            f"merged bundle: {mg['bundle'] or '-'} verdict {mg['verdict'] or '-'}"
            + (f" ({mg['error']})" if mg["error"] else ""),
            highlight=False,
        )


@slurm_app.command("merge")
def slurm_merge(
    job_dir: Path = typer.Argument(..., help="The job folder."),
    sign_keys: Optional[list[Path]] = MERGE_SIGN,
) -> None:
    """The merge job's step: merge every shard bundle present, name each absent shard with its Slurm job,
    state and log, sign; exit 0 only when the merged verdict is pass."""
    from fasttrack.executors.collect import load_job
    from fasttrack.executors.slurm_jobs import SLURM

    job_dir = job_dir.resolve()
    job = load_job(job_dir)
    keys = list(sign_keys or []) or [Path(k) for k in _job_keys(job)]
    merge_and_exit(job_dir, keys, **SLURM.describe_absent(job, job_dir).merge_args())


def _job_keys(job: dict[str, Any]) -> list[str]:
    """The signing keys a job record names (``sign_keys``; ``sign_key`` in records written before it listed them)."""
    keys = job.get("sign_keys")
    if isinstance(keys, list):
        return [str(k) for k in keys]
    return [str(job["sign_key"])] if job.get("sign_key") else []


@registry.component("subcommand", "executors")
def register(app: typer.Typer) -> None:
    """Add ``slurm``, ``k8s`` and ``image`` to the ``fasttrack`` app."""
    from fasttrack.executors.cli_image import image_cmd
    from fasttrack.executors.cli_k8s import k8s_app

    app.add_typer(slurm_app, name="slurm")
    app.add_typer(k8s_app, name="k8s")
    app.command("image")(image_cmd)
