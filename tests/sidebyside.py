"""The suite in two pytest processes side by side (``scripts/test.sh`` without arguments).

- **Shares** (``FASTTRACK_TEST_SPLIT``): ``schedule`` runs the tests on the engine schedule
  (:data:`demo_engines.ENGINE_SCHEDULE`: those that use the session's engines, then those that stop
  them and start their own), then the fast tests of :data:`SCHEDULE_TAIL`; ``other`` runs every other
  test (the fast tests, and the end-to-end
  tests that start engines of their own from the outset). Unset or empty: all of them.
- **Quiet window** (``FASTTRACK_QUIET_FILE``): the tests that time engines (the ``pair`` phase:
  interleaved perf pairs and the slow-batch effect) need the host to themselves; with two processes
  sharing two cores, the other process's engines and tests slow one side of a pair at random and make
  the perf statistics see regressions that are not there. The ``schedule`` process writes ``open``
  to the file when the first ``pair``-phase test starts and ``closed`` when a later phase starts (or
  the session ends); the ``other`` process waits before each test while the file says ``open``. It runs
  its end-to-end tests first, so that by the time the window opens (some ten minutes in) it runs short
  tests and pauses within seconds.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from demo_engines import ENGINE_SCHEDULE, _engine_phase

PLUGIN_NAME = "fasttrack-sidebyside"
SPLIT_ENV = "FASTTRACK_TEST_SPLIT"
SPLITS = ("schedule", "other")
QUIET_ENV = "FASTTRACK_QUIET_FILE"
QUIET_PHASE = "pair"
"""The phase whose tests time engines: the ``other`` process pauses while it runs."""
SCHEDULE_TAIL: tuple[str, ...] = ("tests/bundle/", "tests/kernels/", "tests/pr/", "tests/security/")
"""Fast tests (no engine) that the ``schedule`` process runs after its end-to-end tests: its engine schedule
ends minutes before the ``other`` process's tests do (that one also waits out the quiet window), so these
even out the two (the kernel harness's pytest-in-pytest runs and the security suite's browser runs, about
five minutes on two cores). No test in these folders is on the engine schedule or end-to-end, and nothing
on the engine schedule runs after them."""
QUIET_WAIT_LIMIT_S = 1800.0
"""The longest the ``other`` process waits for one quiet window (then it goes on, saying so)."""


def on_engine_schedule(item: pytest.Item) -> bool:
    """Whether ``item`` has a phase of the engine schedule (through the fixtures it uses)."""
    return _engine_phase(item) >= 0


def in_schedule_share(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to the ``schedule`` share: on the engine schedule, or a fast test of
    :data:`SCHEDULE_TAIL`."""
    if on_engine_schedule(item):
        return True
    path = item.nodeid.split("::", 1)[0]
    return item.get_closest_marker("e2e") is None and path.startswith(SCHEDULE_TAIL)


def split() -> str:
    value = os.environ.get(SPLIT_ENV, "").strip()
    if value and value not in SPLITS:
        raise pytest.UsageError(f"{SPLIT_ENV}={value!r}: expected one of {', '.join(SPLITS)} (or unset: all tests)")
    return value


class SideBySide:
    """The plugin (registered by ``tests/conftest.py``)."""

    def __init__(self) -> None:
        self.split = split()
        quiet = os.environ.get(QUIET_ENV, "").strip()
        self.quiet_file = Path(quiet) if quiet and self.split else None
        self.window = "before"
        """In the ``schedule`` process: ``before``, ``open`` or ``closed`` (the quiet window's state)."""
        self.waited_s = 0.0

    def split_items(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Deselect the tests outside this process's share."""
        if not self.split:
            return
        scheduled = self.split == "schedule"
        kept = [it for it in items if in_schedule_share(it) == scheduled]
        dropped = [it for it in items if in_schedule_share(it) != scheduled]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        if scheduled:
            # the engine schedule first, then the fast tail (the order within each part kept)
            kept.sort(key=lambda it: not on_engine_schedule(it))
        else:
            # the end-to-end tests first: by the time the quiet window opens, this process runs short tests
            kept.sort(key=lambda it: it.get_closest_marker("e2e") is None)
        items[:] = kept

    def _write(self, state: str) -> None:
        assert self.quiet_file is not None
        self.quiet_file.write_text(state + "\n")
        self.window = state

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        if self.quiet_file is None:
            return
        if self.split == "schedule":
            phase = _engine_phase(item)
            quiet = ENGINE_SCHEDULE.index(QUIET_PHASE)
            if phase == quiet and self.window == "before":
                self._write("open")
            elif phase > quiet and self.window == "open":
                self._write("closed")
            return
        self._wait_for_quiet_window(item.nodeid)

    def _wait_for_quiet_window(self, nodeid: str) -> None:
        assert self.quiet_file is not None
        t0 = time.monotonic()
        said = False
        while self.quiet_file.is_file() and self.quiet_file.read_text().strip() == "open":
            if not said:
                print(f"\n[side by side] the other process times engines: {nodeid} waits", file=sys.stderr, flush=True)
                said = True
            if time.monotonic() - t0 > QUIET_WAIT_LIMIT_S:
                print(f"[side by side] waited {QUIET_WAIT_LIMIT_S:.0f} s: going on", file=sys.stderr, flush=True)
                break
            time.sleep(2)
        if said:
            waited = time.monotonic() - t0
            self.waited_s += waited
            print(f"[side by side] went on after {waited:.0f} s", file=sys.stderr, flush=True)

    def pytest_sessionfinish(self) -> None:
        if self.quiet_file is not None and self.split == "schedule" and self.window == "open":
            self._write("closed")

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.split == "other" and self.quiet_file is not None:
            terminalreporter.write_line(
                f"side by side: this process waited {self.waited_s:.0f} s while the other one timed engines"
            )
