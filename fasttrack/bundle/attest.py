"""The attestation of a bundle directory: an in-toto Statement v1 over every bundle file,
in a signed DSSE envelope (the envelope itself is :mod:`fasttrack.bundle.dsse`).

- Subjects: every file of the bundle except ``attestation.dsse.json`` itself, as
  ``{"name": <bundle-relative path>, "digest": {"sha256": <hex>}}``, sorted by name.
- Predicate (``https://fasttrack.dev/evidence/v1``): the summary a reader acts on without
  opening the manifest: bundle verdict, per-check verdicts, PR head, scope and plan hashes
  (:func:`fasttrack.bundle.consistency.predicate_of`).
- Signing checks the bundle's consistency rules first (:mod:`fasttrack.bundle.consistency`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fasttrack.bundle import outfile
from fasttrack.bundle.canonical import HASH_BUFFER, sha256_file
from fasttrack.bundle.consistency import consistency_problems, predicate_of
from fasttrack.bundle.dsse import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    Envelope,
    Signature,
    add_signature,
    check_signatures,
    envelope_bytes,
    envelope_for,
    pae,
    read_envelope,
    statement_of,
)
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.keys import SigningKey
from fasttrack.bundle.layout import ATTESTATION, MANIFEST, regular_files
from fasttrack.bundle.manifest import load_manifest

#: The envelope names are re-exported: callers and tests have always found them here.
__all__ = [
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "Envelope",
    "Signature",
    "add_signature",
    "attest_dir",
    "bundle_files",
    "check_signatures",
    "envelope_bytes",
    "pae",
    "predicate_of",
    "read_envelope",
    "sign_bundle",
    "statement_of",
    "subjects_of_dir",
]


def bundle_files(root: Path) -> dict[str, Path]:
    """Every regular file under ``root`` (bundle-relative POSIX path -> path); links and special files refused."""
    return dict(regular_files(root, what="bundle member"))


def subjects_of_dir(root: Path) -> dict[str, str]:
    """``{name: sha256}`` of every bundle file except the attestation."""
    buf = bytearray(HASH_BUFFER)
    return {name: sha256_file(p, buffer=buf)[0] for name, p in bundle_files(root).items() if name != ATTESTATION}


def attest_dir(root: Path) -> Envelope:
    """Write an unsigned envelope over the bundle directory's current files (drops old signatures)."""
    env = _fresh_envelope(root)
    _write_envelope(root, env)
    return env


def _fresh_envelope(root: Path) -> Envelope:
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise BundleError(f"{root} has no {MANIFEST}; it is not a bundle directory")
    manifest = load_manifest(manifest_path.read_bytes())
    return envelope_for(statement_of(subjects_of_dir(root), predicate_of(manifest)))


def _write_envelope(root: Path, env: Envelope) -> None:
    path = root / ATTESTATION
    outfile.write_bytes(path, envelope_bytes(env))
    os.chmod(path, 0o644)


def sign_bundle(path: str | os.PathLike[str], key: SigningKey, *, replace: bool = False) -> Envelope:
    """Add ``key``'s signature to a bundle directory or ``.tar.gz`` (rewritten in place).

    The bundle must be consistent first (manifest valid, verdict derivable from its check
    entries, tables as recorded). When files changed since the existing signatures were
    made, signing is refused unless ``replace=True``, which drops the old signatures.
    """
    p = Path(path)
    if p.is_dir():
        return _sign_dir(p, key, replace=replace)
    if p.is_file():
        from fasttrack.bundle.pack import pack_bundle
        from fasttrack.bundle.safe_tar import extract_bundle

        with tempfile.TemporaryDirectory(prefix="fasttrack-sign-", dir=p.parent) as tmp:
            root = Path(tmp) / "bundle"
            extract_bundle(p, root)
            env = _sign_dir(root, key, replace=replace)
            pack_bundle(root, p)
        return env
    raise BundleError(f"{p} does not exist")


def _sign_dir(root: Path, key: SigningKey, *, replace: bool) -> Envelope:
    problems = consistency_problems(root)
    if problems:
        raise BundleError(f"refusing to sign {root}: " + "; ".join(problems))
    fresh = _fresh_envelope(root)
    path = root / ATTESTATION
    env = fresh
    if path.exists():
        try:
            old = read_envelope(path.read_bytes())
        except BundleError:
            if not replace:
                raise BundleError(
                    f"{path} is unreadable; sign with replace to write a new attestation (old signatures are lost)"
                ) from None
            old = fresh
        if old.payload == fresh.payload or not old.signatures:
            env = old if old.payload == fresh.payload else fresh
        elif not replace:
            # the key ids an envelope claims are not signed: count the signatures, never quote them
            raise BundleError(
                f"{root} changed since its {len(old.signatures)} signature(s) were made; they no longer cover it. "
                "Re-create the bundle, or sign with replace to drop the old signatures."
            )
    env = add_signature(env, key)
    _write_envelope(root, env)
    return env
