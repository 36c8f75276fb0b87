"""scripts/setup.sh refuses up front, with a clear message, when the disk cannot hold the install."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_setup_says_how_much_space_it_needs_before_installing(tmp_path: Path) -> None:
    (tmp_path / "examples" / "demo_plugin").mkdir(parents=True)
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    shutil.copy(REPO / "examples" / "demo_plugin" / "pyproject.toml", tmp_path / "examples" / "demo_plugin")
    env = {**os.environ, "FASTTRACK_SETUP_MIN_FREE_MIB": str(10**12), "FASTTRACK_VENV": str(tmp_path / "venv")}
    p = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "not enough free disk space" in p.stderr and "MiB free" in p.stderr and "TMPDIR" in p.stderr
    assert not (tmp_path / "venv").exists(), "nothing is installed when the space is not there"
