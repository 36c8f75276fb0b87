"""The demo target's engines in tests: the session's engine slot, the engine schedule, and
what a missing prerequisite of an end-to-end test does (the fixtures are in ``conftest.py``).

Test modules import what they need from here (``from demo_engines import ...``): the
name ``conftest`` is ambiguous (there are several).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, TypeVar

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO_BUILDER = ROOT / "examples" / "demo_model" / "build.py"

#: The cheapest engine that still runs real vLLM (no compilation at all, a short context): for
#: tests of the lifecycle alone, when no engine of the session is up to use instead.
CHEAPEST_ENGINE_ARGS: tuple[str, ...] = (
    "--dtype",
    "float32",
    "--max-model-len",
    "512",
    "--gpu-memory-utilization",
    "0.2",
    "--max-num-seqs",
    "4",
    "--compilation-config",
    json.dumps({"mode": 0}),
)
#: Path markers and the fallback log line of the demo plugin (examples/README.md): the
#: fused ops run only on the candidate's fast decode steps, `stock_step` only on the
#: candidate's stock steps. The baseline runs neither (GEMM names are no marker: both
#: paths multiply through oneDNN).
DEMO_OPTIMIZED_MARKERS: tuple[str, ...] = (r"^fasttrack_demo::fused_decode_",)
DEMO_STOCK_MARKERS: tuple[str, ...] = (r"^fasttrack_demo::stock_step$",)
DEMO_FALLBACK_PATTERN = r"fasttrack-demo fallback reason="
DEFECT_ENV = "FASTTRACK_DEMO_DEFECT"
DEFECT_FILE_ENV = "FASTTRACK_DEMO_DEFECT_FILE"
SLOW_FACTOR_ENV = "FASTTRACK_DEMO_SLOW_FACTOR"
SLOW_FACTOR = 3.0
"""The session candidate's ``slow-batch`` defect makes each decode step at batch 4 this many times slower
(``FASTTRACK_DEMO_SLOW_FACTOR``): far beyond the perf end-to-end test's margin (speedup 1/3 against its
threshold of 0.5), so that test's outcome does not hang on the load of the CI host. The smallest slowdown
the demo scope's own margin is set to detect (1.5x) is measured by ``benchmarks/false_alarm.py``."""
"""The demo plugin's run-time defect switch (examples/README.md): the session's one candidate engine
serves the clean candidate and every planted defect in turn, so the defects cost no engine start."""

#: The session's engine schedule: tests run in this order of the engines they use, so each
#: engine configuration starts once per session. A fixture that uses an engine declares its
#: phase (:func:`engine_phase`); a test's phase is the latest among the fixtures it uses,
#: directly or through other fixtures. Tests that use none run first, in their usual order.
ENGINE_SCHEDULE: tuple[str, ...] = (
    "baseline",
    # the baseline with stock's eager build next to it (the demo scope's reference variant, reference_engine), and
    # the candidate too for the runs that attach all three; the first test of a later phase stops the eager build
    "reference",
    "pair",  # interleaved pairs: the baseline with a candidate next to it
    "baseline-stop",  # the baseline's clean stop; the candidate next to it stays up
    "candidate",
    "numerics-batch",
    "ignore-temperature",
    "broken-json",
    "silent-fallback",
    "last",  # a test that ends the session's last engine (a crash)
    "own",  # tests that start engines of their own (fasttrack validate runs)
)

_F = TypeVar("_F", bound=Callable[..., Any])


def engine_phase(phase: str) -> Callable[[_F], _F]:
    """Declare the :data:`ENGINE_SCHEDULE` phase of a fixture (put it under ``@pytest.fixture``).

    A session fixture that collects results on an engine (e.g. the baseline's side of a
    comparison) declares that engine's phase, so the tests that use it wait for it."""
    if phase not in ENGINE_SCHEDULE:
        raise ValueError(f"unknown engine phase {phase!r}; one of {ENGINE_SCHEDULE}")

    def mark(func: _F) -> _F:
        func._engine_phase = phase  # type: ignore[attr-defined]
        return func

    return mark


