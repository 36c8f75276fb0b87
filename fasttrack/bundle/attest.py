"""The attestation: an in-toto Statement v1 over every bundle file, in a signed DSSE envelope.

- Subjects: every file of the bundle except ``attestation.dsse.json`` itself, as
  ``{"name": <bundle-relative path>, "digest": {"sha256": <hex>}}``, sorted by name.
- Predicate (``https://fasttrack.dev/evidence/v1``): the summary a reader acts on without
  opening the manifest: bundle verdict, per-check verdicts, PR head, scope and plan hashes.
- Envelope: DSSE with payload type ``application/vnd.in-toto+json``; each signature is
  Ed25519 over ``PAE(payloadType, payload)`` with ``keyid`` = sha256 of the raw public key.
  Several signatures (contributor, CI) may sit on one envelope.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fasttrack.bundle.canonical import HASH_BUFFER, canonical_json, sha256_file
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.keys import PublicKey, SigningKey
from fasttrack.bundle.layout import ATTESTATION, MANIFEST
from fasttrack.bundle.manifest import Manifest, load_manifest

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://fasttrack.dev/evidence/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


class Signature(BaseModel):
    """One DSSE signature."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    keyid: str = ""
    """Hex sha256 of the signer's raw Ed25519 public key."""
    sig: str
    """Base64 Ed25519 signature over PAE(payloadType, payload)."""


class Envelope(BaseModel):
    """A DSSE envelope (https://github.com/secure-systems-lab/dsse)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    payload: str
    """Base64 of the serialized in-toto Statement."""
    payloadType: str  # noqa: N815 - the DSSE field name
    """Always ``application/vnd.in-toto+json`` here."""
    signatures: list[Signature] = Field(default_factory=list)
    """Zero or more signatures, sorted by keyid."""

    def payload_bytes(self) -> bytes:
        try:
            return base64.b64decode(self.payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BundleError(f"{ATTESTATION}: payload is not valid base64: {exc}") from None

    def statement(self) -> dict[str, Any]:
        """The decoded in-toto Statement (structure checked)."""
        if self.payloadType != PAYLOAD_TYPE:
            raise BundleError(f"{ATTESTATION}: payloadType is {self.payloadType!r}, expected {PAYLOAD_TYPE!r}")
        try:
            st = json.loads(self.payload_bytes())
        except (ValueError, UnicodeDecodeError) as exc:
            raise BundleError(f"{ATTESTATION}: payload is not JSON: {exc}") from None
        if not isinstance(st, dict) or st.get("_type") != STATEMENT_TYPE:
            raise BundleError(f"{ATTESTATION}: payload is not an in-toto Statement v1 (_type must be {STATEMENT_TYPE})")
        if st.get("predicateType") != PREDICATE_TYPE:
            raise BundleError(
                f"{ATTESTATION}: predicateType is {st.get('predicateType')!r}, expected {PREDICATE_TYPE!r}"
            )
        subj = st.get("subject")
        if not isinstance(subj, list) or not all(
            isinstance(s, dict)
            and isinstance(s.get("name"), str)
            and isinstance(s.get("digest"), dict)
            and isinstance(s["digest"].get("sha256"), str)
            for s in subj
        ):
            raise BundleError(f"{ATTESTATION}: subject must be a list of {{name, digest: {{sha256}}}}")
        if not isinstance(st.get("predicate"), dict):
            raise BundleError(f"{ATTESTATION}: predicate must be an object")
        return st


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: ``DSSEv1 <len> <type> <len> <payload>``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def predicate_of(manifest: Manifest) -> dict[str, Any]:
    """The summary a signature vouches for (derived from the manifest, nothing else)."""
    return {
        "schema_version": manifest.schema_version,
        "verdict": manifest.verdict,
        "checks": {name: e.verdict.value for name, e in manifest.checks.items()},
        "model": manifest.scope.model,
        "tier": manifest.scope.tier,
        "scope_sha256": manifest.scope.sha256,
        "plan_sha256": manifest.plan.sha256,
        "shard": manifest.plan.shard,
        "pr": None
        if manifest.pr is None
        else {"repository": manifest.pr.repository, "number": manifest.pr.number, "head_sha": manifest.pr.head_sha},
        "rehearsal": manifest.rehearsal,
        "created": manifest.created,
    }


def statement_of(subjects: Mapping[str, str], predicate: Mapping[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1 over ``{name: sha256}``."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": n, "digest": {"sha256": subjects[n]}} for n in sorted(subjects)],
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(predicate),
    }


def bundle_files(root: Path) -> dict[str, Path]:
    """Every regular file under ``root`` (bundle-relative POSIX path -> path); links and special files refused."""
    files: dict[str, Path] = {}
    for dirpath, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        d = Path(dirpath)
        for name in dirs:
            if (d / name).is_symlink():
                raise BundleError(f"bundle member {(d / name).relative_to(root).as_posix()} is a symbolic link")
        for name in sorted(names):
            p = d / name
            mode = p.lstat().st_mode
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(mode):
                raise BundleError(f"bundle member {rel} is a symbolic link; bundles hold regular files only")
            if not stat.S_ISREG(mode):
                raise BundleError(f"bundle member {rel} is not a regular file")
            files[rel] = p
    return files


def subjects_of_dir(root: Path) -> dict[str, str]:
    """``{name: sha256}`` of every bundle file except the attestation."""
    buf = bytearray(HASH_BUFFER)
    return {name: sha256_file(p, buffer=buf)[0] for name, p in bundle_files(root).items() if name != ATTESTATION}


def read_envelope(data: bytes) -> Envelope:
    try:
        return Envelope.model_validate_json(data)
    except ValidationError as exc:
        raise BundleError(f"{ATTESTATION} is not a DSSE envelope: {exc.errors()[0].get('msg')}") from None


def envelope_bytes(env: Envelope) -> bytes:
    env = env.model_copy(update={"signatures": sorted(env.signatures, key=lambda s: (s.keyid, s.sig))})
    return canonical_json(env.model_dump(mode="json"))


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
    st = statement_of(subjects_of_dir(root), predicate_of(manifest))
    payload = canonical_json(st, pretty=False)
    return Envelope(payload=base64.b64encode(payload).decode(), payloadType=PAYLOAD_TYPE, signatures=[])


def _write_envelope(root: Path, env: Envelope) -> None:
    path = root / ATTESTATION
    path.write_bytes(envelope_bytes(env))
    os.chmod(path, 0o644)


def add_signature(env: Envelope, key: SigningKey) -> Envelope:
    """Return ``env`` with ``key``'s signature added (replacing an older one by the same key)."""
    sig = key.sign(pae(env.payloadType, env.payload_bytes()))
    sigs = [s for s in env.signatures if s.keyid != key.keyid]
    sigs.append(Signature(keyid=key.keyid, sig=base64.b64encode(sig).decode()))
    return env.model_copy(update={"signatures": sorted(sigs, key=lambda s: (s.keyid, s.sig))})


