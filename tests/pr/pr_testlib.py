"""Shared helpers and fixtures for the PR-flow tests: the GitHub test double, signed demo bundles, the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bundle"))

from bundle_testlib import HEAD, build  # noqa: E402  (needs the path above)
from github_double import GitHubDouble  # noqa: E402

from fasttrack import ROOT  # noqa: E402
from fasttrack import bundle as B  # noqa: E402

UPSTREAM = "org/vllm"
FORK = "alice/vllm"
PR = 7
TOKENS = {"alice": "tok-alice", "fasttrack-bot": "tok-bot", "mallory": "tok-mallory"}


@pytest.fixture()
def gh() -> Iterator[GitHubDouble]:
    """The double with one open PR (#7 on org/vllm from alice's fork, head HEAD)."""
    with GitHubDouble() as d:
        for login, tok in TOKENS.items():
            d.add_user(login, tok)
        d.add_pull(UPSTREAM, PR, author="alice", head_sha=HEAD, head_repo=FORK)
        d.state.collaborators[UPSTREAM].add("fasttrack-bot")
        yield d


@pytest.fixture(scope="session")
def signer_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pr-keys")
    B.generate_keypair(d, name="alice", comment="alice@laptop")
    return d


@pytest.fixture(scope="session")
def trust_dir(signer_keys: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A maintainers' trust set: alice.pub plus an allowed_signers line naming her."""
    d = tmp_path_factory.mktemp("trusted-keys")
    shutil.copy(signer_keys / "alice.pub", d / "alice.pub")
    kind, key = (signer_keys / "alice.pub").read_text().split()[:2]
    (d / "allowed_signers").write_text(f"alice@example.org {kind} {key}\n")
    return d


def make_tarball(root: Path, signer_keys: Path, *, name: str = "bundle", head: str = HEAD) -> Path:
    d = build(root / name, sign=[B.load_private_key(signer_keys / "alice")], head=head)
    tar = root / f"{name}.tar.gz"
    B.pack_bundle(d, tar)
    return tar


@pytest.fixture(scope="session")
def demo_tarball(signer_keys: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A signed demo bundle (built with the bundle test library; no engine) for PR #7's head."""
    return make_tarball(tmp_path_factory.mktemp("pr-bundle"), signer_keys)


def ft(
    *args: str | Path, token: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m fasttrack ARGS`` with only ``token`` (if any) as the GitHub token."""
    e = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN", "FASTTRACK_TRUST_DIR")}
    e.update({"COLUMNS": "200", "NO_COLOR": "1", "PATH": os.path.dirname(sys.executable)})
    e.pop("GITHUB_API_URL", None)
    e.pop("GITHUB_SERVER_URL", None)
    if token is not None:
        e["GITHUB_TOKEN"] = token
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=e,
        timeout=300,
    )


def one_error(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, one error paragraph on stderr (no traceback) containing every needle."""
    out = res.stdout + res.stderr
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in out, out
    assert res.stderr.count("error:") == 1, res.stderr
    for n in needles:
        assert n in res.stderr, (n, res.stderr)
    return res.stderr
