"""DSSE envelopes holding an in-toto Statement v1: the model, PAE, signing and verifying.

The bottom of the attestation code: it knows envelopes, statements and keys, nothing about
manifests or bundle directories, so signing (:mod:`attest`) and verifying (:mod:`verify`)
both build on it without importing each other.

- Envelope: DSSE (https://github.com/secure-systems-lab/dsse) with payload type
  ``application/vnd.in-toto+json``; each signature is Ed25519 over
  ``PAE(payloadType, payload)`` with ``keyid`` = sha256 of the raw public key. Several
  signatures (contributor, CI) may sit on one envelope.
- Payload: an in-toto Statement v1 whose subjects are ``{"name", "digest": {"sha256"}}``
  and whose predicate type is fasttrack's evidence predicate.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field, ValidationError

from fasttrack.bundle.canonical import canonical_json
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.keys import PublicKey, SigningKey
from fasttrack.bundle.layout import ATTESTATION
from fasttrack.limits import MANIFEST_MAX_BYTES, json_problem
from fasttrack.modelbase import DocModel

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://fasttrack.dev/evidence/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


class Signature(DocModel):
    """One DSSE signature."""

    keyid: str = ""
    """Hex sha256 of the signer's raw Ed25519 public key."""
    sig: str
    """Base64 Ed25519 signature over PAE(payloadType, payload)."""


class Envelope(DocModel):
    """A DSSE envelope (https://github.com/secure-systems-lab/dsse)."""

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
        payload = self.payload_bytes()
        problem = json_problem(payload, f"{ATTESTATION}: the payload", max_bytes=MANIFEST_MAX_BYTES)
        if problem:
            raise BundleError(problem)
        try:
            st = json.loads(payload)
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


def statement_of(subjects: Mapping[str, str], predicate: Mapping[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1 over ``{name: sha256}``."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": n, "digest": {"sha256": subjects[n]}} for n in sorted(subjects)],
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(predicate),
    }


def envelope_for(statement: Mapping[str, Any]) -> Envelope:
    """An unsigned envelope holding ``statement`` (compact canonical JSON)."""
    payload = canonical_json(statement, pretty=False)
    return Envelope(payload=base64.b64encode(payload).decode(), payloadType=PAYLOAD_TYPE, signatures=[])


def read_envelope(data: bytes) -> Envelope:
    try:
        return Envelope.model_validate_json(data)
    except ValidationError as exc:
        raise BundleError(f"{ATTESTATION} is not a DSSE envelope: {exc.errors()[0].get('msg')}") from None


def envelope_bytes(env: Envelope) -> bytes:
    env = env.model_copy(update={"signatures": sorted(env.signatures, key=lambda s: (s.keyid, s.sig))})
    return canonical_json(env.model_dump(mode="json"))


def add_signature(env: Envelope, key: SigningKey) -> Envelope:
    """Return ``env`` with ``key``'s signature added (replacing an older one by the same key)."""
    sig = key.sign(pae(env.payloadType, env.payload_bytes()))
    sigs = [s for s in env.signatures if s.keyid != key.keyid]
    sigs.append(Signature(keyid=key.keyid, sig=base64.b64encode(sig).decode()))
    return env.model_copy(update={"signatures": sorted(sigs, key=lambda s: (s.keyid, s.sig))})


def check_signatures(env: Envelope, keys: Iterable[PublicKey]) -> list[dict[str, Any]]:
    """One entry per signature: ``{"keyid", "status", "signer", "key", "duplicate"}``.

    ``status`` is ``valid`` (a trusted key verified it), ``invalid`` (a trusted key's id
    but the signature does not verify) or ``untrusted`` (no trusted key made it). ``key``
    is the id of the trusted key that verified it (None unless valid): a signature's own
    ``keyid`` is only a hint, so the key that verified it is what counts as its signer.
    ``duplicate`` is true for a valid signature by a key an earlier signature already
    stands for (a copy under another key id is not a second signer).
    """
    keys = list(keys)
    message = pae(env.payloadType, env.payload_bytes())
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for s in env.signatures:
        entry: dict[str, Any] = {"keyid": s.keyid, "status": "invalid", "signer": None, "key": None, "duplicate": False}
        out.append(entry)
        try:
            raw = base64.b64decode(s.sig, validate=True)
        except (binascii.Error, ValueError):
            continue
        matching = [k for k in keys if k.keyid == s.keyid]
        entry["status"] = "invalid" if matching else "untrusted"
        for k in matching or keys:
            if k.verify(raw, message):
                entry.update(status="valid", signer=k.source + (f" ({k.comment})" if k.comment else ""), key=k.keyid)
                entry["duplicate"] = k.keyid in seen
                seen.add(k.keyid)
                break
    return out
