"""Hostile archives and oversized or deeply nested content: traversal, links, devices,
bombs, member floods, huge and nested JSON. Verify, report, dashboard and merge refuse each
one by name, write nothing outside their folders, unpack nothing they do not need, and stop
quickly."""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path

import pytest
from security_testlib import (
    Keys,
    force_sign,
    kept_temp_dirs,
    nested_json,
    packed,
    rewrite_manifest,
    tree_bytes,
    variant,
)
from tar_testlib import hostile_tgz, reg, special

from fasttrack import limits
from fasttrack.bundle.errors import BundleError, MergeError
from fasttrack.bundle.merge import merge_bundles
from fasttrack.bundle.safe_tar import iter_members
from fasttrack.bundle.verify import verify_bundle
from fasttrack.report.load import build_report_data
from fasttrack.report.site import build_site

MiB = 1024 * 1024

HOSTILE = {
    "traversal": [reg("manifest.json", b"{}"), reg("../escaped.txt", b"owned")],
    "deep-traversal": [reg("a/b/../../../escaped.txt", b"owned")],
    "absolute": [reg("/tmp/escaped-abs.txt", b"owned")],
    "symlink": [special("manifest.json", tarfile.SYMTYPE, "/etc/passwd")],
    "hardlink": [reg("a", b"x"), special("b", tarfile.LNKTYPE, "/etc/shadow")],
    "chardev": [special("dev", tarfile.CHRTYPE)],
    "blockdev": [special("blk", tarfile.BLKTYPE)],
    "fifo": [special("fifo", tarfile.FIFOTYPE)],
    "backslash": [reg("..\\escaped.txt", b"x")],
    "duplicate": [reg("manifest.json", b"{}"), reg("manifest.json", b"[]")],
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_archive_is_refused_everywhere(kind: str, keys: Keys, tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    tgz = hostile_tgz(bundles / f"{kind}.tar.gz", HOSTILE[kind])  # type: ignore[arg-type]
    res = verify_bundle(tgz, keys=[keys.trusted_pub])
    assert res.item("archive").ok is False and not res.verified
    data = build_report_data(tgz, keys=[keys.trusted_pub])
    assert not data.readable and "refused" in data.unreadable_reason
    build_site(bundles, tmp_path / "site", keys=[keys.trusted_pub], jobs=1)
    [rec] = json.loads((tmp_path / "site" / "index.json").read_text())["bundles"]
    assert rec["readable"] is False and rec["verified"] is False and "archive:" in rec["verification"]
    assert not (tmp_path / "site" / "bundles").exists() or not any((tmp_path / "site" / "bundles").rglob("*.*"))
    with pytest.raises(MergeError):
        merge_bundles([tgz], tmp_path / "merged")
    assert not (tmp_path / "escaped.txt").exists() and not (bundles / "escaped.txt").exists()
    assert not Path("/tmp/escaped-abs.txt").exists()


def test_gzip_bomb_is_refused_from_its_headers(keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 80 MiB of zeros pack into ~80 KiB: past the ratio the limits allow, so the header refuses it
    size = limits.BUNDLE_RATIO_FLOOR + 16 * MiB
    tgz = hostile_tgz(tmp_path / "bomb.tar.gz", [reg("manifest.json", b"{}"), reg("logs/zeros.log", b"\0" * size)])
    assert tgz.stat().st_size * limits.BUNDLE_MAX_RATIO < size
    t0 = time.monotonic()
    res = verify_bundle(tgz, keys=[keys.trusted_pub])
    assert res.item("archive").ok is False and "decompression bomb" in res.item("archive").detail
    assert res.bytes_hashed < MiB  # refused before the member was inflated
    with kept_temp_dirs(monkeypatch, tmp_path / "tmp") as tmp:
        data = build_report_data(tgz, keys=[keys.trusted_pub])
        assert not data.readable
        assert tree_bytes(tmp) == 0  # nothing unpacked
    assert time.monotonic() - t0 < 30


def test_report_of_a_failing_bundle_unpacks_only_what_it_reads(
    base_bundle: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # within the limits, signed, then tampered: the report still reads it (marked unverified),
    # from the manifest, attestation and tables only; the 40 MiB log is never written to disk
    work = variant(base_bundle, tmp_path / "w")
    (work / "logs" / "big.log").write_bytes(b"\0" * (40 * MiB))
    force_sign(work, keys.trusted)
    (work / "logs" / "big.log").write_bytes(b"\1" * (40 * MiB))  # tampered after signing
    tgz = packed(work, tmp_path / "w.tar.gz")
    with kept_temp_dirs(monkeypatch, tmp_path / "tmp") as tmp:
        data = build_report_data(tgz, keys=[keys.trusted_pub])
        assert data.readable and not data.verification.verified
        assert 0 < tree_bytes(tmp) < 2 * MiB, tree_bytes(tmp)
    sizes = {a.name: a.size for a in data.artifacts}
    assert sizes["logs/big.log"] == 40 * MiB  # listed with its size all the same


def test_member_flood_is_refused_at_the_limit_quickly(keys: Keys, tmp_path: Path) -> None:
    n = limits.BUNDLE_MAX_MEMBERS + 1
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tf:
        for i in range(n):
            ti = tarfile.TarInfo(f"artifacts/f{i}.txt")
            ti.size = 1
            tf.addfile(ti, io.BytesIO(b"x"))
    tgz = tmp_path / "flood.tar.gz"
    tgz.write_bytes(buf.getvalue())
    t0 = time.monotonic()
    res = verify_bundle(tgz, keys=[keys.trusted_pub])
    took = time.monotonic() - t0
    assert (
        res.item("archive").ok is False
        and f"more than {limits.BUNDLE_MAX_MEMBERS} members" in res.item("archive").detail
    )
    assert took < 30, took


def test_oversized_tar_headers_are_refused(keys: Keys, tmp_path: Path) -> None:
    # a pax header of 2 MiB per member: within the single-read cap, far past any real header
    ti = tarfile.TarInfo("artifacts/a.txt")
    ti.size = 1
    ti.pax_headers = {"comment": "x" * (2 * MiB)}
    tgz = hostile_tgz(tmp_path / "pax.tar.gz", [(ti, b"a")])
    res = verify_bundle(tgz, keys=[keys.trusted_pub])
    assert res.item("archive").ok is False and "tar headers" in res.item("archive").detail


def test_huge_manifest_is_refused_before_parsing(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    work = variant(base_bundle, tmp_path / "w")
    doc = json.loads((work / "manifest.json").read_bytes())
    doc["padding"] = "x" * (limits.MANIFEST_MAX_BYTES + 1)
    rewrite_manifest(work, raw=json.dumps(doc).encode())
    force_sign(work, keys.trusted, predicate={})
    for target in (work, packed(work, tmp_path / "w.tar.gz")):
        res = verify_bundle(target, keys=[keys.trusted_pub])
        assert res.item("schema").ok is False and "over the limit" in res.item("schema").detail
        data = build_report_data(target, keys=[keys.trusted_pub])
        assert not data.readable


@pytest.mark.parametrize("where", ["manifest", "summary", "attestation", "table-cell"])
def test_deeply_nested_json_is_a_clear_failure(where: str, base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    work = variant(base_bundle, tmp_path / "w")
    deep = nested_json(100_000)
    if where == "manifest":
        rewrite_manifest(work, raw=deep.encode())
        force_sign(work, keys.trusted, predicate={})
    elif where == "summary":
        text = (work / "manifest.json").read_text()
        text = text.replace('"summary": {', '"summary": {"deep": ' + deep + ", ", 1)
        rewrite_manifest(work, raw=text.encode())
        force_sign(work, keys.trusted, predicate={})
    elif where == "attestation":
        import base64

        env = {"payload": base64.b64encode(deep.encode()).decode(), "payloadType": "application/vnd.in-toto+json"}
        (work / "attestation.dsse.json").write_text(json.dumps(env))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from fasttrack.bundle.tables import ENCODING_KEY, JSON_ENCODING, WRITE_OPTIONS, parquet_bytes, rows_to_arrow  # noqa: F401 - the writer's own encoding

        # a declared JSON-encoded column (the perf points' notes, a list of text) holding the deep document
        table = work / "results" / "perf" / "points.parquet"
        field = pa.field("notes", pa.string(), metadata={ENCODING_KEY: JSON_ENCODING})
        old = pq.read_table(table)
        new = old.set_column(old.schema.get_field_index("notes"), field, pa.array([deep] * old.num_rows, pa.string()))
        pq.write_table(new, table, **WRITE_OPTIONS)
        force_sign(work, keys.trusted)
    for target in (work, packed(work, tmp_path / "w.tar.gz")):
        res = verify_bundle(target, keys=[keys.trusted_pub])
        data = build_report_data(target, keys=[keys.trusted_pub])
        if where == "table-cell":
            # decoding the cell through its row model stops at the nesting limit, naming the table and the column
            detail = res.item("tables").detail
            assert not res.verified and "perf/points" in detail and "notes" in detail and "64 deep" in detail, detail
            assert data.readable  # the report still shows the bundle (NOT VERIFIED)
            with pytest.raises(BundleError, match="more than 64 deep"):
                merge_bundles([target], tmp_path / f"merged-{target.name}")
        else:
            item = "attestation" if where == "attestation" else "schema"
            assert res.item(item).ok is False and "deep" in res.item(item).detail, res.item(item).detail
            assert not res.verified
            if where != "attestation":
                assert not data.readable
            with pytest.raises(MergeError):
                merge_bundles([target], tmp_path / f"merged-{target.name}")


def test_recorded_shard_count_is_bounded(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    work = variant(base_bundle, tmp_path / "w")
    rewrite_manifest(work, lambda d: d["plan"].update(shard="1/99999999999999999999"))
    force_sign(work, keys.trusted, predicate={})
    res = verify_bundle(work, keys=[keys.trusted_pub])
    assert res.item("schema").ok is False and "shard" in res.item("schema").detail
    with pytest.raises(MergeError):
        merge_bundles([work], tmp_path / "merged")


def test_members_stream_without_unpacking(base_bundle: Path, tmp_path: Path) -> None:
    tgz = packed(base_bundle, tmp_path / "b.tar.gz")
    names = [m.name for m in iter_members(tgz) if not m.is_dir]
    assert "manifest.json" in names and len(names) == len(set(names))
