"""A real vLLM engine that fails: a bad start and a killed engine core are typed errors with log tails.

The crash test needs no engine of its own: it kills the session's last engine, after every
other test that uses it (``last_engine``)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from fasttrack.engine import EngineCrashed, EngineStartError, ManagedEngine
from fasttrack.engine.procs import group_members

pytestmark = pytest.mark.e2e


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_failed_start_reports_the_log_tail(no_session_engine, tmp_path: Path) -> None:
    eng = ManagedEngine(
        side="candidate",
        model=tmp_path / "no-such-model",
        args=["--gpu-memory-utilization", "0.2"],
        env={"HF_HUB_OFFLINE": "1"},
        log_dir=tmp_path,
        startup_timeout=300,
    )
    with pytest.raises(EngineStartError) as ei:
        eng.start()
    err = ei.value
    assert err.process_exit_code not in (None, 0)
    assert err.log_tail.strip() and "no-such-model" in err.log_tail
    assert err.log_path == str(eng.log_path)
    assert group_members(eng.pgid) == []


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
