"""``fasttrack k8s drive``: what a multi-node shard's driver Job does, start to end.

1. **Its turn.** Without a Kueue queue, shards run in waves: the driver waits until the shard ahead of it in its
   slot recorded an exit status (``--after``; at most ``--after-max-s``, that shard's own deadline). With a queue,
   Kueue admits the engines' LeaderWorkerSets by quota instead.
2. **Its engines.** It creates the shard's engine objects (ComputeDomains, LeaderWorkerSets, Services; the YAML the
   renderer wrote into the shard's ConfigMap), each owned by the driver's own Job (its uid from the pod's label),
   and takes ownership of that ConfigMap: when the Job is deleted (by hand, or ``ttlSecondsAfterFinished`` after
   it ended) they go with it.
3. **The run.** Once both leaders answer ``/health`` it runs ``fasttrack validate`` against them (the arguments
   after ``--``), passing SIGTERM on (pod deletion: fasttrack writes a partial bundle).
4. **Clean-up.** Whatever happened, it deletes its engines, then records the exit status (and, when validate never
   ran, why) next to the shard's bundle, where the merge and the next wave look for it.

A driver needs no GPU: its engines are remote, and validate checks the scope's hardware against what the
engines' nodes report.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from fasttrack.errors import FasttrackError
from fasttrack.executors.k8s_api import Api
from fasttrack.executors.k8s_objects import EXIT_NOTE, EXIT_STATUS, OWNER_UID

EXIT_NO_ENGINES = 4
"""The driver's exit status when its engines never answered (validate did not run)."""


@dataclass
class DriveOptions:
    engines: Path
    """The shard's engine objects (YAML documents)."""
    out: Path
    """The shard's run folder on the shared volume (``validate --out``; the exit status goes there)."""
    urls: dict[str, str]
    validate: list[str]
    """``fasttrack validate ...``: the whole command line."""
    owner_job: str
    owner_uid: str
    configmap: str | None = None
    namespace: str = "default"
    after: Path | None = None
    """The exit status of the shard ahead of this one in its wave slot."""
    after_max_s: float = 0.0
    health_timeout_s: float = 3600.0
    poll_s: float = 10.0


@dataclass
class _State:
    stop: list[int] = field(default_factory=list)
    child: subprocess.Popen[bytes] | None = None


def load_engines(path: Path, owner_uid: str) -> list[dict[str, Any]]:
    """The engine objects with the driver Job's uid in their owner references."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise FasttrackError(f"cannot read the engine objects {str(path)!r}: {exc}.") from None
    for d in docs:
        for ref in d.get("metadata", {}).get("ownerReferences", []):
            if ref.get("uid") == OWNER_UID:
                ref["uid"] = owner_uid
    return docs


def _wait(cond: Callable[[], bool], timeout_s: float, st: _State, poll_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not st.stop:
        if cond():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())) or 0.1)
    return False


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url.rstrip("/") + "/health", timeout=5.0).status_code == 200
    except httpx.HTTPError:
        return False


def drive(opts: DriveOptions, *, api: Api | None = None, log: Callable[[str], None] = print) -> int:
    """Run one multi-node shard (see the module docstring); returns the exit status it records."""
    st = _State()

    def on_term(signum: int, frame: object) -> None:
        st.stop.append(signum)
        if st.child is not None and st.child.poll() is None:
            st.child.send_signal(signal.SIGTERM)

    prev = {s: signal.signal(s, on_term) for s in (signal.SIGTERM, signal.SIGINT)}
    opts.out.mkdir(parents=True, exist_ok=True)
    for name in (EXIT_STATUS, EXIT_NOTE):
        (opts.out / name).unlink(missing_ok=True)
    docs = load_engines(opts.engines, opts.owner_uid)
    rc, note = 0, None
    created: list[dict[str, Any]] = []
    try:
        api = api or Api.in_cluster()
        after = opts.after
        if after is not None and not after.exists():
            log(f"waiting for the shard ahead in this wave slot ({after}), at most {opts.after_max_s:.0f} s")
            if not _wait(after.exists, opts.after_max_s, st, opts.poll_s) and not st.stop:
                log("the shard ahead recorded no exit status in its time; going ahead")
        if not st.stop:
            owner = {"apiVersion": "batch/v1", "kind": "Job", "name": opts.owner_job, "uid": opts.owner_uid}
            if opts.configmap:
                api.own("v1", "ConfigMap", opts.namespace, opts.configmap, owner)
            for d in docs:
                api.create(d)
                created.append(d)
                log(f"created {d['kind']} {d['metadata']['name']}")
            urls = sorted(opts.urls.values())
            if not _wait(lambda: all(_healthy(u) for u in urls), opts.health_timeout_s, st, opts.poll_s):
                rc = 128 + st.stop[0] if st.stop else EXIT_NO_ENGINES
                note = (
                    f"the driver was stopped (signal {st.stop[0]}) before its engines answered"
                    if st.stop
                    else f"the engines did not answer /health within {opts.health_timeout_s:.0f} s ({', '.join(urls)})"
                )
        else:
            rc, note = 128 + st.stop[0], f"the driver was stopped (signal {st.stop[0]}) before its turn"
        if rc == 0 and note is None:
            st.child = subprocess.Popen(opts.validate, start_new_session=False)
            rc = _wait_child(st)
    except FasttrackError as exc:
        rc, note = EXIT_NO_ENGINES, exc.message
        log(f"driver: {exc.message}")
    finally:
        for d in reversed(created):
            try:
                assert api is not None
                api.delete(d)
                log(f"deleted {d['kind']} {d['metadata']['name']}")
            except FasttrackError as exc:  # the owner reference deletes it with the Job
                log(f"driver: {exc.message}")
        if note:
            (opts.out / EXIT_NOTE).write_text(note[:2000] + "\n")
        (opts.out / EXIT_STATUS).write_text(f"{rc}\n")
        for s, h in prev.items():
            signal.signal(s, h)
    return rc


def _wait_child(st: _State) -> int:
    assert st.child is not None
    while True:
        try:
            return st.child.wait()
        except KeyboardInterrupt:  # pragma: no cover - SIGINT is handled above
            continue


def env_owner() -> tuple[str, str]:
    """The driver Job's name and uid, from the pod's environment (the renderer maps them from the pod's labels)."""
    name, uid = os.environ.get("JOB_NAME", ""), os.environ.get("JOB_UID", "")
    if not name or not uid:
        raise FasttrackError("JOB_NAME and JOB_UID are not set: this runs in a driver Job's pod.")
    return name, uid
