"""scripts/demo.sh signs its bundle with a local demo key and ends by verifying it (no engine started here:
``fasttrack`` is a stand-in that records its calls, except ``keys``, which runs the real command)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from fasttrack.bundle.keys import load_private_key, load_public_keys

REPO = Path(__file__).resolve().parents[2]

STUB = """#!/usr/bin/env bash
echo "$*" >> "$FASTTRACK_STUB_LOG"
case "$1" in
  keys) exec "$REAL_PYTHON" -m fasttrack "$@" ;;
  validate)
    while [ $# -gt 0 ]; do
      if [ "$1" = --out ]; then mkdir -p "$2"; echo bundle > "$2/bundle.tar.gz"; fi
      shift
    done
    exit "${STUB_VALIDATE_RC:-0}" ;;
  verify) echo "verified"; exit 0 ;;
esac
"""


def _demo_tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", root / "scripts")
    (root / "scripts" / "setup.sh").write_text("exit 0\n")  # no install here
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    stub = venv / "bin" / "fasttrack"
    stub.write_text(STUB)
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    env = {
        **os.environ,
        "FASTTRACK_VENV": str(venv),
        "FASTTRACK_DEMO_OUT": str(tmp_path / "runs" / "demo"),
        "FASTTRACK_STUB_LOG": str(tmp_path / "calls.log"),
        "REAL_PYTHON": sys.executable,
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    return root, env


def _run(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/demo.sh", "--force"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def test_demo_script_parses() -> None:
    for script in ("demo.sh", "demo_key.sh"):
        subprocess.run(["bash", "-n", str(REPO / "scripts" / script)], check=True)


def test_demo_signs_with_a_reused_local_key_and_verifies(tmp_path: Path) -> None:
    root, env = _demo_tree(tmp_path)
    first = _run(root, env)
    assert first.returncode == 0, first.stderr
    key = tmp_path / "runs" / "demo-keys" / "fasttrack-demo-key"
    assert key.is_file() and (key.parent / "fasttrack-demo-key.pub").is_file()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert "created the local demo signing key" in first.stderr
    sk = load_private_key(key)
    (pub,) = load_public_keys(key.parent / "fasttrack-demo-key.pub")
    assert pub.keyid == sk.keyid and "demo key" in (pub.comment or "")
    calls = (tmp_path / "calls.log").read_text().splitlines()
    validate = next(c for c in calls if c.startswith("validate "))
    assert f"--sign-key {key}" in validate and validate.endswith("--force")
    bundle = tmp_path / "runs" / "demo" / "bundle.tar.gz"
    assert f"verify {bundle} --key {key}.pub" in calls
    assert f"fasttrack verify {bundle} --key {key}.pub" in first.stdout  # the command is printed
    assert first.stdout.rstrip().endswith("verified")

    pem = key.read_bytes()
    second = _run(root, env)  # reused: same key, nothing created
    assert second.returncode == 0, second.stderr
    assert key.read_bytes() == pem and "created" not in second.stderr


def test_demo_keeps_validates_exit_code_and_skips_a_stale_bundle(tmp_path: Path) -> None:
    root, env = _demo_tree(tmp_path)
    failed = _run(root, {**env, "STUB_VALIDATE_RC": "1"})  # verdict fail: the demo exits 1, still verifies
    assert failed.returncode == 1
    assert any(c.startswith("verify ") for c in (tmp_path / "calls.log").read_text().splitlines())
    (tmp_path / "calls.log").unlink()
    stub = Path(env["FASTTRACK_VENV"]) / "bin" / "fasttrack"
    stub.write_text(STUB.replace('mkdir -p "$2"; echo bundle > "$2/bundle.tar.gz"', "true"))
    refused = _run(root, {**env, "STUB_VALIDATE_RC": "2"})  # validate refused: the old bundle is not verified
    assert refused.returncode == 2
    assert not any(c.startswith("verify ") for c in (tmp_path / "calls.log").read_text().splitlines())


def test_half_a_key_pair(tmp_path: Path) -> None:
    root, env = _demo_tree(tmp_path)
    assert _run(root, env).returncode == 0
    keydir = tmp_path / "runs" / "demo-keys"
    pub_text = (keydir / "fasttrack-demo-key.pub").read_text()
    (keydir / "fasttrack-demo-key.pub").unlink()  # the public half lost: derived again from the private key
    assert _run(root, env).returncode == 0
    assert (keydir / "fasttrack-demo-key.pub").read_text().split()[:2] == pub_text.split()[:2]
    (keydir / "fasttrack-demo-key").unlink()  # a public key alone cannot sign: refused, with what to do
    (tmp_path / "calls.log").unlink()
    res = _run(root, env)
    assert res.returncode != 0 and "remove" in res.stderr
    assert not (tmp_path / "calls.log").exists()  # nothing ran
