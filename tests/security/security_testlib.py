"""Builders for the adversarial corpus: keys, a signed base bundle, hostile variants of it
and hostile archives, all made by code (no binary blobs in the repository).

A hostile variant that still passes the bundle layer's own checks is re-signed with the
regular signing path; one that breaks them (a nested manifest, an abbreviated head SHA)
is signed by :func:`force_sign`, the envelope code without the consistency checks: the
corpus needs bundles that are *trusted-signed* and still hostile.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from synthetic import Spec, make_bundle

from fasttrack.bundle.attest import subjects_of_dir
from fasttrack.bundle.dsse import add_signature, envelope_bytes, envelope_for, statement_of
from fasttrack.bundle.keys import SigningKey, generate_keypair, load_private_key
from fasttrack.bundle.layout import ATTESTATION, MANIFEST
from fasttrack.bundle.pack import pack_bundle

__all__ = [
    "HEAD",
    "Keys",
    "add_members",
    "base_bundle",
    "force_sign",
    "keys",
    "nested_json",
    "resign",
    "rewrite_manifest",
    "variant",
]

HEAD = "c0ffee" + "4" * 34


class Keys:
    """A trusted signer (its public key is the trust set), a second trusted signer, a stranger."""

    def __init__(self, root: Path) -> None:
        self.trusted_priv, self.trusted_pub = generate_keypair(root / "t", name="ci", comment="ci@example")
        self.second_priv, self.second_pub = generate_keypair(root / "s", name="second", comment="second@example")
        self.other_priv, self.other_pub = generate_keypair(root / "o", name="stranger", comment="stranger@example")
        self.trusted: SigningKey = load_private_key(self.trusted_priv)
        self.second: SigningKey = load_private_key(self.second_priv)
        self.other: SigningKey = load_private_key(self.other_priv)
        self.trust_dir = root / "trust"
        self.trust_dir.mkdir()
        shutil.copy(self.trusted_pub, self.trust_dir / "ci.pub")
        shutil.copy(self.second_pub, self.trust_dir / "second.pub")


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("sec-keys"))


@pytest.fixture(scope="session")
def base_bundle(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Path:
    """A consistent synthetic bundle signed by the trusted key (never modified: copy it)."""
    out = tmp_path_factory.mktemp("sec-base") / "bundle"
    make_bundle(out, Spec(model="demo-llama", seed=7, head_sha=HEAD), sign_keys=[keys.trusted])
    return out


def variant(base: Path, dest: Path) -> Path:
    """A private copy of ``base`` to tamper with."""
    shutil.copytree(base, dest)
    return dest


def resign(root: Path, key: SigningKey) -> Path:
    """Sign ``root`` afresh (old signatures dropped) through the regular path (consistency checked)."""
    from fasttrack.bundle.attest import sign_bundle

    sign_bundle(root, key, replace=True)
    return root


def force_sign(root: Path, key: SigningKey, *, predicate: dict[str, Any] | None = None) -> Path:
    """Attest every file of ``root`` and sign, skipping the consistency checks signing applies.

    The predicate is the one derived from the manifest when it still loads, else ``predicate``."""
    if predicate is None:
        from fasttrack.bundle.consistency import predicate_of
        from fasttrack.bundle.manifest import load_manifest

        predicate = predicate_of(load_manifest((root / MANIFEST).read_bytes()))
    (root / ATTESTATION).unlink(missing_ok=True)
    env = add_signature(envelope_for(statement_of(subjects_of_dir(root), predicate)), key)
    (root / ATTESTATION).write_bytes(envelope_bytes(env))
    return root


def rewrite_manifest(
    root: Path, edit: Callable[[dict[str, Any]], None] | None = None, *, raw: bytes | None = None
) -> None:
    """Change ``manifest.json`` in place: through ``edit`` on its JSON, or to ``raw`` bytes."""
    p = root / MANIFEST
    if raw is None:
        doc = json.loads(p.read_bytes())
        assert edit is not None
        edit(doc)
        raw = json.dumps(doc, indent=2, sort_keys=True).encode()
    p.write_bytes(raw)


def add_members(root: Path, files: dict[str, bytes | str]) -> Path:
    """Write extra files into a bundle directory (the caller re-signs)."""
    for name, data in files.items():
        f = root / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def nested_json(depth: int, leaf: str = "1") -> str:
    """A JSON array nested ``depth`` deep, built as text (no recursion)."""
    return "[" * depth + leaf + "]" * depth


# --------------------------------------------------------------------------- hostile archives


def packed(root: Path, dest: Path) -> Path:
    """``root`` as a deterministic bundle tarball."""
    return pack_bundle(root, dest)


@contextmanager
def kept_temp_dirs(monkeypatch: pytest.MonkeyPatch, where: Path) -> Iterator[Path]:
    """Temporary directories made while the block runs stay under ``where`` (so a test can
    measure what was unpacked into them)."""
    import tempfile

    where.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    real = tempfile.TemporaryDirectory

    class Kept(real):  # type: ignore[valid-type,misc]  # subclassing the real class, kept on exit
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            self._finalizer.detach()  # not removed when collected either

        def cleanup(self) -> None:
            pass

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(tempfile, "TemporaryDirectory", Kept)
    try:
        yield where
    finally:
        monkeypatch.setattr(tempfile, "TemporaryDirectory", real)


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())
