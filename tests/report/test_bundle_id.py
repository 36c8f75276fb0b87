"""One bundle ID everywhere: derived from the content (every file but the attestation), the same for a
directory and its tarball, before and after a signature is added, and shown alike by verify, the report,
the PR comment, the maintainers' comment body and the dashboard."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from report_testlib import BundleFactory, Keys

from fasttrack import ROOT
from fasttrack.bundle.attest import sign_bundle
from fasttrack.bundle.pack import pack_bundle
from fasttrack.bundle.verify import verify_bundle
from fasttrack.pr.body import render_body
from fasttrack.pr.sticky import BundleLink
from fasttrack.report.comment import render_comment
from fasttrack.report.load import build_report_data
from fasttrack.report.report import report_html
from fasttrack.report.site import build_site


def test_one_bundle_id_everywhere(bundle_factory: BundleFactory, keys: Keys, tmp_path: Path) -> None:
    d = bundle_factory("id-dir", parent=tmp_path)
    tgz = pack_bundle(d, tmp_path / "bundle.tar.gz")
    vd = verify_bundle(d, keys=[keys.trusted_pub])
    vt = verify_bundle(tgz, keys=[keys.trusted_pub])
    assert vd.verified and vt.verified
    bid = vd.bundle_id
    assert bid and re.fullmatch(r"[0-9a-f]{64}", bid) and vt.bundle_id == bid
    # the tarball's own sha256 is another number: it is never shown as the bundle's ID
    from fasttrack.bundle.canonical import sha256_file

    tar_sha = sha256_file(tgz)[0]
    assert tar_sha != bid

    # a second signature changes the attestation, never the ID
    signed_twice = tmp_path / "twice"
    shutil.copytree(d, signed_twice)
    sign_bundle(signed_twice, keys.other)
    assert verify_bundle(signed_twice, keys=[keys.trusted_pub]).bundle_id == bid
    # any other file changed: another ID (and the bundle no longer verifies)
    edited = tmp_path / "edited"
    shutil.copytree(d, edited)
    log = next((edited / "logs").iterdir())
    log.write_text(log.read_text() + "edited\n")
    assert verify_bundle(edited, keys=[keys.trusted_pub]).bundle_id not in (None, bid)

    # verify's JSON and text
    for path in (d, tgz):
        out = subprocess.run(
            [sys.executable, "-m", "fasttrack", "verify", str(path), "--key", str(keys.trusted_pub), "--json"],
            capture_output=True, text=True, cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert json.loads(out.stdout)["bundle_id"] == bid
    text = subprocess.run(
        [sys.executable, "-m", "fasttrack", "verify", str(tgz), "--key", str(keys.trusted_pub)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    ).stdout  # fmt: skip
    assert f"bundle ID: {bid}" in text

    # the report and the PR comment, from the directory and from the tarball
    shown: set[str] = set()
    for path in (d, tgz):
        data = build_report_data(path, keys=[keys.trusted_pub])
        html = report_html(data)
        comment = render_comment(data)
        shown |= set(re.findall(r'id="bundle-id">([0-9a-f]+)<', html))
        shown |= set(re.findall(r"bundle ID `([0-9a-f]+)`", comment))
        assert tar_sha[:16] not in html and tar_sha[:16] not in comment
    # the maintainers' comment body names the tarball's sha256 as such, next to the one ID
    body = render_body(
        tgz,
        BundleLink(url="https://github.com/o/r/releases/download/t/b.tar.gz", sha256=tar_sha, size=tgz.stat().st_size),
        side="maintainer",
        keys=[keys.trusted_pub],
        check_link=False,
    ).text
    shown |= set(re.findall(r"bundle ID `([0-9a-f]+)`", body))
    assert f"tarball sha256 `{tar_sha}`" in body

    # the dashboard, over the directory and the tarball
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    shutil.copytree(d, bundles / "dir")
    shutil.copy(tgz, bundles / "b.tar.gz")
    build_site(bundles, tmp_path / "site", keys=[keys.trusted_pub], jobs=1)
    index = (tmp_path / "site" / "index.html").read_text()
    shown |= set(re.findall(r'class="report-link">([0-9a-f]{16})<', index))
    assert shown == {bid[:16]}, shown
