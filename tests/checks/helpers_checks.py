"""Fakes shared by the correctness-check unit tests (no engine needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fasttrack.checks.base import build_run_plan
from fasttrack.checks.context import RunContext
from fasttrack.checks.windows import WindowRecord
from fasttrack.scope import load_scope

OPT = r"^fasttrack_demo::fused_decode_"


def demo_ctx(tmp_path: Path, *, batches: list[int] | None = None, **scope_updates: Any) -> RunContext:
    """A run context for the demo scope (smoke tier, optionally fewer batch sizes) without engines. Given
    ``features``, the smoke tier checks exactly those (the demo's smoke tier otherwise leaves out
    ``speculative_acceptance``, which needs the speculative group of the standard tier)."""
    loaded = load_scope("demo-llama")
    scope = loaded.scope
    if batches is not None or "features" in scope_updates:
        tiers = {k: v.model_copy() for k, v in scope.tiers.items()}
        smoke: dict[str, Any] = {"batch": batches} if batches is not None else {}
        if "features" in scope_updates:
            smoke["features"] = None
        tiers["smoke"] = tiers["smoke"].model_copy(update=smoke)
        scope_updates["tiers"] = tiers
    if scope_updates:
        scope = scope.model_copy(update=scope_updates)
    plan = build_run_plan(scope, tier="smoke")
    return RunContext(scope=scope, plan=plan, run_dir=tmp_path, loaded=loaded, log=lambda s: None)


def window(
    side: str,
    points: list[str],
    *,
    decode: dict[int, int],
    optimized: dict[int, int] | None = None,
    extra_steps: list[dict[str, Any]] | None = None,
    available: bool = True,
    stock_ops: int = 0,
    fallback_lines: list[str] | None = None,
    name: str = "w",
) -> WindowRecord:
    """A window record with the given decode steps per batch size (and how many ran optimized)."""
    optimized = optimized if optimized is not None else (dict(decode) if side == "candidate" else {})
    steps = []
    for b, n in sorted(decode.items()):
        for i in range(n):
            opt = 1 if i < optimized.get(b, 0) else 0
            steps.append({"kind": "decode", "batch": b, "optimized_ops": opt * 8, "stock_ops": stock_ops})
    steps += extra_steps or []
    if not available:
        return WindowRecord(name=name, side=side, points=points, available=False, unavailable_reason="no profiler")
    summary = {
        "decode_steps": sum(decode.values()),
        "optimized_decode_steps": sum(optimized.values()),
        "decode_batch_sizes": {str(k): v for k, v in decode.items()},
        "optimized_decode_batch_sizes": {str(k): v for k, v in optimized.items() if v},
        "step_counts": {"decode": sum(decode.values())},
        "fallback_lines": fallback_lines or [],
        "fallback_events": len(fallback_lines or []),
    }
    return WindowRecord(name=name, side=side, points=points, available=True, summary=summary, steps=steps)
