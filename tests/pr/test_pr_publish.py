"""``fasttrack pr publish`` / ``comment`` through the real entry point, against the GitHub test double.

GitHub itself cannot be reached from the tests: ``github_double.GitHubDouble`` is a local
HTTP server implementing the few REST endpoints the flow uses, with the request and
response shapes recorded from GitHub's REST documentation (``github_rest_shapes.json``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from github_double import GitHubDouble
from pr_testlib import FORK, PR, TOKENS, UPSTREAM, ft, make_tarball, one_error

from fasttrack.pr.github import json_body
from fasttrack.pr.publish import asset_name, release_payload, release_tag
from fasttrack.pr.sticky import MARKER, parse_link


def publish(gh: GitHubDouble, bundle: Path, *extra: str, token: str = TOKENS["alice"]):  # type: ignore[no-untyped-def]
    return ft("pr", "publish", bundle, "--repo", UPSTREAM, "--pr", PR, "--api-url", gh.api_url, *extra, token=token)


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_dry_run_prints_the_exact_requests_and_sends_nothing(
    gh: GitHubDouble, demo_tarball: Path, trust_dir: Path, tmp_path: Path
) -> None:
    sha = sha256(demo_tarball)
    r = ft(
        "pr", "publish", demo_tarball, "--repo", UPSTREAM, "--pr", PR, "--asset-repo", FORK,
        "--trust", trust_dir, "--pr-head", "0123456789abcdef", "--dry-run", "--api-url", gh.api_url,
        "--body-out", tmp_path / "body.md",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert gh.state.requests == []  # nothing sent, and no token needed
    assert "warning" not in r.stderr  # the bundle verifies
    out = r.stdout
    api = gh.api_url
    for line in (
        f"GET {api}/repos/{UPSTREAM}/pulls/{PR}",
        f"GET {api}/user",
        f"GET {api}/repos/{FORK}/releases/tags/{release_tag(sha)}",
        f"POST {api}/repos/{FORK}/releases",
        f"POST {{upload_url}}?name={asset_name(sha)}",
        f"GET {api}/repos/{UPSTREAM}/issues/{PR}/comments?per_page=100",
        f"PATCH {api}/repos/{UPSTREAM}/issues/comments/{{comment_id}}",
        f"POST {api}/repos/{UPSTREAM}/issues/{PR}/comments",
        "Authorization: Bearer <token>",
        "X-GitHub-Api-Version: 2022-11-28",
        "Content-Type: application/gzip",
        f"Content-Length: {demo_tarball.stat().st_size}",
    ):
        assert line + "\n" in out, line
    # the exact JSON bodies a real run sends
    assert json_body(release_payload(sha)).decode() in out
    body = (tmp_path / "body.md").read_text()
    assert json_body({"body": body}).decode() in out
    assert out.count(json_body({"body": body}).decode()) == 2  # the PATCH, or the POST when there is none
    assert body.startswith(MARKER + "\n")
    link = parse_link(body)
    assert link is not None and link.sha256 == sha
    assert link.url == f"{gh.url}/{FORK}/releases/download/{release_tag(sha)}/{asset_name(sha)}"
    assert "Verification:** ✅ verified" in body and "not yet verified by the maintainers' workflow" in body
    assert "tok-" not in out


def test_a_dry_run_warns_as_a_real_run_does_when_the_bundle_does_not_verify(
    gh: GitHubDouble, demo_tarball: Path, trust_dir: Path
) -> None:
    """docs/pr-flow.md: a bundle that does not verify (here: it tested another head than the PR's) is published
    with a warning; the dry run says the same, on stderr (a verifying bundle's dry run, above, says none)."""
    args = ["pr", "publish", demo_tarball, "--repo", UPSTREAM, "--pr", PR, "--trust", trust_dir, "--dry-run"]
    args += ["--api-url", gh.api_url]
    r = ft(*args, "--pr-head", "fedcba9876543210")
    assert r.returncode == 0, r.stderr
    assert "warning: the bundle does not verify" in r.stderr and "pr_head" in r.stderr
    assert "NOT VERIFIED" in r.stderr and "a real run would publish it" in r.stderr
    assert "# comment verification state: NOT verified" in r.stdout and gh.state.requests == []


def test_second_publish_updates_the_first_comment(
    gh: GitHubDouble, demo_tarball: Path, trust_dir: Path, signer_keys: Path, tmp_path: Path
) -> None:
    r = publish(gh, demo_tarball, "--trust", trust_dir)
    assert r.returncode == 0, r.stderr
    assert "created the fasttrack comment" in r.stdout
    comments = gh.comments(UPSTREAM, PR)
    assert len(comments) == 1
    first = comments[0]
    assert first["user"]["login"] == "alice" and MARKER in first["body"]
    sha = sha256(demo_tarball)
    link = parse_link(first["body"])
    assert link is not None and link.sha256 == sha and link.size == demo_tarball.stat().st_size
    assert "Verification:** ✅ verified" in first["body"]
    assert "signed by alice@\u200bexample.org" in first["body"]  # the identity; @ broken so it pings no one
    # the bundle is a release asset on the PR's head repository (the fork), byte for byte
    rel = gh.state.releases[(FORK, release_tag(sha))]
    assert rel["prerelease"] is True and [a["name"] for a in rel["assets"]] == [asset_name(sha)]
    assert gh.state.blobs[rel["assets"][0]["id"]] == demo_tarball.read_bytes()
    upload = gh.calls("POST", "/uploads/")
    assert len(upload) == 1 and upload[0].headers["content-type"] == "application/gzip"

    # the same bundle again: same comment updated, nothing uploaded twice
    r = publish(gh, demo_tarball, "--trust", trust_dir)
    assert r.returncode == 0, r.stderr
    assert "updated the fasttrack comment" in r.stdout and "already at" in r.stdout
    assert len(gh.comments(UPSTREAM, PR)) == 1 and gh.comments(UPSTREAM, PR)[0]["id"] == first["id"]
    assert len(gh.calls("POST", "/uploads/")) == 1
    assert len(gh.calls("PATCH")) == 1 and gh.calls("PATCH")[0].path.endswith(f"/issues/comments/{first['id']}")

    # a new bundle: a new release and asset, and still the one comment, now linking it
    newer = make_tarball(tmp_path, signer_keys, name="newer", head="89abcdef" * 5)
    r = publish(gh, newer, "--trust", trust_dir)
    assert r.returncode == 0, r.stderr
    comments = gh.comments(UPSTREAM, PR)
    assert len(comments) == 1 and comments[0]["id"] == first["id"]
    new_link = parse_link(comments[0]["body"])
    assert new_link is not None and new_link.sha256 == sha256(newer) != sha
    assert (FORK, release_tag(sha256(newer))) in gh.state.releases
    # it tested another head than the PR's: published, but the comment and a warning say so
    assert "NOT VERIFIED" in comments[0]["body"] and "warning: the bundle does not verify" in r.stderr


def test_publish_leaves_other_peoples_fasttrack_comments_alone(
    gh: GitHubDouble, demo_tarball: Path, trust_dir: Path
) -> None:
    other = gh.add_comment(UPSTREAM, PR, "mallory", f"{MARKER}\nnot alice's")
    r = publish(gh, demo_tarball, "--trust", trust_dir)
    assert r.returncode == 0, r.stderr
    comments = gh.comments(UPSTREAM, PR)
    assert [c["user"]["login"] for c in comments] == ["mallory", "alice"]
    assert comments[0]["body"] == other["body"]


def test_missing_token_is_one_clear_error(gh: GitHubDouble, demo_tarball: Path) -> None:
    r = publish(gh, demo_tarball, token=None)
    one_error(r, "no GitHub token", "GITHUB_TOKEN", "GH_TOKEN", "gh auth login")
    assert gh.state.requests == []


def test_unknown_pr_is_one_clear_error(gh: GitHubDouble, demo_tarball: Path) -> None:
    r = ft("pr", "publish", demo_tarball, "--repo", UPSTREAM, "--pr", 999, "--api-url", gh.api_url, token="tok-alice")
    one_error(r, f"PR #999 does not exist in {UPSTREAM}")
    assert gh.state.releases == {} and gh.comments(UPSTREAM, PR) == []


def test_bad_token_and_bad_repo_are_clear_errors(gh: GitHubDouble, demo_tarball: Path) -> None:
    one_error(publish(gh, demo_tarball, token="expired"), "rejected the token (401 Bad credentials)")
    r = ft("pr", "publish", demo_tarball, "--repo", "not-a-repo", "--pr", PR, "--api-url", gh.api_url, token="x")
    one_error(r, "is not of the form OWNER/NAME")


def test_deleted_fork_needs_an_asset_repo(gh: GitHubDouble, demo_tarball: Path, trust_dir: Path) -> None:
    gh.add_pull(UPSTREAM, 8, author="alice", head_sha="0" * 40, head_repo=None)
    r = ft("pr", "publish", demo_tarball, "--repo", UPSTREAM, "--pr", 8, "--api-url", gh.api_url, token="tok-alice")
    one_error(r, "has no head repository", "--asset-repo")
    r = ft(
        "pr", "publish", demo_tarball, "--repo", UPSTREAM, "--pr", 8, "--asset-repo", FORK,
        "--trust", trust_dir, "--api-url", gh.api_url, token="tok-alice",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (FORK, release_tag(sha256(demo_tarball))) in gh.state.releases


def test_an_asset_with_other_content_is_refused(gh: GitHubDouble, demo_tarball: Path, trust_dir: Path) -> None:
    assert publish(gh, demo_tarball, "--trust", trust_dir).returncode == 0
    rel = gh.state.releases[(FORK, release_tag(sha256(demo_tarball)))]
    rel["assets"][0]["digest"] = "sha256:" + "0" * 64  # someone replaced the asset
    one_error(publish(gh, demo_tarball, "--trust", trust_dir), "is not this bundle", "Delete that asset")


def test_comment_body_over_githubs_limit_is_refused_before_sending(gh: GitHubDouble, tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    big.write_text(MARKER + "\n" + "x" * (65_536 - len(MARKER)))
    r = ft("pr", "comment", "--repo", UPSTREAM, "--pr", PR, "--body-file", big, "--api-url", gh.api_url, token="t")
    one_error(r, "65,537 characters", "at most 65,536")
    assert gh.state.requests == []
    # exactly at the limit: sent, and GitHub (the double) takes it
    big.write_text(MARKER + "\n" + "x" * (65_535 - len(MARKER)))
    r = ft(
        "pr", "comment", "--repo", UPSTREAM, "--pr", PR, "--body-file", big, "--api-url", gh.api_url, token="tok-bot"
    )
    assert r.returncode == 0, r.stderr
    assert len(gh.comments(UPSTREAM, PR)[0]["body"]) == 65_536
    no_marker = tmp_path / "plain.md"
    no_marker.write_text("hello")
    r = ft("pr", "comment", "--repo", UPSTREAM, "--pr", PR, "--body-file", no_marker, "--api-url", gh.api_url)
    one_error(r, "marker")


def test_comment_dry_run_and_upsert_of_the_pr_authors_comment(gh: GitHubDouble, tmp_path: Path) -> None:
    mine = gh.add_comment(UPSTREAM, PR, "alice", f"{MARKER}\nby the contributor")
    body = tmp_path / "c.md"
    body.write_text(f"{MARKER}\nverified by the maintainers")
    r = ft("pr", "comment", "--repo", UPSTREAM, "--pr", PR, "--body-file", body, "--api-url", gh.api_url, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert f"PATCH {gh.api_url}/repos/{UPSTREAM}/issues/comments/{{comment_id}}" in r.stdout
    assert json.dumps({"body": body.read_text()}, ensure_ascii=False, indent=2) in r.stdout
    assert gh.state.requests == []
    r = ft(
        "pr", "comment", "--repo", UPSTREAM, "--pr", PR, "--body-file", body, "--api-url", gh.api_url, token="tok-bot"
    )
    assert r.returncode == 0, r.stderr
    comments = gh.comments(UPSTREAM, PR)
    assert len(comments) == 1 and comments[0]["id"] == mine["id"]
    assert comments[0]["user"]["login"] == "alice" and comments[0]["body"] == body.read_text()
