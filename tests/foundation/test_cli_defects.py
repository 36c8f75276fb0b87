"""Small command-line defects, each held by a test: a PR head that is not a SHA is an input error (exit 2); an
engine argument error names the scope file it came from; ``slurm --gpus-per-node`` is held against the scope's
node model; building the demo plugin prints no setuptools warning."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from scope_testlib import demo_scope_variant

from fasttrack import ROOT


def ft(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600
    )


def clean_error(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr
    err = " ".join(res.stderr.split())
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.mark.parametrize("head", ["abc", "not-a-sha", "12345zz", "a" * 65])
def test_a_pr_head_that_is_not_a_sha_is_an_input_error(head: str, tmp_path: Path) -> None:
    key = tmp_path / "k.pub"
    key.write_text("")
    bundle = tmp_path / "b.tar.gz"
    bundle.write_bytes(b"")
    for cmd in (
        ("verify", str(bundle), "--key", str(key), "--pr-head", head),
        ("report", str(bundle), "-o", str(tmp_path / "r.html"), "--pr-head", head),
    ):
        clean_error(ft(*cmd), "--pr-head", "is not a commit SHA", "7 to 64 hex digits")


def test_an_engine_argument_error_names_the_scope_file_it_came_from(tmp_path: Path) -> None:
    # a copy of the demo scope, still named demo-llama, with a flag vLLM does not know: the error must name
    # the copy, never the shipped suites/demo-llama/scope.yaml
    scope = demo_scope_variant(tmp_path / "copy", {'"--seed", "0"]': '"--seed", "0", "--no-such-flag"]'})
    err = clean_error(ft("plan", "--model", str(scope)), "--no-such-flag", str(scope))
    assert "suites/demo-llama" not in err


def test_slurm_gpus_per_node_is_held_against_the_scope_node_model() -> None:
    # K3's nodes are GB300 trays of 4 GPUs: 8 per node contradicts the node model, 2 is fewer than an engine uses
    clean_error(
        ft("slurm", "--dry-run", "--model", "kimi-k3", "--tier", "full", "--gpus-per-node", "8"),
        "--gpus-per-node 8 disagrees with the scope's node model",
        "has 4 GPUs",
    )
    clean_error(
        ft("slurm", "--dry-run", "--model", "kimi-k3", "--tier", "full", "--gpus-per-node", "2"),
        "--gpus-per-node 2 is fewer than the 4 GPUs per node",
    )
    ok = ft("slurm", "--dry-run", "--model", "kimi-k3", "--tier", "full", "--gpus-per-node", "4")
    assert ok.returncode == 0, ok.stderr
    assert "#SBATCH --gpus-per-node=4" in ok.stdout and "note:" not in ok.stderr


def test_building_the_demo_plugin_prints_no_setuptools_warning(tmp_path: Path) -> None:
    src = tmp_path / "demo_plugin"
    shutil.copytree(ROOT / "examples" / "demo_plugin", src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), src],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout + res.stderr
    assert "Warning" not in out and "deprecated" not in out, out
    (wheel,) = tmp_path.glob("*.whl")
    assert "fasttrack_demo_plugin/csrc/fused_decode.cpp" in zipfile.ZipFile(wheel).namelist()