def in_ci() -> bool:
    """Whether ``CI`` is set (to anything but an empty string, 0 or false)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing_prerequisite(what: str) -> NoReturn:
    """A prerequisite of an end-to-end test is missing: skip, saying what is missing; with
    ``CI`` set, fail instead (a green CI run must mean the end-to-end tests ran)."""
    if in_ci():
        pytest.fail(f"CI is set and a prerequisite of this end-to-end test is missing: {what}", pytrace=False)
    pytest.skip(what)


def demo_plugin_missing() -> str | None:
    """Why the demo plugin cannot be used (None when it is installed and registered)."""
    if importlib.util.find_spec("fasttrack_demo_plugin") is None:
        return "the demo plugin is not installed (pip install -e examples/demo_plugin)"
    eps = importlib.metadata.entry_points(group="vllm.general_plugins")
    if not any(ep.value.startswith("fasttrack_demo_plugin") for ep in eps):
        return "the demo plugin is importable but not registered as a vllm.general_plugins entry point"
    return None


@dataclass(frozen=True)
class DemoModel:
    """The model the engine tests serve."""

    path: Path
    kind: str
    """`demo` (examples/demo_model, needs the plugin) or `tiny-llama` (stand-in)."""
    note: str


def _load_demo_builder() -> Callable[..., Any] | None:
    if not DEMO_BUILDER.exists():
        return None
    spec = importlib.util.spec_from_file_location("fasttrack_demo_model_build", DEMO_BUILDER)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, "build_model", None)


def require_demo_target(demo_model: DemoModel) -> None:
    """The demo plugin and the demo model, or :func:`missing_prerequisite`."""
    missing = demo_plugin_missing()
    if missing:
        missing_prerequisite(missing)
    if demo_model.kind != "demo":
        missing_prerequisite(f"the demo model is not available: {demo_model.note}")


@contextlib.contextmanager
def _environ(**values: str | None) -> Iterator[None]:
    """Temporarily set (or, with None, remove) environment variables of this process."""
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class EngineSlot:
    """The session's live engine (plus, for interleaved perf, engines started next to it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.key: str | None = None
        self.signature: tuple[Any, ...] | None = None
        self.engine: Any = None
        self.extras: dict[str, tuple[Any, tuple[Any, ...]]] = {}
        """Engines started next to the live one (``acquire_also``), by key, with their launch signature."""
        self.extra_phases: dict[str, int] = {}
        """Extras tied to a phase of :data:`ENGINE_SCHEDULE` (``acquire_also(phase=...)``), by key: the first test
        of a later phase stops them (:meth:`end_phases_before`)."""
        self.starts: list[str] = []
        self.defect_file = root / "candidate-defect"
        """The candidate's defect switch (:func:`set_defect`)."""

    def profiler_dir(self, key: str) -> Path:
        d = self.root / "profiles" / key
        d.mkdir(parents=True, exist_ok=True)
        return d

    @staticmethod
    def _signature(
        side: str,
        model: Path,
        args: tuple[str, ...] | list[str],
        env: dict[str, str | None] | None,
        process_env: dict[str, str | None] | None,
    ) -> tuple[Any, ...]:
        return (
            side,
            str(model),
            tuple(args),
            tuple(sorted((env or {}).items(), key=str)),
            tuple(sorted((process_env or {}).items(), key=str)),
        )

    def acquire(
        self,
        key: str,
        *,
        side: str,
        model: Path,
        args: tuple[str, ...] | list[str],
        env: dict[str, str | None] | None = None,
        process_env: dict[str, str | None] | None = None,
        fresh: bool = False,
        cpus: list[int] | None = None,
    ) -> Any:
        """The live engine for ``key``; stops whatever else runs and starts it if needed.

        The live engine is reused only when ``key`` and the launch (side, model, args,
        env) are the same as when it was started. An engine of that key and launch
        running next to the live one (``acquire_also``) becomes the live one.

        ``process_env`` is set in this process while the engine starts (as if set
        where fasttrack runs); ``env`` is given to the engine as overrides. ``cpus``: the cores
        its processes are pinned to (``fasttrack.engine.pinning``).
        """
        signature = (*self._signature(side, model, args, env, process_env), tuple(cpus or ()), True)
        if (
            not fresh
            and self.key == key
            and self.signature == signature
            and self.engine is not None
            and self.engine.running
        ):
            return self.engine
        extra = self.extras.get(key)
        if not fresh and extra is not None and extra[1] == signature and extra[0].running:
            del self.extras[key]
            self.extra_phases.pop(key, None)
            self.release()
            self.key, self.engine, self.signature = key, extra[0], signature
            return self.engine
        self.release()
        eng = self._start(key, side=side, model=model, args=args, env=env, process_env=process_env, cpus=cpus)
        self.key, self.engine, self.signature = key, eng, signature
        return eng

    def acquire_also(
        self,
        key: str,
        *,
        side: str,
        model: Path,
        args: tuple[str, ...] | list[str],
        env: dict[str, str | None] | None = None,
        process_env: dict[str, str | None] | None = None,
        cpus: list[int] | None = None,
        evidence: bool = True,
        phase: str | None = None,
    ) -> Any:
        """An engine next to the live one (interleaved perf, a reference variant): reused when one of this key and
        launch runs, else started; stopped by ``release`` (or ``release_also``), and, with ``phase``, by the first
        test of a later phase of :data:`ENGINE_SCHEDULE` (:meth:`end_phases_before`). ``evidence=False``: no
        profiler and no per-request metrics (as fasttrack starts a reference variant)."""
        if self.engine is None or not self.engine.running:
            raise RuntimeError("acquire_also needs a live engine from acquire()")
        signature = (*self._signature(side, model, args, env, process_env), tuple(cpus or ()), evidence)
        extra = self.extras.get(key)
        if extra is not None and extra[1] == signature and extra[0].running:
            return extra[0]
        self.release_also(key)
        eng = self._start(
            key,
            side=side,
            model=model,
            args=args,
            env=env,
            process_env=process_env,
            exclusive=False,
            cpus=cpus,
            evidence=evidence,
        )
        self.extras[key] = (eng, signature)
        if phase is not None:
            self.extra_phases[key] = ENGINE_SCHEDULE.index(phase)
        return eng

    def release_also(self, key: str) -> None:
        """Stop the extra engine ``key``, if it runs."""
        self.extra_phases.pop(key, None)
        extra = self.extras.pop(key, None)
        if extra is not None:
            extra[0].stop()

    def end_phases_before(self, phase: int) -> None:
        """A test of ``phase`` (an index of :data:`ENGINE_SCHEDULE`; -1: none) starts: stop the extras tied to an
        earlier phase (an idle engine next to the ones a later test times would only be in the way)."""
        for key, until in list(self.extra_phases.items()):
            if phase > until:
                self.release_also(key)

    def _start(
        self,
        key: str,
        *,
        side: str,
        model: Path,
        args: tuple[str, ...] | list[str],
        env: dict[str, str | None] | None,
        process_env: dict[str, str | None] | None,
        exclusive: bool = True,
        cpus: list[int] | None = None,
        evidence: bool = True,
    ) -> Any:
        from fasttrack.engine import ManagedEngine, per_request_metrics_args, profiler_args
        from fasttrack.engine.pinning import pinned, pinning_env

        env = {**(env or {}), **pinning_env(cpus, dict(env or {}), cpu_device=True)}
        extra_args: list[str] = []
        extra_env: dict[str, str | None] = {}
        if evidence:
            # the demo scope declares a device counter (path_markers.device_counters): as fasttrack's own engines,
            # each gets a fresh folder for prometheus_client's multiprocess mode, so the worker's counter reaches
            # /metrics
            prom = self.root / "prometheus" / key
            shutil.rmtree(prom, ignore_errors=True)
            prom.mkdir(parents=True)
            extra_args = [*profiler_args(self.profiler_dir(key)), *per_request_metrics_args(args)]
            extra_env = {"PROMETHEUS_MULTIPROC_DIR": str(prom)}
        eng = ManagedEngine(
            side=side,
            model=model,
            args=[*args, *extra_args],
            env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra_env, **(env or {})},
            log_dir=self.root / "logs",
            log_name=key,
            startup_timeout=900.0,
            progress=lambda p: print(f"[{p.side}] starting, {p.elapsed_s:.0f} s: {p.line()}", file=sys.stderr),
            exclusive=exclusive,
        )
        with _environ(**(process_env or {})), pinned(cpus):
            eng.start()
        self.starts.append(key)
        return eng

    def release(self, *, extras: bool = True) -> None:
        """Stop the live engine and (unless ``extras=False``) the ones next to it.

        With ``extras=False`` an engine that ran next to the live one stays up, to be
        taken over by the next ``acquire`` of its key."""
        if extras:
            for key in list(self.extras):
                self.release_also(key)
        if self.engine is not None:
            self.engine.stop()
        self.key, self.engine, self.signature = None, None, None


