"""What ``fasttrack slurm`` and ``fasttrack k8s`` share: their options, the plan's shards, the PR and image."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional, TypeVar

import typer
from rich.console import Console

from fasttrack.pipeline.options import ValidateOptions, option

if TYPE_CHECKING:
    from fasttrack.executors.shards import ShardLayout

_Command = TypeVar("_Command", bound=Callable[..., Any])

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

# validate's options, as fasttrack.pipeline.options declares them (each shard runs validate with them)
MODEL = option("model", default=None)
TIER = option("tier")
SIGN = option(
    "sign_keys",
    help="Ed25519 private key (PEM or OpenSSH) that signs every shard's bundle and the merged one, as the nodes see "
    "it (Kubernetes: /fasttrack-key/NAME, a file of the site's kubernetes.sign_key_secret); repeatable.",
)
MERGE_SIGN = option(
    "sign_keys",
    help="Ed25519 private key (PEM or OpenSSH) that signs the merged bundle; repeatable (every key signs; Slurm: "
    "default the keys the job was rendered with).",
)
REPO = option("repo", help="The PR's vLLM repository as the nodes see it (validate --repo).")
BASE = option("base", help="The PR's base ref or SHA (validate --base).")
HEAD = option("head", help="The PR's head SHA (validate --head).")
SHARDS = typer.Option("groups", "--shards", help="Shard count, or 'groups': one shard per engine group.")
SITE = typer.Option(None, "--site", help="Site profile (YAML): partition, account, extra #SBATCH lines, image, ...")
OUT = typer.Option(None, "-o", "--out", help="Job folder (on a file system every node shares).")
GPUS = typer.Option(None, "--gpus-per-node", min=0, help="GPUs to request per node (default: the plan's).")
IMAGE = typer.Option(None, "--container-image", help="Pyxis/enroot image the jobs run in (#SBATCH --container-image).")
VARG = typer.Option([], "--validate-arg", help="Extra `fasttrack validate` argument for every shard (repeatable).")
DRY = typer.Option(False, "--dry-run", help="Print the scripts; write and submit nothing.")
BUILD = typer.Option(
    None,
    "--image-build",
    help="image.json of `fasttrack image`: the PR head's image (pinned by digest) and its --repo/--base/--head.",
)
PARALLEL = typer.Option(None, "--max-parallel", min=1, help="Shards running at once (Slurm: --array=...%N).")


def shard_options(
    model: str,
    tier: str,
    sign_keys: Optional[list[Path]],
    repo: Optional[str],
    base: Optional[str],
    head: Optional[str],
    build: Optional[Path],
) -> ValidateOptions:
    """What every shard's ``validate`` runs with: the scope as the nodes name it, the tier, the signing keys, and the
    PR from the build record of ``fasttrack image`` (``build``), explicit ``--repo/--base/--head`` winning."""
    from fasttrack.errors import FasttrackError
    from fasttrack.executors.image import ImageBuild

    rec = ImageBuild.load(build) if build is not None else None
    head = head or (rec.head if rec else None)
    if (repo or base) and not head:
        raise FasttrackError("--repo and --base need --head (the PR's head SHA).")
    repo = (repo or (rec.repo if rec else None)) if head else None
    return ValidateOptions(
        model=_nodes_model(model),
        tier=tier,
        sign_keys=list(sign_keys or []),
        repo=Path(repo) if repo else None,
        base=(base or (rec.base if rec else None)) if head else None,
        head=head,
    )


def build_image(build: Optional[Path], image: Optional[str]) -> Optional[str]:
    """The image every job runs in: ``image``, else the one ``fasttrack image`` built (its record ``build``)."""
    from fasttrack.executors.image import ImageBuild

    return image or (ImageBuild.load(build).image if build is not None else None)


def _nodes_model(model: str) -> str:
    """The scope as the nodes name it: a suite name stays, a file becomes an absolute path."""
    p = Path(model)
    if p.suffix in {".yaml", ".yml"} or p.exists():
        return str(p.resolve())
    return model


def _layout(model: Optional[str], tier: str, shards: str) -> ShardLayout:
    from fasttrack.errors import FasttrackError
    from fasttrack.executors.shards import layout
    from fasttrack.scope import load_scope

    if not model:
        raise FasttrackError("--model is required.", hint="e.g. fasttrack slurm --dry-run --model kimi-k3 --tier full")
    return layout(load_scope(model), tier=tier, shards=shards)


def shares_options(template: Callable[..., Any]) -> Callable[[_Command], _Command]:
    """A decorator: the command it decorates takes, after its own parameters, the options that are the parameters
    of ``template``, and receives them as keyword arguments (``**opts``), to pass on with ``template(**opts)``.
    Typer reads a command's options from its signature, so the decorator sets ``__signature__``: one list of
    options for every command that runs ``template``."""

    def share(command: _Command) -> _Command:
        own = [
            p
            for p in inspect.signature(command, eval_str=True).parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        shared = inspect.signature(template, eval_str=True).parameters.values()
        # setattr: mypy knows no __signature__ on a callable
        setattr(command, "__signature__", inspect.Signature([*own, *shared]))  # noqa: B010
        return command

    return share


def log_line(message: str) -> None:
    """A progress line on stdout, printed as it is (no markup, no highlighting)."""
    console.print(message, highlight=False, markup=False)


def merge_and_exit(job_dir: Path, sign_keys: list[Path], **merge_args: Any) -> NoReturn:
    """The merge job's step: :func:`fasttrack.executors.collect.merge_job` of the job folder (``merge_args``: how
    the scheduler names absent shards), signed with every key of ``sign_keys``; exit 0 only when the merged verdict
    is pass."""
    from fasttrack.bundle.keys import load_private_key
    from fasttrack.executors.collect import merge_job

    keys = [load_private_key(k) for k in sign_keys]
    outcome = merge_job(job_dir, sign_keys=keys, log=log_line, **merge_args)
    raise typer.Exit(0 if outcome.verdict == "pass" else 1)
