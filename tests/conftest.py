"""Shared session fixtures, the session's engine schedule, and what a missing prerequisite does.

Everything heavy is built lazily, only when a test asks for it, so unit tests stay fast:

- ``demo_model`` / ``demo_model_dir``: the demo model, built once per session with
  ``examples/demo_model/build.py`` (its architecture comes from the demo plugin, so
  that needs ``examples/demo_plugin`` pip-installed). Without the plugin, a plain
  tiny Llama (``tests/engine/tiny_llama.py``) stands in, and candidate fixtures skip
  (or fail, with ``CI`` set: ``missing_prerequisite``).
- ``engine_slot``: the session's engines. Fixtures that start an engine go through
  it, and it stops the live engine before starting another: one engine up at a time
  (an idle vLLM engine busy-polls and would disturb the other one), two only where a
  test needs a pair (interleaved perf, :meth:`EngineSlot.acquire_also`).
- Two engines for the whole session, the demo target exactly as ``fasttrack validate``
  starts it (the demo scope's smoke-tier engine arguments and environment):
  ``baseline_engine`` and one candidate. ``candidate_engine`` and the planted-defect
  fixtures (``numerics_batch_engine``, ``ignore_temperature_engine``,
  ``broken_json_engine``, ``silent_fallback_engine``, ``slow_batch_engine``) all return
  that candidate, with their defect planted through the demo plugin's run-time defect
  file (``FASTTRACK_DEMO_DEFECT_FILE``; the clean fixture clears it), so a defect costs
  no engine start. :data:`ENGINE_SCHEDULE` orders the tests by the engines they need
  (``pytest_collection_modifyitems``), across modules: everything that needs the
  baseline, the interleaved pairs, then the candidate clean and with each defect in
  turn, then the tests that end an engine or start their own. A module's results that
  depend on an earlier engine (say the baseline's side of a comparison) come from
  session fixtures that a test of that earlier phase asks for first.
- ``reference_engines``: the baseline with stock's eager build next to it (the demo
  scope's reference variant, started as ``fasttrack validate`` starts it) and the
  candidate on request: the ``validate``/``reproduce`` runs that judge equivalence attach
  all of them (``--reference-url eager=URL``), so the eager build starts once per session;
  the first test of a later phase stops it (``pytest_runtest_setup``).
- ``tests/enginecount.py`` (registered here) counts the session's engine starts and
  end-to-end tests and prints them at the end of the run.

The helpers behind these fixtures (the slot, the schedule, :func:`missing_prerequisite`)
are in ``tests/demo_engines.py``; test modules import from there.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import enginecount
import pytest
import sidebyside
from demo_engines import (
    CHEAPEST_ENGINE_ARGS,
    ROOT,
    DemoModel,
    DemoPathMarkers,
    DemoTarget,
    EnginePair,
    EngineSlot,
    ReferenceEngines,
    _engine_phase,
    _load_demo_builder,
    demo_engine,
    demo_plugin_missing,
    engine_phase,
    reference_engine,
    require_demo_target,
)

SLOT = pytest.StashKey[EngineSlot]()
"""The session's engine slot, once a test asked for it (``pytest_runtest_setup`` ends its phase-tied engines)."""


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> DemoModel:
    out = tmp_path_factory.mktemp("demo-model")
    builder = _load_demo_builder()
    missing = demo_plugin_missing()
    if builder is not None and missing is None:
        builder(out)
        return DemoModel(out, "demo", "built with examples/demo_model/build.py")
    sys.path.insert(0, str(ROOT / "tests" / "engine"))
    try:
        from tiny_llama import build_tiny_llama
    finally:
        sys.path.pop(0)
    build_tiny_llama(out)
    why = "examples/demo_model/build.py has no build_model" if builder is None else missing
    return DemoModel(out, "tiny-llama", f"stand-in tiny Llama ({why})")


@pytest.fixture(scope="session")
def demo_model_dir(demo_model: DemoModel) -> Path:
    """Directory of the demo model (built once per session)."""
    return demo_model.path


@pytest.fixture(scope="session")
def engine_slot(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineSlot]:
    slot = EngineSlot(tmp_path_factory.mktemp("engines"))
    request.config.stash[SLOT] = slot
    try:
        yield slot
    finally:
        slot.release()


@pytest.fixture(scope="session")
def demo_target() -> DemoTarget:
    from fasttrack.checks.base import build_run_plan
    from fasttrack.scope import load_scope

    loaded = load_scope("demo-llama")
    return DemoTarget(loaded=loaded, plan=build_run_plan(loaded.scope, tier="smoke", scope_sha256=loaded.sha256))


@pytest.fixture
@engine_phase("baseline")
def baseline_engine(engine_slot: EngineSlot, demo_model: DemoModel, demo_target: DemoTarget) -> Any:
    """The stock-path engine of the demo target."""
    return demo_engine(engine_slot, demo_model, demo_target, "baseline")


@pytest.fixture
@engine_phase("baseline-stop")
def retiring_baseline_engine(baseline_engine: Any) -> Any:
    """The baseline engine, for the test that stops it: scheduled after every other user of it."""
    return baseline_engine