@dataclass(frozen=True)
class DemoTarget:
    """The demo target's engines as ``fasttrack validate --model demo-llama --tier smoke`` starts them."""

    loaded: Any
    """The loaded demo scope (``fasttrack.scope.LoadedScope``)."""
    plan: Any
    """Its smoke-tier plan (one engine group)."""

    @property
    def group(self) -> Any:
        return self.plan.groups[0]

    @property
    def served_name(self) -> str:
        return str(self.loaded.scope.model.served_name or "demo-llama")

    def args(self, side: str) -> list[str]:
        return [*self.group.args[side], "--served-model-name", self.served_name]

    def env(self, side: str) -> dict[str, str | None]:
        return dict(self.group.env[side])

    def reference_args(self, variant: str) -> list[str]:
        """The engine arguments of the scope's reference variant ``variant`` (``gates.equivalence.reference``), as
        ``fasttrack validate`` starts it (``fasttrack.pipeline.variants``): the baseline's with the variant's
        appended, the served model name, no path evidence."""
        from fasttrack.engine.cmdline import serve_spec

        ref = self.loaded.scope.gates.equivalence.reference
        assert ref is not None and variant in ref.variants, f"the demo scope has no reference variant {variant!r}"
        spec = serve_spec(
            self.loaded.scope,
            self.group,
            "baseline",
            model="(the demo model)",
            run_dir="(no run)",
            name=f"reference-{variant}",
            args=[*self.group.args["baseline"], *ref.variants[variant]],
            evidence=False,
        )
        return list(spec.args)


