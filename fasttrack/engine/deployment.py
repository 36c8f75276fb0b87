"""Starting an engine outside its envelope and recording what it does (the ``unsupported_deployment`` probe).

A scope declares what its optimized path does when deployed outside the envelope:
``reject_at_startup`` (the engine refuses with a clear error) or ``fallback`` (it serves on
the stock path, visibly). :func:`probe_deployment` starts such an engine once, and either
records the refusal (exit code, the log lines that say why) or, when it comes up, sends a
few greedy requests and records the fallback lines the engine logged. Judging is the
coverage check's; this module only observes.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Sequence

import httpx
from pydantic import Field

from fasttrack.engine.errors import EngineStartError
from fasttrack.engine.logs import read_log_range
from fasttrack.engine.start import start_engine
from fasttrack.engine.tls import tls_context
from fasttrack.modelbase import DocModel

PROBE_PROMPTS = ("The capital of France is", "One, two, three,")
PROBE_TOKENS = 8


class DeploymentOutcome(DocModel):
    """What one engine start outside the envelope did."""

    args: list[str]
    started: bool
    """The engine became healthy (it did not refuse the deployment)."""
    exit_code: int | None = None
    """The exit code of a refused start."""
    seconds: float = 0.0
    log: str | None = None
    log_tail: str = ""
    reject_lines: list[str] = Field(default_factory=list)
    """Log lines matching the scope's ``reject_regex`` (a refused start)."""
    fallback_lines: list[str] = Field(default_factory=list)
    """Log lines matching the scope's ``log_regex`` (an engine that came up and served)."""
    served: int = 0
    """Requests answered by an engine that came up."""
    error: str | None = None
    """Why a request failed, when one did."""


def probe_deployment(
    *,
    args: Sequence[str],
    served_model: str | None = None,
    reject_regex: str | None = None,
    log_regex: str | None = None,
    **launch: Any,
) -> DeploymentOutcome:
    """Start the engine once with ``args`` (``launch``: the other arguments of
    :func:`~fasttrack.engine.start.start_engine`: side, model, env, log folder and name, startup timeout, nodes,
    launcher); record a refusal, or serve a few requests and record the fallback lines. The engine is always stopped
    before this returns."""
    t0 = time.monotonic()
    try:
        eng = start_engine(args=list(args), **launch)
    except EngineStartError as exc:
        text = read_log_range(Path(exc.log_path), 0) if exc.log_path else exc.log_tail
        rx = re.compile(reject_regex) if reject_regex else None
        return DeploymentOutcome(
            args=list(args),
            started=False,
            exit_code=exc.process_exit_code,
            seconds=round(time.monotonic() - t0, 1),
            log=exc.log_path,
            log_tail=exc.log_tail[-4000:],
            reject_lines=[ln for ln in text.splitlines() if rx.search(ln)][:5] if rx else [],
        )
    out = DeploymentOutcome(args=list(args), started=True, log=str(eng.log_path) if eng.log_path else None)
    try:
        start = eng.log_offset()
        name = served_model or eng.model
        with httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0), verify=tls_context()) as http:
            for prompt in PROBE_PROMPTS:
                r = http.post(
                    eng.base_url + "/v1/completions",
                    json={"model": name, "prompt": prompt, "max_tokens": PROBE_TOKENS, "temperature": 0.0},
                )
                if r.status_code == 200:
                    out.served += 1
                else:
                    out.error = f"HTTP {r.status_code}: {r.text[:300]}"
        time.sleep(1.0)  # let the engine flush its log lines
        if log_regex:
            rx = re.compile(log_regex)
            out.fallback_lines = [ln for ln in eng.read_log(start).splitlines() if rx.search(ln)][:5]
            if not out.fallback_lines:  # rate-limited loggers may have said it at startup
                out.fallback_lines = [ln for ln in eng.read_log(0, start).splitlines() if rx.search(ln)][-5:]
        out.log_tail = eng.log_tail(40)
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    finally:
        eng.stop()
        out.seconds = round(time.monotonic() - t0, 1)
    return out
