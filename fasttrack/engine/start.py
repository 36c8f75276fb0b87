"""Starting an owned engine: one server process, or one process per node when it spans nodes."""

from __future__ import annotations

import os
from typing import Any, Sequence

from fasttrack.engine.launchers import Launcher
from fasttrack.engine.multinode import MultiNodeEngine
from fasttrack.engine.server import ManagedEngine


def start_engine(
    *,
    side: str,
    model: str | os.PathLike[str],
    args: Sequence[str] = (),
    env: dict[str, str | None] | None = None,
    log_dir: str | os.PathLike[str],
    nodes: int = 1,
    launcher: Launcher | None = None,
    gpus_per_node: int | None = None,
    **kwargs: Any,
) -> ManagedEngine:
    """Start an owned engine for one side and wait until it is healthy.

    ``nodes`` > 1: a :class:`~fasttrack.engine.multinode.MultiNodeEngine` whose node processes
    ``launcher`` starts (default: all on this host); else a :class:`~fasttrack.engine.server.ManagedEngine`."""
    if nodes > 1:
        return MultiNodeEngine(
            side=side,
            model=model,
            args=args,
            env=env,
            log_dir=log_dir,
            nodes=nodes,
            launcher=launcher,
            gpus_per_node=gpus_per_node,
            **kwargs,
        ).start()
    return ManagedEngine(side=side, model=model, args=args, env=env, log_dir=log_dir, **kwargs).start()
