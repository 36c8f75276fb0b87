"""``fasttrack image``: build the engine image of a PR head (``fasttrack.executors.image``)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

err_console = Console(stderr=True, soft_wrap=True)


def image_cmd(
    repo: Path = typer.Option(..., "--repo", help="The vLLM repository holding the PR's commits."),
    base: str = typer.Option(..., "--base", help="The PR's base ref (e.g. main)."),
    head: str = typer.Option(..., "--head", help="The PR's head ref or SHA."),
    base_image: str = typer.Option(
        ..., "--base-image", help="The base image pinned by digest, e.g. vllm/vllm-openai@sha256:<64 hex>."
    ),
    tag: Optional[str] = typer.Option(None, "--tag", help="registry/name:tag (default fasttrack-pr:<head>)."),
    builder: str = typer.Option("docker", "--builder", help="docker (buildx) or podman."),
    push: bool = typer.Option(False, "--push", help="Push the image (a registry digest every node can pull)."),
    precompiled: str = typer.Option(
        "auto", "--precompiled", help="auto: precompiled kernels unless the PR changes compiled sources; yes; no."
    ),
    out: Path = typer.Option(Path("runs/image"), "-o", "--out", help="Build folder (Containerfile, context, record)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Write the build folder and print the commands; no build."),
) -> None:
    """Build an engine image of the PR head: the base image pinned by digest, the PR's vLLM (precompiled kernels
    where the PR changes no compiled source), this fasttrack. Prints the digest; writes image.json for
    `fasttrack slurm/k8s render --image-build`."""
    from fasttrack.errors import FasttrackError
    from fasttrack.executors.image import RECORD, ImageRequest, build_image

    if builder not in ("docker", "podman"):
        raise FasttrackError(f"--builder {builder!r}: use docker or podman.")
    if precompiled not in ("auto", "yes", "no"):
        raise FasttrackError(f"--precompiled {precompiled!r}: use auto, yes or no.")
    req = ImageRequest(
        repo=repo,
        base=base,
        head=head,
        base_image=base_image,
        tag=tag,
        builder=builder,  # type: ignore[arg-type]  # checked above
        push=push,
        precompiled=precompiled,  # type: ignore[arg-type]  # checked above
        out=out,
    )
    rec = build_image(req, dry_run=dry_run)
    err_console.print(
        f"PR head {rec['head'][:12]} (merge base {rec['base'][:12]}): {rec['precompiled_reason']}", highlight=False
    )
    record = Path(out).resolve() / RECORD
    if dry_run:
        for argv in rec["commands"]:
            sys.stdout.write(shlex.join(argv) + "\n")
        err_console.print(f"--dry-run: nothing built; build folder {Path(out).resolve()}", highlight=False)
        return
    err_console.print(f"image record: {record}", highlight=False)
    err_console.print(
        f"render with it: fasttrack k8s render --image-build {record} ...  (or fasttrack slurm --image-build)",
        highlight=False,
    )
    if not rec["pushed"]:
        err_console.print("not pushed (--push): the digest names a local image only", highlight=False)
    sys.stdout.write(json.dumps({"image": rec["image"], "digest": rec["digest"]}) + "\n")
