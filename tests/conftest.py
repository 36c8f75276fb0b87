"""Shared session fixtures.

Everything heavy is built lazily, only when a test asks for it, so unit tests stay fast:

- ``demo_model`` / ``demo_model_dir``: the demo model, built once per session with
  ``examples/demo_model/build.py`` (its architecture comes from the demo plugin, so
  that needs ``examples/demo_plugin`` pip-installed). Without the plugin, a plain
  tiny Llama (``tests/engine/tiny_llama.py``) stands in, and candidate fixtures skip.
- ``engine_slot``: the session's one engine. Fixtures that start an engine go through
  it, and it stops the live engine before starting another: never two engines up
  (an idle vLLM engine busy-polls and would disturb the other one). A test that
  starts an engine of its own calls ``engine_slot.release()`` first.
- ``baseline_engine``, ``candidate_engine``, ``silent_fallback_engine``: live
  engines of the demo target. They are function-scoped views of the slot, so
  consecutive tests that ask for the same one share one engine lifetime; keep tests
  of one engine together in a file to avoid restarts.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO_BUILDER = ROOT / "examples" / "demo_model" / "build.py"

#: Engine arguments both sides share in tests (0.2 of the NUMA node for the KV cache).
#: float32: with `auto` vLLM would downcast the float32 checkpoint to bfloat16 (emulated on
#: AVX2-only CPUs); the demo's numeric tolerances are for float32 (examples/README.md).
COMMON_ENGINE_ARGS: tuple[str, ...] = (
    "--dtype",
    "float32",
    "--max-model-len",
    "2048",
    "--gpu-memory-utilization",
    "0.2",
    "--max-num-seqs",
    "16",
    "--seed",
    "0",
)
#: What turns the demo model's optimized decode path on.
CANDIDATE_ENGINE_ARGS: tuple[str, ...] = (
    "--additional-config",
    json.dumps({"decode_backend": "latency_specialized"}),
)
#: Path markers and the fallback log line of the demo plugin (examples/README.md): the
#: fused ops run only on the candidate's fast decode steps, `stock_step` only on the
#: candidate's stock steps. The baseline runs neither (GEMM names are no marker: both
#: paths multiply through oneDNN).
DEMO_OPTIMIZED_MARKERS: tuple[str, ...] = (r"^fasttrack_demo::fused_decode_",)
DEMO_STOCK_MARKERS: tuple[str, ...] = (r"^fasttrack_demo::stock_step$",)
DEMO_FALLBACK_PATTERN = r"fasttrack-demo fallback reason="
DEFECT_ENV = "FASTTRACK_DEMO_DEFECT"


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
    """One live engine per test session (plus, for interleaved perf, engines started next to it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.key: str | None = None
        self.signature: tuple[Any, ...] | None = None
        self.engine: Any = None
        self.extras: dict[str, Any] = {}
        """Engines started next to the live one (``acquire_also``), by key."""
        self.starts: list[str] = []

    def profiler_dir(self, key: str) -> Path:
        d = self.root / "profiles" / key
        d.mkdir(parents=True, exist_ok=True)
        return d

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
    ) -> Any:
        """The live engine for ``key``; stops whatever else runs and starts it if needed.

        The live engine is reused only when ``key`` and the launch (side, model, args,
        env) are the same as when it was started.

        ``process_env`` is set in this process while the engine starts (as if set
        where fasttrack runs); ``env`` is given to the engine as overrides.
        """
        signature = (
            side,
            str(model),
            tuple(args),
            tuple(sorted((env or {}).items(), key=str)),
            tuple(sorted((process_env or {}).items(), key=str)),
        )
        if (
            not fresh
            and self.key == key
            and self.signature == signature
            and self.engine is not None
            and self.engine.running
        ):
            return self.engine
        self.release()
        eng = self._start(key, side=side, model=model, args=args, env=env, process_env=process_env)
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
    ) -> Any:
        """Start a second engine next to the live one (interleaved perf); stopped by ``release``
        (or ``release_also``). Always a fresh start."""
        if self.engine is None or not self.engine.running:
            raise RuntimeError("acquire_also needs a live engine from acquire()")
        self.release_also(key)
        eng = self._start(key, side=side, model=model, args=args, env=env, process_env=process_env, exclusive=False)
        self.extras[key] = eng
        return eng

    def release_also(self, key: str) -> None:
        """Stop the extra engine ``key``, if it runs."""
        eng = self.extras.pop(key, None)
        if eng is not None:
            eng.stop()

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
    ) -> Any:
        from fasttrack.engine import ManagedEngine, per_request_metrics_args, profiler_args

        eng = ManagedEngine(
            side=side,
            model=model,
            args=[*args, *profiler_args(self.profiler_dir(key)), *per_request_metrics_args(args)],
            env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})},
            log_dir=self.root / "logs",
            log_name=key,
            startup_timeout=900.0,
            progress=lambda p: print(
                f"[{p.side}] starting, {p.elapsed_s:.0f} s: {p.last_log_line[:120]}", file=sys.stderr
            ),
            exclusive=exclusive,
        )
        with _environ(**(process_env or {})):
            eng.start()
        self.starts.append(key)
        return eng

    def release(self) -> None:
        """Stop the live engine and any extra ones."""
        for key in list(self.extras):
            self.release_also(key)
        if self.engine is not None:
            self.engine.stop()
        self.key, self.engine, self.signature = None, None, None