def set_defect(slot: EngineSlot, defect: str | None) -> None:
    """Plant ``defect`` (None: none) in the session's candidate engine, through its defect file: the engine
    takes it at its next forward step. Replaced atomically, so the engine never reads half a name."""
    tmp = slot.defect_file.with_suffix(".tmp")
    tmp.write_text(defect or "", encoding="utf-8")
    tmp.replace(slot.defect_file)


def demo_engine(
    slot: EngineSlot,
    model: DemoModel,
    target: DemoTarget,
    side: str,
    defect: str | None = None,
    *,
    also: bool = False,
) -> Any:
    """The session's engine of one side of the demo target (started on first use).

    The candidate is one engine for the whole session: ``defect`` is planted in it through the demo
    plugin's defect file (:func:`set_defect`) before it is returned, and every call without one clears
    it, so a test gets the candidate it asked for whatever ran before. (That ``FASTTRACK_DEMO_DEFECT`` set
    where fasttrack runs reaches the engine is what the ``fasttrack validate`` end-to-end tests show.)
    ``also``: next to the live engine (an interleaved pair) instead of in its place."""
    if side == "candidate":
        require_demo_target(model)
    elif defect is not None:
        raise ValueError("only the candidate carries a planted defect")
    start = slot.acquire_also if also else slot.acquire
    env = target.env(side)
    if side == "candidate":
        env[DEFECT_FILE_ENV] = str(slot.defect_file)
        env[SLOW_FACTOR_ENV] = str(SLOW_FACTOR)
        set_defect(slot, defect)
    return start(
        side,
        side=side,
        model=model.path,
        args=target.args(side),
        env=env,
        process_env={DEFECT_ENV: None},
        cpus=session_cpus(target, side),
    )


