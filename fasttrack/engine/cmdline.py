"""The engine's command line: one place turns what a side serves into each node's argv and environment.

Two steps, the same for every place an engine's processes run:

* :func:`serve_spec`: (scope, engine group, side, run folder) -> :class:`ServeSpec`, what the side's
  engine serves wherever it runs: the model, the scope's vLLM arguments with fasttrack's own (the served
  model name; the path-evidence settings: vLLM's ``--profiler-config`` writing traces under
  ``<run folder>/profiles/<name>``, per-request metrics, the folder of the device counters a scope names)
  and the scope's environment;
* :func:`engine_command`: (that spec, node rank, executor) -> :class:`EngineCommand`, one node's argv
  (the executor's entry program, then vLLM's arguments: ``--model``, the API address on the node that
  serves it, the spec's arguments, the multi-node flags ``--nnodes --master-addr --master-port
  --node-rank --headless``) and its environment: the host's, :data:`HARNESS_ENV`, the scope's, the
  executor's own additions, and last the host's GPU safety settings (:data:`HOST_SAFETY_ENV`: the host's
  value unchanged, else the safe value), which nothing before them can change.

An :class:`Executor` says where a node process runs and how it is written down there:
:class:`LocalExecutor` (a process on this host), :class:`SrunExecutor` (one ``srun`` task per node that
learns its rank from Slurm), and the Kubernetes renderer's pod executor (a LeaderWorkerSet pod). The
launchers (:mod:`fasttrack.engine.launchers`) start the processes; the renderers only write them down.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Mapping, Protocol, Sequence

from fasttrack.engine.compile_cache import INDUCTOR_CACHE_ENV, compile_cache_env, inductor_cache_dir
from fasttrack.engine.flags import per_request_metrics_args, profiler_args, profiler_dir_from_args, server_module
from fasttrack.errors import ScopeError
from fasttrack.scope import HOST_SAFETY_ENV

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.planning.plan import EngineGroup
    from fasttrack.scope import Scope

NODE_MAIN = Path(__file__).with_name("node_main.py")
"""The node entry script (run by path under the engine's interpreter, which needs no fasttrack)."""

HARNESS_ENV: dict[str, str] = {"VLLM_SERVER_DEV_MODE": "1"}
"""Set for every engine the harness starts, on both sides (the scope's ``env`` may override
or unset it). Development mode serves vLLM's ``/pause`` and ``/resume``, which the checks
use to hold the scheduler while a round of requests arrives, so the round starts in one
engine step (:meth:`~fasttrack.engine.client.EngineClient.pause_scheduler`), and ``/server_info``,
where a driver that attaches the engine by URL finds its profiler folder. vLLM's own
benchmark sweep sets it for its cache resets. It adds endpoints and changes nothing on the
model's path."""

DEVICE_COUNTERS_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""Where an engine's processes publish the device counters a scope's ``path_markers.device_counters`` names:
prometheus_client's multiprocess mode (the worker processes count, the API server serves ``/metrics``)."""

NODE_REPORTS_ENV = "FASTTRACK_NODE_REPORTS"
"""The folder where every node that runs through the node script writes its hardware report
(``node<rank>.json``, :mod:`fasttrack.engine.node_report`): ``<run folder>/engines/<name>.nodes``, next to the
profiler folder a driver finds on ``/server_info`` (:func:`node_reports_dir`)."""


def node_reports_dir(profiler_dir: str | os.PathLike[str]) -> Path:
    """The node reports' folder of an engine whose traces go to ``profiler_dir`` (``<run>/profiles/<name>``)."""
    p = Path(profiler_dir)
    return p.parent.parent / "engines" / f"{p.name}.nodes"


Role = Literal["server", "leader", "follower", "task"]
"""What a node process does: ``server`` (a single-node engine), ``leader`` (node 0: the API server),
``follower`` (a headless node), ``task`` (a node that learns its rank where it runs: an ``srun`` task)."""


def host_safety_env(host_env: Mapping[str, str]) -> dict[str, str]:
    """The GPU safety settings an engine gets: each as the host sets it (unchanged), else its safe value."""
    return {k: host_env[k] if k in host_env else v for k, v in HOST_SAFETY_ENV.items()}


def safety_exports() -> list[str]:
    """Shell lines that give a job the safety settings: the host's value where it sets one, else the safe one."""
    return [f'export {k}="${{{k}-{v}}}"' for k, v in HOST_SAFETY_ENV.items()]


@dataclass(frozen=True)
class ServeSpec:
    """What one side's engine serves, wherever its processes run."""

    side: str
    model: str
    args: tuple[str, ...] = ()
    """vLLM's arguments for the side (identical on every node), fasttrack's own included."""
    env: Mapping[str, str | None] = field(default_factory=dict)
    """The scope's environment for the side (None: unset the variable)."""

    def __post_init__(self) -> None:
        taken = [k for k in HOST_SAFETY_ENV if k in self.env]
        if taken:  # the scope's own validation says this first; this guards every other way in
            raise ScopeError(
                f"the {self.side} engine's environment sets {', '.join(taken)}, a host GPU safety setting that "
                "only the host decides (NVLink multicast can take shared GPUs down).",
                hint="Remove it from engine.env / engine.<side>.env; every engine gets the host's value unchanged, "
                "or the safe value where the host sets none.",
            )

    @property
    def profiler_dir(self) -> Path | None:
        """Where the engine's profiler writes its traces (None: no profiler)."""
        return profiler_dir_from_args(self.args)


def serve_spec(
    scope: "Scope",
    group: "EngineGroup",
    side: str,
    *,
    model: str | os.PathLike[str],
    run_dir: str | os.PathLike[str],
    name: str,
    args: Sequence[str] | None = None,
    evidence: bool = True,
    per_request_metrics: bool | None = None,
) -> ServeSpec:
    """What ``side`` of ``group`` serves: the group's arguments for the side (or ``args``), the served model
    name, and with ``evidence`` the profiler configuration (traces under ``<run_dir>/profiles/<name>``),
    per-request metrics (``per_request_metrics`` None: when the installed vLLM has them), where the scope
    names device counters, their folder (:data:`DEVICE_COUNTERS_ENV`: ``<run_dir>/engines/<name>.prometheus``),
    and the folder of the node reports (:data:`NODE_REPORTS_ENV`)."""
    out = [str(a) for a in (group.args[side] if args is None else args)]
    served = scope.model.served_name
    if served and "--served-model-name" not in out:
        out += ["--served-model-name", served]
    env: dict[str, str | None] = dict(group.env[side])
    if evidence:
        out += profiler_args(Path(run_dir) / "profiles" / name)
        out += per_request_metrics_args(out, supported=per_request_metrics)  # the engine core's own timing (perf)
        markers = scope.path_markers
        if markers is not None and markers.device_counters is not None:
            env[DEVICE_COUNTERS_ENV] = str(Path(run_dir) / "engines" / f"{name}.prometheus")
        env[NODE_REPORTS_ENV] = str(node_reports_dir(Path(run_dir) / "profiles" / name))
    return ServeSpec(side=side, model=str(model), args=tuple(out), env=env)


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of a multi-node engine meet (vLLM's ``--master-addr``/``--master-port``)."""

    nnodes: int
    master_addr: str
    master_port: int | str


class Executor(Protocol):
    """Where an engine's node processes run, and how a node is written down there."""

    name: str
    bind_host: str
    """Where the API server listens by default."""

    def entry(self, python: str, role: Role) -> list[str]:
        """The program that runs a node in ``role``, before vLLM's arguments."""
        ...

    def rank(self, rank: int) -> str:
        """How node ``rank``'s ``--node-rank`` is written."""
        ...

    def node_env(self, env: dict[str, str], *, python: str, rank: int | None, nnodes: int) -> dict[str, str]:
        """The executor's additions to a node's environment."""
        ...


def local_node_env(env: Mapping[str, str], rank: int) -> dict[str, str]:
    """The environment of node ``rank`` on this host: inductor's cache in a folder of its own
    (``<cache>/node<rank>``, under :func:`inductor_cache_dir`). Node processes
    of one host compile the same graphs at the same moment, and inductor's compiled-kernel cache is
    not safe for that: one rank loaded a kernel library the other was still writing (``ImportError:
    ... .so: file too short``) and its engine died on its first request."""
    return {**env, INDUCTOR_CACHE_ENV: os.path.join(inductor_cache_dir(env), f"node{rank}")}


class LocalExecutor:
    """A process on this host: the API server as ``python -m <vLLM's server module>``, a follower through
    :data:`NODE_MAIN`; compiled code reused across starts, each node of a multi-node engine with its own
    inductor cache (:func:`local_node_env`)."""

    name = "local"
    bind_host = "127.0.0.1"

    def entry(self, python: str, role: Role) -> list[str]:
        if role in ("server", "leader"):
            return [python, "-m", server_module()]
        return [python, str(NODE_MAIN), role]

    def rank(self, rank: int) -> str:
        return str(rank)

    def node_env(self, env: dict[str, str], *, python: str, rank: int | None, nnodes: int) -> dict[str, str]:
        env = {**env, **compile_cache_env(python, env)}  # reuse compiled code across starts
        return local_node_env(env, rank or 0) if nnodes > 1 else env


class SrunExecutor(LocalExecutor):
    """One ``srun`` task per node: every task runs :data:`NODE_MAIN` ``slurm``, which takes the node's rank
    from ``SLURM_NODEID`` (0 leads, the others follow headless); the API server listens on every address."""

    name = "slurm"
    bind_host = "0.0.0.0"

    def entry(self, python: str, role: Role) -> list[str]:
        return [python, str(NODE_MAIN), "slurm"]

    def node_env(self, env: dict[str, str], *, python: str, rank: int | None, nnodes: int) -> dict[str, str]:
        return {**env, **compile_cache_env(python, env)}  # nodes are hosts of their own: one cache each


@dataclass(frozen=True)
class EngineCommand:
    """One node's process: its argv and environment."""

    argv: list[str]
    vllm_args: list[str]
    """vLLM's arguments alone (``argv`` without the entry program)."""
    env: dict[str, str]
    role: Role
    profiler_dir: Path | None


def engine_command(
    spec: ServeSpec,
    *,
    executor: Executor,
    python: str,
    host_env: Mapping[str, str],
    api_port: int | str,
    api_host: str | None = None,
    rank: int | None = 0,
    rendezvous: Rendezvous | None = None,
) -> EngineCommand:
    """Node ``rank`` of the engine ``spec`` describes, run by ``executor`` (see the module docstring).

    Without ``rendezvous`` the engine is one process (``rank`` is ignored); with it, ``rank`` None means the
    node learns its rank where it runs (:class:`SrunExecutor`). ``host_env`` is the environment the process
    starts from (this host's; a pod's: the site's)."""
    nnodes = rendezvous.nnodes if rendezvous is not None else 1
    role: Role = "server" if nnodes == 1 else "task" if rank is None else "leader" if rank == 0 else "follower"
    vllm = ["--model", spec.model]
    if role != "follower":  # followers serve no API
        vllm += ["--host", api_host or executor.bind_host, "--port", str(api_port)]
    vllm += spec.args
    if rendezvous is not None and nnodes > 1:
        vllm += ["--nnodes", str(nnodes), "--master-addr", rendezvous.master_addr]
        vllm += ["--master-port", str(rendezvous.master_port)]
        if rank is not None:
            vllm += ["--node-rank", executor.rank(rank)] + (["--headless"] if rank > 0 else [])
    env = dict(host_env)
    env.update(HARNESS_ENV)
    for k, v in spec.env.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    env = executor.node_env(env, python=python, rank=rank, nnodes=nnodes)
    env.update(host_safety_env(host_env))  # last: nothing before the host's safety settings changes them
    return EngineCommand(
        argv=[*executor.entry(python, role), *vllm],
        vllm_args=vllm,
        env=env,
        role=role,
        profiler_dir=spec.profiler_dir,
    )
