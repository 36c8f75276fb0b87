"""Hostile tarballs are refused by name before anything is written; good ones extract."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest
from tar_testlib import hostile_tgz, reg, special

from fasttrack import bundle as B
from fasttrack.bundle.errors import UnsafeArchiveError
from fasttrack.bundle.safe_tar import Limits, iter_members


def refuse(path: Path, match: str, *, limits: Limits | None = None) -> None:
    dest = path.parent / (path.name + "-out")
    kwargs = {"limits": limits} if limits else {}
    with pytest.raises(UnsafeArchiveError, match=match):
        B.extract_bundle(path, dest, **kwargs)
    assert not dest.exists(), "a refused archive left files behind"
    with pytest.raises(UnsafeArchiveError, match=match):
        for _ in iter_members(path, **kwargs):
            pass


@pytest.mark.parametrize("name", ["../evil", "a/../../evil", "a/b/../../../evil"])
def test_traversal_is_refused(tmp_path: Path, name: str) -> None:
    p = hostile_tgz(tmp_path / "t.tar.gz", [reg("ok"), reg(name)])
    refuse(p, r"'\.\.'")
    assert not (tmp_path / "evil").exists()


@pytest.mark.parametrize("name", ["/etc/evil", "C:/evil"])
def test_absolute_path_is_refused(tmp_path: Path, name: str) -> None:
    p = hostile_tgz(tmp_path / "a.tar.gz", [reg(name)])
    refuse(p, "absolute path")


def test_symlink_is_refused(tmp_path: Path) -> None:
    p = hostile_tgz(tmp_path / "s.tar.gz", [special("manifest.json", tarfile.SYMTYPE, "/etc/passwd")])
    refuse(p, "symbolic link to '/etc/passwd'")


def test_hardlink_is_refused(tmp_path: Path) -> None:
    p = hostile_tgz(tmp_path / "h.tar.gz", [reg("ok"), special("link", tarfile.LNKTYPE, "/etc/shadow")])
    refuse(p, "hard link")


@pytest.mark.parametrize(
    "typ,what", [(tarfile.CHRTYPE, "device"), (tarfile.BLKTYPE, "device"), (tarfile.FIFOTYPE, "FIFO")]
)
def test_devices_and_fifos_are_refused(tmp_path: Path, typ: bytes, what: str) -> None:
    p = hostile_tgz(tmp_path / "d.tar.gz", [special("dev", typ)])
    refuse(p, what)


def test_too_many_members_are_refused(tmp_path: Path) -> None:
    p = hostile_tgz(tmp_path / "m.tar.gz", [reg(f"f{i}") for i in range(30)])
    refuse(p, "more than 20 members", limits=Limits(max_members=20))


def test_oversized_member_is_refused(tmp_path: Path) -> None:
    p = hostile_tgz(tmp_path / "o.tar.gz", [reg("big", b"\0" * 5000)])
    refuse(p, "over the limit of 4096", limits=Limits(max_member_size=4096))


def test_gzip_bomb_is_refused_from_headers(tmp_path: Path) -> None:
    # 64 MiB of zeros per member compress to ~64 KiB each; the total limit stops it
    # before the data is inflated.
    big = b"\0" * (64 * 1024 * 1024)
    p = hostile_tgz(tmp_path / "bomb.tar.gz", [reg(f"z{i}", big) for i in range(3)])
    assert p.stat().st_size < 1024 * 1024
    refuse(p, "decompression bomb", limits=Limits(max_total_size=100 * 1024 * 1024))


def test_default_limits_refuse_a_header_claiming_a_huge_member(tmp_path: Path) -> None:
    ti = tarfile.TarInfo("huge")
    ti.size = 20 * 1024**3  # the header claims 20 GiB; the data is not there
    buf = io.BytesIO()
    buf.write(ti.tobuf(tarfile.PAX_FORMAT))
    buf.write(b"\0" * 1024)
    p = tmp_path / "huge.tar.gz"
    p.write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    refuse(p, "over the limit")


def test_huge_pax_header_is_refused(tmp_path: Path) -> None:
    # a pax extended header announcing 100 MiB of records would be read into memory whole
    ti = tarfile.TarInfo("././@PaxHeader")
    ti.type = tarfile.XHDTYPE
    ti.size = 100 * 1024 * 1024
    raw = ti.tobuf(tarfile.USTAR_FORMAT) + b"\0" * 1024
    p = tmp_path / "pax.tar.gz"
    p.write_bytes(gzip.compress(raw, mtime=0))
    with pytest.raises(B.BundleError):
        B.extract_bundle(p, tmp_path / "pax-out")


def test_duplicate_member_is_refused(tmp_path: Path) -> None:
    p = hostile_tgz(tmp_path / "dup.tar.gz", [reg("manifest.json", b"a"), reg("manifest.json", b"b")])
    refuse(p, "more than once")


def test_backslash_and_nul_names_are_refused(tmp_path: Path) -> None:
    p = hostile_tgz(tmp_path / "bs.tar.gz", [reg("..\\evil")])
    refuse(p, "backslash")


def test_data_after_end_of_archive_is_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti, data = reg("ok", b"hello")
        tf.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue() + b"smuggled"
    p = tmp_path / "trail.tar.gz"
    p.write_bytes(gzip.compress(raw, mtime=0))
    with pytest.raises(UnsafeArchiveError, match="after the end"):
        list(iter_members(p))


def test_truncated_archive_is_a_bundle_error(tmp_path: Path) -> None:
    p = hostile_tgz(tmp_path / "ok.tar.gz", [reg("a", b"y" * 100_000)])
    p.write_bytes(p.read_bytes()[:-200])
    with pytest.raises(B.BundleError):
        B.extract_bundle(p, tmp_path / "t-out")


def test_garbage_is_a_bundle_error(tmp_path: Path) -> None:
    p = tmp_path / "g.tar.gz"
    p.write_bytes(b"\x1f\x8b" + b"garbage" * 100)
    with pytest.raises(B.BundleError, match="not a readable|corrupt"):
        B.extract_bundle(p, tmp_path / "g-out")


def test_extract_into_non_empty_directory_is_refused(tmp_path: Path) -> None:
    p = hostile_tgz(tmp_path / "ok.tar.gz", [reg("a")])
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "existing").write_text("x")
    with pytest.raises(B.BundleError, match="not empty"):
        B.extract_bundle(p, dest)


def test_good_archive_extracts_with_fixed_modes(tmp_path: Path) -> None:
    ti, data = reg("results/evals/t.parquet", b"PAR1")
    ti.mode = 0o4777  # setuid bits in the archive are not honoured
    d = tarfile.TarInfo("results")
    d.type = tarfile.DIRTYPE
    p = hostile_tgz(tmp_path / "ok.tar.gz", [(d, None), (ti, data), reg("./manifest.json", b"{}")])
    names = B.extract_bundle(p, tmp_path / "out")
    assert sorted(names) == ["manifest.json", "results/evals/t.parquet"]
    f = tmp_path / "out" / "results" / "evals" / "t.parquet"
    assert f.read_bytes() == b"PAR1"
    assert f.stat().st_mode & 0o7777 == 0o644


def test_file_then_directory_of_the_same_name_is_refused(tmp_path: Path) -> None:
    p = hostile_tgz(tmp_path / "fd.tar.gz", [reg("a", b"file"), reg("a/b", b"under a file")])
    with pytest.raises(UnsafeArchiveError, match="cannot be created"):
        B.extract_bundle(p, tmp_path / "fd-out")
    assert not (tmp_path / "fd-out").exists()
