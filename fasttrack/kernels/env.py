"""Environment variables the runner uses to configure a suite's pytest process.

Environment variables (not pytest options) carry the configuration, so that the same
settings reach pytest when it runs under ``compute-sanitizer`` or is started by hand.
"""

from __future__ import annotations

import json
import os
from typing import Any

ROWS = "FASTTRACK_KERNEL_ROWS"
"""Path of the JSON file the pytest plugin writes its rows to."""
CANDIDATE = "FASTTRACK_KERNEL_CANDIDATE"
"""Candidate module: a dotted name or a ``.py`` file path (default: the suite's own)."""
DEFECT = "FASTTRACK_KERNEL_DEFECT"
"""Comma-separated planted defects the shipped candidates switch on (testing the tier)."""
TIER = "FASTTRACK_KERNEL_TIER"
"""Case matrix size: smoke < standard < full."""
TOLERANCES = "FASTTRACK_KERNEL_TOLERANCES"
"""JSON {kernel: {dtype: {atol, rtol, ulp}}}: the scope's per-kernel overrides."""
DIMS = "FASTTRACK_KERNEL_DIMS"
"""JSON {name: int}: model dimensions that override the suite's defaults."""
DTYPES = "FASTTRACK_KERNEL_DTYPES"
"""Comma-separated dtypes (fp32, fp16, bf16, fp8) the suite runs; default: the suite's."""
SUITE = "FASTTRACK_KERNEL_SUITE"
"""Suite name recorded in every row."""
SEED = "FASTTRACK_KERNEL_SEED"
"""Base seed of the input generators (default 0)."""
SANITIZER = "FASTTRACK_KERNEL_SANITIZER"
"""Set by the runner while a suite runs under compute-sanitizer (tool name)."""

TIERS: tuple[str, ...] = ("smoke", "standard", "full")


def tier() -> str:
    t = os.environ.get(TIER, "standard").strip() or "standard"
    if t not in TIERS:
        raise ValueError(f"{TIER}={t!r} is not one of {', '.join(TIERS)}")
    return t


def json_object(text: str, what: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object; else ValueError naming ``what`` (an environment variable, an option)."""
    try:
        val = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} must hold a JSON object; parsing failed: {exc}") from None
    if not isinstance(val, dict):
        raise ValueError(f"{what} must hold a JSON object, got {type(val).__name__}")
    return val


def json_var(name: str) -> dict[str, Any]:
    raw = os.environ.get(name, "").strip()
    return json_object(raw, name) if raw else {}


def defects() -> frozenset[str]:
    raw = os.environ.get(DEFECT, "")
    return frozenset(d.strip() for d in raw.split(",") if d.strip())


def seed() -> int:
    return int(os.environ.get(SEED, "0") or 0)
