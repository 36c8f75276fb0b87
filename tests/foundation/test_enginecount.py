"""The suite's engine-start count (tests/enginecount.py) reads the starts of fasttrack subprocesses from their
run summaries: owned engines count, attached ones do not, and a start that never came up says why."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import enginecount


def test_subprocess_starts_from_run_summaries() -> None:
    # outside the session's temporary folder, whose run summaries the suite's own count reads
    base = Path(tempfile.mkdtemp(prefix="enginecount-"))
    try:
        _check(base)
    finally:
        shutil.rmtree(base)


def _check(tmp_path: Path) -> None:
    run = tmp_path / "validate0" / "run"
    run.mkdir(parents=True)
    engines = [
        {"group": "g", "side": "baseline", "lifetime": 0, "owned": False, "args": ["--x"], "startup_s": 30.0},
        {"group": "g", "side": "candidate", "lifetime": 0, "owned": True, "args": ["--x"], "startup_s": 41.5},
        {"group": "g", "side": "candidate", "lifetime": 1, "owned": True, "args": ["--enable-lora"],
         "startup_s": 15.9, "stop": "refused to start"},
        {"group": "g", "side": "baseline", "lifetime": 1, "owned": True, "args": ["--x"], "startup_s": None,
         "stop": "stopped while starting (interrupted)"},
        {"group": "g", "side": "baseline", "lifetime": 2, "owned": True, "args": [], "startup_s": None},
    ]  # fmt: skip
    (run / "run-summary.json").write_text(json.dumps({"engines": engines}))
    logs = run / "logs"  # the copy a bundle keeps among its logs is the same run: not counted twice
    logs.mkdir()
    (logs / "run-summary.json").write_text(json.dumps({"engines": engines}))
    counter = enginecount.EngineCount.__new__(enginecount.EngineCount)
    counter.config = SimpleNamespace(_tmp_path_factory=SimpleNamespace(_basetemp=tmp_path))  # type: ignore[assignment]
    starts = counter._run_summary_starts()
    assert [(s.name.split(": ")[1], s.ok, s.outcome, s.seconds) for s in starts] == [
        ("g.candidate.0", True, "", 41.5),
        ("g.candidate.1", False, "refused", None),
        ("g.baseline.1", False, "stopped", None),
    ]