@pytest.fixture(scope="session")
def engine_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineSlot]:
    slot = EngineSlot(tmp_path_factory.mktemp("engines"))
    try:
        yield slot
    finally:
        slot.release()


def candidate_skip_reason(demo_model: DemoModel) -> str | None:
    missing = demo_plugin_missing()
    if missing:
        return missing
    if demo_model.kind != "demo":
        return f"the demo model is not available: {demo_model.note}"
    return None


@pytest.fixture
def baseline_engine(engine_slot: EngineSlot, demo_model: DemoModel) -> Any:
    """The stock-path engine of the demo target."""
    return engine_slot.acquire(
        "baseline",
        side="baseline",
        model=demo_model.path,
        args=COMMON_ENGINE_ARGS,
        env={DEFECT_ENV: None},
    )


@pytest.fixture
def candidate_engine(engine_slot: EngineSlot, demo_model: DemoModel) -> Any:
    """The optimized-path engine of the demo target (skips without the demo plugin)."""
    reason = candidate_skip_reason(demo_model)
    if reason:
        pytest.skip(reason)
    return engine_slot.acquire(
        "candidate",
        side="candidate",
        model=demo_model.path,
        args=(*COMMON_ENGINE_ARGS, *CANDIDATE_ENGINE_ARGS),
        env={DEFECT_ENV: None},
    )


@pytest.fixture
def silent_fallback_engine(engine_slot: EngineSlot, demo_model: DemoModel) -> Any:
    """A candidate engine with the ``silent-fallback`` defect planted through the
    environment of the process that starts it (as ``FASTTRACK_DEMO_DEFECT=... fasttrack``)."""
    reason = candidate_skip_reason(demo_model)
    if reason:
        pytest.skip(reason)
    return engine_slot.acquire(
        "candidate-silent-fallback",
        side="candidate",
        model=demo_model.path,
        args=(*COMMON_ENGINE_ARGS, *CANDIDATE_ENGINE_ARGS),
        process_env={DEFECT_ENV: "silent-fallback"},
    )


@dataclass(frozen=True)
class DemoPathMarkers:
    """What proves which path the demo target ran."""

    optimized: tuple[str, ...] = DEMO_OPTIMIZED_MARKERS
    stock: tuple[str, ...] = DEMO_STOCK_MARKERS
    fallback_pattern: str = DEMO_FALLBACK_PATTERN

    def marker_set(self) -> Any:
        from fasttrack.engine import MarkerSet

        return MarkerSet(optimized=list(self.optimized), stock=list(self.stock))


@dataclass(frozen=True)
class DemoEngineArgs:
    """Engine arguments of the demo target in tests."""

    common: tuple[str, ...] = COMMON_ENGINE_ARGS
    candidate: tuple[str, ...] = CANDIDATE_ENGINE_ARGS


@pytest.fixture(scope="session")
def demo_engine_args() -> DemoEngineArgs:
    """Engine arguments both sides share, and the candidate's switch."""
    return DemoEngineArgs()


@pytest.fixture(scope="session")
def demo_path_markers() -> DemoPathMarkers:
    """Path markers and the fallback log regex of the demo plugin."""
    return DemoPathMarkers()
