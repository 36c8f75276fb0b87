"""The trust set: NAME.pub files plus an allowed_signers mapping; verify names who signed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bundle_testlib import build
from test_bundle_cli import ft

from fasttrack import bundle as B
from fasttrack.bundle.errors import KeyFileError
from fasttrack.bundle.trust import load_trust_set, parse_allowed_signers


def pub_fields(path: Path) -> tuple[str, str]:
    kind, key = path.read_text().split()[:2]
    return kind, key


@pytest.fixture()
def trust(tmp_path: Path, keydir: Path) -> Path:
    d = tmp_path / "trusted-keys"
    d.mkdir()
    shutil.copy(keydir / "contrib.pub", d / "alice.pub")
    shutil.copy(keydir / "ci.pub", d / "ci-gb300.pub")
    return d


def test_identity_is_the_file_name_or_the_allowed_signers_principals(trust: Path, keydir: Path) -> None:
    contrib = B.load_public_keys(keydir / "contrib.pub")[0]
    ci = B.load_public_keys(keydir / "ci.pub")[0]
    ts = load_trust_set(trust)
    assert ts.identity(contrib.keyid) == "alice" and ts.identity(ci.keyid) == "ci-gb300"
    kind, key = pub_fields(keydir / "contrib.pub")
    (trust / "allowed_signers").write_text(
        "# maintainers' mapping\n\n"
        f'"alice@example.org,Alice Liddell" namespaces="git,file" {kind} {key} laptop key\n'
        f"alice@work.example {kind} {key}\n"
    )
    ts = load_trust_set(trust)
    assert ts.identity(contrib.keyid) == "alice@example.org, Alice Liddell, alice@work.example"
    assert ts.identity(ci.keyid) == "ci-gb300"
    assert {k.keyid for k in ts.keys} == {contrib.keyid, ci.keyid}


def test_allowed_signers_never_adds_trust(trust: Path, keydir: Path) -> None:
    kind, key = pub_fields(keydir / "mallory.pub")
    (trust / "allowed_signers").write_text(f"mallory@example.org {kind} {key}\n")
    with pytest.raises(KeyFileError, match="which no \\*.pub file .* holds"):
        load_trust_set(trust)


@pytest.mark.parametrize(
    "line, message",
    [
        ("alice cert-authority {kind} {key}", "option 'cert-authority' is not supported"),
        ('alice valid-before="20300101" {kind} {key}', "option 'valid-before' is not supported"),
        ("alice frobnicate {kind} {key}", "unknown option 'frobnicate'"),
        ("alice* {kind} {key}", "is a pattern"),
        ("alice ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ", "ssh-rsa key; fasttrack verifies Ed25519"),
        ("alice", "expected 'PRINCIPALS"),
        ('"alice {kind} {key}', "unbalanced double quote"),
    ],
)
def test_allowed_signers_errors_name_the_line(tmp_path: Path, keydir: Path, line: str, message: str) -> None:
    kind, key = pub_fields(keydir / "contrib.pub")
    f = tmp_path / "allowed_signers"
    f.write_text("# header\n" + line.format(kind=kind, key=key) + "\n")
    with pytest.raises(KeyFileError, match=message) as e:
        parse_allowed_signers(f)
    assert "line 2" in e.value.message


def test_verify_reports_the_signers_identity(tmp_path: Path, trust: Path, keydir: Path, contrib: B.SigningKey) -> None:
    b = build(tmp_path / "b", sign=[contrib, B.load_private_key(keydir / "mallory")])
    kind, key = pub_fields(keydir / "contrib.pub")
    (trust / "allowed_signers").write_text(f"alice@example.org {kind} {key}\n")
    res = B.verify_bundle(b, trust_dir=trust)
    assert res.verified and res.identities == ["alice@example.org"]
    by_status = {s["status"]: s for s in res.signatures}
    assert by_status["valid"]["identity"] == "alice@example.org" and by_status["untrusted"]["identity"] is None
    assert "by alice@example.org" in res.item("signature").detail
    # a key given on its own is named by its comment
    assert B.verify_bundle(b, keys=[keydir / "contrib.pub"]).identities == ["contrib@test"]

    r = ft("verify", b, "--trust", trust)
    assert r.returncode == 0, r.stderr
    assert f"signed by: alice@example.org (key {contrib.keyid[:16]})" in r.stdout
    r = ft("verify", b, "--trust", trust, "--json")
    out = json.loads(r.stdout)
    assert out["identities"] == ["alice@example.org"]
    assert [s["identity"] for s in out["signatures"] if s["status"] == "valid"] == ["alice@example.org"]


def test_a_signature_with_a_wrong_keyid_is_named_by_the_key_that_verified_it(
    tmp_path: Path, trust: Path, contrib: B.SigningKey
) -> None:
    from fasttrack.bundle.attest import read_envelope
    from fasttrack.bundle.layout import ATTESTATION

    b = build(tmp_path / "b", sign=[contrib])
    env = read_envelope((b / ATTESTATION).read_bytes())
    env.signatures[0].keyid = ""
    (b / ATTESTATION).write_text(env.model_dump_json())
    res = B.verify_bundle(b, trust_dir=trust)
    assert res.verified and res.identities == ["alice"]
