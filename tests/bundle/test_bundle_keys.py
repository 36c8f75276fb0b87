"""Ed25519 keys: generated, PEM and OpenSSH forms, encrypted keys, wrong types."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from bundle_testlib import build
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fasttrack import bundle as B
from fasttrack.bundle.keys import PASSPHRASE_ENV, keyid_of


def test_generate_writes_private_pem_0600_and_openssh_pub(tmp_path: Path) -> None:
    priv, pub = B.generate_keypair(tmp_path / "k", name="me", comment="me@host")
    assert priv.name == "me" and pub.name == "me.pub"
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert priv.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    line = pub.read_text().strip()
    assert line.startswith("ssh-ed25519 AAAA") and line.endswith(" me@host")
    sk = B.load_private_key(priv)
    [pk] = B.load_public_keys(pub)
    assert sk.keyid == pk.keyid == keyid_of(sk.private.public_key())
    assert len(sk.keyid) == 64
    with pytest.raises(B.KeyFileError, match="already exists"):
        B.generate_keypair(tmp_path / "k", name="me")


def _write_openssh(path: Path, key) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    (path.parent / (path.name + ".pub")).write_bytes(
        key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        + b" dev@laptop\n"
    )


def test_openssh_key_signs_and_its_pub_line_verifies(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    _write_openssh(tmp_path / "id_ed25519", key)
    sk = B.load_private_key(tmp_path / "id_ed25519")
    d = build(tmp_path / "b", sign=[sk])
    assert B.verify_bundle(d, keys=[tmp_path / "id_ed25519.pub"]).verified
    # the same key in PEM form has the same id
    pem = tmp_path / "k.pem"
    pem.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    assert B.load_public_keys(pem)[0].keyid == sk.keyid
    assert B.verify_bundle(d, keys=[pem]).verified


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")
def test_key_made_by_ssh_keygen_works(tmp_path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dev@host", "-f", str(tmp_path / "id_ed25519")],
        check=True,
    )
    sk = B.load_private_key(tmp_path / "id_ed25519")
    d = build(tmp_path / "b", sign=[sk])
    assert B.verify_bundle(d, keys=[tmp_path / "id_ed25519.pub"]).verified


def test_encrypted_key_needs_passphrase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = Ed25519PrivateKey.generate()
    p = tmp_path / "enc.pem"
    p.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret"),
        )
    )
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with pytest.raises(B.KeyFileError, match=PASSPHRASE_ENV):
        B.load_private_key(p)
    monkeypatch.setenv(PASSPHRASE_ENV, "wrong")
    with pytest.raises(B.KeyFileError, match="passphrase"):
        B.load_private_key(p)
    monkeypatch.setenv(PASSPHRASE_ENV, "s3cret")
    assert B.load_private_key(p).keyid == keyid_of(key.public_key())


def test_wrong_key_types_are_refused_clearly(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    p = tmp_path / "id_rsa"
    p.write_bytes(
        rsa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
    )
    with pytest.raises(B.KeyFileError, match="RSA key; fasttrack signs with Ed25519 only"):
        B.load_private_key(p)
    ecp = tmp_path / "ec.pem"
    ecp.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(B.KeyFileError, match="Ed25519 only"):
        B.load_private_key(ecp)
    pub = tmp_path / "id_rsa.pub"
    pub.write_bytes(
        rsa_key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    with pytest.raises(B.KeyFileError, match="ssh-rsa key"):
        B.load_public_keys(pub)
    with pytest.raises(B.KeyFileError, match="looks like a public key"):
        B.load_private_key(pub)
    with pytest.raises(B.KeyFileError, match="does not exist"):
        B.load_private_key(tmp_path / "missing")
    junk = tmp_path / "junk.pub"
    junk.write_text("ssh-ed25519 notbase64!!\n")
    with pytest.raises(B.KeyFileError):
        B.load_public_keys(junk)


def test_code_host_key_list_yields_the_ed25519_lines(tmp_path: Path) -> None:
    rsa_line = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    keys = [Ed25519PrivateKey.generate() for _ in range(2)]
    lines = [rsa_line] + [
        k.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
        for k in keys
    ]
    f = tmp_path / "user.keys"
    f.write_text("\n".join(lines) + "\n")
    got = B.load_public_keys(f)
    assert [k.keyid for k in got] == [keyid_of(k.public_key()) for k in keys]


def test_trust_dir(tmp_path: Path) -> None:
    with pytest.raises(B.KeyFileError, match="does not exist"):
        B.load_trust_dir(tmp_path / "none")
    (tmp_path / "t").mkdir()
    with pytest.raises(B.KeyFileError, match="no \\*.pub"):
        B.load_trust_dir(tmp_path / "t")
    B.generate_keypair(tmp_path / "t", name="a")
    B.generate_keypair(tmp_path / "t", name="b")
    assert len(B.load_trust_dir(tmp_path / "t")) == 2


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")
def test_encrypted_openssh_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "pw", "-f", str(p)], check=True)
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with pytest.raises(B.KeyFileError, match=PASSPHRASE_ENV):
        B.load_private_key(p)
    monkeypatch.setenv(PASSPHRASE_ENV, "pw")
    try:
        import bcrypt  # noqa: F401
    except ImportError:
        with pytest.raises(B.KeyFileError, match="bcrypt"):
            B.load_private_key(p)
    else:
        assert B.load_private_key(p).keyid == B.load_public_keys(p.with_name("id_ed25519.pub"))[0].keyid
