"""Condense rows documents into a small results file (for committing next to a suite).

    python -m fasttrack.kernels.results --out results.json [--env env.txt] [--note TEXT] NAME=rows.json ...

Keeps every figure a reader needs (worst errors per kernel, output, dtype and distribution;
determinism; perturbation trials; sanitizer summaries; speed of light with its samples; the
device peaks) and drops the bulky parts (per-case rows, log tails).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from fasttrack.kernels.summary import summarize

_DROP = {"log_tail", "tests", "command"}


def _worst(cases: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    agg: dict[tuple, dict[str, Any]] = defaultdict(
        lambda: {
            "cases": 0,
            "failed": 0,
            "max_abs_err": 0.0,
            "max_rel_err": 0.0,
            "max_ulp": 0,
            "nan_mismatch": 0,
            "inf_mismatch": 0,
            "expected_nonfinite": 0,
        }
    )
    for r in cases:
        key = (r.get("kernel"), r.get("output"), r.get("dtype"), r.get("dist"))
        a = agg[key]
        a["cases"] += 1
        a["failed"] += 0 if r.get("verdict") == "pass" else 1
        for f in ("max_abs_err", "max_rel_err", "max_ulp"):
            v = r.get(f)
            if isinstance(v, (int, float)) and v > a[f]:
                a[f] = v
        for f in ("nan_mismatch", "inf_mismatch", "expected_nonfinite"):
            a[f] += int(r.get(f) or 0)
        a["atol"], a["rtol"] = r.get("atol"), r.get("rtol")
        a.setdefault("shapes", set()).add(r.get("shape"))
    out = []
    for (k, o, d, dist), v in sorted(agg.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        v = dict(v)
        v["shapes"] = len(v.pop("shapes"))
        out.append({"kernel": k, "output": o, "dtype": d, "dist": dist, **v})
    return out


def condense(name: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    summary = doc.get("summary") or summarize(doc)
    pert = []
    for r in doc.get("perturbation") or []:
        row = {k: v for k, v in r.items() if k != "trial_records"}
        trials = r.get("trial_records") or []
        row["trials_ok"] = "".join("." if t.get("ok") else "X" for t in trials)
        row["sleep_cycles_max"] = max((max(t.get("sleep_cycles") or [0]) for t in trials), default=0)
        pert.append(row)
    return {
        "name": name,
        "suite": doc.get("suite"),
        "candidate": doc.get("candidate"),
        "defects": doc.get("defects"),
        "tier": doc.get("tier"),
        "command": (doc.get("runner") or {}).get("command"),
        "wall_s": doc.get("wall_s_total"),
        "host": doc.get("host"),
        "verdict": summary.get("verdict"),
        "reason": summary.get("reason"),
        "counts": summary.get("counts"),
        "failures": (summary.get("failures") or [])[:10],
        "failures_total": len(summary.get("failures") or []),
        "worst_errors": _worst(doc.get("cases") or []),
        "determinism": [{k: v for k, v in r.items() if k not in _DROP} for r in doc.get("determinism") or []],
        "perturbation": pert,
        "sanitizer": [{k: v for k, v in r.items() if k not in _DROP} for r in doc.get("sanitizer") or []],
        "speed_of_light": doc.get("speed_of_light") or [],
        "peaks": {k: v for k, v in (doc.get("peaks") or {}).items()} or None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fasttrack.kernels.results", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--env", type=Path, help="a text file describing the host (stored verbatim)")
    p.add_argument("--note", action="append", default=[], help="a line of context to store (repeatable)")
    p.add_argument("runs", nargs="+", help="NAME=rows.json")
    a = p.parse_args(argv)
    runs = []
    for item in a.runs:
        name, sep, path = item.partition("=")
        if not sep:
            print(f"error: {item!r} is not NAME=rows.json", file=sys.stderr)
            return 2
        runs.append(condense(name, json.loads(Path(path).read_text(encoding="utf-8"))))
    out = {
        "schema": "fasttrack.kernels.results/1",
        "notes": a.note,
        "env": a.env.read_text(encoding="utf-8").splitlines() if a.env else None,
        "runs": runs,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {a.out} ({a.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
