"""Reports over evidence bundles: the PR report (HTML), the PR comment (Markdown) and the
maintainer dashboard (a static site over many bundles, with a local server).

Everything is rendered from bundles only, after verifying them::

    from fasttrack.report import render_report
    render_report(bundle_dir, "report.html", keys=["ci.pub"], comment_path="pr-comment.md")

    from fasttrack.report import build_site
    build_site(bundles_dir, site_dir, trust_dir="trusted-keys/")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fasttrack import lazy_exports

_EXPORTS = {
    "render_report": "report",
    "report_html": "report",
    "build_report_data": "load",
    "render_comment": "comment",
    "build_site": "site",
    "serve": "server",
}

__all__ = [
    "build_report_data",
    "build_site",
    "render_comment",
    "render_report",
    "report_html",
    "serve",
]


__getattr__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.report.comment import render_comment
    from fasttrack.report.load import build_report_data
    from fasttrack.report.report import render_report, report_html
    from fasttrack.report.server import serve
    from fasttrack.report.site import build_site
