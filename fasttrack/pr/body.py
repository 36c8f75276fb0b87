"""The body of the sticky comment: the report's PR comment plus who checked it and where the bundle is.

Two sides write it:

- ``contributor`` (``fasttrack pr publish``): a banner saying the results are published by
  the contributor and not yet verified by the maintainers' workflow; the verification
  line is the publisher's own check (with the keys it was given).
- ``maintainer`` (``fasttrack pr body`` in the maintainers' workflow): a banner with the
  workflow's verdict on the bundle (trust set, PR head from the event) and a link to the
  run, whose artifacts hold the full report.

Both end with the bundle's link, sha256 and size, and the machine-readable link line
(:meth:`~fasttrack.pr.sticky.BundleLink.line`) the maintainers' workflow reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fasttrack.bundle.headline import headline
from fasttrack.bundle.verify import VerifyResult, verify_bundle
from fasttrack.pr.github import COMMENT_LIMIT, GitHubError
from fasttrack.pr.sticky import MARKER, BundleLink, check_body
from fasttrack.report.comment import check_url, code, md, render_comment
from fasttrack.report.load import build_report_data

Side = Literal["contributor", "maintainer"]


@dataclass
class Body:
    """A rendered comment body and the verification behind it."""

    text: str
    verify: VerifyResult

    @property
    def passed(self) -> bool:
        """The headline is PASS (:mod:`fasttrack.bundle.headline`): verified, bound to the PR head, not a
        rehearsal, complete for its tier."""
        return headline(self.verify).passed


def _signed_by(vr: VerifyResult) -> str:
    """Who signed, named by the trusted keys that verified the signatures: a signature's own key id is
    not signed (anyone can edit it), so it is never quoted here."""
    who = [
        f"{md(s['identity'], 120)} (key {code(str(s['key'])[:16])})"
        for s in vr.signatures
        if s.get("status") == "valid" and s.get("identity") and s.get("key")
    ]
    return ", ".join(who)


def _banner(side: Side, vr: VerifyResult, *, pr_head: str | None, run_url: str | None, keys_desc: str) -> str:
    if side == "contributor":
        return (
            "> **Published by the contributor** with `fasttrack pr publish`: **not yet verified by the "
            "maintainers' workflow**. The verification line below is the publisher's own check "
            f"({md(keys_desc, 300)}); "
            "a maintainer's verification replaces this comment with the verified result."
        )
    run = f" · [workflow run]({run_url})" if run_url else ""
    head = code(pr_head[:12]) if pr_head else "(not given)"
    hl = headline(vr)
    if vr.verified:
        who = _signed_by(vr) or "a trusted key"
        return (
            f"> {hl.icon} **{md(hl.text, 160)}** · **Verified by the maintainers' workflow** against the repository's "
            f"trust set at PR head {head}: signed by {who}; bundle verdict **{md(vr.verdict or 'unknown', 20)}**{run}"
        )
    return (
        f"> 🛑 **The maintainers' workflow could NOT verify this bundle** (trust set, PR head {head}); "
        f"see the verification line below{run}"
    )


def _footer(link: BundleLink, vr: VerifyResult) -> str:
    who = _signed_by(vr)
    return (
        f"**Bundle:** [{md(link.name, 120)}]({link.url}) · bundle ID {code((vr.bundle_id or 'unknown')[:16])}"
        f" · tarball sha256 {code(link.sha256)} · {link.size:,} bytes"
        + (f" · signed by {who}" if who else "")
        + "\n"
        + link.line()
        + "\n"
    )


def render_body(
    bundle: str | os.PathLike[str],
    link: BundleLink,
    *,
    side: Side,
    keys: Sequence[Any] = (),
    trust_dir: str | os.PathLike[str] | None = None,
    pr_head: str | None = None,
    trusted_scope: str | os.PathLike[str] | None = None,
    min_tier: str | None = None,
    run_url: str | None = None,
    keys_desc: str = "",
    check_link: bool = True,
) -> Body:
    """Verify ``bundle`` and render the sticky comment for it (at most GitHub's limit)."""
    if check_link:
        link.check()
    if run_url is not None:
        check_url(run_url, "--run-url")  # a plain http(s) URL: it goes into the comment as a link
    vr = verify_bundle(
        Path(bundle), keys=keys, trust_dir=trust_dir, pr_head=pr_head, trusted_scope=trusted_scope, min_tier=min_tier
    )
    content_hash = link.sha256 if Path(bundle).is_file() else None
    data = build_report_data(
        Path(bundle), keys=keys, trust_dir=trust_dir, pr_head=pr_head, verify_result=vr, content_hash=content_hash
    )
    banner = _banner(side, vr, pr_head=pr_head, run_url=run_url, keys_desc=keys_desc or "no key given")
    footer = _footer(link, vr)
    if side == "maintainer" and run_url:
        ref, url = "report.html in the workflow run's artifacts", run_url
    else:
        ref, url = "fasttrack report BUNDLE -o report.html", None
    room = COMMENT_LIMIT - len(banner) - len(footer) - 200
    comment = render_comment(data, report_ref=ref, report_url=url, limit=room)
    first, _, rest = comment.partition("\n")
    if first.strip() != MARKER:
        raise GitHubError("the PR comment template does not start with the fasttrack marker")
    text = f"{first}\n{banner}\n\n{rest.strip()}\n\n{footer}"
    return Body(text=check_body(text), verify=vr)
