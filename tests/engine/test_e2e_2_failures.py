"""A real vLLM engine that fails: a killed engine core is a typed error with a log tail.

The crash test needs no engine of its own: it kills the session's last engine, after every
other test that uses it (``last_engine``). A start that fails is a real vLLM start of its own;
the planted-defect ``fasttrack validate`` already makes one (the unsupported-deployment probe,
which the demo plugin refuses), so what a failed start reports (its typed error's exit code, log
tail and log, and no process left) is tested there
(``tests/e2e/test_e2e_validate.py::test_a_refused_start_reports_its_exit_code_and_log_tail_and_leaves_no_process``)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from fasttrack.engine import EngineCrashed
from fasttrack.engine.procs import group_members

pytestmark = pytest.mark.e2e


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_killed_engine_core_is_reported_as_a_crash(engine_slot, last_engine) -> None:
    """Kills the engine core of the session's last engine (scheduled after every other user of it)."""
    eng = last_engine
    pgid = eng.pgid
    core = [p for p in eng.group_pids() if _comm(p).startswith("VLLM::EngineCor")]
    assert core, f"no engine core process among {[(p, _comm(p)) for p in eng.group_pids()]}"
    os.kill(core[0], signal.SIGKILL)

    async def go():
        async with eng.client(timeout=60.0) as c:
            for _ in range(20):  # the server notices the dead core within a few requests
                await c.complete("Hello", max_tokens=8, temperature=0.0)
                await asyncio.sleep(0.5)

    with pytest.raises(EngineCrashed) as ei:
        asyncio.run(go())
    err = ei.value
    assert err.side == eng.side in ("baseline", "candidate")
    assert err.log_tail.strip(), "a crash must carry the engine's last log lines"
    with pytest.raises(EngineCrashed):
        eng.check_alive(grace=30.0)
    engine_slot.release()
    assert group_members(pgid) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
