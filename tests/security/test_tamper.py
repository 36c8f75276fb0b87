"""Tampering: every member, the verdicts, the signatures and the PR head of a trusted-signed
bundle. Each variant must fail verification, naming what is wrong, in a directory and a tarball."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from security_testlib import HEAD, Keys, force_sign, packed, resign, rewrite_manifest, variant

from fasttrack.bundle.dsse import Signature, envelope_bytes, read_envelope
from fasttrack.bundle.layout import ATTESTATION, MANIFEST
from fasttrack.bundle.verify import verify_bundle


def failed(res) -> set[str]:  # noqa: ANN001 - a VerifyResult
    return {it.name for it in res.failures}


def files_of(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_the_base_bundle_verifies(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    assert verify_bundle(base_bundle, keys=[keys.trusted_pub], pr_head=HEAD).verified
    assert verify_bundle(packed(base_bundle, tmp_path / "b.tar.gz"), trust_dir=keys.trust_dir).verified


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
def test_every_member_changed_fails_in_dir_and_tarball(base_bundle: Path, keys: Keys, tmp_path: Path, how: str) -> None:
    members = files_of(base_bundle)
    assert len(members) > 10
    for i, name in enumerate(members):
        work = variant(base_bundle, tmp_path / f"{how}-{i}")
        f = work / name
        if how == "flip":
            data = bytearray(f.read_bytes())
            data[len(data) // 2] ^= 0x20
            f.write_bytes(bytes(data))
        elif how == "truncate":
            f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])
        else:
            f.unlink()
        for target in (work, packed(work, tmp_path / f"{how}-{i}.tar.gz")):
            res = verify_bundle(target, keys=[keys.trusted_pub])
            assert not res.verified, (how, name)
            if name != ATTESTATION:
                assert failed(res) & {"hashes", "files"}, (how, name, failed(res))
                detail = res.item("hashes").detail + res.item("files").detail
                assert name in detail, (how, name, detail)


def test_an_added_member_fails(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    for name in ("artifacts/extra.txt", "logs/smuggled.log", "results/perf/extra.parquet", "x"):
        work = variant(base_bundle, tmp_path / name.replace("/", "_"))
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text("smuggled\n")
        res = verify_bundle(packed(work, tmp_path / (name.replace("/", "_") + ".tgz")), keys=[keys.trusted_pub])
        assert "files" in failed(res) and name in res.item("files").detail


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(verdict="pass" if d["verdict"] != "pass" else "fail"),
        lambda d: d["checks"][next(iter(d["checks"]))].update(verdict="fail", reason=""),
        lambda d: d["checks"]["perf"].update(required=False, verdict="fail"),
        lambda d: d["pr"].update(head_sha="d" * 40),
        lambda d: d["scope"].update(tier="full"),
        lambda d: d.update(rehearsal=True, rehearsal_reason="x"),
    ],
    ids=["verdict", "check-verdict", "required-flag", "pr-head", "tier", "rehearsal"],
)
def test_manifest_edits_fail_signed_or_not(base_bundle: Path, keys: Keys, tmp_path: Path, edit) -> None:  # noqa: ANN001
    work = variant(base_bundle, tmp_path / "w")
    rewrite_manifest(work, edit)
    res = verify_bundle(work, keys=[keys.trusted_pub])
    assert "hashes" in failed(res)
    # re-attested by a stranger: the hashes match again, the signature does not
    force_sign(work, keys.other)
    res = verify_bundle(work, keys=[keys.trusted_pub])
    assert "signature" in failed(res) and not res.verified


def test_verdict_that_does_not_follow_fails_even_when_trusted_signed(
    base_bundle: Path, keys: Keys, tmp_path: Path
) -> None:
    work = variant(base_bundle, tmp_path / "w")

    def flip(d: dict) -> None:
        d["verdict"] = "pass" if d["verdict"] != "pass" else "fail"

    rewrite_manifest(work, flip)
    force_sign(work, keys.trusted)  # the trusted key signed a manifest whose verdict does not follow
    res = verify_bundle(work, keys=[keys.trusted_pub])
    assert failed(res) == {"verdicts"}, res.failures


def _copies_under_other_ids(work: Path, ids: list[str]) -> None:
    p = work / ATTESTATION
    env = read_envelope(p.read_bytes())
    [real] = env.signatures
    env = env.model_copy(update={"signatures": [real] + [Signature(keyid=k, sig=real.sig) for k in ids]})
    p.write_bytes(envelope_bytes(env))


def test_min_signatures_counts_distinct_keys_not_copies(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    work = variant(base_bundle, tmp_path / "w")
    _copies_under_other_ids(work, ["", "f" * 64, "0" * 64])
    res = verify_bundle(work, keys=[keys.trusted_pub], min_signatures=3)
    assert not res.verified and failed(res) == {"signature"}
    assert "1 distinct trusted key(s) signed, 3 required" in res.item("signature").detail
    assert res.signers == [keys.trusted.keyid]
    res = verify_bundle(work, trust_dir=keys.trust_dir, min_signatures=2)
    assert failed(res) == {"signature"}
    # a copy under the trusted key's own id verifies too, and still counts once
    res = verify_bundle(work, keys=[keys.trusted_pub], min_signatures=1)
    assert res.verified and res.signers == [keys.trusted.keyid]
    # two real signers are two
    two = variant(base_bundle, tmp_path / "two")
    from fasttrack.bundle.attest import sign_bundle

    sign_bundle(two, keys.second)
    res = verify_bundle(two, trust_dir=keys.trust_dir, min_signatures=2)
    assert res.verified and sorted(res.signers) == sorted([keys.trusted.keyid, keys.second.keyid])


def test_signature_tampering(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    p_rel = ATTESTATION
    # a flipped signature byte under the trusted key's id
    work = variant(base_bundle, tmp_path / "flip")
    env = read_envelope((work / p_rel).read_bytes())
    raw = bytearray(base64.b64decode(env.signatures[0].sig))
    raw[0] ^= 1
    bad = env.signatures[0].model_copy(update={"sig": base64.b64encode(bytes(raw)).decode()})
    (work / p_rel).write_bytes(envelope_bytes(env.model_copy(update={"signatures": [bad]})))
    res = verify_bundle(work, keys=[keys.trusted_pub])
    assert failed(res) == {"signature"} and "does not verify" in res.item("signature").detail
    # the signature stripped
    work = variant(base_bundle, tmp_path / "strip")
    (work / p_rel).write_bytes(envelope_bytes(env.model_copy(update={"signatures": []})))
    assert "not signed" in verify_bundle(work, keys=[keys.trusted_pub]).item("signature").detail
    # not base64, and a signature from another payload
    work = variant(base_bundle, tmp_path / "junk")
    junk = env.signatures[0].model_copy(update={"sig": "!!!not base64!!!"})
    (work / p_rel).write_bytes(envelope_bytes(env.model_copy(update={"signatures": [junk]})))
    assert failed(verify_bundle(work, keys=[keys.trusted_pub])) == {"signature"}
    # the payload swapped for another bundle's (signatures made over that one)
    other = variant(base_bundle, tmp_path / "other")
    rewrite_manifest(other, lambda d: d.update(created="2026-02-01T00:00:00+00:00"))
    resign(other, keys.trusted)
    work = variant(base_bundle, tmp_path / "swap")
    shutil.copy(other / p_rel, work / p_rel)
    assert not verify_bundle(work, keys=[keys.trusted_pub]).verified
    # the envelope as garbage, empty, and nested JSON
    for i, data in enumerate([b"", b"\x00\xff" * 100, b"[" * 100_000, json.dumps({"payload": 1}).encode()]):
        work = variant(base_bundle, tmp_path / f"env{i}")
        (work / p_rel).write_bytes(data)
        res = verify_bundle(work, keys=[keys.trusted_pub])
        assert "attestation" in failed(res)


def test_pr_head(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    ok = verify_bundle(base_bundle, keys=[keys.trusted_pub], pr_head=HEAD)
    assert ok.item("pr_head").ok is True
    assert verify_bundle(base_bundle, keys=[keys.trusted_pub], pr_head=HEAD[:12]).item("pr_head").ok is True
    for other in ("d" * 40, HEAD[:-1] + "0", HEAD + "0" * 24, "zz" * 20, "", HEAD[:6]):
        assert verify_bundle(base_bundle, keys=[keys.trusted_pub], pr_head=other).item("pr_head").ok is False, other


def test_an_abbreviated_recorded_head_matches_nothing(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    work = variant(base_bundle, tmp_path / "short")
    rewrite_manifest(work, lambda d: d["pr"].update(head_sha=HEAD[:7]))
    force_sign(work, keys.trusted)
    res = verify_bundle(work, keys=[keys.trusted_pub], pr_head=HEAD)
    item = res.item("pr_head")
    assert item.ok is False and "abbreviated" in item.detail, item.detail
    assert not verify_bundle(work, keys=[keys.trusted_pub], pr_head=HEAD[:7]).item("pr_head").ok
    # the predicate signed with it still matches: only the head comparison fails
    assert failed(res) == {"pr_head"}


def test_manifest_swapped_with_another_signed_bundles(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    other = variant(base_bundle, tmp_path / "other")
    rewrite_manifest(other, lambda d: d["pr"].update(head_sha="e" * 40))
    resign(other, keys.trusted)
    work = variant(base_bundle, tmp_path / "w")
    shutil.copy(other / MANIFEST, work / MANIFEST)
    res = verify_bundle(work, keys=[keys.trusted_pub], pr_head=HEAD)
    assert "hashes" in failed(res) and not res.verified
