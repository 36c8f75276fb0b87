"""The scheduler interface: what running a plan's shards on a cluster scheduler takes.

A :class:`Scheduler` renders a plan's shards for its scheduler (scripts or manifests, from the shard layout,
the site profile and the options every shard's ``fasttrack validate`` runs with), writes them, submits them,
reads their state back, and says what it knows about a shard that wrote no bundle when the shards are merged
(:class:`MergeNotes`). Slurm (:mod:`~fasttrack.executors.slurm_jobs`) and Kubernetes
(:mod:`~fasttrack.executors.k8s_jobs`) implement it; each is registered (the registry's kind ``scheduler``)
under the name its job record gives as ``executor``, so the merge finds the scheduler of a job folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fasttrack import registry
from fasttrack.executors.shards import ShardLayout, ShardRunOptions
from fasttrack.executors.site import SiteProfile

Describe = Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]
"""What a scheduler knows about a shard without a bundle: (the note the merged bundle gives, the details)."""


@dataclass(frozen=True)
class MergeNotes:
    """What a scheduler tells the merge (:func:`fasttrack.executors.collect.merge_job`) about the shards."""

    describe_absent: Describe
    """A shard that wrote no bundle: why, as far as the scheduler knows (its job, state, exit status, log)."""
    details: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """A shard with a bundle: what the scheduler says about its job (recorded in the merge summary)."""
    present_note: Callable[[dict[str, Any]], str | None] | None = None
    """A shard with a bundle whose job the scheduler stopped (cancelled, timed out): the merged bundle says so."""

    def merge_args(self) -> dict[str, Any]:
        return {"describe_absent": self.describe_absent, "details": self.details, "present_note": self.present_note}


class Rendered(Protocol):
    """What a scheduler renders: every file it writes, by name."""

    def texts(self) -> dict[str, str]: ...


class Scheduler(Protocol):
    """A cluster scheduler that runs a plan's shards."""

    name: str
    """Its name in the registry and in the job record (``executor``)."""

    def render(self, layout: ShardLayout, site: SiteProfile, opts: ShardRunOptions) -> Rendered:
        """The scripts or manifests that run every shard of ``layout`` and merge their bundles."""

    def write(self, rendered: Rendered, out: Path) -> list[Path]:
        """Write what :meth:`render` made into ``out``; the files written."""

    def submit(self, where: Path) -> dict[str, Any]:
        """Hand the written folder to the scheduler; what it answered (its job ids or objects)."""

    def status(self, where: Path) -> dict[str, Any]:
        """Each shard's state as the scheduler reports it (and its bundle, where the folder holds it)."""

    def describe_absent(self, job: dict[str, Any], job_dir: Path) -> MergeNotes:
        """What it knows about each shard of the job record ``job`` when the bundles in ``job_dir`` are merged."""


def scheduler(name: str) -> Scheduler:
    """The scheduler registered as ``name`` (a job record's ``executor``); an unknown name is an error listing the
    registered ones."""
    found: Scheduler = registry.get("scheduler", name)
    return found
