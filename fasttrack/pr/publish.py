"""``fasttrack pr publish``: a contributor's bundle onto the PR, as a release asset and one comment.

Where the bundle goes: a **release asset** on the PR's head repository (the
contributor's fork), in a pre-release tagged ``fasttrack-bundle-<first 16 hex of the
bundle's sha256>``. One tag per bundle content, so publishing the same bundle twice
reuses the release and the asset, and a new bundle never replaces an old one that a
comment or a maintainer may still point at. The release is a pre-release that is not
marked latest, so it does not stand in for the fork's real releases; creating it also
creates the tag (on the fork's default branch: the tag names a bundle, not a commit).
``--asset-repo OWNER/NAME`` puts it elsewhere (e.g. when the fork was deleted).

Then the sticky comment (:mod:`fasttrack.pr.sticky`) written by the token's user is
created or updated with the verification state, the headline, the bundle's link and
its sha256 (:mod:`fasttrack.pr.body`).

``--dry-run`` sends nothing and needs no token: it prints every request a real run
sends, in order, with the exact bodies; values only an earlier answer can give (the
comment id, the release's upload URL, the PR's head repository unless ``--asset-repo``
is given) are shown as ``{name}``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrack import attrs
from fasttrack.bundle.canonical import sha256_file
from fasttrack.bundle.errors import BundleError
from fasttrack.pr.body import Body, render_body
from fasttrack.pr.github import Call, GitHubClient, GitHubError, check_repo, server_from_api
from fasttrack.pr.sticky import BundleLink, plan_upsert, upsert

RELEASE_PREFIX = "fasttrack-bundle-"
ASSET_CONTENT_TYPE = "application/gzip"


def release_tag(sha256: str) -> str:
    return RELEASE_PREFIX + sha256[:16]


def asset_name(sha256: str) -> str:
    return release_tag(sha256) + ".tar.gz"


def release_payload(sha256: str) -> dict[str, Any]:
    """The JSON body of ``POST /repos/{owner}/{repo}/releases``."""
    return {
        "tag_name": release_tag(sha256),
        "name": f"fasttrack bundle {sha256[:16]}",
        "body": (
            f"fasttrack evidence bundle, sha256 `{sha256}`.\n\n"
            "Published by `fasttrack pr publish`. Check the sha256 of the download, then "
            "`fasttrack verify BUNDLE --trust DIR --pr-head SHA`."
        ),
        "draft": False,
        "prerelease": True,
        "make_latest": "false",
    }


def download_url(server_url: str, repo: str, sha256: str) -> str:
    """Where GitHub serves the asset (``browser_download_url``)."""
    return f"{server_url.rstrip('/')}/{repo}/releases/download/{release_tag(sha256)}/{asset_name(sha256)}"


@contextlib.contextmanager
def tarball_of(bundle: Path) -> Iterator[Path]:
    """The bundle as a ``.tar.gz`` (a directory is packed deterministically into a temporary file)."""
    if bundle.is_file():
        yield bundle
        return
    if not bundle.is_dir():
        raise BundleError(f"{bundle} does not exist; give the bundle .tar.gz written by fasttrack validate")
    from fasttrack.bundle.pack import pack_bundle

    with tempfile.TemporaryDirectory(prefix="fasttrack-publish-") as tmp:
        out = Path(tmp) / "bundle.tar.gz"
        pack_bundle(bundle, out)
        yield out


@dataclass
class PublishOptions:
    bundle: Path
    repo: str
    pr: int
    keys: Sequence[Any] = ()
    trust_dir: Path | None = None
    asset_repo: str | None = None
    #: Dry runs only (a real run takes the head from the PR).
    pr_head: str | None = None

    def keys_desc(self) -> str:
        parts = [f"key {Path(str(k)).name}" for k in self.keys]
        if self.trust_dir is not None:
            parts.append(f"trust set {self.trust_dir}")
        return ", ".join(parts) or "no key given"


@dataclass
class Published:
    link: BundleLink
    asset_repo: str
    tag: str
    release_created: bool
    asset_uploaded: bool
    comment_url: str
    comment_created: bool
    head_sha: str
    body: Body


def _same_asset(asset: dict[str, Any], sha256: str, size: int) -> bool:
    digest = str(asset.get("digest") or "")
    if digest.startswith("sha256:"):
        return digest.removeprefix("sha256:").lower() == sha256
    return int(asset.get("size", -1)) == size


def _find_asset(release: dict[str, Any], name: str) -> dict[str, Any] | None:
    for a in release.get("assets") or []:
        if isinstance(a, dict) and a.get("name") == name:
            return a
    return None


def publish(opts: PublishOptions, client: GitHubClient, *, log: Callable[[str], None] = lambda _m: None) -> Published:
    """Upload the bundle (unless already there) and create or update the sticky comment."""
    repo = check_repo(opts.repo)
    if opts.asset_repo is not None:
        check_repo(opts.asset_repo, "--asset-repo")
    with tarball_of(opts.bundle) as tar:
        sha, size = sha256_file(tar)
        pull = client.get_pull(repo, opts.pr)
        head = pull.get("head") or {}
        head_sha = str(head.get("sha") or "")
        target = opts.asset_repo or ((head.get("repo") or {}).get("full_name"))
        if not target:
            raise GitHubError(
                f"PR #{opts.pr} of {repo} has no head repository (was the fork deleted?)",
                hint="Pass --asset-repo OWNER/NAME: a repository you can create releases on.",
            )
        me = client.get_user()
        tag, name = release_tag(sha), asset_name(sha)
        release = client.get_release_by_tag(target, tag)
        created = release is None
        if release is None:
            release = client.create_release(target, release_payload(sha))
        asset = _find_asset(release, name)
        uploaded = False
        if asset is None:
            asset = client.upload_asset(str(release["upload_url"]), name, str(tar), size, sha)
            uploaded = asset is not None
            if asset is None:  # uploaded meanwhile by another run
                asset = _find_asset(client.get_release_by_tag(target, tag) or {}, name)
        if asset is None or asset.get("state", "uploaded") != "uploaded" or not _same_asset(asset, sha, size):
            raise GitHubError(
                f"release {tag} of {target} holds an asset {name} that is not this bundle "
                "(different content, or an interrupted upload)",
                hint="Delete that asset (or the release) on GitHub and publish again.",
            )
        link = BundleLink(url=str(asset["browser_download_url"]), sha256=sha, size=size).check()
        body = _contributor_body(tar, link, opts, pr_head=head_sha or None)
        warning = unverified_warning(opts, body)
        if warning:
            log(warning)
        up = upsert(client, repo, opts.pr, body.text, author=me)
    return Published(
        link=link,
        asset_repo=target,
        tag=tag,
        release_created=created,
        asset_uploaded=uploaded,
        **attrs(up, "url", "created", prefix="comment_"),
        head_sha=head_sha,
        body=body,
    )


def _contributor_body(
    tar: Path, link: BundleLink, opts: PublishOptions, *, pr_head: str | None, check_link: bool = True
) -> Body:
    """The PR comment of the contributor's side for the bundle ``tar`` behind ``link``, checked with the keys and
    trust folder of ``opts``."""
    return render_body(
        tar,
        link,
        side="contributor",
        keys=opts.keys,
        trust_dir=opts.trust_dir,
        pr_head=pr_head,
        keys_desc=opts.keys_desc(),
        check_link=check_link,
    )


def unverified_warning(opts: PublishOptions, body: Body) -> str | None:
    """The warning a publish (and its dry run) prints when the bundle does not verify: it is published all the
    same, and the comment says NOT VERIFIED."""
    if body.verify.verified:
        return None
    bad = "; ".join(f"{it.name}: {it.detail}" for it in body.verify.failures)
    return (
        f"warning: the bundle does not verify ({opts.keys_desc()}): {bad}. It is published all the same, and the "
        "comment says it is NOT VERIFIED"
    )


def dry_run(opts: PublishOptions, client: GitHubClient, *, token_source: str) -> tuple[str, Body]:
    """The requests :func:`publish` sends, as text, and the comment body (nothing is sent)."""
    repo = check_repo(opts.repo)
    target = check_repo(opts.asset_repo, "--asset-repo") if opts.asset_repo else "{head_repo}"
    with tarball_of(opts.bundle) as tar:
        sha, size = sha256_file(tar)
        link = BundleLink(url=download_url(server_from_api(client.api_url), target, sha), sha256=sha, size=size)
        body = _contributor_body(tar, link, opts, pr_head=opts.pr_head, check_link=opts.asset_repo is not None)
        tag, name = release_tag(sha), asset_name(sha)
        steps: list[tuple[str, Call]] = [
            (
                f'read the PR; a 404 stops here ("PR #{opts.pr} does not exist in {repo}")',
                client.call_get_pull(repo, opts.pr),
            ),
            ("the token's login: its fasttrack comment is the one to update", client.call_get_user()),
            (f"the release that holds the bundle, on {target}", client.call_get_release_by_tag(target, tag)),
            ("only when that answers 404: create it", client.call_create_release(target, release_payload(sha))),
            (
                f"only when the release holds no asset {name} yet: upload it ({{upload_url}} from the release)",
                client.call_upload_asset("{upload_url}", name, str(tar), size, sha),
            ),
        ]
        steps += plan_upsert(client, repo, opts.pr, body.text, author_desc="{login}")
    head = [
        "# fasttrack pr publish --dry-run: nothing is sent. The requests a real run sends, in order.",
        f"# <token> stands for the token ({token_source}); {{name}} for a value from an earlier answer.",
        f"# bundle: {opts.bundle} ({size:,} bytes, sha256 {sha})",
        "# asset repository: "
        + (f"{target} (--asset-repo)" if opts.asset_repo else "{head_repo}, the PR's head repository (answer 1)"),
        f"# comment verification state: {'verified' if body.verify.verified else 'NOT verified'} "
        f"({opts.keys_desc()}; PR head {opts.pr_head or 'not given'})",
    ]
    parts = ["\n".join(head)]
    for i, (note, call) in enumerate(steps, start=1):
        parts.append(f"### {i}. {note}\n{call.render()}")
    return "\n\n".join(parts) + "\n", body


def default_trust(keys: Sequence[Any], trust: Path | None, env: dict[str, str] | None = None) -> Path | None:
    """``--trust``, else ``$FASTTRACK_TRUST_DIR``, else ``.fasttrack/trusted-keys`` when present (no --key)."""
    if trust is not None or keys:
        return trust
    env = dict(os.environ) if env is None else env
    if env.get("FASTTRACK_TRUST_DIR"):
        return Path(env["FASTTRACK_TRUST_DIR"])
    from fasttrack.bundle.trust import DEFAULT_TRUST_DIR

    return Path(DEFAULT_TRUST_DIR) if Path(DEFAULT_TRUST_DIR).is_dir() else None
