"""Real git repositories for the isolation tests: a fresh repository with its base commit on ``main``,
and the calls that change it."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """Run ``git -C repo args`` and return its stripped standard output (raises when git fails)."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def write(repo: Path, rel: str, text: str) -> None:
    """Write ``text`` to ``repo/rel``, making its folders."""
    p = repo / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def commit(repo: Path, msg: str = "change") -> str:
    """Commit everything in the work tree; the new commit's SHA."""
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", msg)
    return git(repo, "rev-parse", "HEAD")


def init_repo(repo: Path, files: Mapping[str, str]) -> str:
    """A new repository at ``repo`` whose branch ``main`` holds ``files`` (path -> text) in one commit,
    ``base``; that commit's SHA."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    for rel, text in files.items():
        write(repo, rel, text)
    return commit(repo, "base")
