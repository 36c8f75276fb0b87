"""fasttrack: validation and evidence bundles for fast-track inference optimizations in vLLM."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

#: Repository root (suites/, schemas/, templates/ live here).
ROOT = Path(__file__).resolve().parent.parent
