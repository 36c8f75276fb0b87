"""The dashboard's cache is keyed by content, never by size and time.

``dashboard build`` once decided a bundle was unchanged from its size and mtime, so a bundle
edited in place with the same size and its mtime restored kept ``verified: true``. Every rebuild
now hashes every bundle, and a record is reused only under the content hash it was verified for.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from security_testlib import Keys, packed

from fasttrack.report.site import build_site


def _restore_times(paths: list[Path], times: dict[Path, tuple[int, int]]) -> None:
    for p in paths:
        os.utime(p, ns=times[p], follow_symlinks=False)


def _times(paths: list[Path]) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_atime_ns, p.stat().st_mtime_ns) for p in paths}


def _record(site: Path, rel: str) -> dict:
    doc = json.loads((site / "index.json").read_text())
    [rec] = [b for b in doc["bundles"] if b["path"] == rel]
    return rec


def _flip_same_size(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))


def test_an_edit_in_place_with_size_and_mtime_kept_is_seen(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    d = bundles / "dir-bundle"
    shutil.copytree(base_bundle, d)
    tar = packed(base_bundle, bundles / "tar-bundle.tar.gz")
    site = tmp_path / "site"
    s1 = build_site(bundles, site, keys=[keys.trusted_pub], jobs=1)
    assert (s1.read, s1.errors) == (2, [])
    assert _record(site, "dir-bundle")["verified"] and _record(site, "tar-bundle.tar.gz")["verified"]

    # the directory: one byte of a log flipped, size kept, every time restored (file and folders)
    log = next(p for p in sorted(d.rglob("*.log")))
    watched = [log, *[p for p in log.parents if p.is_relative_to(d)]]
    times = _times(watched)
    size = log.stat().st_size
    _flip_same_size(log)
    _restore_times(watched, times)
    assert log.stat().st_size == size and _times(watched) == times
    # the tarball: one byte of its compressed stream flipped, size and time kept
    ttimes = _times([tar])
    _flip_same_size(tar)
    _restore_times([tar], ttimes)

    s2 = build_site(bundles, site, keys=[keys.trusted_pub], jobs=1)
    assert s2.read + len(s2.errors) == 2 and s2.reused == 0, s2
    rec = _record(site, "dir-bundle")
    assert rec["verified"] is False and rec["hashes_ok"] is False, rec
    doc = json.loads((site / "index.json").read_text())
    tar_recs = [b for b in doc["bundles"] if b["path"] == "tar-bundle.tar.gz"]
    assert not tar_recs or tar_recs[0]["verified"] is False  # unreadable now, or shown unverified
    assert not any(b["verified"] for b in doc["bundles"])

    # putting the original bytes back verifies them again, and a rebuild with nothing changed reads nothing
    _flip_same_size(log)
    _flip_same_size(tar)
    s3 = build_site(bundles, site, keys=[keys.trusted_pub], jobs=1)
    assert (s3.read, s3.reused, s3.errors) == (2, 0, []), s3
    assert _record(site, "dir-bundle")["verified"] and _record(site, "tar-bundle.tar.gz")["verified"]
    s4 = build_site(bundles, site, keys=[keys.trusted_pub], jobs=1)
    assert (s4.read, s4.reused) == (0, 2), s4


def test_a_link_swapped_in_for_a_file_changes_the_id(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    from fasttrack.report.identity import bundle_hash

    d = tmp_path / "b"
    shutil.copytree(base_bundle, d)
    before = bundle_hash(d)
    log = next(p for p in sorted(d.rglob("*.log")))
    copy = tmp_path / "outside.log"
    shutil.copy(log, copy)
    log.unlink()
    log.symlink_to(copy)
    assert bundle_hash(d) != before  # the same bytes behind a link are not the same bundle
