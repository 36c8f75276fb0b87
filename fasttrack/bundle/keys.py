"""Ed25519 keys for signing bundles: generate, load (PEM or OpenSSH), identify.

A key's id is the hex sha256 of its raw 32-byte public key, so the same key has the same
id whether it is stored as PEM or in OpenSSH format. An existing ``~/.ssh/id_ed25519``
signs, and the ``ssh-ed25519 ...`` lines a code host lists for a user verify.
Encrypted private keys take their passphrase from ``$FASTTRACK_KEY_PASSPHRASE``.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re
import socket
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from fasttrack.bundle import outfile
from fasttrack.bundle.errors import KeyFileError
from fasttrack.limits import KEY_FILE_MAX_BYTES, read_capped

PASSPHRASE_ENV = "FASTTRACK_KEY_PASSPHRASE"
#: Public key files in a trust directory.
PUBLIC_SUFFIX = ".pub"


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key and its id."""

    private: Ed25519PrivateKey
    keyid: str
    source: str

    @property
    def public(self) -> "PublicKey":
        return PublicKey(key=self.private.public_key(), keyid=self.keyid, comment="", source=self.source)

    def sign(self, data: bytes) -> bytes:
        return self.private.sign(data)


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key, its id, and where it came from."""

    key: Ed25519PublicKey
    keyid: str
    comment: str
    source: str

    def verify(self, signature: bytes, data: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            self.key.verify(signature, data)
        except InvalidSignature:
            return False
        return True


def raw_public_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def keyid_of(key: Ed25519PublicKey) -> str:
    """Hex sha256 of the raw public key."""
    return hashlib.sha256(raw_public_bytes(key)).hexdigest()


def openssh_public_line(key: Ed25519PublicKey, comment: str = "") -> str:
    """``ssh-ed25519 AAAA... comment``."""
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return f"{line} {comment}".rstrip()


def _type_name(key: object) -> str:
    return type(key).__name__.removeprefix("_").replace("PrivateKey", "").replace("PublicKey", "") or "unknown"


def generate_keypair(
    out_dir: str | os.PathLike[str], *, name: str = "fasttrack", comment: str | None = None
) -> tuple[Path, Path]:
    """Write ``DIR/NAME`` (PEM PKCS8 private key, mode 0600) and ``DIR/NAME.pub`` (OpenSSH).

    Refuses to overwrite existing files. Returns both paths.
    """
    if not name or "/" in name or name.startswith("."):
        raise KeyFileError(f"key name {name!r} must be a plain file name")
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    priv_path, pub_path = d / name, d / f"{name}{PUBLIC_SUFFIX}"
    for p in (priv_path, pub_path):
        if p.exists():
            raise KeyFileError(f"{p} already exists; choose another --name or directory (keys are never overwritten)")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.chmod(priv_path, 0o600)
    if comment is None:
        try:
            comment = f"{getpass.getuser()}@{socket.gethostname()}"
        except Exception:  # pragma: no cover - no user database
            comment = name
    outfile.write_text(pub_path, openssh_public_line(key.public_key(), comment) + "\n")
    os.chmod(pub_path, 0o644)
    return priv_path, pub_path


def _read(path: Path, what: str) -> bytes:
    """The bytes of a key file, read with a size limit (``/dev/zero`` or a FIFO is refused, not read)."""
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise KeyFileError(f"{what} {path} is a directory, not a key file")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
            raise KeyFileError(f"{what} {path} is not a regular file")
        data = read_capped(path, KEY_FILE_MAX_BYTES)
    except FileNotFoundError:
        raise KeyFileError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise KeyFileError(f"{what} {path} is a directory, not a key file") from None
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {path}: {exc.strerror}") from None
    if data is None:
        raise KeyFileError(
            f"{what} {path} is larger than {KEY_FILE_MAX_BYTES} bytes, so it is not a key file "
            "(key files are a few hundred bytes; a list of keys a few KiB)"
        )
    if b"\0" in data or not _is_text(data):
        raise KeyFileError(
            f"{what} {path} holds binary data, not a key in PEM or OpenSSH format "
            "(fasttrack reads `-----BEGIN ...` PEM files and `ssh-ed25519 AAAA...` lines)"
        )
    return data


def _is_text(data: bytes) -> bool:
    """UTF-8 text without control characters other than line breaks and tabs (key files are)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(ch.isprintable() or ch in "\r\n\t" for ch in text)


_KIND_RE = re.compile(rb"^[A-Za-z0-9@._+-]{1,64}$")


def _kind(token: bytes) -> str:
    """A key type named in a file, fit to print (anything else is shown as unrecognised)."""
    return token.decode() if _KIND_RE.match(token) else "unrecognised"


