"""How the node processes of a multi-node engine are started: the launcher interface.

A multi-node engine runs vLLM's multiprocessing backend across hosts: node 0 (the
leader) serves the OpenAI API with ``--nnodes N --node-rank 0 --master-addr A
--master-port P``; nodes 1..N-1 (followers) run headless with their ``--node-rank``
(see :mod:`fasttrack.engine.node_main`). A launcher turns that into processes:

* :class:`LocalLauncher`: every node is a process on this host (rehearsals and tests:
  the "nodes" talk over loopback); each in its own process group, with its own log.
* :class:`SlurmLauncher`: inside a Slurm allocation, one ``srun`` step with one task per
  node; each task reads its role from ``SLURM_NODEID``; one log per node (``%n``); srun
  ends the whole step when any task fails (``--kill-on-bad-exit``).

Launchers only start processes; :class:`~fasttrack.engine.multinode.MultiNodeEngine`
waits for health, watches every node and tears them all down.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from fasttrack.engine.compile_cache import INDUCTOR_CACHE_ENV, inductor_cache_dir
from fasttrack.engine.procs import parent_death_preexec

NODE_MAIN = Path(__file__).with_name("node_main.py")
"""The node entry script (run by path under the engine's interpreter)."""


def local_node_env(env: dict[str, str], rank: int) -> dict[str, str]:
    """The environment of node ``rank`` on this host: inductor's cache in a folder of its own
    (``<cache>/node<rank>``, under :func:`inductor_cache_dir`). Node processes
    of one host compile the same graphs at the same moment, and inductor's compiled-kernel cache is
    not safe for that: one rank loaded a kernel library the other was still writing (``ImportError:
    ... .so: file too short``) and its engine died on its first request."""
    return {**env, INDUCTOR_CACHE_ENV: os.path.join(inductor_cache_dir(env), f"node{rank}")}


def node_args(*, nnodes: int, rank: int | None, master_addr: str, master_port: int, headless: bool) -> list[str]:
    """vLLM's multi-node flags for one node (``rank`` None: the task finds its own, e.g. from Slurm)."""
    out = ["--nnodes", str(nnodes), "--master-addr", master_addr, "--master-port", str(master_port)]
    if rank is not None:
        out += ["--node-rank", str(rank)]
    if headless:
        out.append("--headless")
    return out


@dataclass
class NodeProcess:
    """One process the launcher started: one node, or (``srun``) all of them."""

    ranks: list[int]
    """Node ranks this process runs (one, or every rank for an ``srun`` step)."""
    host: str
    argv: list[str]
    log_path: Path
    """Where the process's output goes (for ``srun``: srun's own messages; the nodes log to ``node_logs``)."""
    proc: subprocess.Popen[bytes]
    node_logs: dict[int, Path] = field(default_factory=dict)
    """Log of each node rank."""

    @property
    def label(self) -> str:
        if len(self.ranks) == 1:
            return f"node {self.ranks[0]} ({self.host})"
        return f"nodes {self.ranks[0]}-{self.ranks[-1]} ({self.host})"


@dataclass
class LaunchRequest:
    """What the engine asks a launcher to start."""

    python: str
    server_module: str
    model: str
    args: list[str]
    """The scope's vLLM arguments for this side (identical on every node)."""
    nnodes: int
    api_port: int
    master_port: int
    env: dict[str, str]
    log_dir: Path
    log_name: str
    gpus_per_node: int | None = None


class Launcher(ABC):
    """Starts the node processes of one multi-node engine."""

    name: str

    @abstractmethod
    def hosts(self, nnodes: int) -> list[str]:
        """The host of each node rank (rank 0 first)."""

    def bind_host(self) -> str:
        """Where the leader's API server listens."""
        return "0.0.0.0"

    @abstractmethod
    def launch(self, req: LaunchRequest) -> list[NodeProcess]:
        """Start every node; the first process returned runs node 0 (the API server)."""


def _popen(argv: list[str], log_path: Path, env: dict[str, str], header: str) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(header.encode())
        log.flush()
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=parent_death_preexec(),
            close_fds=True,
        )


def _free_log(log_dir: Path, stem: str) -> Path:
    path = log_dir / f"{stem}.log"
    i = 2
    while path.exists():
        path = log_dir / f"{stem}-{i}.log"
        i += 1
    return path


class LocalLauncher(Launcher):
    """Every node on this host, talking over loopback (CPU rehearsals and tests)."""

    name = "local"

    def hosts(self, nnodes: int) -> list[str]:
        return ["127.0.0.1"] * nnodes

    def bind_host(self) -> str:
        return "127.0.0.1"

    def launch(self, req: LaunchRequest) -> list[NodeProcess]:
        master = "127.0.0.1"
        out: list[NodeProcess] = []
        lock = threading.Lock()
        for rank in range(req.nnodes):
            lead = rank == 0
            common = [
                *req.args,
                *node_args(
                    nnodes=req.nnodes, rank=rank, master_addr=master, master_port=req.master_port, headless=not lead
                ),
            ]
            if lead:
                argv = [
                    req.python,
                    "-m",
                    req.server_module,
                    "--model",
                    req.model,
                    "--host",
                    self.bind_host(),
                    "--port",
                    str(req.api_port),
                    *common,
                ]
            else:
                argv = [req.python, str(NODE_MAIN), "follower", "--model", req.model, *common]
            log_path = _free_log(req.log_dir, f"{req.log_name}.node{rank}")
            header = (
                f"# fasttrack: node {rank} of {req.nnodes} ({'leader' if lead else 'follower'}), launcher local\n"
                f"# argv: {subprocess.list2cmdline(argv)}\n"
            )
            with lock:
                proc = _popen(argv, log_path, local_node_env(req.env, rank), header)
            out.append(
                NodeProcess(
                    ranks=[rank], host=master, argv=argv, log_path=log_path, proc=proc, node_logs={rank: log_path}
                )
            )
        return out


