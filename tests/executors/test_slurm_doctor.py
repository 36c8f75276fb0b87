"""`fasttrack doctor` inside a two-node allocation of the local Slurm cluster reads every node's hardware report
(one srun task per node) and checks that the nodes an engine spans share one NVLink domain. A stand-in
nvidia-smi answers as a GB300 compute tray; which rack (fabric clique) a node is in comes from its Slurm node
name. No engine starts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_engine_hardware import FAKE_SMI

from fasttrack import ROOT

pytestmark = pytest.mark.e2e

RACKS = (
    'import os\nclique = {"n1": "rack-a", "n2": os.environ.get("N2_RACK", "rack-a")}[os.environ["SLURMD_NODENAME"]]\n'
)


def _scope(tmp_path: Path) -> Path:
    """kimi-k3 with a smoke tier of TP8 engines (two GB300 trays each: the local cluster has two nodes)."""
    text = (ROOT / "suites" / "kimi-k3" / "scope.yaml").read_text()
    old = "  smoke:\n    tensor_parallel: [16]\n"
    assert old in text
    (tmp_path / "k3").mkdir(parents=True)
    (tmp_path / "k3" / "scope.yaml").write_text(text.replace(old, "  smoke:\n    tensor_parallel: [8]\n"))
    for sub in ("kernels",):
        (tmp_path / "k3" / sub).symlink_to(ROOT / "suites" / "kimi-k3" / sub)
    return tmp_path / "k3" / "scope.yaml"


def _doctor_in_allocation(slurm_env: dict[str, str], tmp_path: Path, n2_rack: str) -> dict[str, Any]:
    bin_dir = tmp_path / f"bin-{n2_rack}"
    bin_dir.mkdir()
    smi = FAKE_SMI.replace('clique = os.environ.get("FAKE_CLIQUE", "rack-a")\n', RACKS)
    (bin_dir / "nvidia-smi").write_text(smi)
    (bin_dir / "nvidia-smi").chmod(0o755)
    scope = _scope(tmp_path / n2_rack)
    out = tmp_path / f"doctor-{n2_rack}.json"
    cmd = f"{sys.executable} -m fasttrack doctor --model {scope} --tier smoke --no-arg-check --json > {out}"
    env = {**slurm_env, "PATH": f"{bin_dir}:{slurm_env['PATH']}", "PYTHONPATH": str(ROOT), "N2_RACK": n2_rack}
    res = subprocess.run(
        ["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", f"--output={tmp_path}/job-{n2_rack}.out"]
        + [f"--wrap={cmd}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    t0 = time.time()
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, env=slurm_env).stdout.strip():
        assert time.time() - t0 < 600, "the allocation did not finish"
        time.sleep(1)
    assert out.is_file() and out.stat().st_size, (tmp_path / f"job-{n2_rack}.out").read_text()
    return json.loads(out.read_text())  # type: ignore[no-any-return]  # doctor's JSON


def test_doctor_checks_that_the_allocations_nodes_share_one_nvlink_domain(slurm_env, tmp_path: Path) -> None:
    rep = _doctor_in_allocation(slurm_env, tmp_path, "rack-a")
    nodes = [f for f in rep["findings"] if f["topic"] == "engine nodes"]
    assert any(f["status"] == "ok" and "2 node(s) of the allocation (" in f["found"] for f in nodes), nodes
    assert any("clique(s) rack-a;" in f["found"] for f in nodes), nodes
    assert not [f for f in nodes if f["status"] == "problem"], nodes

    rep = _doctor_in_allocation(slurm_env, tmp_path, "rack-b")
    nodes = [f for f in rep["findings"] if f["topic"] == "engine nodes"]
    bad = [f for f in nodes if f["status"] == "problem"]
    assert bad and "not in one NVLink domain" in bad[0]["found"] and "rack-b" in bad[0]["found"], nodes
    assert "slurm.placement" in (bad[0]["fix"] or "") and rep["ok"] is False
