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
    MERGE_SIGN,
    MODEL,
    PARALLEL,
    REPO,
    SHARDS,
    SIGN,
    SITE,
    TIER,
    _layout,
    build_image,
    err_console,
    log_line,
    merge_and_exit,
    shard_options,
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
    sign_keys: Optional[list[Path]] = SIGN,
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

    lay = _layout(model, tier, shards)
    assert model is not None
    validate = shard_options(model, tier, sign_keys, repo, base, head, image_build)
    prof = load_site(site)
    opts = k8s.K8sOptions(
        validate, image=build_image(image_build, image), gpus_per_node=gpus, max_parallel=max_parallel
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
    sign_keys: Optional[list[Path]] = MERGE_SIGN,
) -> None:
    """The merge Job's step: merge every shard bundle present, name each absent shard with its Job, completion
    index and exit status, sign; exit 0 only when the merged verdict is pass."""
    from fasttrack.executors.collect import load_job
    from fasttrack.executors.k8s_jobs import KUBERNETES

    job_dir = job_dir.resolve()
    notes = KUBERNETES.describe_absent(load_job(job_dir), job_dir)
    merge_and_exit(job_dir, list(sign_keys or []), **notes.merge_args())


@k8s_app.command("submit")
def k8s_submit(manifests: Path = typer.Argument(..., help="The folder `fasttrack k8s render -o` wrote.")) -> None:
    """Apply the rendered manifests (kubectl apply -f FOLDER)."""
    from fasttrack.executors.k8s_jobs import KUBERNETES

    got = KUBERNETES.submit(manifests)
    for line in got["applied"]:
        log_line(line)
    log_line(f"watch: fasttrack k8s status {manifests}   (or: kubectl get jobs -n {got['namespace']})")


@k8s_app.command("status")
def k8s_status(
    manifests: Path = typer.Argument(..., help="The folder `fasttrack k8s render -o` wrote."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Each shard's Job and state (kubectl get jobs), and the merge Job's."""
    import json

    from fasttrack.executors.k8s_jobs import KUBERNETES

    st = KUBERNETES.status(manifests)
    if as_json:
        sys.stdout.write(json.dumps(st, indent=2) + "\n")
        return
    for s in st["shards"]:
        idx = f" index {s['completion_index']}" if s["completion_index"] is not None else ""
        log_line(f"shard {s['shard']} ({s['nodes']} node(s)): Job {s['job']}{idx}: {s['state']}")
    log_line(f"merge Job {st['merge']['job']}: {st['merge']['state']}")
