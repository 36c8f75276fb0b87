"""``render_report``: one bundle -> one self-contained HTML file (and optionally the PR comment)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrack.errors import FasttrackError
from fasttrack.report.load import Links, build_report_data, default_links
from fasttrack.report.render import render_page, static, write_text
from fasttrack.report.views import ReportData

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.bundle.verify import VerifyResult

REPORT_TEMPLATE = "report.html.j2"
REPORT_CSS = "report.css"


def report_html(data: ReportData, *, back_href: str | None = None) -> str:
    """The report page for already loaded data."""
    return render_page(REPORT_TEMPLATE, css=static(REPORT_CSS), r=data, back_href=back_href, generated=None)


def render_report(
    bundle_path: str | os.PathLike[str],
    out_html: str | os.PathLike[str],
    *,
    keys: Sequence[Any] = (),
    trust_dir: str | os.PathLike[str] | None = None,
    pr_head: str | None = None,
    trusted_scope: str | os.PathLike[str] | None = None,
    min_tier: str | None = None,
    comment_path: str | os.PathLike[str] | None = None,
    report_url: str | None = None,
    verify_result: VerifyResult | None = None,
) -> ReportData:
    """Verify ``bundle_path``, write the report to ``out_html`` (and the PR comment to
    ``comment_path``), and return what was shown.

    ``verify_result``: the bundle's verification when the caller has just done it (it is then
    not verified again).

    ``keys`` are trusted public keys (files or loaded keys) and ``trust_dir`` a directory of
    ``*.pub`` files; without either the signature cannot verify and the report says so.
    ``pr_head`` is the PR's current head commit, when known, to check the bundle against; ``trusted_scope`` and
    ``min_tier`` hold the recorded scope against the repository's and the tier against the lowest accepted (see
    :func:`fasttrack.bundle.verify.verify_bundle`): the headline names what they find.
    Links to the bundle's files are relative to ``out_html`` (directory bundles only).
    """
    from fasttrack.report.comment import render_comment

    bundle = Path(bundle_path)
    out = Path(out_html)
    if bundle.is_dir():
        for target in (out, Path(comment_path) if comment_path is not None else None):
            if target is not None and target.resolve().is_relative_to(bundle.resolve()):
                raise FasttrackError(
                    f"{target} is inside the bundle {bundle}; "
                    "a file added there would make the bundle fail verification",
                    hint="Write the report next to the bundle, e.g. -o report.html",
                )
    links: Links = default_links(bundle, out)
    data = build_report_data(
        bundle,
        keys=keys,
        trust_dir=trust_dir,
        pr_head=pr_head,
        trusted_scope=trusted_scope,
        min_tier=min_tier,
        links=links,
        verify_result=verify_result,
    )
    write_text(out, report_html(data))
    if comment_path is not None:
        cp = Path(comment_path)
        ref = os.path.relpath(out.resolve(), cp.resolve().parent) if report_url is None else out.name
        write_text(cp, render_comment(data, report_ref=ref, report_url=report_url))
    return data