def check_signatures(env: Envelope, keys: Iterable[PublicKey]) -> list[dict[str, Any]]:
    """One entry per signature: ``{"keyid", "status", "signer"}`` with status
    ``valid`` (a trusted key verified it), ``invalid`` (a trusted key's id but the signature
    does not verify) or ``untrusted`` (no trusted key made it)."""
    keys = list(keys)
    message = pae(env.payloadType, env.payload_bytes())
    out = []
    for s in env.signatures:
        try:
            raw = base64.b64decode(s.sig, validate=True)
        except (binascii.Error, ValueError):
            out.append({"keyid": s.keyid, "status": "invalid", "signer": None})
            continue
        matching = [k for k in keys if k.keyid == s.keyid]
        status, signer = ("invalid" if matching else "untrusted"), None
        for k in matching or keys:
            if k.verify(raw, message):
                status, signer = "valid", k.source + (f" ({k.comment})" if k.comment else "")
                break
        out.append({"keyid": s.keyid, "status": status, "signer": signer})
    return out


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
    from fasttrack.bundle.verify import consistency_problems

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
            signers = ", ".join(s.keyid[:16] for s in old.signatures)
            raise BundleError(
                f"{root} changed since it was signed by {signers}; their signatures no longer cover it. "
                "Re-create the bundle, or sign with replace to drop the old signatures."
            )
    env = add_signature(env, key)
    _write_envelope(root, env)
    return env
