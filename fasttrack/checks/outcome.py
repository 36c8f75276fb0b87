"""Helpers for a check's result: folding verdicts, the "used the standard path" finding, artifacts."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from fasttrack.checks.windows import WindowRecord
from fasttrack.results import Verdict

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.checks.context import RunContext


def used_standard_path(windows: Iterable[WindowRecord]) -> str | None:
    """The "used the standard path" finding for a check's candidate windows, or None.

    Returns a sentence when the windows have path evidence and none of their decode
    steps ran the optimized path."""
    ws = [w for w in windows if w.side == "candidate" and w.available]
    if not ws:
        return None
    decode = sum(w.decode_steps for w in ws)
    opt = sum(w.optimized_decode_steps for w in ws)
    if opt == 0:
        return (
            f"used the standard path: none of the candidate's {decode} decode steps in {len(ws)} profiler "
            f"window(s) ran an optimized-path marker"
        )
    return None


def fold_verdicts(verdicts: Iterable[Verdict]) -> Verdict:
    """FAIL if any fails; else NOT_RUN if any did not run (or none given); else PASS."""
    vs = list(verdicts)
    if any(v is Verdict.FAIL for v in vs):
        return Verdict.FAIL
    if not vs or any(v is Verdict.NOT_RUN for v in vs):
        return Verdict.NOT_RUN
    return Verdict.PASS


def write_artifact(ctx: RunContext, check: str, name: str, data: Any) -> str:
    """Write raw data as JSON under ``artifacts/<check>/``; return the path relative to the run directory."""
    d = ctx.artifact_dir(check)
    p = d / name
    p.write_text(json.dumps(data, indent=1, default=str, sort_keys=True), encoding="utf-8")
    try:
        return str(p.relative_to(ctx.run_dir))
    except ValueError:
        return str(p)


def clip(text: str, n: int = 60) -> str:
    """``text`` shortened to about ``n`` characters, for failure messages (repr-quoted)."""
    t = text if len(text) <= n else text[: n - 1] + "…"
    return repr(t)