def _private_from_bytes(data: bytes, source: str, password: bytes | None) -> Ed25519PrivateKey:
    text = data.lstrip()
    key: object  # any key type the loaders know; only Ed25519 is accepted below
    try:
        if text.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----"):
            key = serialization.load_ssh_private_key(data, password=password)
        elif text.startswith(b"-----BEGIN"):
            key = serialization.load_pem_private_key(data, password=password)
        else:
            raise KeyFileError(
                f"{source} is not a private key in PEM or OpenSSH format"
                + (" (it looks like a public key; signing needs the private key)" if text.startswith(b"ssh-") else "")
            )
    except TypeError as exc:
        if password is None and ("encrypted" in str(exc).lower() or "password" in str(exc).lower()):
            raise KeyFileError(f"{source} is encrypted; put its passphrase in ${PASSPHRASE_ENV}") from None
        raise KeyFileError(f"cannot load private key {source}: {exc}") from None
    except UnsupportedAlgorithm as exc:
        if "bcrypt" in str(exc):
            raise KeyFileError(
                f"{source} is an encrypted OpenSSH key, and decrypting those needs the 'bcrypt' package "
                "(pip install bcrypt); or use an unencrypted key or a PEM (PKCS8) key"
            ) from None
        raise KeyFileError(f"cannot load private key {source}: {exc}") from None
    except ValueError as exc:
        hint = " (wrong passphrase?)" if password is not None else ""
        raise KeyFileError(f"cannot load private key {source}{hint}: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(
            f"{source} is a {_type_name(key)} key; fasttrack signs with Ed25519 only "
            "(create one with `fasttrack keys generate` or `ssh-keygen -t ed25519`)"
        )
    return key


def load_private_key(path: str | os.PathLike[str], *, password: bytes | str | None = None) -> SigningKey:
    """Load an Ed25519 private key from a PEM (PKCS8) or OpenSSH file."""
    p = Path(path).expanduser()
    data = _read(p, "private key")
    if password is None and os.environ.get(PASSPHRASE_ENV):
        password = os.environ[PASSPHRASE_ENV]
    pw = password.encode() if isinstance(password, str) else password
    key = _private_from_bytes(data, str(p), pw)
    return SigningKey(private=key, keyid=keyid_of(key.public_key()), source=str(p))


def _public_key(load: Callable[[bytes], object], data: bytes, source: str, unreadable: str) -> Ed25519PublicKey:
    """The Ed25519 public key ``load`` reads from ``data`` (``unreadable``: what is said when it cannot)."""
    try:
        key = load(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(f"{unreadable}: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{source} is a {_type_name(key)} key; fasttrack verifies Ed25519 signatures only")
    return key


def _public_from_line(line: bytes, source: str) -> Ed25519PublicKey:
    return _public_key(serialization.load_ssh_public_key, line, source, f"{source}: not a valid OpenSSH public key")


def load_public_keys(path: str | os.PathLike[str], *, allow_private: bool = False) -> list[PublicKey]:
    """Ed25519 public keys from one file.

    Accepts a PEM public key or OpenSSH lines (``ssh-ed25519 AAAA... comment``; a file of
    several lines, as code hosts list them, yields every ed25519 line and skips other
    types). A private key file is refused (a verifier needs only the public key, and a
    private key has no business on the machines that verify) unless ``allow_private``
    (``keys show``), which yields its public half.
    """
    p = Path(path).expanduser()
    data = _read(p, "public key")
    text = data.lstrip()
    if text.startswith(b"-----BEGIN PUBLIC KEY-----"):
        key = _public_key(serialization.load_pem_public_key, data, str(p), f"cannot load public key {p}")
        return [PublicKey(key=key, keyid=keyid_of(key), comment="", source=str(p))]
    if text.startswith(b"-----BEGIN"):
        if not allow_private:
            raise KeyFileError(
                f"{p} is a private key, not a public key: a verifier needs only the public half "
                f"({p.name}.pub, or what `fasttrack keys show {p}` prints); keep private keys off the machines "
                "that verify"
            )
        sk = load_private_key(p)
        return [sk.public]
    lines = [ln.strip() for ln in data.splitlines() if ln.strip() and not ln.strip().startswith(b"#")]
    if not lines:
        raise KeyFileError(f"{p} holds no public key")
    keys, other = [], []
    for i, ln in enumerate(lines):
        kind = _kind(ln.split()[0])
        if kind != "ssh-ed25519" and len(lines) > 1:
            other.append(kind)
            continue
        if kind != "ssh-ed25519":
            raise KeyFileError(f"{p} is a {kind} key; fasttrack verifies Ed25519 signatures only")
        key = _public_from_line(ln, f"{p} line {i + 1}")
        parts = ln.split(None, 2)
        comment = parts[2].decode(errors="replace") if len(parts) > 2 else ""
        keys.append(PublicKey(key=key, keyid=keyid_of(key), comment=comment, source=str(p)))
    if not keys:
        raise KeyFileError(f"{p} lists only {', '.join(sorted(set(other)))} keys; fasttrack needs an ssh-ed25519 key")
    return keys


def load_trust_dir(path: str | os.PathLike[str]) -> list[PublicKey]:
    """Every public key in the ``*.pub`` files of a directory (the trusted signers)."""
    d = Path(path).expanduser()
    if not d.is_dir():
        raise KeyFileError(f"trust directory {d} does not exist or is not a directory")
    keys: list[PublicKey] = []
    for f in sorted(d.glob(f"*{PUBLIC_SUFFIX}")):
        keys.extend(load_public_keys(f))
    if not keys:
        raise KeyFileError(f"trust directory {d} holds no *{PUBLIC_SUFFIX} key files")
    return keys


def resolve_keys(
    keys: Iterable[str | os.PathLike[str] | PublicKey] = (), trust_dir: str | os.PathLike[str] | None = None
) -> list[PublicKey]:
    """Public keys from key files, already-loaded keys and/or a trust directory."""
    out: list[PublicKey] = []
    for k in keys:
        out.extend([k] if isinstance(k, PublicKey) else load_public_keys(k))
    if trust_dir is not None:
        out.extend(load_trust_dir(trust_dir))
    return out
