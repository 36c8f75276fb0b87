"""``fasttrack pr``: publish a bundle to a PR, fetch it on the maintainers' side, keep one comment."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from fasttrack import registry, terminal
from fasttrack.bundle import outfile
from fasttrack.report.cli import MIN_TIER_OPT, TRUSTED_SCOPE_OPT

if TYPE_CHECKING:
    from fasttrack.pr.github import GitHubClient

# fasttrack.pr.github (and httpx) load only when a pr command runs: every fasttrack command
# registers these subcommands, and `fasttrack verify` / `report` stay light.

console = terminal.console(soft_wrap=True)
err_console = terminal.console(stderr=True, soft_wrap=True)
pr_app = typer.Typer(
    help="Publish a bundle to a GitHub PR and keep its one fasttrack comment (see docs/pr-flow.md).",
    no_args_is_help=True,
)


def _api_default() -> str:
    from fasttrack.pr.github import DEFAULT_API_URL

    return os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL


def _log(msg: str) -> None:
    err_console.print(msg, highlight=False, markup=False)


def _client(api_url: Optional[str], max_wait: float, *, dry_run: bool = False) -> tuple[GitHubClient, str]:
    from fasttrack.pr.github import GitHubClient, GitHubError, resolve_token

    api = api_url or _api_default()
    if dry_run:
        try:
            _tok, source = resolve_token(api_url=api)
        except GitHubError:
            source = "none found: a real run needs $GITHUB_TOKEN, $GH_TOKEN or `gh auth login`"
        return GitHubClient(token=None, api_url=api, max_wait=max_wait, log=_log), source
    token, source = resolve_token(api_url=api)
    return GitHubClient(token=token, api_url=api, max_wait=max_wait, log=_log), source


API_OPT = typer.Option(None, "--api-url", help="GitHub REST API base (default: $GITHUB_API_URL or api.github.com).")
WAIT_OPT = typer.Option(300.0, "--max-wait", min=0, help="Longest wait for a rate limit to reset, in seconds.")


@pr_app.command("publish")
def publish_cmd(
    bundle: Path = typer.Argument(..., help="The signed bundle (.tar.gz, or a bundle directory to pack)."),
    repo: str = typer.Option(..., "--repo", help="The PR's repository, OWNER/NAME (e.g. vllm-project/vllm)."),
    pr: int = typer.Option(..., "--pr", min=1, help="The PR number."),
    key: list[Path] = typer.Option([], "--key", "-k", help="Public key to check the bundle with (repeatable)."),
    trust: Optional[Path] = typer.Option(
        None,
        "--trust",
        help="Trust directory to check the bundle with (default: $FASTTRACK_TRUST_DIR, else "
        ".fasttrack/trusted-keys when present and no --key).",
    ),
    asset_repo: Optional[str] = typer.Option(
        None, "--asset-repo", help="Repository for the release holding the bundle (default: the PR's head repository)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the requests a real run sends; send nothing."),
    pr_head: Optional[str] = typer.Option(
        None, "--pr-head", help="With --dry-run: the PR head to check against (a real run asks GitHub)."
    ),
    body_out: Optional[Path] = typer.Option(None, "--body-out", help="Also write the comment body here."),
    api_url: Optional[str] = API_OPT,
    max_wait: float = WAIT_OPT,
) -> None:
    """Upload a bundle as a release asset of the PR's head repository and create or update the
    PR's one fasttrack comment (verification state, headline, link, sha256)."""
    from fasttrack.bundle.consistency import pr_head_argument
    from fasttrack.pr.publish import PublishOptions, default_trust, publish, unverified_warning
    from fasttrack.pr.publish import dry_run as plan

    pr_head = pr_head_argument(pr_head)
    opts = PublishOptions(
        bundle=bundle,
        repo=repo,
        pr=pr,
        keys=list(key),
        trust_dir=default_trust(key, trust),
        asset_repo=asset_repo,
        pr_head=pr_head,
    )
    client, source = _client(api_url, max_wait, dry_run=dry_run)
    try:
        if dry_run:
            text, body = plan(opts, client, token_source=source)
            typer.echo(text, nl=False)
            warning = unverified_warning(opts, body)
            if warning:
                _log(warning + " (a real run would publish it)")
        else:
            res = publish(opts, client, log=_log)
            body = res.body
            verb = "created" if res.comment_created else "updated"
            console.print(
                f"bundle ID {(body.verify.bundle_id or 'unknown')[:16]} (tarball sha256 {res.link.sha256[:16]}, "
                f"{res.link.size:,} bytes) "
                + ("uploaded to " if res.asset_uploaded else "already at ")
                + f"{res.link.url}\n{verb} the fasttrack comment: {res.comment_url}",
                highlight=False,
                markup=False,
            )
    finally:
        client.close()
    if body_out is not None:
        outfile.write_text(body_out, body.text)


