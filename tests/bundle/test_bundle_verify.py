"""Verification accepts an intact signed bundle and rejects every kind of tampering."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from bundle_testlib import HEAD, build, make_results
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasttrack import bundle as B
from fasttrack.bundle.attest import attest_dir
from fasttrack.bundle.canonical import canonical_json
from fasttrack.bundle.dsse import add_signature, read_envelope
from fasttrack.bundle.layout import ATTESTATION, MANIFEST
from fasttrack.results import Verdict


def failed(res: B.VerifyResult) -> set[str]:
    return {it.name for it in res.failures}


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_intact_directory_and_tarball_verify(signed_dir: Path, keydir: Path, tmp_path: Path) -> None:
    res = B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"], pr_head=HEAD[:12])
    assert res.verified, res.failures
    assert res.verdict == "pass"
    assert res.item("pr_head").ok is True
    assert len(res.signers) == 1
    tgz = B.pack_bundle(signed_dir, tmp_path / "b.tar.gz")
    res = B.verify_bundle(tgz, trust_dir=keydir)
    assert res.verified, res.failures
    assert res.item("archive").ok is True
    assert res.bytes_hashed == sum(p.stat().st_size for p in files_of(signed_dir))


def test_every_item_is_reported(signed_dir: Path, keydir: Path) -> None:
    from fasttrack.bundle.verify import ITEMS

    res = B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"])
    assert [it.name for it in res.items] == list(ITEMS)


def test_flipping_one_byte_of_each_member_fails(signed_dir: Path, keydir: Path, tmp_path: Path) -> None:
    pub = keydir / "contrib.pub"
    for f in files_of(signed_dir):
        work = tmp_path / f"w-{f.name}"
        shutil.copytree(signed_dir, work)
        target = work / f.relative_to(signed_dir)
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x01
        target.write_bytes(bytes(data))
        res = B.verify_bundle(work, keys=[pub])
        assert not res.verified, f"flip in {f.relative_to(signed_dir)} went unnoticed"
        if f.name != ATTESTATION:
            assert "hashes" in failed(res), (f, res.failures)
        shutil.rmtree(work)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_byte_flips_in_tarball_fail(signed_dir: Path, keydir: Path, tmp_path_factory, data) -> None:
    d = tmp_path_factory.mktemp("flip")
    tgz = B.pack_bundle(signed_dir, d / "b.tar.gz")
    raw = bytearray(tgz.read_bytes())
    pos = data.draw(st.integers(0, len(raw) - 1), label="offset")
    bit = data.draw(st.integers(0, 7), label="bit")
    raw[pos] ^= 1 << bit
    tgz.write_bytes(bytes(raw))
    res = B.verify_bundle(tgz, keys=[keydir / "contrib.pub"])
    if res.verified:
        # Only bytes that carry no evidence may change without notice (gzip header flags,
        # unused bits at the end of the deflate stream): every member must be unchanged.
        out = d / "x"
        B.extract_bundle(tgz, out)
        assert {p.relative_to(out): p.read_bytes() for p in files_of(out)} == {
            p.relative_to(signed_dir): p.read_bytes() for p in files_of(signed_dir)
        }, f"flip at offset {pos} changed a member yet verified"


def test_flip_in_member_data_of_tarball_fails(signed_dir: Path, keydir: Path, tmp_path: Path) -> None:
    import gzip

    tgz = B.pack_bundle(signed_dir, tmp_path / "b.tar.gz")
    tar = bytearray(gzip.decompress(tgz.read_bytes()))
    needle = b"INFO engine started"
    i = tar.find(needle)
    assert i > 0
    tar[i] ^= 0x20
    tgz.write_bytes(gzip.compress(bytes(tar), mtime=0))
    res = B.verify_bundle(tgz, keys=[keydir / "contrib.pub"])
    assert failed(res) == {"hashes"}
    assert "logs/g0.baseline.0.log" in res.item("hashes").detail


def test_flips_in_gzip_trailer_and_tar_padding_fail(signed_dir: Path, keydir: Path, tmp_path: Path) -> None:
    import gzip

    tgz = B.pack_bundle(signed_dir, tmp_path / "b.tar.gz")
    good = tgz.read_bytes()
    for pos in (len(good) - 1, len(good) - 5):  # ISIZE and CRC32
        raw = bytearray(good)
        raw[pos] ^= 0x01
        tgz.write_bytes(bytes(raw))
        assert not B.verify_bundle(tgz, keys=[keydir / "contrib.pub"]).verified, pos
    tar = bytearray(gzip.decompress(good))
    tar[-1] = 0x01  # inside the zero padding after the end-of-archive marker
    tgz.write_bytes(gzip.compress(bytes(tar), mtime=0))
    res = B.verify_bundle(tgz, keys=[keydir / "contrib.pub"])
    assert "archive" in failed(res) and "after the end" in res.item("archive").detail


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_byte_flips_in_members_fail(signed_dir: Path, keydir: Path, tmp_path_factory, data) -> None:
    files = files_of(signed_dir)
    f = data.draw(st.sampled_from(files), label="member")
    d = tmp_path_factory.mktemp("mflip")
    work = d / "b"
    shutil.copytree(signed_dir, work)
    target = work / f.relative_to(signed_dir)
    raw = bytearray(target.read_bytes())
    pos = data.draw(st.integers(0, len(raw) - 1), label="offset")
    raw[pos] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    target.write_bytes(bytes(raw))
    assert not B.verify_bundle(work, keys=[keydir / "contrib.pub"]).verified


def test_renaming_a_member_fails(signed_dir: Path, keydir: Path) -> None:
    src = signed_dir / "artifacts" / "evals" / "samples.jsonl"
    src.rename(src.with_name("samples2.jsonl"))
    res = B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"])
    assert "files" in failed(res)
    detail = res.item("files").detail
    assert "artifacts/evals/samples.jsonl" in detail and "artifacts/evals/samples2.jsonl" in detail


def test_adding_a_member_fails(signed_dir: Path, keydir: Path) -> None:
    (signed_dir / "logs" / "extra.log").write_text("not attested\n")
    res = B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"])
    assert failed(res) == {"files"}
    assert "logs/extra.log" in res.item("files").detail


def test_removing_a_member_fails(signed_dir: Path, keydir: Path) -> None:
    (signed_dir / "results" / "perf" / "points.parquet").unlink()
    res = B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"])
    assert {"files", "tables"} <= failed(res)


def test_symlink_in_directory_fails(signed_dir: Path, keydir: Path) -> None:
    (signed_dir / "logs" / "link").symlink_to("/etc/hostname")
    res = B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"])
    assert "files" in failed(res)
    assert "symbolic link" in res.item("files").detail


def test_wrong_key_fails(signed_dir: Path, keydir: Path) -> None:
    res = B.verify_bundle(signed_dir, keys=[keydir / "mallory.pub"])
    assert failed(res) == {"signature"}
    assert res.signatures[0]["status"] == "untrusted"


def test_no_key_or_unsigned_fails(tmp_path: Path, keydir: Path) -> None:
    d = build(tmp_path / "unsigned")
    assert failed(B.verify_bundle(d, keys=[keydir / "contrib.pub"])) == {"signature"}
    assert "not signed" in B.verify_bundle(d, keys=[keydir / "contrib.pub"]).item("signature").detail
    assert "no trusted key" in B.verify_bundle(d).item("signature").detail


def test_different_pr_head_fails(signed_dir: Path, keydir: Path) -> None:
    res = B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"], pr_head="fedcba9876543210")
    assert failed(res) == {"pr_head"}
    assert HEAD in res.item("pr_head").detail
    res = B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"], pr_head="xyz")
    assert failed(res) == {"pr_head"}


def _edit_manifest(root: Path, edit) -> None:
    m = json.loads((root / MANIFEST).read_bytes())
    edit(m)
    (root / MANIFEST).write_bytes(canonical_json(m))


def test_hand_edited_verdict_without_resigning_fails(tmp_path: Path, contrib, keydir: Path) -> None:
    d = build(tmp_path / "b", results=make_results(perf=Verdict.FAIL), sign=[contrib])
    assert B.verify_bundle(d, keys=[keydir / "contrib.pub"]).verdict == "fail"

    def edit(m):
        m["verdict"] = "pass"
        m["checks"]["perf"]["verdict"] = "pass"

    _edit_manifest(d, edit)
    res = B.verify_bundle(d, keys=[keydir / "contrib.pub"])
    assert not res.verified
    assert "hashes" in failed(res) and "manifest.json" in res.item("hashes").detail
    assert "predicate" in failed(res)


def test_hand_edited_verdict_resigned_by_untrusted_key_fails(tmp_path: Path, contrib, mallory, keydir: Path) -> None:
    d = build(tmp_path / "b", results=make_results(perf=Verdict.FAIL), sign=[contrib])

    def edit(m):
        m["verdict"] = "pass"
        m["checks"]["perf"]["verdict"] = "pass"

    _edit_manifest(d, edit)
    # signing refuses it: the perf rows re-judged fail
    with pytest.raises(B.BundleError, match="perf"):
        B.sign_bundle(d, mallory, replace=True)
    env = add_signature(attest_dir(d), mallory)  # a signature forced onto the forgery by the forger
    (d / ATTESTATION).write_bytes(canonical_json(env.model_dump(mode="json")))
    res = B.verify_bundle(d, keys=[keydir / "contrib.pub"])
    assert "signature" in failed(res)
    # the forger's own key does not make it verify either: re-judging the rows refuses the edited verdicts
    res = B.verify_bundle(d, keys=[keydir / "mallory.pub"])
    assert failed(res) == {"verdicts"}
    assert "'perf' is recorded pass, but its rows re-judged allow at best fail" in res.item("verdicts").detail


def test_verdict_inconsistent_with_checks_fails_even_with_trusted_signature(
    tmp_path: Path, contrib, keydir: Path
) -> None:
    d = build(tmp_path / "b", results=make_results(perf=Verdict.FAIL), sign=[contrib])
    _edit_manifest(d, lambda m: m.update(verdict="pass"))
    # sign_bundle refuses an inconsistent bundle ...
    with pytest.raises(B.BundleError, match="verdict"):
        B.sign_bundle(d, contrib, replace=True)
    # ... and a signature forced onto it does not make it verify
    env = attest_dir(d)
    env = add_signature(env, contrib)
    (d / ATTESTATION).write_bytes(canonical_json(env.model_dump(mode="json")))
    res = B.verify_bundle(d, keys=[keydir / "contrib.pub"])
    assert failed(res) == {"verdicts"}
    assert "perf=fail" in res.item("verdicts").detail


def test_pass_with_not_run_required_check_cannot_verify(tmp_path: Path, contrib, keydir: Path) -> None:
    results = [r for r in make_results() if r.check != "coverage"]
    d = build(tmp_path / "b", results=results, sign=[contrib])
    assert B.verify_bundle(d, keys=[keydir / "contrib.pub"]).verdict == "incomplete"
    _edit_manifest(d, lambda m: m.update(verdict="pass"))
    env = add_signature(attest_dir(d), contrib)
    (d / ATTESTATION).write_bytes(canonical_json(env.model_dump(mode="json")))
    assert failed(B.verify_bundle(d, keys=[keydir / "contrib.pub"])) == {"verdicts"}


def test_row_count_edit_is_caught(tmp_path: Path, contrib, keydir: Path) -> None:
    d = build(tmp_path / "b", sign=[contrib])
    _edit_manifest(d, lambda m: m["checks"]["perf"]["tables"]["points"].update(rows=5))
    env = add_signature(attest_dir(d), contrib)
    (d / ATTESTATION).write_bytes(canonical_json(env.model_dump(mode="json")))
    res = B.verify_bundle(d, keys=[keydir / "contrib.pub"])
    assert failed(res) == {"tables"}


def test_schema_violation_is_caught(tmp_path: Path, contrib, keydir: Path) -> None:
    d = build(tmp_path / "b", sign=[contrib])
    _edit_manifest(d, lambda m: m.update(surprise=1))
    env = add_signature(_raw_attest(d), contrib)
    (d / ATTESTATION).write_bytes(canonical_json(env.model_dump(mode="json")))
    res = B.verify_bundle(d, keys=[keydir / "contrib.pub"])
    assert "schema" in failed(res)
    assert "surprise" in res.item("schema").detail


def _raw_attest(root: Path):
    """An envelope over the files as they are, without reading the manifest (for forged bundles)."""
    from fasttrack.bundle.attest import subjects_of_dir
    from fasttrack.bundle.dsse import PAYLOAD_TYPE, Envelope, statement_of

    old = read_envelope((root / ATTESTATION).read_bytes()).statement()
    st = statement_of(subjects_of_dir(root), old["predicate"])
    return Envelope(payload=base64.b64encode(canonical_json(st, pretty=False)).decode(), payloadType=PAYLOAD_TYPE)


def test_invalid_signature_with_trusted_keyid_fails(signed_dir: Path, keydir: Path, contrib) -> None:
    env = read_envelope((signed_dir / ATTESTATION).read_bytes())
    bad = env.signatures[0].model_copy(update={"sig": base64.b64encode(b"\0" * 64).decode()})
    env = env.model_copy(update={"signatures": [bad]})
    (signed_dir / ATTESTATION).write_bytes(canonical_json(env.model_dump(mode="json")))
    res = B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"])
    assert failed(res) == {"signature"}
    assert res.signatures[0]["status"] == "invalid"


def test_several_signatures(signed_dir: Path, keydir: Path) -> None:
    ci = B.load_private_key(keydir / "ci")
    env = B.sign_bundle(signed_dir, ci)
    assert len(env.signatures) == 2
    res = B.verify_bundle(signed_dir, trust_dir=keydir, min_signatures=2)
    assert res.verified and len(res.signers) == 2
    only_ci = B.verify_bundle(signed_dir, keys=[keydir / "ci.pub"], min_signatures=2)
    assert failed(only_ci) == {"signature"}
    # signing again with the same key replaces, not duplicates
    assert len(B.sign_bundle(signed_dir, ci).signatures) == 2


def test_signing_a_changed_bundle_needs_replace(signed_dir: Path, keydir: Path) -> None:
    ci = B.load_private_key(keydir / "ci")
    (signed_dir / "logs" / "late.log").write_text("added after signing\n")
    with pytest.raises(B.BundleError, match="changed since its 1 signature"):
        B.sign_bundle(signed_dir, ci)
    env = B.sign_bundle(signed_dir, ci, replace=True)
    assert [s.keyid for s in env.signatures] == [ci.keyid]
    assert B.verify_bundle(signed_dir, keys=[keydir / "ci.pub"]).verified


def test_sign_and_verify_tarball_in_place(tmp_path: Path, keydir: Path, contrib) -> None:
    d = build(tmp_path / "b")
    tgz = B.pack_bundle(d, tmp_path / "b.tar.gz")
    B.sign_bundle(tgz, contrib)
    assert B.verify_bundle(tgz, keys=[keydir / "contrib.pub"]).verified
    # signing the directory the same way gives the very same tarball
    B.sign_bundle(d, contrib)
    assert B.pack_bundle(d, tmp_path / "c.tar.gz").read_bytes() == tgz.read_bytes()


def test_missing_bundle_is_a_user_error(tmp_path: Path, keydir: Path) -> None:
    with pytest.raises(B.BundleError, match="does not exist"):
        B.verify_bundle(tmp_path / "nope", keys=[keydir / "contrib.pub"])


def test_not_a_tarball_is_reported(tmp_path: Path, keydir: Path) -> None:
    p = tmp_path / "junk.tar.gz"
    p.write_bytes(b"this is not gzip at all" * 40)
    res = B.verify_bundle(p, keys=[keydir / "contrib.pub"])
    assert failed(res) >= {"archive"} and not res.verified


def test_unreadable_attestation_needs_replace_to_resign(signed_dir: Path, keydir: Path, contrib) -> None:
    (signed_dir / ATTESTATION).write_text("{not json")
    assert failed(B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"])) >= {"attestation"}
    with pytest.raises(B.BundleError, match="unreadable"):
        B.sign_bundle(signed_dir, contrib)
    B.sign_bundle(signed_dir, contrib, replace=True)
    assert B.verify_bundle(signed_dir, keys=[keydir / "contrib.pub"]).verified
