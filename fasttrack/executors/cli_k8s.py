"""``fasttrack k8s``: render a plan's shards as Kubernetes objects, drive a multi-node shard, merge."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from fasttrack.executors.cli_common import (
    BASE,
    BUILD,
    GPUS,
    HEAD,
    MODEL,
    PARALLEL,
    REPO,
    SHARDS,
    SITE,
    TIER,
    _layout,
    _nodes_model,
    err_console,
    log_line,
    merge_and_exit,
    pr_and_image,
)

k8s_app = typer.Typer(help="Kubernetes manifests for a plan's shards (see docs/scale-out.md).", no_args_is_help=True)


@k8s_app.command("render")
def k8s_render(
    model: Optional[str] = MODEL,
    tier: str = TIER,
    shards: str = SHARDS,
    site: Optional[Path] = SITE,
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write the manifests here (default: print)."),
    image: Optional[str] = typer.Option(None, "--image", help="The evaluation image (default: the site's)."),
    gpus: Optional[int] = GPUS,
    sign: bool = typer.Option(
        False, "--sign", help="Sign bundles with the key in the site's kubernetes.sign_key_secret."
    ),
    repo: Optional[str] = REPO,
    base: Optional[str] = BASE,
    head: Optional[str] = HEAD,
    image_build: Optional[Path] = BUILD,
    max_parallel: Optional[int] = PARALLEL,
) -> None:
    """An Indexed Job for single-node shards, a driver Job per multi-node shard (its LeaderWorkerSets created in
    its turn, owned by it), the drivers' account, a shared volume, a merge Job."""
    from fasttrack.executors import k8s
    from fasttrack.executors.site import load_site

    pr, image = pr_and_image(repo, base, head, image_build, image)
    lay = _layout(model, tier, shards)
    prof = load_site(site)
    assert model is not None
    opts = k8s.K8sOptions(
        model=_nodes_model(model), image=image, gpus_per_node=gpus, sign=sign, pr=pr, max_parallel=max_parallel
    )
    rendered = k8s.render(lay, prof, opts)
    err_console.print(rendered.summary(), highlight=False)
    if out is None:
        sys.stdout.write(rendered.text())
        return
    paths = k8s.write(rendered, out)
    err_console.print(f"wrote {len(paths)} file(s) under {out}: apply with kubectl apply -f {out}", highlight=False)


@k8s_app.command("drive")
def k8s_drive(
    engines: Path = typer.Option(..., "--engines", help="The shard's engine objects (YAML)."),
    out: Path = typer.Option(..., "--out", help="The shard's run folder (the exit status goes there)."),
    baseline_url: str = typer.Option(..., "--baseline-url"),
    candidate_url: str = typer.Option(..., "--candidate-url"),
    configmap: Optional[str] = typer.Option(None, "--configmap", help="The shard's ConfigMap (the driver owns it)."),
    namespace: str = typer.Option("default", "--namespace"),
    after: Optional[Path] = typer.Option(None, "--after", help="Wait for this exit status first (waves)."),
    after_max_s: float = typer.Option(0.0, "--after-max-s", help="At most this long."),
    health_timeout_s: float = typer.Option(3600.0, "--health-timeout-s"),
    validate: list[str] = typer.Argument(..., help="The validate command line (after --)."),
) -> None:
    """A multi-node shard's driver (run by its Job): its turn, its engines (owned by the Job), validate against
    them, their deletion, the exit status. See fasttrack/executors/k8s_drive.py."""
    from fasttrack.executors.k8s_drive import DriveOptions, drive, env_owner

    name, uid = env_owner()
    rc = drive(
        DriveOptions(
            engines=engines,
            out=out,
            urls={"baseline": baseline_url, "candidate": candidate_url},
            validate=list(validate),
            owner_job=name,
            owner_uid=uid,
            configmap=configmap,
            namespace=namespace,
            after=after,
            after_max_s=after_max_s,
            health_timeout_s=health_timeout_s,
        ),
        log=log_line,
    )
    raise typer.Exit(rc)


@k8s_app.command("merge")
def k8s_merge(
    job_dir: Path = typer.Argument(..., help="The shared volume's root (holds fasttrack-job.json and shards/)."),
    sign_key: Optional[Path] = typer.Option(None, "--sign-key", help="Private key that signs the merged bundle."),
) -> None:
    """The merge Job's step: merge every shard bundle present, name each absent shard with its Job, completion
    index and exit status, sign; exit 0 only when the merged verdict is pass."""
    from fasttrack.executors import k8s
    from fasttrack.executors.collect import load_job

    job_dir = job_dir.resolve()
    merge_and_exit(job_dir, sign_key, describe_absent=k8s.describe_absent(load_job(job_dir), job_dir))