@pr_app.command("fetch")
def fetch_cmd(
    repo: str = typer.Option(..., "--repo", help="The PR's repository, OWNER/NAME."),
    pr: int = typer.Option(..., "--pr", min=1, help="The PR number."),
    out: Path = typer.Option(..., "-o", "--out", help="Where to write the bundle (.tar.gz)."),
    author: Optional[str] = typer.Option(
        None, "--author", help="Login whose fasttrack comment links the bundle (default: the PR's author)."
    ),
    server_url: Optional[str] = typer.Option(
        None, "--server-url", help="Only downloads from here (default: $GITHUB_SERVER_URL or github.com)."
    ),
    github_output: Optional[Path] = typer.Option(
        None, "--github-output", help="Append bundle, sha256, head_sha, comment_id, ... here ($GITHUB_OUTPUT)."
    ),
    max_bytes: int = typer.Option(2 * 1024**3, "--max-bytes", min=1, help="Largest bundle accepted."),
    api_url: Optional[str] = API_OPT,
    max_wait: float = WAIT_OPT,
) -> None:
    """Download the bundle the PR's fasttrack comment links and check its sha256 (maintainers' side)."""
    from fasttrack.pr.fetch import fetch_bundle, write_outputs
    from fasttrack.pr.github import DEFAULT_SERVER_URL, server_from_api

    client, _ = _client(api_url, max_wait)
    server = (
        server_url
        or os.environ.get("GITHUB_SERVER_URL")
        or (server_from_api(api_url) if api_url else DEFAULT_SERVER_URL)
    )
    try:
        got = fetch_bundle(client, repo, pr, out, server_url=server, author=author, max_bytes=max_bytes)
    finally:
        client.close()
    console.print(
        f"fetched {got.link.url} -> {out} (sha256 {got.link.sha256} matches); PR head {got.head_sha}",
        highlight=False,
        markup=False,
    )
    if github_output is not None:
        write_outputs(github_output, got.outputs())


@pr_app.command("body")
def body_cmd(
    bundle: Path = typer.Argument(..., help="The fetched bundle (.tar.gz)."),
    out: Path = typer.Option(..., "-o", "--out", help="Where to write the comment body (Markdown)."),
    bundle_url: str = typer.Option(..., "--bundle-url", help="Where the bundle was published (the comment's link)."),
    key: list[Path] = typer.Option([], "--key", "-k", help="Trusted public key (repeatable)."),
    trust: Optional[Path] = typer.Option(None, "--trust", help="Trust directory (e.g. .fasttrack/trusted-keys)."),
    pr_head: Optional[str] = typer.Option(None, "--pr-head", help="The PR's head commit, from the event."),
    trusted_scope: Optional[str] = TRUSTED_SCOPE_OPT,
    min_tier: Optional[str] = MIN_TIER_OPT,
    run_url: str = typer.Option(..., "--run-url", help="The workflow run (its artifacts hold the report)."),
) -> None:
    """Verify a fetched bundle and render the maintainers' comment body (exit 0 even when it does not verify)."""
    from fasttrack.bundle.canonical import sha256_file
    from fasttrack.bundle.consistency import pr_head_argument, tier_argument
    from fasttrack.pr.body import render_body
    from fasttrack.pr.sticky import BundleLink

    pr_head = pr_head_argument(pr_head)
    tier_argument(min_tier)
    if out.exists() or out.is_symlink():  # a FIFO, a device or a link is refused before anything is read
        outfile.check_target(out)
    sha, size = sha256_file(bundle)
    body = render_body(
        bundle,
        BundleLink(url=bundle_url, sha256=sha, size=size),
        side="maintainer",
        keys=list(key),
        trust_dir=trust,
        pr_head=pr_head,
        trusted_scope=trusted_scope,
        min_tier=min_tier,
        run_url=run_url,
    )
    outfile.write_text(out, body.text)
    state = "verified" if body.verify.verified else "NOT verified"
    console.print(f"wrote {out}: {state}, verdict {body.verify.verdict}", highlight=False, markup=False)


@pr_app.command("comment")
def comment_cmd(
    repo: str = typer.Option(..., "--repo", help="The PR's repository, OWNER/NAME."),
    pr: int = typer.Option(..., "--pr", min=1, help="The PR number."),
    body_file: Path = typer.Option(..., "--body-file", help="The comment body (must carry the fasttrack marker)."),
    author: Optional[str] = typer.Option(
        None, "--author", help="Login whose fasttrack comment to update (default: the PR's author)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the requests; send nothing."),
    api_url: Optional[str] = API_OPT,
    max_wait: float = WAIT_OPT,
) -> None:
    """Update the PR's fasttrack comment with a body file (create it only when there is none)."""
    from fasttrack.pr.github import GitHubError, check_repo
    from fasttrack.pr.sticky import check_body, plan_upsert, upsert

    check_repo(repo)
    try:
        text = check_body(body_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise GitHubError(f"cannot read --body-file {body_file}: {exc}") from None
    client, source = _client(api_url, max_wait, dry_run=dry_run)
    try:
        if dry_run:
            steps = (
                [("read the PR (its author owns the comment)", client.call_get_pull(repo, pr))] if not author else []
            )
            steps += plan_upsert(client, repo, pr, text, author_desc=author or "{pr_author}")
            typer.echo(f"# fasttrack pr comment --dry-run: nothing is sent; <token> is {source}.\n")
            for i, (note, call) in enumerate(steps, start=1):
                typer.echo(f"### {i}. {note}\n{call.render()}\n")
            return
        who = author or str((client.get_pull(repo, pr).get("user") or {}).get("login") or "") or None
        res = upsert(client, repo, pr, text, author=who)
    finally:
        client.close()
    console.print(
        f"{'created' if res.created else 'updated'} the fasttrack comment: {res.url}", highlight=False, markup=False
    )


@registry.component("subcommand", "pr")
def register(app: typer.Typer) -> None:
    """Add ``pr`` to the ``fasttrack`` app."""
    app.add_typer(pr_app, name="pr")
