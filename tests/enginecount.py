"""Counts a test session's vLLM engine starts and end-to-end tests, and prints both at the end.

Engine starts are what the suite's time is made of (a minute or more each on two
cores), so the suite has a budget for them (README, Development). Counted here:

- every start of a real vLLM engine in the test process (``ManagedEngine.start``,
  whoever calls it: the session's engine slot or a test), with its seconds, failed
  starts included; starts of the stand-in servers of the unit tests are counted apart;
- every engine a ``fasttrack validate`` / ``reproduce`` subprocess started, read from the
  ``run-summary.json`` files those runs leave under the session's temporary directory.

End-to-end tests (marker ``e2e``) are counted by outcome. When ``FASTTRACK_SUITE_SUMMARY``
names a file, the counts are written there as ``key=value`` lines for
``scripts/test.sh``, which fails a run that was meant to include the end-to-end tests
(no ``-m`` deselecting them) when none of them ran.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PLUGIN_NAME = "fasttrack-enginecount"
SUMMARY_ENV = "FASTTRACK_SUITE_SUMMARY"


@dataclass
class Start:
    """One engine start."""

    name: str
    """The engine's log name (the slot key, or ``run folder: group.side.lifetime``)."""
    seconds: float | None
    """Seconds until the engine answered /health (None: it never did)."""
    ok: bool
    where: str
    """The test that started it (its node id), or the run folder of a subprocess run."""
    real: bool = True
    """False for a stand-in server (unit tests of the lifecycle)."""
    outcome: str = ""
    """Why a start that never answered ended (``failed``, ``refused``: a probe the engine refused at
    start-up, ``stopped``: stopped while starting, by Ctrl-C or a signal); empty when it came up."""


def _is_real(engine: Any) -> bool:
    python = getattr(engine, "python", None) or sys.executable
    return os.path.realpath(python) == os.path.realpath(sys.executable)


def _e2e_meant(config: pytest.Config) -> bool:
    """Whether the marker expression lets an end-to-end test through (no ``-m`` deselecting them)."""
    expr = (config.option.markexpr or "").strip()
    if not expr:
        return True
    try:
        from _pytest.mark.expression import Expression

        return bool(Expression.compile(expr).evaluate(lambda name, **_: name == "e2e"))
    except Exception:  # noqa: BLE001  (a private pytest API: fall back to reading the expression)
        return "not e2e" not in expr


class EngineCount:
    """The plugin (registered by ``tests/conftest.py``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.starts: list[Start] = []
        self.current_test = "(outside a test)"
        self.e2e: dict[str, set[str]] = {"selected": set(), "ran": set(), "passed": set(), "skipped": set()}
        self.narrowed = False
        self._patch()

    # -- counting in this process

    def _patch(self) -> None:
        from fasttrack.engine.server import ManagedEngine

        original = ManagedEngine.start
        if getattr(original, "_enginecount", False):
            return
        plugin = self

        def start(engine: Any) -> Any:
            t0 = time.monotonic()
            ok = False
            try:
                result = original(engine)
                ok = True
                return result
            finally:
                plugin.starts.append(
                    Start(
                        name=str(getattr(engine, "log_name", "?")),
                        seconds=round(time.monotonic() - t0, 1) if ok else None,
                        ok=ok,
                        where=plugin.current_test,
                        real=_is_real(engine),
                    )
                )

        start._enginecount = True  # type: ignore[attr-defined]
        ManagedEngine.start = start  # type: ignore[method-assign]

    # -- counting in fasttrack subprocesses

    def _run_summary_starts(self) -> list[Start]:
        factory = getattr(self.config, "_tmp_path_factory", None)
        base = getattr(factory, "_basetemp", None)
        if base is None or not Path(base).is_dir():
            return []
        out = []
        for path in sorted(Path(base).rglob("run-summary.json")):
            if "logs" in path.relative_to(base).parts[:-1]:
                continue  # the copy a bundle keeps among its logs: the same run, counted once
            try:
                summary = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            for rec in summary.get("engines") or []:
                if not rec.get("owned", True) or not rec.get("args"):
                    continue  # attached (started by someone else), or never launched
                secs = rec.get("startup_s")
                name = f"{path.parent.name}: {rec.get('group')}.{rec.get('side')}.{rec.get('lifetime')}"
                stop = rec.get("stop") if isinstance(rec.get("stop"), str) else ""
                if stop == "refused to start":  # a probe the engine refused: it records the seconds until it exited
                    secs = None
                outcome = (
                    ""
                    if secs is not None
                    else "stopped"
                    if stop.startswith("stopped while starting")
                    else "refused"
                    if stop == "refused to start"
                    else "failed"
                )
                out.append(
                    Start(
                        name=name,
                        seconds=round(secs, 1) if secs else None,
                        ok=secs is not None,
                        where="",
                        outcome=outcome,
                    )
                )
        return out

    # -- hooks

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        self.e2e["selected"] = {it.nodeid for it in items if it.get_closest_marker("e2e")}
        tests_dir = (Path(config.rootpath) / "tests").resolve()
        explicit = [a for a in config.args or [] if Path(a.split("::")[0]).resolve() != tests_dir]
        self.narrowed = bool(config.option.keyword) or bool(explicit)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.current_test = nodeid

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.e2e["selected"]:
            return
        if report.when == "call":
            self.e2e["ran"].add(report.nodeid)
            if report.passed:
                self.e2e["passed"].add(report.nodeid)
        if report.skipped:
            self.e2e["skipped"].add(report.nodeid)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        subprocess_starts = self._run_summary_starts()
        real = [s for s in self.starts if s.real] + subprocess_starts
        stand_ins = [s for s in self.starts if not s.real]
        tr.section("engine starts")
        for s in real:
            secs = f"{s.seconds:7.1f} s" if s.seconds is not None else f" {s.outcome or 'failed':<8}"
            where = s.where if s.where else "(fasttrack subprocess)"
            tr.write_line(f"{secs}  {s.name:<42} {where}")
        total = sum(s.seconds or 0.0 for s in real)
        failed = sum(1 for s in real if not s.ok)
        tr.write_line(
            f"engine starts: {len(real)} ({len(real) - len(subprocess_starts)} in this process, "
            f"{len(subprocess_starts)} in fasttrack subprocesses; {failed} did not come up: failed, refused "
            f"or stopped while starting), {total:.0f} s until healthy"
            + (f"; plus {len(stand_ins)} stand-in server start(s)" if stand_ins else "")
        )
        e = self.e2e
        meant = _e2e_meant(self.config)
        tr.write_line(
            f"end-to-end tests: {len(e['ran'])} ran ({len(e['passed'])} passed), "
            f"{len(e['skipped'])} skipped, of {len(e['selected'])} selected" + ("" if meant else " (deselected by -m)")
        )
        target = os.environ.get(SUMMARY_ENV)
        if target:
            lines = {
                "e2e_meant": int(meant and not (self.narrowed and not e["selected"])),
                "e2e_selected": len(e["selected"]),
                "e2e_ran": len(e["ran"]),
                "engine_starts": len(real),
                "engine_start_seconds": round(total),
            }
            Path(target).write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
