"""What a point's verdict requires and how it reads: no regression or strictly better, extra gates (goodput at
the SLO, curve dominance), and "measured slower, within margin".

* ``gates.perf.require: no_regression`` (default): a point passes when the lower bound of its
  gated speedup is at least ``1 - noise_margin``. ``strictly_better``: when it exceeds 1 (the
  candidate is measurably faster); the sequential looks then decide against 1.
* A point that passes while its whole interval lies below 1 was **measured slower, within the
  margin**: it passed the no-regression gate, and it is shown so, never as a plain pass.
* Goodput at the scope's SLO (``gates.perf.slo.gate``) and, for ``concurrency_sweep`` levels,
  curve dominance (``gates.perf.curve_dominance``) are further conditions of the same point
  (intersection-union: each at the nominal level, no multiplicity correction).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fasttrack.perf.curves import CURVE_KIND, CURVE_METRICS

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.scope import PerfGate

SLOWER = "measured slower, within margin"


def gate_margin(gate: "PerfGate") -> float:
    """The margin the gate judges by: the scope's noise margin, or 0 (threshold 1) when strictly better is
    required."""
    return 0.0 if gate.require == "strictly_better" else gate.noise_margin


def rule_words(gate: "PerfGate") -> str:
    if gate.require == "strictly_better":
        return "strictly better: lower bound > 1"
    return f"no regression: lower bound >= 1 - noise_margin = {1.0 - gate.noise_margin:g}"


def item_metrics(kind: str, metrics: list[str], gate: "PerfGate") -> list[str]:
    """The metrics one item is compared on: the scope's, plus a curve level's and goodput under an SLO."""
    out = list(metrics)
    if kind == CURVE_KIND:
        out += [m for m in CURVE_METRICS if m not in out]
    if gate.slo is not None and "goodput" not in out:
        out.append("goodput")
    return out


def label_outcome(row: dict[str, Any]) -> None:
    """Set ``outcome`` (and ``slower_within_margin``) on a gated row."""
    v = row.get("verdict")
    if v is None:
        return
    hi = row.get("ci_high")
    slower = v == "pass" and isinstance(hi, (int, float)) and hi < 1.0
    row["slower_within_margin"] = slower
    row["outcome"] = SLOWER if slower else str(v)
    if slower:
        row["statement"] = (
            f"{SLOWER}: the whole interval [{row['ci_low']:.3f}, {hi:.3f}] lies below 1 (the candidate is measurably "
            f"slower here), and its lower bound passes the threshold {row['threshold']:.3f}; "
        ) + str(row.get("statement", ""))


def goodput_condition(rows: list[dict[str, Any]], *, threshold: float) -> tuple[bool | None, str]:
    """Goodput at the SLO as a gate condition of one point: (passed, why); None without an interval."""
    r = next((x for x in rows if x.get("metric_name") == "goodput"), None)
    if r is None or r.get("nominal_ci_low") is None:
        return None, "goodput at the SLO has no interval (no samples on a side)"
    lo, hi = float(r["nominal_ci_low"]), float(r["nominal_ci_high"])
    ok = lo >= threshold
    r["verdict"] = "pass" if ok else "fail"
    r["gated"] = True
    why = f"goodput speedup {r['speedup']:.3f} [{lo:.3f}, {hi:.3f}]: lower bound {'>=' if ok else '<'} {threshold:.3f}"
    return ok, why