def reference_engine(slot: EngineSlot, model: DemoModel, target: DemoTarget, variant: str = "eager") -> Any:
    """Stock's build of the demo scope's reference variant ``variant`` (started on first use), next to the live
    baseline, as ``fasttrack validate`` would start it (:meth:`DemoTarget.reference_args`, the baseline's
    environment, unpinned): the runs that judge equivalence attach it (``--reference-url eager=URL``) instead of
    starting it each. Tied to the ``reference`` phase: the first test of a later phase stops it."""
    return slot.acquire_also(
        f"reference-{variant}",
        side="baseline",
        model=model.path,
        args=target.reference_args(variant),
        env=target.env("baseline"),
        process_env={DEFECT_ENV: None},
        evidence=False,
        phase="reference",
    )


def session_cpus(target: DemoTarget, side: str) -> list[int] | None:
    """The cores of the session's ``side`` engine: its half for the first lifetime of an interleaved pair, as
    ``fasttrack validate`` pins the demo target's pairs (``engine.cpu_pinning``); the baseline and the candidate
    are up together in the perf tests, so each is pinned from its start."""
    from fasttrack.engine.pinning import pair_cpus

    pin = target.loaded.scope.engine.cpu_pinning
    return None if pin.mode == "off" else pair_cpus(side, 0, cores=pin.cores)


@dataclass
class EnginePair:
    """The baseline engine with candidates started next to it, one at a time (interleaved perf)."""

    slot: EngineSlot
    model: DemoModel
    target: DemoTarget
    baseline: Any

    def candidate(self, defect: str | None = None) -> Any:
        """The session's candidate (with ``defect`` planted) next to the baseline."""
        return demo_engine(self.slot, self.model, self.target, "candidate", defect, also=True)


@dataclass
class ReferenceEngines(EnginePair):
    """The baseline engine, stock's build of the scope's reference variant next to it (:func:`reference_engine`), and
    candidates next to both on request: every engine a run that judges equivalence attaches."""

    reference: Any = None
    variant: str = "eager"

    @property
    def reference_url(self) -> str:
        """``--reference-url``'s value for the variant's engine."""
        return f"{self.variant}={self.reference.base_url}"


def _engine_phase(item: pytest.Item) -> int:
    info = getattr(item, "_fixtureinfo", None)
    phases = [
        ENGINE_SCHEDULE.index(phase)
        for defs in (info.name2fixturedefs.values() if info is not None else ())
        if defs and (phase := getattr(defs[-1].func, "_engine_phase", None))
    ]
    return max(phases, default=-1)


@dataclass(frozen=True)
class DemoPathMarkers:
    """What proves which path the demo target ran."""

    optimized: tuple[str, ...] = DEMO_OPTIMIZED_MARKERS
    stock: tuple[str, ...] = DEMO_STOCK_MARKERS
    fallback_pattern: str = DEMO_FALLBACK_PATTERN

    def marker_set(self) -> Any:
        from fasttrack.engine import MarkerSet

        return MarkerSet(optimized=list(self.optimized), stock=list(self.stock))
