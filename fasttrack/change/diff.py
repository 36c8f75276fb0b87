"""The isolation check: does a change stay inside the code the optimization owns?

Asks git for every path changed between two refs (renames and deletions included,
both sides of a rename), classifies each path as ``owned``, ``shared`` (one of the
off-limits components: input preparation, sampling, KV-cache management) or
``elsewhere``, and derives a verdict by one rule, the one ``fasttrack isolation`` and the
isolation row of ``fasttrack validate`` both apply (:func:`judge_paths`):

- every path owned, or outside the owned paths but in the scope's ``allowed_paths`` (listed) -> ``pass``
- any shared component touched -> ``fail`` ("needs core-maintainer review"), naming the component
- any other path outside the owned ones -> ``fail``, naming it
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Literal

from fasttrack.errors import IsolationError
from fasttrack.modelbase import DocModel
from fasttrack.scope import IsolationSpec
from fasttrack.scope.globs import Classification, Glob, classify, compile_glob, glob_match

#: The glob matcher and the classifier live in :mod:`fasttrack.scope.globs` (layer 1: verifying reclassifies a
#: bundle's paths by them); they are named here too because callers found them here.
__all__ = [
    "ChangedPath",
    "Classification",
    "Glob",
    "IsolationResult",
    "IsolationVerdict",
    "check_isolation",
    "classify",
    "compile_glob",
    "glob_match",
    "judge_paths",
    "resolve_refs",
]
IsolationVerdict = Literal["pass", "fail"]
"""``fail``: a shared component, or a path outside the owned and allowed ones, changed."""


class ChangedPath(DocModel):
    path: str
    status: str
    """git's status letter: A, M, D, R (rename), C (copy), T (type change)."""
    old_path: str | None = None
    """Source path of a rename or copy."""
    classification: Classification
    component: str | None = None
    """The shared component this path belongs to, when classification is 'shared'."""
    matched: str | None = None
    """The glob that matched."""
    allowed: bool = False
    """An 'elsewhere' path the scope allows a change to touch (``isolation.allowed_paths``): listed, not failed."""


class IsolationResult(DocModel):
    verdict: IsolationVerdict
    message: str
    repo: str
    base_ref: str
    head_ref: str
    base_sha: str
    head_sha: str
    merge_base_sha: str
    diff_sha256: str
    """sha256 of the full binary diff base..head (what was reviewed)."""
    changed: list[ChangedPath]
    failures: list[str] = []
    """One line per changed path that fails the rule, naming the path and why."""

    @property
    def exit_code(self) -> int:
        """0 for ``pass``, 1 for ``fail``: the exit code of ``validate --checks isolation`` on the same diff."""
        return 0 if self.verdict == "pass" else 1


def _changed(path: str, status: str, spec: IsolationSpec, old_path: str | None = None) -> ChangedPath:
    cls, comp, g = classify(path, spec)
    return ChangedPath(
        path=path,
        status=status,
        old_path=old_path,
        classification=cls,
        component=comp,
        matched=g,
        allowed=cls == "elsewhere" and g is not None,
    )


