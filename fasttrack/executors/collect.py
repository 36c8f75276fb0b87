"""The merge step a scheduler runs after every shard: collect, name the absent, merge, sign.

A job folder (written by ``fasttrack slurm`` or ``fasttrack k8s render``) holds
``fasttrack-job.json`` (the shards and where each writes its run folder) and, once the
shards ran, ``shards/shard-i-of-n/bundle.tar.gz``. The merge takes every shard bundle
that is there and verifies; a shard without one (never started, killed before it could
write, or whose bundle does not verify) is named absent with what the scheduler knows
about it (its job id, state and log), so the merged verdict is ``incomplete`` and says
which shard is missing and why, never a silent gap. The result is
``merged/bundle.tar.gz`` (signed when a key is given) and ``merged/merge-summary.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.keys import SigningKey
from fasttrack.errors import FasttrackError

JOB_FILE = "fasttrack-job.json"
MERGED_DIR = "merged"
MERGED_BUNDLE = "bundle.tar.gz"
MERGE_SUMMARY = "merge-summary.json"


def load_job(job_dir: str | Path) -> dict[str, Any]:
    """The job description a render wrote into ``job_dir``."""
    path = Path(job_dir) / JOB_FILE
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise FasttrackError(
            f"{str(job_dir)!r} is not a fasttrack job folder (no {JOB_FILE}).",
            hint="Render one with `fasttrack slurm render -o DIR` or `fasttrack k8s render -o DIR`.",
        ) from None
    except (OSError, ValueError) as exc:
        raise FasttrackError(f"cannot read {path}: {exc}.") from None
    return data


def save_job(job_dir: str | Path, job: dict[str, Any]) -> None:
    path = Path(job_dir) / JOB_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(job, indent=2) + "\n")
    tmp.replace(path)


def shard_bundle(job_dir: Path, shard: dict[str, Any]) -> Path:
    """Where a shard's validate run writes its bundle."""
    return job_dir / shard["dir"] / "bundle.tar.gz"


@dataclass
class ShardOutcome:
    shard: str
    bundle: str | None
    """The shard's bundle, when present and verified."""
    verdict: str | None
    """The shard bundle's own verdict."""
    note: str | None = None
    """Why the shard is absent (None: present)."""
    scheduler: dict[str, Any] = field(default_factory=dict)
    """What the scheduler says about the shard's job (id, state, exit code, log)."""


@dataclass
class MergeOutcome:
    job_dir: Path
    shards: list[ShardOutcome]
    merged: Path | None
    verdict: str | None
    signed: bool
    error: str | None = None

    @property
    def absent(self) -> dict[str, str]:
        return {s.shard: s.note for s in self.shards if s.note is not None}

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_dir": str(self.job_dir),
            "merged": str(self.merged) if self.merged else None,
            "verdict": self.verdict,
            "signed": self.signed,
            "error": self.error,
            "shards": [
                {
                    "shard": s.shard,
                    "bundle": s.bundle,
                    "verdict": s.verdict,
                    "absent": s.note,
                    "scheduler": s.scheduler,
                }
                for s in self.shards
            ],
        }


def check_bundle(path: Path) -> tuple[str | None, str | None]:
    """(verdict, problem) of a shard bundle: integrity only (signatures are checked by the merge)."""
    from fasttrack.bundle.verify import verify_bundle

    try:
        res = verify_bundle(path)
    except (BundleError, OSError) as exc:
        return None, f"its bundle {path} cannot be read: {getattr(exc, 'message', exc)}"
    bad = [it for it in res.items if it.ok is False and it.name != "signature"]
    if bad:
        return None, f"its bundle {path} does not verify: " + "; ".join(f"{it.name}: {it.detail}" for it in bad)
    return res.verdict, None


def merge_job(
    job_dir: str | Path,
    *,
    describe_absent: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]],
    sign_keys: list[SigningKey] | None = None,
    details: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    present_note: Callable[[dict[str, Any]], str | None] | None = None,
    log: Callable[[str], None] = print,
) -> MergeOutcome:
    """Merge the shard bundles present in ``job_dir``; ``describe_absent(shard)`` says what
    the scheduler knows about a shard without a bundle: (note, details); ``details(shard)``
    what it knows about one with a bundle (recorded in the merge summary); ``present_note(details)`` what the
    merged bundle says about such a shard where a check did not run or failed there (e.g. its job
    was cancelled, and its log)."""
    from fasttrack.bundle.merge import merge_bundles

    job_dir = Path(job_dir).resolve()
    job = load_job(job_dir)
    sign_keys = list(sign_keys or [])
    outcomes: list[ShardOutcome] = []
    present: list[Path] = []
    notes: dict[str, str] = {}
    for shard in job["shards"]:
        path = shard_bundle(job_dir, shard)
        if path.is_file():
            verdict, problem = check_bundle(path)
            if problem is None:
                info = details(shard) if details is not None else {}
                outcomes.append(ShardOutcome(shard["shard"], str(path), verdict, scheduler=info))
                said = present_note(info) if present_note is not None else None
                if said:
                    notes[shard["shard"]] = said
                present.append(path)
                continue
        else:
            problem = None
        note, known = describe_absent(shard)
        if problem:
            note = f"{problem}; {note}"
        outcomes.append(ShardOutcome(shard["shard"], None, None, note=note, scheduler=known))
    out_dir = job_dir / MERGED_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / MERGED_BUNDLE
    outcome = MergeOutcome(job_dir, outcomes, None, None, bool(sign_keys))
    if not present:
        outcome.error = "no shard wrote a bundle; nothing to merge"
    else:
        target.unlink(missing_ok=True)
        try:
            m = merge_bundles(
                present,
                target,
                sign_keys=sign_keys,
                keys=[k.public for k in sign_keys],
                absent=outcome.absent,
                notes=notes,
            )
        except FasttrackError as exc:
            outcome.error = exc.message
        else:
            outcome.merged, outcome.verdict = target, m.verdict
    (out_dir / MERGE_SUMMARY).write_text(json.dumps(outcome.as_dict(), indent=2) + "\n")
    for s in outcomes:
        log(f"shard {s.shard}: " + (f"bundle verdict {s.verdict}" if s.note is None else f"ABSENT: {s.note}"))
    if outcome.error:
        log(f"merge: {outcome.error}")
    else:
        log(
            f"merged {len(present)} of {len(outcomes)} shard bundle(s) into {target}: verdict {outcome.verdict}"
            + (", signed" if sign_keys else ", unsigned")
        )
    return outcome
