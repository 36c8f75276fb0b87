"""The pipeline's pieces around the checks, without engines: the check interface it drives, the
run record, the provenance recorder, and ``--eval-data``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers_checks import demo_ctx

from fasttrack import ROOT
from fasttrack.checks.base import EngineCheck, EnginelessCheck, PairedCheck, registered_checks
from fasttrack.checks.context import ProvenanceRecorder, sha256_path
from fasttrack.checks.features import features
from fasttrack.inputs import PROMPT_SET
from fasttrack.pipeline.launch import EngineLaunch, engine_seed
from fasttrack.results import LEGACY_CHECK_ORDER


def test_every_check_declares_title_view_and_kind() -> None:
    reg = registered_checks()
    # the shipped checks' declared order (``after``) is the order older bundles were reported in
    assert list(reg) == list(LEGACY_CHECK_ORDER)
    for name, cls in reg.items():
        assert cls.name == name and cls.title and cls.report_view
        assert issubclass(cls, EnginelessCheck) != issubclass(cls, EngineCheck), name
    assert [n for n, c in reg.items() if issubclass(c, PairedCheck)] == ["perf"]
    assert [n for n, c in reg.items() if issubclass(c, EnginelessCheck)] == ["isolation", "kernels"]


def test_the_feature_table_names_each_feature_once_and_covers_the_shipped_scopes() -> None:
    from fasttrack.scope import available_suites, load_scope

    names = [t.name for t in features()]
    assert len(names) == len(set(names))
    for suite in available_suites():
        assert set(load_scope(suite).scope.features) <= set(names), suite


def test_gates_are_declared_for_the_demo_scope(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    for name, cls in registered_checks().items():
        gate = cls().gate(ctx)
        assert gate.statistic and gate.rule, name


def test_provenance_recorder_hashes_inputs_and_refuses_conflicts(tmp_path: Path) -> None:
    rec = ProvenanceRecorder()
    digest = rec.input_file(PROMPT_SET)
    assert rec.datasets == {"suites/common/prompts/real-text.jsonl": digest} and len(digest) == 64
    rec.seed("features/n_best", 99)
    rec.seed("features/n_best", 99)  # the same value twice is fine
    with pytest.raises(ValueError, match="recorded twice"):
        rec.seed("features/n_best", 100)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("a")
    before = sha256_path(tmp_path / "d")
    (tmp_path / "d" / "a.txt").write_text("b")
    assert sha256_path(tmp_path / "d") != before


def test_engine_seed_and_the_summary_record() -> None:
    assert engine_seed(["--dtype", "float32", "--seed", "0"]) == 0
    assert engine_seed(["--seed=7"]) == 7 and engine_seed(["--dtype", "x"]) is None
    rec = EngineLaunch(side="baseline", group="g", lifetime=0, checks=["perf"], env={"HF_TOKEN": "x", "A": "1"})
    out = rec.to_json(redact=lambda env: {k: ("<redacted>" if "TOKEN" in k else v) for k, v in env.items()})
    assert out == {
        "side": "baseline",
        "group": "g",
        "lifetime": 0,
        "checks": ["perf"],
        "env": {"HF_TOKEN": "<redacted>", "A": "1"},
    }


def test_eval_data_flag_must_name_an_eval_and_a_path(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "fasttrack", "validate", "--model", "demo-llama", "--out", str(tmp_path / "r")]
        + ["--eval-data", "aime25"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert "NAME=PATH" in res.stdout + res.stderr and "Traceback" not in res.stdout + res.stderr
    assert not (tmp_path / "r").exists()


def test_blocking_work_with_its_own_event_loop_runs_in_a_thread() -> None:
    """lm-eval runs its own event loop; the evals check hands it to ``in_thread`` from the pipeline's loop."""
    import asyncio
    import threading
    import time

    from fasttrack.checks.requests import in_thread
    from fasttrack.perf.loadgen import run_loop

    async def inner() -> str:
        await asyncio.sleep(0)
        return "inner loop ran"

    def blocking() -> tuple[str, str]:
        return asyncio.run(inner()), threading.current_thread().name

    out, thread = run_loop(in_thread(blocking, name="lm-eval-test"))
    assert out == "inner loop ran" and thread == "lm-eval-test"

    def boom() -> None:
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        run_loop(in_thread(boom, name="boom"))

    # a cancelled wait (Ctrl-C) does not wait for the thread to finish when the loop shuts down
    release = threading.Event()

    async def cancel_soon() -> None:
        task = asyncio.ensure_future(in_thread(lambda: release.wait(30), name="stuck"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    t0 = time.perf_counter()
    run_loop(cancel_soon())
    assert time.perf_counter() - t0 < 5
    release.set()