def _git(repo: Path, *args: str, binary: bool = False) -> str | bytes:
    try:
        res = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise IsolationError("git is not installed or not on PATH.", hint="Install git and retry.") from None
    if res.returncode != 0:
        raise IsolationError(f"git {' '.join(args)} failed in {repo}: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout if binary else res.stdout.decode()


def _resolve(repo: Path, ref: str, which: str) -> str:
    res = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0 or not res.stdout.strip():
        raise IsolationError(
            f"{which} ref {ref!r} is not a commit in {repo}.",
            hint="Pass a branch, tag or SHA that exists there (fetch the PR's refs first, e.g. "
            "'git fetch origin pull/N/head:pr-N').",
        )
    return res.stdout.strip()


def resolve_refs(repo: Path | str, base: str, head: str) -> tuple[str, str]:
    """The commits ``base`` and ``head`` name in ``repo`` (raises :class:`IsolationError` naming what is wrong)."""
    repo = Path(repo)
    if not repo.is_dir():
        raise IsolationError(f"repository path {str(repo)!r} does not exist or is not a folder.")
    top = subprocess.run(["git", "-C", str(repo), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0:
        raise IsolationError(
            f"{str(repo)!r} is not a git repository.",
            hint="Point --repo at a clone of the vLLM tree that contains the PR's commits.",
        )
    return _resolve(repo, base, "base"), _resolve(repo, head, "head")


def check_isolation(repo: Path | str, base: str, head: str, spec: IsolationSpec) -> IsolationResult:
    """Classify every path changed from the merge base of ``base`` and ``head`` to ``head``."""
    repo = Path(repo)
    base_sha, head_sha = resolve_refs(repo, base, head)
    mb = subprocess.run(["git", "-C", str(repo), "merge-base", base_sha, head_sha], capture_output=True, text=True)
    merge_base = mb.stdout.strip() if mb.returncode == 0 and mb.stdout.strip() else base_sha
    raw = _git(repo, "diff", "--name-status", "-z", "-M", "-C", "--no-ext-diff", merge_base, head_sha)
    assert isinstance(raw, str)
    parts = raw.split("\0")
    changed: list[ChangedPath] = []
    k = 0
    while k < len(parts) and parts[k]:
        status = parts[k]
        letter = status[0]
        if letter in "RC":
            old, new = parts[k + 1], parts[k + 2]
            k += 3
            # both ends of a rename count: moving a shared file out of its place touches it
            for p, old_p in ((new, old), (old, None)):
                changed.append(_changed(p, letter if old_p else "D" if letter == "R" else letter, spec, old_p))
            if letter == "C":
                changed.pop()  # the source of a copy is unchanged
        else:
            p = parts[k + 1]
            k += 2
            changed.append(_changed(p, letter, spec))
    diff = _git(repo, "diff", "--binary", "--no-ext-diff", "--full-index", merge_base, head_sha, binary=True)
    assert isinstance(diff, bytes)
    digest = hashlib.sha256(diff).hexdigest()

    verdict, msg, failures = judge_paths(changed)
    return IsolationResult(
        verdict=verdict,
        message=msg,
        repo=str(repo.resolve()),
        base_ref=base,
        head_ref=head,
        base_sha=base_sha,
        head_sha=head_sha,
        merge_base_sha=merge_base,
        diff_sha256=digest,
        changed=changed,
        failures=failures,
    )


def judge_paths(changed: list[ChangedPath]) -> tuple[IsolationVerdict, str, list[str]]:
    """The isolation rule: (verdict, the reason in one sentence, one failure line per offending path).

    ``pass`` only when nothing shared and nothing outside the owned and allowed paths changed."""
    shared = [c for c in changed if c.classification == "shared"]
    elsewhere = [c for c in changed if c.classification == "elsewhere" and not c.allowed]
    allowed = [c for c in changed if c.allowed]
    failures = [
        f"{c.path} ({c.status}) is in the shared component {str(c.component).replace('_', ' ')} "
        f"(glob {c.matched}): needs core-maintainer review"
        for c in shared
    ] + [
        f"{c.path} ({c.status}) is outside the owned paths and the scope does not allow it (isolation.allowed_paths)"
        for c in elsewhere
    ]
    if not changed:
        return "pass", "no paths changed", []
    if shared:
        components = sorted({str(c.component) for c in shared})
        msg = f"the change touches the shared component(s) {', '.join(components)}, which needs core-maintainer " + (
            "review: " + ", ".join(c.path for c in shared)
        )
        if elsewhere:
            msg += f"; and {len(elsewhere)} path(s) outside the owned paths: " + ", ".join(c.path for c in elsewhere)
        return "fail", msg, failures
    if elsewhere:
        msg = f"{len(elsewhere)} changed path(s) outside the owned paths, not allowed by the scope: " + ", ".join(
            c.path for c in elsewhere
        )
        return "fail", msg, failures
    owned = len(changed) - len(allowed)
    msg = f"all {len(changed)} changed path(s) are owned by the optimization" + (
        f" ({owned}) or in the scope's allowed paths ({len(allowed)}: {', '.join(c.path for c in allowed)})"
        if allowed
        else ""
    )
    return "pass", msg, []
