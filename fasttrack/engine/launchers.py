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

Each node's command line and environment come from
:func:`~fasttrack.engine.cmdline.engine_command`, through the launcher's executor (local
processes, ``srun`` tasks). Launchers only start processes;
:class:`~fasttrack.engine.multinode.MultiNodeEngine` waits for health, watches every node
and tears them all down.
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

from fasttrack import registry
from fasttrack.engine.cmdline import (
    EngineCommand,
    Executor,
    LocalExecutor,
    Rendezvous,
    ServeSpec,
    SrunExecutor,
    engine_command,
)
from fasttrack.engine.logs import free_log_path
from fasttrack.engine.procs import start_logged


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
    env: dict[str, str] = field(default_factory=dict)
    """The environment the process was started with."""

    @property
    def label(self) -> str:
        if len(self.ranks) == 1:
            return f"node {self.ranks[0]} ({self.host})"
        return f"nodes {self.ranks[0]}-{self.ranks[-1]} ({self.host})"


@dataclass
class LaunchRequest:
    """What the engine asks a launcher to start."""

    python: str
    spec: ServeSpec
    """What the engine serves (its vLLM arguments are identical on every node)."""
    nnodes: int
    api_port: int
    master_port: int
    host_env: dict[str, str]
    """The environment the node processes start from (this host's)."""
    log_dir: Path
    log_name: str
    gpus_per_node: int | None = None

    def command(self, executor: Executor, *, rank: int | None, master_addr: str) -> EngineCommand:
        """Node ``rank``'s command line (:func:`~fasttrack.engine.cmdline.engine_command`)."""
        return engine_command(
            self.spec,
            executor=executor,
            python=self.python,
            host_env=self.host_env,
            api_port=self.api_port,
            rank=rank,
            rendezvous=Rendezvous(self.nnodes, master_addr, self.master_port),
        )


class Launcher(ABC):
    """Starts the node processes of one multi-node engine, through its :class:`Executor`."""

    name: str
    executor: Executor

    @abstractmethod
    def hosts(self, nnodes: int) -> list[str]:
        """The host of each node rank (rank 0 first)."""

    def address(self, host: str) -> str:
        """The address the driver reaches ``host`` at (its API server's URL): the host itself by default."""
        return host

    @abstractmethod
    def launch(self, req: LaunchRequest) -> list[NodeProcess]:
        """Start every node; the first process returned runs node 0 (the API server)."""


@registry.component("launcher")
class LocalLauncher(Launcher):
    """Every node on this host, talking over loopback (CPU rehearsals and tests)."""

    name = "local"

    def __init__(self) -> None:
        self.executor = LocalExecutor()

    def hosts(self, nnodes: int) -> list[str]:
        return ["127.0.0.1"] * nnodes

    def commands(self, req: LaunchRequest) -> list[EngineCommand]:
        """Each node's command line, rank 0 first (they meet on loopback)."""
        return [req.command(self.executor, rank=rank, master_addr="127.0.0.1") for rank in range(req.nnodes)]

    def launch(self, req: LaunchRequest) -> list[NodeProcess]:
        master = "127.0.0.1"
        out: list[NodeProcess] = []
        lock = threading.Lock()
        for rank, cmd in enumerate(self.commands(req)):
            log_path = free_log_path(req.log_dir, f"{req.log_name}.node{rank}")
            header = (
                f"# fasttrack: node {rank} of {req.nnodes} ({cmd.role}), launcher local\n"
                f"# argv: {subprocess.list2cmdline(cmd.argv)}\n"
            )
            with lock:
                proc = start_logged(cmd.argv, log_path, cmd.env, header)
            out.append(
                NodeProcess(
                    ranks=[rank],
                    host=master,
                    argv=cmd.argv,
                    log_path=log_path,
                    proc=proc,
                    node_logs={rank: log_path},
                    env=cmd.env,
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


@registry.component("launcher")
class SlurmLauncher(Launcher):
    """One ``srun`` step inside the allocation: one task per node, the role from ``SLURM_NODEID``; the master
    address is the first node's ``NodeAddr`` (:func:`slurm_node_address`)."""

    name = "slurm"

    def __init__(
        self, *, srun: str = "srun", extra_args: Sequence[str] | None = None, env: dict[str, str] | None = None
    ):
        self.executor = SrunExecutor()
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

    def address(self, host: str) -> str:
        """The node's ``NodeAddr`` (:func:`slurm_node_address`), as the other nodes reach it: a Slurm node name
        need not resolve on the driver's host."""
        return slurm_node_address(host, self.env)

    def command(self, req: LaunchRequest) -> tuple[list[str], EngineCommand, dict[int, Path]]:
        """The ``srun`` command line, the node tasks' command and the log path of each node rank."""
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
        task = req.command(self.executor, rank=None, master_addr=slurm_node_address(hosts[0], self.env))
        return [*srun, *task.argv], task, logs

    def argv(self, req: LaunchRequest) -> tuple[list[str], dict[int, Path]]:
        """The ``srun`` command line and the log path of each node rank."""
        argv, _, logs = self.command(req)
        return argv, logs

    def launch(self, req: LaunchRequest) -> list[NodeProcess]:
        argv, task, logs = self.command(req)
        hosts = self.hosts(req.nnodes)
        log_path = free_log_path(req.log_dir, f"{req.log_name}.srun")
        header = f"# fasttrack: {req.nnodes} nodes {hosts}, launcher slurm\n# argv: {subprocess.list2cmdline(argv)}\n"
        proc = start_logged(argv, log_path, task.env, header)  # srun --export=ALL: every task gets it
        return [
            NodeProcess(
                ranks=list(range(req.nnodes)),
                host=hosts[0],
                argv=argv,
                log_path=log_path,
                proc=proc,
                node_logs=logs,
                env=task.env,
            )
        ]


registry.BUILTIN_MODULES["launcher"] = (__name__,)


def default_launcher(env: dict[str, str] | None = None) -> Launcher:
    """``slurm`` inside a Slurm allocation of several nodes, else ``local``."""
    env = dict(os.environ) if env is None else env
    nodes = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or ""
    if nodes.isdigit() and int(nodes) > 1:
        return SlurmLauncher(env=env)
    return LocalLauncher()


def get_launcher(name: str | None) -> Launcher:
    """The launcher registered as ``name`` (kind ``launcher``; None: :func:`default_launcher`). An unknown name is
    an error listing the registered ones."""
    if name is None:
        return default_launcher()
    launcher: Launcher = registry.get("launcher", name)()
    return launcher
