"""Lifecycle logic against a stand-in server process (fast; the real-vLLM versions are e2e)."""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

from fasttrack.engine import (
    AttachedEngine,
    EngineCrashed,
    EngineError,
    EngineStartError,
    EngineUnreachable,
    ManagedEngine,
    live_engines,
)
from fasttrack.engine.procs import group_members

FAKE = Path(__file__).with_name("fake_vllm_server.py")


@pytest.fixture(autouse=True)
def _no_session_engine(engine_slot) -> None:
    """These tests start engines of their own: stop the session's shared engine first."""
    engine_slot.release()


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    """An 'interpreter' that runs the stand-in server whatever module it is asked for."""
    exe = tmp_path / "fake-python"
    # "-c CODE" (the environment probe) runs the real interpreter
    exe.write_text(
        f'#!/bin/sh\nif [ "$1" = "-c" ]; then exec "{sys.executable}" "$@"; fi\nexec "{sys.executable}" "{FAKE}" "$@"\n'
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def _engine(fake_python: str, tmp_path: Path, mode: str, **kw) -> ManagedEngine:
    env = {"FAKE_VLLM_MODE": mode, **kw.pop("env", {})}
    return ManagedEngine(
        side=kw.pop("side", "baseline"),
        model="fake-model",
        args=kw.pop("args", ["--seed", "0"]),
        env=env,
        log_dir=tmp_path / "logs",
        python=fake_python,
        startup_timeout=kw.pop("startup_timeout", 30.0),
        **kw,
    )


def _assert_group_gone(pgid: int) -> None:
    assert group_members(pgid) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def test_start_health_stop_leaves_no_process(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path, "ok").start()
    try:
        assert eng.running and eng.owned
        assert eng.model == "fake-model"
        assert eng.health() == 200
        assert eng.base_url.startswith("http://127.0.0.1:")
        assert len(eng.group_pids()) == 2  # server + "engine core"
        assert eng in live_engines()
        argv = eng.argv
        assert argv[1:3] == ["-m", "vllm.entrypoints.launchers.api_server.entry"]  # not the deprecated module
        assert argv[argv.index("--port") + 1] == str(eng.port)
        assert argv[-2:] == ["--seed", "0"]
        eng.check_alive()
    finally:
        report = eng.stop()
    assert report is not None
    assert report.signals_sent == ["SIGINT"]
    assert report.clean and report.exit_code == 0
    _assert_group_gone(eng.pgid)
    assert eng not in live_engines()
    assert eng.stop() is report  # idempotent


def test_context_manager_stops_on_exception(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path, "ok")
    with pytest.raises(RuntimeError, match="boom"):
        with eng.start():
            raise RuntimeError("boom")
    _assert_group_gone(eng.pgid)


def test_escalates_to_sigkill_for_a_stubborn_group(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path, "stubborn").start()
    report = eng.stop(timeouts=(0.5, 0.5, 5.0))
    assert report is not None
    assert report.signals_sent == ["SIGINT", "SIGTERM", "SIGKILL"]
    assert report.exit_code == -signal.SIGKILL
    _assert_group_gone(eng.pgid)


def test_kills_children_the_server_leaves_behind(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path, "orphan").start()
    child_pids = [p for p in eng.group_pids() if p != eng.pid]
    assert child_pids
    report = eng.stop(timeouts=(0.5, 0.5, 5.0))
    assert report is not None and report.exit_code == 0
    # the server went on SIGINT, its child only on SIGKILL
    assert report.signals_sent == ["SIGINT", "SIGTERM", "SIGKILL"]
    _assert_group_gone(eng.pgid)


def test_exit_before_healthy_raises_with_log_tail(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path, "exit")
    with pytest.raises(EngineStartError) as ei:
        eng.start()
    err = ei.value
    assert err.process_exit_code == 3 and err.exit_code == 2  # the process's code; the CLI's
    assert "something is wrong with the model" in err.log_tail
    assert "something is wrong with the model" in str(err)
    assert err.log_path and Path(err.log_path).exists()
    assert eng not in live_engines()


def test_startup_timeout_stops_the_engine(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path, "hang", startup_timeout=2.0)
    seen = []
    eng.progress, eng.progress_interval = seen.append, 0.5
    t0 = time.monotonic()
    with pytest.raises(EngineStartError, match="did not answer /health within 2 s"):
        eng.start()
    assert time.monotonic() - t0 < 30
    assert seen and seen[-1].side == "baseline" and seen[-1].elapsed_s > 0
    _assert_group_gone(eng.pgid)


def test_child_death_is_reported_as_crash(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path, "ok").start()
    try:
        core = [p for p in eng.group_pids() if p != eng.pid][0]
        os.kill(core, signal.SIGKILL)
        with pytest.raises(EngineCrashed) as ei:
            eng.check_alive(grace=10.0)
        assert ei.value.process_exit_code == 1
        assert "engine core died" in ei.value.log_tail
        assert "exited with code 1" in str(ei.value)
    finally:
        eng.stop()
    _assert_group_gone(eng.pgid)


def test_env_is_inherited_with_overrides_and_unsets(fake_python: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FASTTRACK_DEMO_DEFECT", "silent-fallback")
    with _engine(fake_python, tmp_path, "ok").start() as eng:
        assert "FASTTRACK_DEMO_DEFECT=silent-fallback" in eng.log_tail(50)
        env = eng.environment()
        assert env.owned and env.env_relevant.get("FASTTRACK_DEMO_DEFECT") == "silent-fallback"
        assert env.env_overrides == {"FAKE_VLLM_MODE": "ok"}
        assert env.argv == eng.argv
        assert env.served_vllm_version == "0.0-fake"
    with _engine(fake_python, tmp_path, "ok", env={"FASTTRACK_DEMO_DEFECT": None}).start() as eng:
        assert "FASTTRACK_DEMO_DEFECT=\n" in eng.read_log() or eng.log_tail(50).count("FASTTRACK_DEMO_DEFECT=") == 1
        assert "FASTTRACK_DEMO_DEFECT=silent" not in eng.read_log()
    # the host's GPU safety settings: its own value unchanged, the safe value where it sets none
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "7")
    monkeypatch.delenv("NVSHMEM_DISABLE_NVLS", raising=False)
    with _engine(fake_python, tmp_path, "ok").start() as eng:
        live = Path(f"/proc/{eng.pid}/environ").read_bytes().split(b"\0")
        assert b"NCCL_NVLS_ENABLE=7" in live and b"NVSHMEM_DISABLE_NVLS=1" in live
        assert eng.environment().env_relevant["NVSHMEM_DISABLE_NVLS"] == "1"


def test_only_one_engine_at_a_time(fake_python: str, tmp_path: Path) -> None:
    with _engine(fake_python, tmp_path, "ok").start():
        other = _engine(fake_python, tmp_path, "ok", side="candidate")
        with pytest.raises(EngineError, match="another engine is running"):
            other.start()
        both = _engine(fake_python, tmp_path, "ok", side="candidate", exclusive=False).start()
        both.stop()


def test_log_offsets_bracket_new_output(fake_python: str, tmp_path: Path) -> None:
    with _engine(fake_python, tmp_path, "ok").start() as eng:
        start = eng.log_offset()
        eng.health()
        time.sleep(0.3)
        assert "GET /health" in eng.read_log(start)
        assert eng.log_path is not None and eng.log_path.name == "baseline-engine.log"


def test_attach_mode_does_not_own_the_engine(fake_python: str, tmp_path: Path) -> None:
    with _engine(fake_python, tmp_path, "ok").start() as owned:
        att = AttachedEngine(side="baseline", url=owned.base_url + "/v1/")
        assert att.base_url == owned.base_url
        assert att.owned is False and att.model == "fake-model"
        att.check_alive()
        assert att.stop() is None
        assert owned.running  # attach-mode stop is a no-op
        env = att.environment()
        assert env.owned is False and env.source == "endpoint" and env.vllm_version == "0.0-fake"
        assert att.profiler_dir is None  # the engine reports no profiler folder
        assert att.describe()["owned"] is False
        url = owned.base_url
    with pytest.raises(EngineCrashed):
        att.check_alive()
    with pytest.raises(EngineUnreachable, match="no healthy vLLM engine answers"):
        AttachedEngine(side="candidate", url=url)


def test_an_attached_engine_on_this_host_reports_its_profiler_folder(fake_python: str, tmp_path: Path) -> None:
    """The path evidence of an attached engine: its traces are read from the folder it reports (``/server_info``)."""
    from fasttrack.engine import profiler_args

    traces = tmp_path / "traces"
    traces.mkdir()
    with _engine(fake_python, tmp_path, "ok", args=["--seed", "0", *profiler_args(traces)]).start() as owned:
        att = AttachedEngine(side="candidate", url=owned.base_url)
        assert att.profiler_dir == traces.resolve()
        named = tmp_path / "named"
        assert AttachedEngine(side="candidate", url=owned.base_url, profiler_dir=named).profiler_dir == named


def test_killed_server_is_a_crash_and_its_orphans_are_killed(fake_python: str, tmp_path: Path) -> None:
    eng = _engine(fake_python, tmp_path, "ok").start()
    try:
        core = [p for p in eng.group_pids() if p != eng.pid][0]
        os.kill(eng.pid, signal.SIGKILL)
        with pytest.raises(EngineCrashed) as ei:
            eng.check_alive(grace=10.0)
        assert ei.value.process_exit_code == -signal.SIGKILL
        assert "serving" in ei.value.log_tail
        # the orphaned "engine core" was taken down with the group
        with pytest.raises(ProcessLookupError):
            os.kill(core, 0)
    finally:
        eng.stop()
    _assert_group_gone(eng.pgid)
    assert eng not in live_engines()


HARNESS = """
import os, sys, time
from fasttrack.engine import ManagedEngine
eng = ManagedEngine(side="baseline", model="m", env={"FAKE_VLLM_MODE": "ok"}, log_dir=sys.argv[1],
                    python=sys.argv[2], startup_timeout=30)
eng.start()
print(eng.pgid, flush=True)
if sys.argv[3] == "exit":
    sys.exit(0)  # no stop(): the atexit hook must take the engine down
time.sleep(120)
"""


@pytest.mark.parametrize("how", ["exit", "sigterm", "sigkill"])
def test_engines_die_with_the_harness(fake_python: str, tmp_path: Path, how: str) -> None:
    """Interpreter exit, SIGTERM and even SIGKILL of the harness leave no engine behind."""
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(tmp_path), fake_python, how],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stdout is not None
        pgid = int(proc.stdout.readline())
        assert group_members(pgid)
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        elif how == "sigkill":
            proc.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=60)
        expected = {"exit": 0, "sigterm": 128 + signal.SIGTERM, "sigkill": -signal.SIGKILL}[how]
        assert code == expected
        deadline = time.monotonic() + 20
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert group_members(pgid) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_crashed_engine_does_not_block_the_next_start(fake_python: str, tmp_path: Path) -> None:
    first = _engine(fake_python, tmp_path, "ok").start()
    os.kill(first.pid, signal.SIGKILL)
    first._proc.wait()  # dead, but nobody called check_alive() or stop()
    with _engine(fake_python, tmp_path, "ok", side="candidate").start() as second:
        assert second.running
    _assert_group_gone(first.pgid)
    assert first not in live_engines()
