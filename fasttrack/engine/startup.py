"""What a starting engine is doing, read from its log: the phase of vLLM's start and since when.

Progress lines during an engine start name the phase (never raw log text, which is an
environment dump or a progress bar as often as not). The phases follow the log lines vLLM
writes on the way up, in the CUDA build (0.26.0; engine logs recorded on an H200 are in
``tests/fixtures/gpu``) and the CPU build (0.32.0) alike:

============================  ==============================================================
phase                         begins at
============================  ==============================================================
importing                     the start (Python imports torch and vLLM; nothing logged yet)
initializing the engine       ``vLLM server version``, ``non-default args``, ``Resolved architecture``,
                              ``Initializing a V1 LLM engine``
loading weights               ``Starting to load model``, ``Loading model from scratch`` (the V2 model
                              runner), ``Loading safetensors checkpoint shards``
profiling memory              ``Loading weights took``, ``Model loading took``
compiling                     ``Dynamo bytecode transform time``, ``Compiling a graph for``,
                              ``Directly load the compiled graph``, ``Using cache directory:
                              .../torch_compile_cache``, ``Warming up model for the compilation`` (CPU)
allocating the KV cache       ``torch.compile took``/``takes``, ``Available KV cache memory``,
                              ``KV cache size``, ``GiB for KV cache`` and ``Warming up done`` (CPU)
capturing CUDA graphs         ``Capturing CUDA graphs``
warming up                    ``Graph capturing finished``, ``Warming up``, ``Compile and warming up``
waiting for health            ``init engine (profile, create kv cache, warmup model) took``,
                              ``Starting vLLM server``/``Starting vLLM API server``, ``Available routes``,
                              ``Application startup complete``
============================  ==============================================================

The phase is that of the last marker line in the log (vLLM compiles during its memory profile, and
a compile cache hit skips straight on), so an unknown line never moves it.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

IMPORTING = "importing"
WAITING_FOR_HEALTH = "waiting for health"

#: (phase, regex) in the order tried on each line: the first that matches sets the phase.
PHASE_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (phase, re.compile(rx))
    for phase, rx in (
        (
            WAITING_FOR_HEALTH,
            r"init engine \(profile, create kv cache, warmup model\) took|Starting vLLM (API )?server"
            r"|Available routes are|Started server process|Waiting for application startup"
            r"|Application startup complete",
        ),
        ("allocating the KV cache", r"Warming up done"),  # CPU: the compile warm-up ends, the KV cache is next
        ("warming up", r"Graph capturing finished|Compile and warming up|Warming up (?!model for the compil)"),
        ("capturing CUDA graphs", r"Capturing CUDA graphs"),
        (
            "allocating the KV cache",
            r"torch\.compile (took|takes)|Available KV cache memory|KV cache size|GiB for KV cache",
        ),
        (
            "compiling",
            r"Dynamo bytecode transform time|Compiling a graph for|Directly load the compiled graph"
            r"|Using cache directory: .*torch_compile_cache|Warming up model for the compilation",
        ),
        ("profiling memory", r"Loading weights took|Model loading took"),
        (
            "loading weights",
            r"Starting to load model|Loading model from scratch|Loading safetensors checkpoint shards|Loading weights",
        ),
        (
            "initializing the engine",
            r"vLLM (API )?server version|non-default args|Resolved architecture|Initializing a V1 LLM engine",
        ),
    )
)


def line_phase(line: str) -> str | None:
    """The phase a log line starts, or None when it is not a marker."""
    for phase, rx in PHASE_MARKERS:
        if rx.search(line):
            return phase
    return None


def phase_of(text: str) -> str:
    """The phase of an engine whose log so far is ``text``."""
    phase = IMPORTING
    for line in text.splitlines():
        phase = line_phase(line) or phase
    return phase


@dataclass
class StartupWatch:
    """Follows a starting engine's log: the current phase and when it began (``time.monotonic``)."""

    log_path: Path | None
    started: float = field(default_factory=time.monotonic)
    phase: str = IMPORTING
    since: float = 0.0
    _offset: int = 0
    _partial: str = ""

    def __post_init__(self) -> None:
        self.since = self.started

    def poll(self, now: float | None = None) -> str:
        """Read what the log gained since the last call; returns the phase."""
        now = time.monotonic() if now is None else now
        if self.log_path is None:
            return self.phase
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                if size < self._offset:  # a new log in place of the old one
                    self._offset, self._partial = 0, ""
                f.seek(self._offset)
                data = f.read(max(0, size - self._offset))
        except OSError:
            return self.phase
        self._offset += len(data)
        text = self._partial + data.decode("utf-8", errors="replace")
        # progress bars redraw with carriage returns: each redraw is a line of its own
        lines = re.split(r"\r\n|\r|\n", text)
        self._partial = lines.pop()
        for line in lines:
            phase = line_phase(line)
            if phase is not None and phase != self.phase:
                self.phase, self.since = phase, now
        return self.phase

    def describe(self, now: float | None = None) -> str:
        """'compiling (for 12 s)': the phase and how long it has lasted."""
        now = time.monotonic() if now is None else now
        return f"{self.phase} (for {now - self.since:.0f} s)"
