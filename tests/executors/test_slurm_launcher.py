"""The multi-node launcher's `slurm` mode on the real local cluster: inside a two-node allocation it starts
one srun task per node, each node learns its role from SLURM_NODEID, every node's output lands in its own
log, and the master address is the address of the allocation's first node (its NodeAddr). A stand-in
interpreter records how each node was started (no engine: vLLM's own multi-node start is the engine tests' concern)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fasttrack import ROOT

pytestmark = pytest.mark.e2e


def test_slurm_mode_starts_one_task_per_node_with_its_role(slurm_env, tmp_path: Path) -> None:
    fake = tmp_path / "fake-python"
    fake.write_text('#!/bin/bash\necho "nodeid=$SLURM_NODEID node=$SLURMD_NODENAME argv=$*"\n')
    fake.chmod(0o755)
    out = tmp_path / "out"
    driver = tmp_path / "driver.py"
    driver.write_text(
        textwrap.dedent(
            f"""
            import json, os
            from pathlib import Path
            from fasttrack.engine.cmdline import ServeSpec
            from fasttrack.engine.launchers import LaunchRequest, SlurmLauncher, default_launcher
            launcher = default_launcher()
            assert isinstance(launcher, SlurmLauncher), type(launcher)
            spec = ServeSpec(side="candidate", model="demo", args=("--tensor-parallel-size", "2"))
            req = LaunchRequest(python={str(fake)!r}, spec=spec, nnodes=2, api_port=8000, master_port=29500,
                                host_env=dict(os.environ), log_dir=Path({str(out)!r}), log_name="eng")
            (proc,) = launcher.launch(req)
            rc = proc.proc.wait(120)
            print(json.dumps({{"rc": rc, "hosts": launcher.hosts(2),
                              "logs": {{str(r): str(p) for r, p in proc.node_logs.items()}}}}))
            """
        )
    )
    res = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--nodes=2",
            "--ntasks-per-node=1",
            f"--output={tmp_path}/job.out",
            f"--wrap={sys.executable} {driver}",
        ],
        capture_output=True,
        text=True,
        env={**slurm_env, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    t0 = time.time()
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, env=slurm_env).stdout.strip():
        assert time.time() - t0 < 300, "the allocation did not finish"
        time.sleep(1)
    text = (tmp_path / "job.out").read_text()
    report = json.loads(text.strip().splitlines()[-1])
    assert report["rc"] == 0 and report["hosts"] == ["n1", "n2"], text
    lines = {r: Path(p).read_text() for r, p in report["logs"].items()}
    assert set(lines) == {"0", "1"}
    for rank, node in (("0", "n1"), ("1", "n2")):
        assert f"nodeid={rank} node={node}" in lines[rank], lines
        argv = lines[rank].split("argv=", 1)[1].split()
        assert argv[1] == "slurm" and argv[argv.index("--nnodes") + 1] == "2"
        # the first node's address (NodeAddr), not its Slurm name: the local cluster's nodes are named n1 and n2
        # and are reached at 127.0.0.1
        assert argv[argv.index("--master-addr") + 1] == "127.0.0.1" and "--node-rank" not in argv
