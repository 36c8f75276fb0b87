"""The scope's path markers checked against what the engines reported.

A marker regex that matches the wrong ops makes every path finding built on it wrong, so
the coverage check reads its own profiled windows (both sides) and reports a scope error,
naming the op names seen, when

* a stock marker also matches ops in the candidate's steps that ran the optimized path
  (or an op name both marker kinds match): it cannot tell the stock path from the optimized one;
* a stock marker never matches an op on the baseline (``path_markers.stock_on_baseline``,
  the default) or, for markers of the candidate's own fallback steps, never on the candidate.

A scope error makes the coverage check ``not_run`` (its findings rest on the markers), never ``pass``.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from fasttrack.checks.windows import WindowRecord
from fasttrack.scope import Scope

NAMES_SHOWN = 8
"""Op names quoted per finding."""


def _names(windows: list[WindowRecord], key: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for w in windows:
        for name, n in (w.summary.get(key) or {}).items():
            out[str(name)] += int(n)
    return out


def _quote(names: Counter[str] | list[str]) -> str:
    items = [n for n, _ in names.most_common(NAMES_SHOWN)] if isinstance(names, Counter) else names[:NAMES_SHOWN]
    return ", ".join(items) if items else "none recorded"


def audit_markers(scope: Scope, windows: list[WindowRecord]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per stock marker (the op names it matched on each side) and the scope errors found."""
    pm = scope.path_markers
    if pm is None:
        return [], []
    base = [w for w in windows if w.side == "baseline" and w.available]
    cand = [w for w in windows if w.side == "candidate" and w.available]
    base_stock, cand_stock = _names(base, "stock_op_counts"), _names(cand, "stock_op_counts")
    cand_opt = _names(cand, "optimized_op_counts")
    mixed = [s for w in cand for s in w.steps if s.get("optimized_ops") and s.get("stock_ops")]
    opt_steps = sum(1 for w in cand for s in w.steps if s.get("optimized_ops"))
    errors: list[str] = []
    if mixed:
        errors.append(
            f"scope error: the stock markers {pm.stock} match ops in {len(mixed)} of the candidate's {opt_steps} "
            f"steps that ran the optimized path (stock-marker ops seen on the candidate: {_quote(cand_stock)}); a "
            "stock marker must match only the stock path"
        )
    rows: list[dict[str, Any]] = []
    for rx in pm.stock:
        pat = re.compile(rx)
        on_base = Counter({n: c for n, c in base_stock.items() if pat.search(n)})
        on_cand = Counter({n: c for n, c in cand_stock.items() if pat.search(n)})
        shared = sorted(n for n in cand_opt if pat.search(n))
        problems: list[str] = []
        if shared:
            problems.append(
                f"scope error: stock marker {rx!r} also matches the optimized-path op(s) {_quote(shared)} the "
                "candidate ran"
            )
        if pm.stock_on_baseline and base and not on_base:
            problems.append(
                f"scope error: stock marker {rx!r} matched no op on the baseline in {len(base)} profiled window(s) "
                f"(ops seen there: {_quote(_names(base, 'top_ops'))})"
            )
        # per marker when the windows name their stock-marker ops; from the step counts when they do not
        seen_cand = bool(on_cand) if cand_stock else any(s.get("stock_ops") for w in cand for s in w.steps)
        if not pm.stock_on_baseline and cand and not seen_cand:
            problems.append(
                f"scope error: stock marker {rx!r} matched no op on the candidate in {len(cand)} profiled window(s) "
                f"(ops seen there: {_quote(_names(cand, 'top_ops'))})"
            )
        errors.extend(problems)
        rows.append(
            {
                "marker": rx,
                "kind": "stock",
                "expected_on": "baseline" if pm.stock_on_baseline else "candidate",
                "baseline_windows": len(base),
                "candidate_windows": len(cand),
                "baseline_ops": _quote(on_base) if on_base else "",
                "candidate_ops": _quote(on_cand) if on_cand else "",
                "candidate_optimized_steps_with_stock_ops": len(mixed),
                "verdict": "not_run" if problems or mixed else ("pass" if base or cand else "not_run"),
                "detail": "; ".join(problems) or ("" if base or cand else "no profiled window to check it against"),
            }
        )
    return rows, errors
