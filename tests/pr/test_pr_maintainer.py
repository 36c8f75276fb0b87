"""The maintainers' side (``pr fetch``, ``pr body``, ``pr comment``) against the GitHub test double.

GitHub cannot be reached from the tests; ``github_double.GitHubDouble`` is a local HTTP
server implementing the REST endpoints and release downloads the flow uses, with the
shapes recorded from GitHub's REST documentation.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from github_double import GitHubDouble
from pr_testlib import PR, TOKENS, UPSTREAM, ft, one_error

from fasttrack.pr.sticky import MARKER, parse_link

RUN_URL = "https://github.com/org/vllm/actions/runs/123"


def api(gh: GitHubDouble) -> list[str]:
    return ["--api-url", gh.api_url]


def test_fetch_verify_and_upsert_the_verified_result(
    gh: GitHubDouble, demo_tarball: Path, trust_dir: Path, tmp_path: Path
) -> None:
    r = ft("pr", "publish", demo_tarball, "--repo", UPSTREAM, "--pr", PR, *api(gh), "--key", trust_dir / "alice.pub",
           token=TOKENS["alice"])  # fmt: skip
    assert r.returncode == 0, r.stderr
    contributor = gh.comments(UPSTREAM, PR)[0]

    out = tmp_path / "gh-output"
    got = tmp_path / "in" / "bundle.tar.gz"
    r = ft("pr", "fetch", "--repo", UPSTREAM, "--pr", PR, "-o", got, "--github-output", out, *api(gh),
           token=TOKENS["fasttrack-bot"])  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert got.read_bytes() == demo_tarball.read_bytes()
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    head = gh.state.pulls[(UPSTREAM, PR)].head_sha
    assert outputs["head_sha"] == head  # from the API, not from the bundle
    assert outputs["sha256"] == hashlib.sha256(got.read_bytes()).hexdigest()
    assert outputs["comment_id"] == str(contributor["id"]) and outputs["pr_author"] == "alice"
    downloads = gh.calls("GET", "/alice/vllm/releases/download/") + gh.calls("GET", "/_objects/")
    assert len(downloads) == 2 and all("authorization" not in d.headers for d in downloads)  # no token sent

    body = tmp_path / "comment.md"
    r = ft("pr", "body", got, "-o", body, "--bundle-url", outputs["url"], "--trust", trust_dir,
           "--pr-head", head, "--run-url", RUN_URL)  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = body.read_text()
    assert text.startswith(MARKER + "\n")
    assert "Verified by the maintainers' workflow" in text and f"PR head `{head[:12]}`" in text
    assert "signed by alice@\u200bexample.org" in text and f"[workflow run]({RUN_URL})" in text
    link = parse_link(text)
    assert link is not None and link.url == outputs["url"] and link.sha256 == outputs["sha256"]

    r = ft("pr", "comment", "--repo", UPSTREAM, "--pr", PR, "--body-file", body, *api(gh),
           token=TOKENS["fasttrack-bot"])  # fmt: skip
    assert r.returncode == 0, r.stderr
    comments = gh.comments(UPSTREAM, PR)
    assert len(comments) == 1 and comments[0]["id"] == contributor["id"] and comments[0]["body"] == text

    # the workflow's result names the head from the event: a stale head shows as not verified
    r = ft("pr", "body", got, "-o", body, "--bundle-url", outputs["url"], "--trust", trust_dir,
           "--pr-head", "f" * 40, "--run-url", RUN_URL)  # fmt: skip
    assert r.returncode == 0 and "NOT verified" in r.stdout
    assert "could NOT verify this bundle" in body.read_text()

    # the head SHA fetch reports is the PR's (from the API), whatever head the bundle tested
    gh.state.pulls[(UPSTREAM, PR)].head_sha = "c0ffee" * 6 + "c0ff"
    out.unlink()
    r = ft("pr", "fetch", "--repo", UPSTREAM, "--pr", PR, "-o", got, "--github-output", out, *api(gh),
           token=TOKENS["fasttrack-bot"])  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "head_sha=" + "c0ffee" * 6 + "c0ff" in out.read_text().splitlines()


def test_fetch_refuses_a_changed_bundle(gh: GitHubDouble, demo_tarball: Path, tmp_path: Path) -> None:
    r = ft("pr", "publish", demo_tarball, "--repo", UPSTREAM, "--pr", PR, *api(gh), token=TOKENS["alice"])
    assert r.returncode == 0, r.stderr
    blob_id = next(iter(gh.state.blobs))
    gh.state.blobs[blob_id] = gh.state.blobs[blob_id] + b"tampered"
    got = tmp_path / "bundle.tar.gz"
    r = ft("pr", "fetch", "--repo", UPSTREAM, "--pr", PR, "-o", got, *api(gh), token=TOKENS["fasttrack-bot"])
    one_error(r, "has sha256", "the PR's comment names", "fasttrack pr publish")
    assert not got.exists() and not list(tmp_path.glob("*.part"))


def test_fetch_takes_only_release_downloads_from_the_pr_authors_comment(gh: GitHubDouble, tmp_path: Path) -> None:
    got = tmp_path / "b.tar.gz"
    r = ft("pr", "fetch", "--repo", UPSTREAM, "--pr", PR, "-o", got, *api(gh), token=TOKENS["fasttrack-bot"])
    one_error(r, "has no fasttrack comment", "by alice", "fasttrack pr publish")
    line = "<!-- fasttrack-bundle url={} sha256=" + "a" * 64 + " size=10 -->"
    gh.add_comment(
        UPSTREAM, PR, "mallory", f"{MARKER}\n" + line.format(f"{gh.url}/mallory/x/releases/download/t/b.tar.gz")
    )
    r = ft("pr", "fetch", "--repo", UPSTREAM, "--pr", PR, "-o", got, *api(gh), token=TOKENS["fasttrack-bot"])
    one_error(r, "has no fasttrack comment", "by alice")  # someone else's comment is not the PR's
    gh.add_comment(UPSTREAM, PR, "alice", f"{MARKER}\n" + line.format("https://evil.example/bundle.tar.gz"))
    r = ft("pr", "fetch", "--repo", UPSTREAM, "--pr", PR, "-o", got, *api(gh), token=TOKENS["fasttrack-bot"])
    one_error(r, "which is not a release download on")
    assert not got.exists()
