"""A multi-node engine rehearsed on CPU: the demo target with tensor parallel 2 over two "nodes" of
this host (two node ranks on loopback, vLLM's multiprocessing backend over gloo).

* the two-node engine passes equivalence against the single-node stock engine (a scope whose
  candidate is the stock path at ``--tensor-parallel-size 2`` on nodes of one rank);
* killing one node's process mid-run gives a partial bundle that names that node, and no
  process of the run is left behind.

Two engine starts: the two-node candidate of the first run (its single-node baseline is the
session's stock engine, attached by URL) and the two-node baseline the second run kills a node
of; both eager (``--enforce-eager``), the cheapest configuration that still runs real vLLM,
since the deployment is what is tested."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scope_testlib import EAGER, TWO_NODE_CANDIDATE, demo_scope_variant

from fasttrack import ROOT

pytestmark = pytest.mark.e2e

FT = [sys.executable, "-m", "fasttrack"]


def _env(cache: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("FASTTRACK_DEMO_DEFECT", None)
    if cache is not None:
        # a compile cache of this run's own: with a shared one, seen once here, one rank loaded a compiled
        # graph another run had saved while its peer compiled afresh, and both waited in warm-up for good
        env["VLLM_CACHE_ROOT"] = str(cache)
    return env


def rehearsal_scope(folder: Path, *, both_sides: bool, one_batch: bool = False) -> Path:
    """The demo scope on nodes of one rank; the candidate (or both sides) at TP2, i.e. on two nodes. ``one_batch``:
    one point (batch 4: its rounds are real batches) with short greedy outputs, enough to compare the two-node
    engine's outputs with the stock engine's (what the equivalence check does at every point is tested on the
    session's engines)."""
    swaps = {
        **TWO_NODE_CANDIDATE,
        "    batch: [1, 2, 3, 4, 8]\n    context: [32, full]": "    batch: [1, 4]\n    context: [32]",
        # two node processes plus their workers start slowly on a loaded two-core host
        "  startup_timeout_s: 300": "  startup_timeout_s: 1800",
        # the deployment is under test, not the compiled model: eager engines start without compiling
        **EAGER,
    }
    if both_sides:
        swaps["  baseline:\n    args: []"] = '  baseline:\n    args: ["--tensor-parallel-size", "2"]'
    if one_batch:
        swaps["    batch: [1, 2, 3, 4, 8]\n    context: [32, full]"] = "    batch: [4]\n    context: [32]"
        equivalence = "  equivalence:\n    top_k: 5\n    max_tokens: {}\n"
        swaps[equivalence.format(48)] = equivalence.format(16)
    return demo_scope_variant(folder, swaps)


def _run_pids(run_dir: Path) -> list[int]:
    """Processes whose command line names this run folder (every node's server and workers)."""
    out = subprocess.run(["pgrep", "-f", str(run_dir / "profiles")], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _follower_pid(run_dir: Path) -> int | None:
    for pid in _run_pids(run_dir):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(c.endswith(b"node_main.py") for c in cmd) and b"follower" in cmd:
            return pid
    return None


@pytest.fixture(scope="module")
def _no_other_engine(engine_slot) -> None:
    engine_slot.release()


def test_two_node_engine_passes_equivalence_against_the_single_node_stock_engine(
    tmp_path: Path, baseline_engine
) -> None:
    scope = rehearsal_scope(tmp_path / "scope", both_sides=False, one_batch=True)
    plan = json.loads(
        subprocess.run(
            [*FT, "plan", "--model", str(scope), "--json", "--no-arg-check"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=_env(),
            check=True,
        ).stdout
    )
    assert [g["side_nodes"] for g in plan["groups"]] == [{"baseline": 1, "candidate": 2}]
    run_dir = tmp_path / "run"
    res = subprocess.run(
        [*FT, "validate", "--model", str(scope), "--checks", "equivalence", "--out", str(run_dir)]
        + ["--baseline-url", baseline_engine.api_url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(tmp_path / "vllm-cache"),
        timeout=2400,
    )
    out = res.stdout + res.stderr
    assert "Traceback" not in out
    summary = json.loads((run_dir / "run-summary.json").read_text())
    eq = summary["checks"]["equivalence"]
    assert eq["verdict"] == "pass", (eq, out[-4000:])
    launches = {e["side"]: e for e in summary["engines"]}
    assert launches["baseline"].get("nodes", 1) == 1 and launches["baseline"]["owned"] is False
    cand = launches["candidate"]
    assert cand["nodes"] == 2 and cand["launcher"] == "local"
    assert len(cand["node_logs"]) == 2
    logs = sorted(p.name for p in (run_dir / "bundle" / "logs").glob("*.node*.log"))
    assert [n.rsplit(".", 2)[-2] for n in logs] == ["node0", "node1"], logs
    assert not _run_pids(run_dir)


def test_killing_one_node_gives_a_partial_bundle_naming_it(tmp_path: Path, _no_other_engine) -> None:
    """An engine that crashes mid-run (here one node of a two-node engine, the harder case) leaves a
    signed partial bundle that says what crashed, with every node's log, and no process behind."""
    keys = tmp_path / "keys"
    subprocess.run([*FT, "keys", "generate", "-o", str(keys), "--name", "ci"], cwd=ROOT, env=_env(), check=True)
    scope = rehearsal_scope(tmp_path / "scope", both_sides=True)
    run_dir = tmp_path / "run"
    log = tmp_path / "validate.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [*FT, "validate", "--model", str(scope), "--checks", "equivalence", "--out", str(run_dir)]
            + ["--sign-key", str(keys / "ci")],
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=_env(tmp_path / "vllm-cache"),
        )
    try:
        t0 = time.time()
        while "engine up at" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.time() - t0 < 1500, "the two-node engine did not come up"
            time.sleep(1)
        follower = _follower_pid(run_dir)
        assert follower is not None, "no follower node process found"
        # a follower node gets the host's GPU safety settings too (the host's value, else the safe one)
        entries = Path(f"/proc/{follower}/environ").read_bytes().decode(errors="replace").split("\0")
        live = dict(e.split("=", 1) for e in entries if "=" in e)
        safe = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
        assert {k: live.get(k) for k in safe} == {k: os.environ.get(k, v) for k, v in safe.items()}
        os.kill(follower, signal.SIGKILL)
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text(errors="replace")
    assert rc == 1, out[-3000:]
    assert "Traceback" not in out
    summary = json.loads((run_dir / "run-summary.json").read_text())
    assert summary["verdict"] == "incomplete"
    crash = summary["crash"]
    assert crash["side"] == "baseline" and crash["node"] == 1, crash
    assert crash["error"] in {"EngineCrashed", "EngineRequestError", "EngineUnreachable"}, crash
    assert "node 1 of 2" in crash["message"] and crash["log"].endswith(".node1.log")
    assert "node 1 of 2" in summary["checks"]["equivalence"]["reason"]
    # every node's log is in the partial bundle, and nothing of the run is left running
    logs = sorted((run_dir / "bundle" / "logs").glob("*.node*.log"))
    assert len(logs) == 2 and all(p.stat().st_size > 0 for p in logs), logs
    # the partial bundle is signed, verifies, and cannot say pass
    res = subprocess.run(
        [*FT, "verify", str(run_dir / "bundle.tar.gz"), "--key", str(keys / "ci.pub"), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    v = json.loads(res.stdout)
    assert v["verified"] is True and v["verdict"] == "incomplete", res.stdout
    deadline = time.time() + 30
    while _run_pids(run_dir) and time.time() < deadline:
        time.sleep(1)
    assert not _run_pids(run_dir)
