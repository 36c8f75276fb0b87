"""The packer is deterministic: same bundle contents, same bytes."""

from __future__ import annotations

import gzip
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from bundle_testlib import build

from fasttrack import bundle as B


def test_two_packs_are_byte_identical(signed_dir: Path, tmp_path: Path) -> None:
    a = B.pack_bundle(signed_dir, tmp_path / "a.tar.gz").read_bytes()
    b = B.pack_bundle(signed_dir, tmp_path / "b.tar.gz").read_bytes()
    assert a == b


def test_two_builds_from_the_same_inputs_are_byte_identical(tmp_path: Path, contrib) -> None:
    d1 = build(tmp_path / "one", sign=[contrib])
    d2 = build(tmp_path / "two", sign=[contrib])
    t1 = B.pack_bundle(d1, tmp_path / "one.tar.gz").read_bytes()
    t2 = B.pack_bundle(d2, tmp_path / "two.tar.gz").read_bytes()
    assert t1 == t2


def test_pack_ignores_mtimes_modes_and_creation_order(signed_dir: Path, tmp_path: Path) -> None:
    ref = B.pack_bundle(signed_dir, tmp_path / "ref.tar.gz").read_bytes()
    other = tmp_path / "other"
    # recreate the tree in reverse order with other times and permissions
    files = sorted((p for p in signed_dir.rglob("*") if p.is_file()), reverse=True)
    for p in files:
        q = other / p.relative_to(signed_dir)
        q.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, q)
        os.chmod(q, 0o600)
        os.utime(q, (1_700_000_000, 1_700_000_000))
    assert B.pack_bundle(other, tmp_path / "other.tar.gz").read_bytes() == ref


def test_member_metadata_is_fixed(signed_dir: Path, tmp_path: Path) -> None:
    p = B.pack_bundle(signed_dir, tmp_path / "b.tar.gz")
    raw = p.read_bytes()
    assert raw[:4] == b"\x1f\x8b\x08\x00"  # deflate, no FNAME/FEXTRA/FCOMMENT flags
    assert raw[4:8] == b"\0\0\0\0"  # gzip mtime 0
    with tarfile.open(p) as tf:
        members = tf.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: n.split("/"))
    for m in members:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "")
        assert m.mode == (0o755 if m.isdir() else 0o644)
        assert m.isdir() or m.isreg()
    files = {m.name for m in members if m.isreg()}
    assert files == {p.relative_to(signed_dir).as_posix() for p in signed_dir.rglob("*") if p.is_file()}
    assert gzip.decompress(raw)  # a valid gzip stream


def test_pack_refuses_symlinks(signed_dir: Path, tmp_path: Path) -> None:
    (signed_dir / "logs" / "l").symlink_to("/etc/hostname")
    with pytest.raises(B.BundleError, match="symbolic link"):
        B.pack_bundle(signed_dir, tmp_path / "x.tar.gz")
    assert not (tmp_path / "x.tar.gz").exists()


def test_pack_refuses_output_inside_bundle(signed_dir: Path) -> None:
    with pytest.raises(B.BundleError, match="must not be written inside"):
        B.pack_bundle(signed_dir, signed_dir / "b.tar.gz")


def test_unicode_and_long_names_roundtrip(tmp_path: Path, contrib, keydir: Path) -> None:
    d = build(tmp_path / "b")
    long = "artifacts/" + "x" * 150 + "/échantillon-" + "y" * 120 + ".jsonl"
    (d / long).parent.mkdir(parents=True)
    (d / long).write_text("é\n")
    B.sign_bundle(d, contrib, replace=True)
    t1 = B.pack_bundle(d, tmp_path / "u1.tar.gz").read_bytes()
    t2 = B.pack_bundle(d, tmp_path / "u2.tar.gz").read_bytes()
    assert t1 == t2
    assert B.verify_bundle(tmp_path / "u1.tar.gz", keys=[keydir / "contrib.pub"]).verified
