"""Verifying and rendering a bundle load neither the checks, the engine code, nor their
heavy dependencies: each command runs in a fresh interpreter, which then lists its modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bundle_testlib import build

from fasttrack import ROOT
from fasttrack import bundle as B

#: Module name prefixes that must stay out of ``sys.modules``.
FORBIDDEN = ("fasttrack.engine", "fasttrack.checks", "httpx", "scipy", "vllm", "torch")

_PROBE = """
import json, sys
from fasttrack.cli import main
try:
    main(sys.argv[1:])
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
print("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def run_cli(*args: str) -> tuple[int, set[str], str]:
    """Run ``fasttrack ARGS`` in a fresh interpreter: exit code, loaded modules, output."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr
    last = json.loads(res.stdout.strip().splitlines()[-1])
    return last["code"], set(last["modules"]), res.stdout + res.stderr


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A real signed bundle (directory and tarball) and its public key."""
    root = tmp_path_factory.mktemp("light")
    priv, pub = B.generate_keypair(root / "keys", name="signer")
    d = build(root / "bundle", sign=[B.load_private_key(priv)])
    tgz = B.pack_bundle(d, root / "bundle.tar.gz")
    return d, tgz, pub


def test_the_probe_sees_heavy_modules() -> None:
    # the probe reports the child's modules, and the filter names every forbidden one it is given
    code, mods, out = run_cli("--version")
    assert code == 0, out
    assert "fasttrack.cli" in mods and not heavy(mods)
    assert heavy({"fasttrack.checks.base", "scipy.stats", "httpx", "fasttrack.engine", "fasttrack.bundle"}) == [
        "fasttrack.checks.base",
        "fasttrack.engine",
        "httpx",
        "scipy.stats",
    ]


def test_verify_loads_no_engine_checks_httpx_or_scipy(signed: tuple[Path, Path, Path]) -> None:
    _, tgz, pub = signed
    code, mods, out = run_cli("verify", str(tgz), "--key", str(pub), "--json")
    assert code == 0, out
    assert '"verified": true' in out
    assert "fasttrack.bundle.verify" in mods
    assert not heavy(mods), f"fasttrack verify imported {heavy(mods)}"


def test_report_loads_no_engine_checks_httpx_or_scipy(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    d, _, pub = signed
    html, md = tmp_path / "report.html", tmp_path / "comment.md"
    code, mods, out = run_cli("report", str(d), "-o", str(html), "--comment", str(md), "--key", str(pub))
    assert code == 0, out
    assert "verified" in out and "NOT verified" not in out
    assert html.stat().st_size > 1000 and md.stat().st_size > 100
    assert "fasttrack.report.load" in mods and "fasttrack.bundle.verify" in mods
    assert not heavy(mods), f"fasttrack report imported {heavy(mods)}"
