"""The trust set: which public keys may sign bundles, and who each key belongs to.

A repository that accepts bundles keeps its trust set in one directory, by convention
``.fasttrack/trusted-keys/``::

    .fasttrack/trusted-keys/
      alice.pub          one file per contributor or CI signer: OpenSSH ``ssh-ed25519 ...``
      ci-gb300.pub       line(s) or a PEM public key (see :func:`keys.load_public_keys`)
      allowed_signers    optional: key -> identity, in OpenSSH's allowed-signers format

``allowed_signers`` lines read ``PRINCIPALS [OPTIONS] ssh-ed25519 BASE64 [COMMENT]``, as
``ssh-keygen -Y verify`` reads them (``alice@example.org,alice ssh-ed25519 AAAA...``).
The ``*.pub`` files are the trust set; ``allowed_signers`` only names their keys, so a
line whose key is in no ``*.pub`` file is an error (adding a line never adds trust).
The ``namespaces=`` option is accepted (fasttrack's DSSE signatures are not SSH
signatures, so it has no effect); ``cert-authority``, ``valid-after`` and
``valid-before`` are refused rather than silently ignored.

A key's identity is its principals from ``allowed_signers``; otherwise the ``NAME`` of
its ``NAME.pub`` file. A key given on its own (``verify --key FILE``) is named by its
comment, or by its file name when it has none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrack.bundle.dsse import Envelope
from fasttrack.bundle.errors import KeyFileError
from fasttrack.bundle.keys import (
    PUBLIC_SUFFIX,
    PublicKey,
    _public_from_line,
    keyid_of,
    load_public_keys,
    load_trust_dir,
)
from fasttrack.limits import KEY_FILE_MAX_BYTES, read_capped

#: The key -> identity mapping inside a trust directory.
ALLOWED_SIGNERS = "allowed_signers"
#: The conventional place of the trust set in a repository.
DEFAULT_TRUST_DIR = ".fasttrack/trusted-keys"

_ACCEPTED_OPTIONS = {"namespaces"}
_REFUSED_OPTIONS = {"cert-authority", "valid-after", "valid-before"}


@dataclass(frozen=True)
class SignerEntry:
    """One line of an ``allowed_signers`` file."""

    principals: tuple[str, ...]
    key: PublicKey
    line: int


@dataclass(frozen=True)
class TrustSet:
    """The trusted keys of a directory and the identity of each (by key id)."""

    directory: Path
    keys: list[PublicKey]
    identities: dict[str, str]

    def identity(self, keyid: str) -> str | None:
        return self.identities.get(keyid)


def _split_quoted(text: str, is_separator: Callable[[str], bool]) -> list[str]:
    """``text`` split at the separators outside double quotes (quotes group, and are kept inside a part);
    empty parts dropped."""
    parts: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if is_separator(ch) and not quoted:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if quoted:
        raise ValueError("unbalanced double quote")
    parts.append("".join(cur))
    return [part for part in parts if part]


def _split_fields(line: str) -> list[str]:
    """Whitespace-separated fields; double quotes group (and are kept inside a field)."""
    return _split_quoted(line, str.isspace)


def _split_options(text: str) -> list[str]:
    """``a,b="x,y",c`` -> ``['a', 'b="x,y"', 'c']``."""
    return _split_quoted(text, lambda ch: ch == ",")


def parse_allowed_signers(path: str | os.PathLike[str]) -> list[SignerEntry]:
    """The lines of an allowed-signers file (comments and blank lines skipped)."""
    p = Path(path)
    try:
        data = read_capped(p, KEY_FILE_MAX_BYTES)
        if data is None:
            raise KeyFileError(f"{p} is larger than {KEY_FILE_MAX_BYTES} bytes (the limit for key files)")
        text = data.decode("utf-8")
    except OSError as exc:
        raise KeyFileError(f"cannot read {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise KeyFileError(f"{p} is not UTF-8 text; an allowed_signers file lists keys as text lines") from None
    entries: list[SignerEntry] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{p} line {n}"
        try:
            fields = _split_fields(line)
        except ValueError as exc:
            raise KeyFileError(f"{where}: {exc}") from None
        if len(fields) < 3:
            raise KeyFileError(f"{where}: expected 'PRINCIPALS [OPTIONS] ssh-ed25519 KEY [COMMENT]'")
        principals = tuple(x.strip().strip('"').strip() for x in fields[0].split(",") if x.strip().strip('"'))
        rest = fields[1:]
        if not rest[0].startswith(("ssh-", "ecdsa-", "sk-")):
            for opt in _split_options(rest[0]):
                name = opt.split("=", 1)[0].strip().lower()
                if name in _REFUSED_OPTIONS:
                    raise KeyFileError(
                        f"{where}: option {name!r} is not supported in a fasttrack trust set; "
                        "remove the line's options or the key's .pub file"
                    )
                if name not in _ACCEPTED_OPTIONS:
                    raise KeyFileError(f"{where}: unknown option {name!r}")
            rest = rest[1:]
        if len(rest) < 2:
            raise KeyFileError(f"{where}: expected a key type and a base64 key after the principals")
        if not principals:
            raise KeyFileError(f"{where}: no principal (identity) before the key")
        bad = [x for x in principals if any(c in x for c in "*?!")]
        if bad:
            raise KeyFileError(f"{where}: principal {bad[0]!r} is a pattern; name one identity per principal")
        if rest[0] != "ssh-ed25519":
            raise KeyFileError(f"{where} is a {rest[0]} key; fasttrack verifies Ed25519 signatures only")
        key = _public_from_line(f"{rest[0]} {rest[1]}".encode(), where)
        pub = PublicKey(key=key, keyid=keyid_of(key), comment=" ".join(rest[2:]), source=str(p))
        entries.append(SignerEntry(principals=principals, key=pub, line=n))
    return entries


def load_trust_set(path: str | os.PathLike[str]) -> TrustSet:
    """The keys of a trust directory and their identities (see the module docstring)."""
    d = Path(path).expanduser()
    keys = load_trust_dir(d)
    identities: dict[str, str] = {}
    for f in sorted(d.glob(f"*{PUBLIC_SUFFIX}")):
        for k in load_public_keys(f):
            identities.setdefault(k.keyid, f.name[: -len(PUBLIC_SUFFIX)])
    signers = d / ALLOWED_SIGNERS
    if signers.is_file():
        named: dict[str, list[str]] = {}
        for e in parse_allowed_signers(signers):
            if e.key.keyid not in identities:
                raise KeyFileError(
                    f"{signers} line {e.line} names key {e.key.keyid[:16]} ({', '.join(e.principals)}), "
                    f"which no *{PUBLIC_SUFFIX} file in {d} holds; add its {PUBLIC_SUFFIX} file or remove the line "
                    "(allowed_signers names trusted keys, it does not add any)"
                )
            names = named.setdefault(e.key.keyid, [])
            names.extend(x for x in e.principals if x not in names)
        for keyid, names in named.items():
            identities[keyid] = ", ".join(names)
    return TrustSet(directory=d, keys=keys, identities=identities)


def key_identity(key: PublicKey) -> str:
    """The name of a key given on its own: its comment, else its file name."""
    if key.comment.strip():
        return key.comment.strip()
    name = Path(key.source).name
    return name[: -len(PUBLIC_SUFFIX)] if name.endswith(PUBLIC_SUFFIX) else name


def identity_names(keys: Sequence[PublicKey], trust_dir: str | os.PathLike[str] | None) -> dict[str, str]:
    """Key id -> identity for every trusted key (the trust set's names win)."""
    names = {k.keyid: key_identity(k) for k in keys}
    if trust_dir is not None:
        names.update(load_trust_set(trust_dir).identities)
    return names


def signer_identities(
    env: Envelope, sigs: Sequence[dict[str, Any]], keys: Sequence[PublicKey], names: dict[str, str]
) -> list[str | None]:
    """The identity behind each entry of :func:`dsse.check_signatures` (None unless valid).

    ``sigs`` are in the order of ``env.signatures`` (as ``check_signatures`` returns them).
    A valid signature is named by the trusted key that verified it (its ``key``), whatever
    key id the signature claims.
    """
    by_id = {k.keyid: k for k in keys}
    out: list[str | None] = []
    for _sig, s in zip(env.signatures, sigs, strict=True):
        key = by_id.get(s.get("key") or "") if s.get("status") == "valid" else None
        out.append(None if key is None else names.get(key.keyid, key_identity(key)))
    return out
