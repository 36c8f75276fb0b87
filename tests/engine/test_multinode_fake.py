"""Multi-node engines against stand-in node processes (fast; the real two-node rehearsal is e2e).

Every node is a process group of its own; health is the leader's; a node that dies takes
every other node down with it and is named; stop leaves nothing behind."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from fasttrack.engine import EngineCrashed, EngineStartError, MultiNodeEngine, live_engines, start_engine
from fasttrack.engine.cmdline import NODE_MAIN, ServeSpec, local_node_env
from fasttrack.engine.launchers import LaunchRequest, LocalLauncher, SlurmLauncher, default_launcher
from fasttrack.engine.procs import group_members

FAKE = Path(__file__).with_name("fake_vllm_server.py")


@pytest.fixture(autouse=True)
def _no_session_engine(engine_slot) -> None:
    engine_slot.release()


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    """An 'interpreter' that runs the stand-in server for any module or script it is asked for."""
    exe = tmp_path / "fake-python"
    exe.write_text(
        f'#!/bin/sh\nif [ "$1" = "-c" ]; then exec "{sys.executable}" "$@"; fi\nexec "{sys.executable}" "{FAKE}" "$@"\n'
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def _engine(fake_python: str, tmp_path: Path, **env: str) -> MultiNodeEngine:
    return MultiNodeEngine(
        side="candidate",
        model="fake-model",
        args=["--tensor-parallel-size", "2", "--seed", "0"],
        env={"FAKE_VLLM_MODE": "ok", **env},
        log_dir=tmp_path / "logs",
        log_name="g.candidate.0",
        python=fake_python,
        startup_timeout=30.0,
        nodes=2,
    )


def _environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(e.split("=", 1) for e in entries if "=" in e)


def test_local_nodes_get_inductor_caches_of_their_own() -> None:
    assert local_node_env({"TORCHINDUCTOR_CACHE_DIR": "/c", "A": "1"}, 1) == {
        "TORCHINDUCTOR_CACHE_DIR": "/c/node1",
        "A": "1",
    }
    assert local_node_env({}, 0)["TORCHINDUCTOR_CACHE_DIR"].endswith("/node0")


def _gone(pids: list[int]) -> bool:
    return all(not Path(f"/proc/{p}").exists() or "Z" in Path(f"/proc/{p}/stat").read_text().split()[2] for p in pids)


def test_two_local_nodes_start_serve_and_stop_clean(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path).start()
    try:
        assert eng.health() == 200 and eng.model == "fake-model"
        assert sorted(eng.node_logs) == [0, 1]
        assert [p.name for p in eng.node_logs.values()] == ["g.candidate.0.node0.log", "g.candidate.0.node1.log"]
        lead, follow = (np.argv for np in eng.node_procs)
        assert lead[1:3] == ["-m", "vllm.entrypoints.launchers.api_server.entry"]
        assert lead[lead.index("--node-rank") + 1] == "0" and "--headless" not in lead
        assert follow[1:3] == [str(NODE_MAIN), "follower"]
        assert follow[follow.index("--node-rank") + 1] == "1" and "--headless" in follow
        assert follow[follow.index("--master-port") + 1] == lead[lead.index("--master-port") + 1]
        assert "--port" not in follow  # followers serve no API
        # each node spawns its child after it starts, and the follower says "workers up" once its child is
        # ready, which on a busy host can come after the leader answers /health: wait for both
        deadline = time.monotonic() + 60
        pids = eng.group_pids()
        while (len(pids) < 4 or "workers up" not in eng.node_logs[1].read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
            pids = eng.group_pids()
        assert len(pids) >= 4  # two nodes, each with its "engine core" child
        assert "workers up" in eng.node_logs[1].read_text()
        eng.check_alive()
        assert eng in live_engines()
        # each node of this host compiles into an inductor cache of its own
        caches = [_environ(np.proc.pid).get("TORCHINDUCTOR_CACHE_DIR", "") for np in eng.node_procs]
        assert [Path(c).name for c in caches] == ["node0", "node1"], caches
        assert Path(caches[0]).parent == Path(caches[1]).parent
    finally:
        report = eng.stop()
    assert report is not None and report.clean
    assert _gone(pids) and eng not in live_engines()
    for np in eng.node_procs:
        assert group_members(np.proc.pid) == []
    d = eng.describe()
    assert d["launcher"] == "local" and len(d["nodes"]) == 2 and d["failed_node"] is None


def test_a_follower_that_dies_takes_the_engine_down_and_is_named(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path, FAKE_VLLM_NODE_EXIT="1:3").start()
    pids = eng.group_pids()
    try:
        deadline = time.monotonic() + 30
        while eng.failed_node is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert eng.failed_node == 1
        # the watchdog tore the leader down too: nothing waits for the lost peer
        deadline = time.monotonic() + 30
        while not _gone(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(pids)
        with pytest.raises(EngineCrashed) as exc:
            eng.check_alive()
        msg = exc.value.message
        assert exc.value.node == 1 and exc.value.side == "candidate"
        assert "node 1 of 2 (127.0.0.1) of the candidate engine exited with code 7" in msg
        assert "g.candidate.0.node1.log" in msg and "the peer went away" in msg
    finally:
        eng.stop()
    assert eng not in live_engines()


def test_a_follower_that_dies_before_health_fails_the_start(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path, FAKE_VLLM_NODE_EXIT="1:0", FAKE_VLLM_MODE="hang")
    with pytest.raises(EngineStartError) as exc:
        eng.start()
    assert "node 1 of 2" in exc.value.message and "before it became healthy" in exc.value.message
    assert exc.value.node == 1
    for np in eng.node_procs:
        assert group_members(np.proc.pid) == []


def test_start_engine_picks_the_multi_node_engine(fake_python: str, tmp_path: Path) -> None:
    eng = start_engine(
        side="baseline",
        model="fake-model",
        args=["--tensor-parallel-size", "2"],
        env={"FAKE_VLLM_MODE": "ok"},
        log_dir=tmp_path / "logs",
        python=fake_python,
        nodes=2,
        launcher=LocalLauncher(),
        startup_timeout=30.0,
    )
    try:
        assert isinstance(eng, MultiNodeEngine) and eng.nodes == 2
    finally:
        eng.stop()


# --------------------------------------------------------------------------- slurm


def _slurm_env() -> dict[str, str]:
    return {"SLURM_JOB_NUM_NODES": "4", "SLURM_JOB_NODELIST": "gb[1-4]", "SLURM_JOB_ID": "77"}


def test_slurm_launcher_runs_one_task_per_node(tmp_path: Path) -> None:
    # a stand-in scontrol: the cluster names its nodes gb1..gb4 and reaches them at other addresses
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/bash\n"
        'if [[ "$1 $2" == "show hostnames" ]]; then printf "gb%s\\n" 1 2 3 4; exit 0; fi\n'
        'if [[ "$1 $2 $3" == "-o show node" ]]; then echo "NodeName=$4 Arch=x86_64 NodeAddr=10.1.0.${4#gb} '
        'NodeHostName=$4-host State=IDLE"; exit 0; fi\n'
        "exit 1\n"
    )
    (bin_dir / "scontrol").chmod(0o755)
    env = {**_slurm_env(), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    launcher = default_launcher(env)
    assert isinstance(launcher, SlurmLauncher)
    launcher = SlurmLauncher(env=env, extra_args=["--mpi=none"])
    req = LaunchRequest(
        python="/opt/venv/bin/python",
        spec=ServeSpec(side="candidate", model="moonshotai/Kimi-K3", args=("--tensor-parallel-size", "16")),
        nnodes=4,
        api_port=8100,
        master_port=29500,
        host_env={},
        log_dir=tmp_path,
        log_name="tp16.candidate.0",
        gpus_per_node=4,
    )
    argv, logs = launcher.argv(req)
    assert argv[0] == "srun"
    for flag in (
        "--nodes=4",
        "--ntasks=4",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--gpus-per-node=4",
        "--nodelist=gb1,gb2,gb3,gb4",
        "--mpi=none",
        f"--output={tmp_path}/tp16.candidate.0.node%n.log",
    ):
        assert flag in argv, flag
    task = argv[argv.index("/opt/venv/bin/python") :]
    assert task[1:3] == [str(NODE_MAIN), "slurm"]  # the role comes from SLURM_NODEID
    # the master is the first node's NodeAddr, not its Slurm name
    assert task[task.index("--master-addr") + 1] == "10.1.0.1" and "--node-rank" not in task
    assert task[task.index("--host") + 1] == "0.0.0.0"
    assert {r: p.name for r, p in logs.items()} == {r: f"tp16.candidate.0.node{r}.log" for r in range(4)}
    assert launcher.hosts(2) == ["gb1", "gb2"]
    with pytest.raises(ValueError, match="spans 8 nodes and the Slurm allocation has 4"):
        launcher.hosts(8)


def test_slurm_node_lists_expand() -> None:
    from fasttrack.engine.launchers import expand_nodelist

    assert expand_nodelist("gb[01-03,7],login1") == ["gb01", "gb02", "gb03", "gb7", "login1"]
    assert expand_nodelist("a1,a2") == ["a1", "a2"]


def test_node_main_picks_its_role_from_the_slurm_node_id(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("fasttrack_node_main_under_test", NODE_MAIN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # the file does nothing on import (its work is under __main__)
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(mod, "run_leader", lambda argv: calls.append(("leader", argv)))
    monkeypatch.setattr(mod, "run_follower", lambda argv: calls.append(("follower", argv)))
    for node in ("0", "2"):
        monkeypatch.setenv("SLURM_NODEID", node)
        mod.run_slurm(["--model", "m"])
    assert calls == [
        ("leader", ["--model", "m", "--node-rank", "0"]),
        ("follower", ["--model", "m", "--node-rank", "2", "--headless"]),
    ]


def test_default_launcher_is_local_outside_an_allocation() -> None:
    assert isinstance(default_launcher({}), LocalLauncher)
    assert isinstance(default_launcher({"SLURM_JOB_NUM_NODES": "1"}), LocalLauncher)


def test_engine_records_say_which_nodes_ran(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path).start()
    try:
        d = eng.describe()
    finally:
        eng.stop()
    assert [n["ranks"] for n in d["nodes"]] == [[0], [1]]
    assert json.dumps(d, default=str)  # serializable for the run record
    assert os.path.basename(d["log_path"]) == "g.candidate.0.node0.log"


# --------------------------------------------------------------------------- deployments outside the envelope


def test_a_refused_deployment_is_recorded_with_its_reason(fake_python: str, tmp_path: Path) -> None:
    from fasttrack.engine.deployment import probe_deployment

    out = probe_deployment(
        side="candidate",
        model="fake-model",
        args=["--tensor-parallel-size", "2"],
        env={"FAKE_VLLM_MODE": "exit"},
        log_dir=tmp_path,
        log_name="probe",
        startup_timeout=30.0,
        python=fake_python,
        reject_regex="something is wrong with the model",
    )
    assert not out.started and out.exit_code == 3
    assert out.reject_lines == ["ValueError: something is wrong with the model"]
    assert out.log and Path(out.log).is_file()


def test_a_deployment_that_comes_up_is_served_and_stopped(fake_python: str, tmp_path: Path) -> None:
    from fasttrack.engine.deployment import probe_deployment

    out = probe_deployment(
        side="candidate",
        model="fake-model",
        args=["--tensor-parallel-size", "2"],
        env={"FAKE_VLLM_MODE": "ok"},
        log_dir=tmp_path,
        log_name="probe",
        startup_timeout=30.0,
        python=fake_python,
        log_regex="FASTTRACK_DEMO_DEFECT=",
    )
    assert out.started and out.exit_code is None
    assert out.served == 0 and out.error and "HTTP 501" in out.error  # the stand-in serves no completions
    assert out.fallback_lines == ["FASTTRACK_DEMO_DEFECT="]  # found in the log, earlier in the engine's life
    assert not live_engines()


def test_a_node_without_an_address_is_reached_by_its_name(tmp_path: Path) -> None:
    from fasttrack.engine.launchers import slurm_node_address

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/bash\necho "NodeName=$4 NodeAddr=(null)"\n')
    (bin_dir / "scontrol").chmod(0o755)
    assert slurm_node_address("gb7", {"PATH": f"{bin_dir}:/usr/bin:/bin"}) == "gb7"
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho 'slurm_load_node error: Invalid node name' >&2; exit 1\n")
    assert slurm_node_address("gb7", {"PATH": f"{bin_dir}:/usr/bin:/bin"}) == "gb7"
    (bin_dir / "scontrol").unlink()
    assert slurm_node_address("gb7", {"PATH": str(bin_dir)}) == "gb7"  # no scontrol at all


def test_the_driver_reaches_a_slurm_head_node_at_its_address(tmp_path: Path) -> None:
    """A Slurm node name need not resolve on the driver's host: the API server's URL uses its NodeAddr."""
    from fasttrack.engine.launchers import LocalLauncher, SlurmLauncher

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/bash\necho "NodeName=$4 NodeHostname=localhost NodeAddr=10.0.0.7"\n')
    (bin_dir / "scontrol").chmod(0o755)
    launcher = SlurmLauncher(env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "n1"})
    assert launcher.address("n1") == "10.0.0.7"
    assert LocalLauncher().address("127.0.0.1") == "127.0.0.1"
