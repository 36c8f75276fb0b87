"""Fixtures for report and dashboard tests: keys and synthetic bundles (built with the
real bundle layer; their figures are invented, see tests/synthetic)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from demo_engines import missing_prerequisite
from synthetic import Spec, make_bundle

from fasttrack.bundle.keys import SigningKey, generate_keypair, load_private_key

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ".artifacts" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


class Keys:
    def __init__(self, root: Path) -> None:
        self.trusted_priv, self.trusted_pub = generate_keypair(root / "trusted", name="ci", comment="ci@example")
        self.other_priv, self.other_pub = generate_keypair(root / "other", name="stranger", comment="stranger@example")
        self.trusted: SigningKey = load_private_key(self.trusted_priv)
        self.other: SigningKey = load_private_key(self.other_priv)
        self.trust_dir = root / "trusted-pub"
        self.trust_dir.mkdir()
        shutil.copy(self.trusted_pub, self.trust_dir / "ci.pub")


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("keys"))


BundleFactory = Callable[..., Path]


@pytest.fixture(scope="session")
def bundle_factory(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> BundleFactory:
    """``make(name, signer="trusted"|"other"|None, **Spec fields) -> bundle dir`` (cached per arguments)."""
    root = tmp_path_factory.mktemp("bundles")
    made: dict[str, Path] = {}

    def make(name: str, *, signer: str | None = "trusted", parent: Path | None = None, **fields: object) -> Path:
        out = (parent or root) / name
        if parent is None and name in made:
            return made[name]
        sign = {"trusted": [keys.trusted], "other": [keys.other], None: []}[signer]
        make_bundle(out, Spec(**fields), sign_keys=sign)  # type: ignore[arg-type]
        if parent is None:
            made[name] = out
        return out

    return make


def chromium_or_skip() -> str:
    """Path of Debian's chromium; skip (locally) or fail (in CI) when it is missing."""
    if CHROMIUM.exists():
        return str(CHROMIUM)
    missing_prerequisite(
        "/usr/bin/chromium is missing: the browser tests need Debian's chromium "
        "(apt-get install -y chromium; scripts/setup.sh --browser does it)"
    )
