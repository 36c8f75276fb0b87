"""The local two-node Slurm cluster for the end-to-end tests (scripts/slurm/start.sh).

``scripts/test.sh`` starts it around pytest and exports ``SLURM_CONF`` (and
``FASTTRACK_REQUIRE_SLURM=1``, so that a cluster that cannot start fails the tests
instead of skipping them); run alone, the fixture starts one for the session and stops
it afterwards.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fasttrack import ROOT

SCRIPTS = ROOT / "scripts" / "slurm"


def _ping(env: dict[str, str]) -> bool:
    res = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=env, check=False)
    return res.returncode == 0 and "UP" in res.stdout


@pytest.fixture(scope="session")
def slurm_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    env = dict(os.environ)
    if env.get("SLURM_CONF") and Path(env["SLURM_CONF"]).is_file():
        if not _ping(env):
            pytest.fail(f"SLURM_CONF={env['SLURM_CONF']} is set but its controller does not answer")
        yield env
        return
    state = tmp_path_factory.mktemp("slurm")
    env["FASTTRACK_SLURM_DIR"] = str(state)
    res = subprocess.run(
        ["bash", str(SCRIPTS / "start.sh"), "--print-env"], capture_output=True, text=True, env=env, check=False
    )
    if res.returncode != 0:
        msg = f"the local Slurm cluster did not start:\n{res.stderr[-3000:]}"
        if os.environ.get("FASTTRACK_REQUIRE_SLURM") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    for line in res.stdout.splitlines():
        if line.startswith("export "):
            k, _, v = line[len("export ") :].partition("=")
            env[k] = v.strip("'\"")
    try:
        yield env
    finally:
        subprocess.run(["bash", str(SCRIPTS / "stop.sh")], env=env, capture_output=True, check=False)