@pytest.fixture
@engine_phase("candidate")
def candidate_engine(engine_slot: EngineSlot, demo_model: DemoModel, demo_target: DemoTarget) -> Any:
    """The optimized-path engine of the demo target (needs the demo plugin)."""
    return demo_engine(engine_slot, demo_model, demo_target, "candidate")


@pytest.fixture
@engine_phase("numerics-batch")
def numerics_batch_engine(engine_slot: EngineSlot, demo_model: DemoModel, demo_target: DemoTarget) -> Any:
    """A candidate with the ``numerics-batch`` defect (wrong numbers at decode batch 3)."""
    return demo_engine(engine_slot, demo_model, demo_target, "candidate", "numerics-batch")


@pytest.fixture
@engine_phase("ignore-temperature")
def ignore_temperature_engine(engine_slot: EngineSlot, demo_model: DemoModel, demo_target: DemoTarget) -> Any:
    """A candidate with the ``ignore-temperature`` defect (sampling at the wrong temperature)."""
    return demo_engine(engine_slot, demo_model, demo_target, "candidate", "ignore-temperature")


@pytest.fixture
@engine_phase("broken-json")
def broken_json_engine(engine_slot: EngineSlot, demo_model: DemoModel, demo_target: DemoTarget) -> Any:
    """A candidate with the ``broken-json`` defect (structured output breaks)."""
    return demo_engine(engine_slot, demo_model, demo_target, "candidate", "broken-json")


@pytest.fixture
@engine_phase("silent-fallback")
def silent_fallback_engine(engine_slot: EngineSlot, demo_model: DemoModel, demo_target: DemoTarget) -> Any:
    """A candidate with the ``silent-fallback`` defect (claims the fast path, runs the stock one)."""
    return demo_engine(engine_slot, demo_model, demo_target, "candidate", "silent-fallback")


@pytest.fixture
@engine_phase("reference")
def reference_engines(
    baseline_engine: Any, engine_slot: EngineSlot, demo_model: DemoModel, demo_target: DemoTarget
) -> ReferenceEngines:
    """The baseline engine, stock's eager build next to it (the demo scope's reference variant,
    :func:`demo_engines.reference_engine`), and candidates next to them on request (:class:`ReferenceEngines`)."""
    require_demo_target(demo_model)
    eager = reference_engine(engine_slot, demo_model, demo_target, "eager")
    return ReferenceEngines(engine_slot, demo_model, demo_target, baseline_engine, eager, "eager")


@pytest.fixture
@engine_phase("pair")
def engine_pair(baseline_engine: Any, engine_slot: EngineSlot, demo_model: DemoModel, demo_target: DemoTarget) -> Any:
    """The baseline engine, and candidates next to it on request (:class:`EnginePair`)."""
    require_demo_target(demo_model)
    return EnginePair(engine_slot, demo_model, demo_target, baseline_engine)


@pytest.fixture
@engine_phase("pair")
def slow_batch_engine(engine_pair: EnginePair) -> Any:
    """A candidate with the ``slow-batch`` defect (every decode step at batch 4 is slow), next to
    the baseline: the interleaved perf test pairs the two."""
    return engine_pair.candidate("slow-batch")


@pytest.fixture
@engine_phase("last")
def last_engine(engine_slot: EngineSlot, demo_model: DemoModel) -> Any:
    """An engine for a test that ends it (a crash): the session's live engine, scheduled after
    every other test that uses it, or, when none is up, the cheapest real engine."""
    if engine_slot.engine is not None and engine_slot.engine.running:
        return engine_slot.engine
    return engine_slot.acquire("cheapest", side="baseline", model=demo_model.path, args=CHEAPEST_ENGINE_ARGS)


@pytest.fixture
@engine_phase("own")
def no_session_engine(engine_slot: EngineSlot) -> None:
    """For tests that start engines of their own: the session's engines are stopped first."""
    engine_slot.release()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the tests in the order of :data:`ENGINE_SCHEDULE` (stable within one phase), and only this
    process's share of them when ``FASTTRACK_TEST_SPLIT`` names one (``tests/sidebyside.py``). Runs
    before the end-to-end test count (``tests/enginecount.py``, a trylast hook)."""
    items[:] = sorted(items, key=_engine_phase)
    plugin = config.pluginmanager.get_plugin(sidebyside.PLUGIN_NAME)
    if plugin is not None:
        plugin.split_items(config, items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a test's fixtures: the engines tied to an earlier phase of the schedule stop (the eager reference
    build, before the interleaved perf pairs time the baseline and the candidate)."""
    slot = item.config.stash.get(SLOT, None)
    if slot is not None:
        slot.end_phases_before(_engine_phase(item))


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(enginecount.PLUGIN_NAME):
        config.pluginmanager.register(enginecount.EngineCount(config), enginecount.PLUGIN_NAME)
    if not config.pluginmanager.has_plugin(sidebyside.PLUGIN_NAME):
        config.pluginmanager.register(sidebyside.SideBySide(), sidebyside.PLUGIN_NAME)


@pytest.fixture(scope="session")
def demo_path_markers() -> DemoPathMarkers:
    """Path markers and the fallback log regex of the demo plugin."""
    return DemoPathMarkers()