def expand_nodelist(nodelist: str) -> list[str]:
    """A Slurm node list (``gb[01-03,7],login1``) as host names, in order."""
    hosts: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,]*)", nodelist):
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            hosts.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not hi:
                hosts.append(f"{prefix}{lo}{suffix}")
                continue
            width = len(lo)
            hosts.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(int(lo), int(hi) + 1))
    return [h for h in hosts if h]


def slurm_hostnames(env: dict[str, str] | None = None) -> list[str]:
    """The allocation's hosts in Slurm's order (``scontrol show hostnames``, else the list expanded here)."""
    env = dict(os.environ) if env is None else env
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        return []
    scontrol = shutil.which("scontrol", path=env.get("PATH"))
    if scontrol is not None:
        res = subprocess.run(
            [scontrol, "show", "hostnames", nodelist], capture_output=True, text=True, check=False, timeout=30
        )
        hosts = [h.strip() for h in res.stdout.splitlines() if h.strip()]
        if res.returncode == 0 and hosts:
            return hosts
    return expand_nodelist(nodelist)


def slurm_node_address(node: str, env: dict[str, str] | None = None) -> str:
    """The address other nodes reach ``node`` at: its ``NodeAddr`` (``scontrol -o show node``), which differs
    from the Slurm node name where the cluster names nodes apart from their hosts; the name where
    ``scontrol`` is missing or says nothing."""
    scontrol = shutil.which("scontrol", path=(env or os.environ).get("PATH"))
    if scontrol is None:
        return node
    res = subprocess.run(
        [scontrol, "-o", "show", "node", node], capture_output=True, text=True, check=False, timeout=30
    )
    if res.returncode == 0:
        for field in res.stdout.split():
            key, _, value = field.partition("=")
            if key == "NodeAddr" and value and value not in ("(null)", "None"):
                return value
    return node


class SlurmLauncher(Launcher):
    """One ``srun`` step inside the allocation: one task per node, the role from ``SLURM_NODEID``; the master
    address is the first node's ``NodeAddr`` (:func:`slurm_node_address`)."""

    name = "slurm"

    def __init__(
        self, *, srun: str = "srun", extra_args: Sequence[str] | None = None, env: dict[str, str] | None = None
    ):
        self.srun = srun
        self.env = dict(os.environ) if env is None else env
        self.extra_args = (
            list(extra_args) if extra_args is not None else shlex.split(self.env.get("FASTTRACK_SRUN_ARGS", ""))
        )

    def hosts(self, nnodes: int) -> list[str]:
        hosts = slurm_hostnames(self.env)
        if len(hosts) < nnodes:
            raise ValueError(
                f"the engine spans {nnodes} nodes and the Slurm allocation has {len(hosts)} "
                f"({self.env.get('SLURM_JOB_NODELIST', 'no SLURM_JOB_NODELIST')})"
            )
        return hosts[:nnodes]

    def argv(self, req: LaunchRequest) -> tuple[list[str], dict[int, Path]]:
        """The ``srun`` command line and the log path of each node rank."""
        hosts = self.hosts(req.nnodes)
        stem = f"{req.log_name}.node"
        logs = {r: req.log_dir / f"{stem}{r}.log" for r in range(req.nnodes)}
        srun = [
            self.srun,
            f"--nodes={req.nnodes}",
            f"--ntasks={req.nnodes}",
            "--ntasks-per-node=1",
            f"--nodelist={','.join(hosts)}",
            "--kill-on-bad-exit=1",
            "--overlap",
            "--export=ALL",
            f"--output={req.log_dir / stem}%n.log",
        ]
        if req.gpus_per_node:
            srun.append(f"--gpus-per-node={req.gpus_per_node}")
        srun += self.extra_args
        task = [
            req.python,
            str(NODE_MAIN),
            "slurm",
            "--model",
            req.model,
            "--host",
            self.bind_host(),
            "--port",
            str(req.api_port),
            *req.args,
            *node_args(
                nnodes=req.nnodes,
                rank=None,
                master_addr=slurm_node_address(hosts[0], self.env),
                master_port=req.master_port,
                headless=False,
            ),
        ]
        return [*srun, *task], logs

    def launch(self, req: LaunchRequest) -> list[NodeProcess]:
        argv, logs = self.argv(req)
        hosts = self.hosts(req.nnodes)
        log_path = _free_log(req.log_dir, f"{req.log_name}.srun")
        header = f"# fasttrack: {req.nnodes} nodes {hosts}, launcher slurm\n# argv: {subprocess.list2cmdline(argv)}\n"
        proc = _popen(argv, log_path, req.env, header)
        return [
            NodeProcess(
                ranks=list(range(req.nnodes)), host=hosts[0], argv=argv, log_path=log_path, proc=proc, node_logs=logs
            )
        ]


LAUNCHERS = {"local": LocalLauncher, "slurm": SlurmLauncher}


def default_launcher(env: dict[str, str] | None = None) -> Launcher:
    """``slurm`` inside a Slurm allocation of several nodes, else ``local``."""
    env = dict(os.environ) if env is None else env
    nodes = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or ""
    if nodes.isdigit() and int(nodes) > 1:
        return SlurmLauncher(env=env)
    return LocalLauncher()


def get_launcher(name: str | None) -> Launcher:
    """The launcher called ``name`` (None: :func:`default_launcher`)."""
    if name is None:
        return default_launcher()
    if name not in LAUNCHERS:
        raise ValueError(f"unknown launcher {name!r}; use one of {sorted(LAUNCHERS)}")
    return LAUNCHERS[name]()
