"""Termination by a scheduler is an interruption, not a crash: SIGTERM (scancel, the time limit, pod
deletion) and SIGHUP to `fasttrack validate` write the partial, signed bundle naming the checks that did
not finish ("terminated by signal N") within 30 s, and leave no engine process.

Here the signal comes during the engine-less kernels check (no engine is started: the engine-start case
is the cancelled shard of test_slurm_e2e.py, whose SIGTERM arrives while its first engine starts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scope_testlib import ONE_POINT, SLOW_HOST, demo_scope_variant

from fasttrack import ROOT

pytestmark = pytest.mark.e2e

FT = [sys.executable, "-m", "fasttrack"]


@pytest.fixture(scope="module")
def scope_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """demo-llama with a one-point smoke tier running kernels and equivalence only."""
    return demo_scope_variant(tmp_path_factory.mktemp("scope"), {**ONE_POINT, **SLOW_HOST})


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("keys")
    subprocess.run([*FT, "keys", "generate", "-o", str(d), "--name", "ci"], check=True, capture_output=True)
    return d


def _default_signals() -> None:
    """The child takes signals as a process a scheduler started would (a shell without job control
    starts background jobs with SIGINT ignored, and an ignored signal stays ignored across exec)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_termination_signal_writes_a_partial_signed_bundle(
    sig: signal.Signals, scope_file: Path, keys: Path, tmp_path: Path
) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "validate.log"
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [*FT, "validate", "--model", str(scope_file), "--out", str(run_dir), "--sign-key", str(keys / "ci")],
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
            preexec_fn=_default_signals,
        )
    try:
        t0 = time.time()
        while "check kernels: running" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.time() - t0 < 600, "validate never reached the kernels check"
            time.sleep(0.5)
        time.sleep(2)
        sent = time.time()
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
        took = time.time() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text(errors="replace")
    assert rc == 128 + sig, out[-3000:]
    assert took < 30, f"{took:.1f} s from the signal to the exit"
    assert "Traceback" not in out
    assert f"terminated by signal {int(sig)}" in out
    summary = json.loads((run_dir / "run-summary.json").read_text())
    assert summary["verdict"] == "incomplete" and summary["interrupted"]
    for name in ("kernels", "equivalence"):
        assert summary["checks"][name]["verdict"] == "not_run"
        assert f"terminated by signal {int(sig)} ({sig.name})" in summary["checks"][name]["reason"], summary
    res = subprocess.run(
        [*FT, "verify", str(run_dir / "bundle.tar.gz"), "--key", str(keys / "ci.pub"), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    v = json.loads(res.stdout)
    assert v["verified"] is True and v["verdict"] == "incomplete", res.stdout
    left = subprocess.run(["pgrep", "-af", str(run_dir)], capture_output=True, text=True).stdout
    assert not [ln for ln in left.splitlines() if "pgrep" not in ln], left
