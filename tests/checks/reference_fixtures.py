"""Recorded validate runs with reference variants, as fixtures of the calibrated equivalence rule's CPU tests.

A fixture is a folder ``tests/fixtures/equivalence/<name>/`` made from a run folder of ``fasttrack validate``
(``--checks equivalence,features`` is enough) by::

    python tests/checks/reference_fixtures.py RUN_DIR NAME --note "what was run, where"

* ``meta.json``: the scope, the tier, the note, and the engines recorded;
* ``equivalence.json.gz``: per engine (``baseline``, ``candidate``, ``reference-<variant>``), per config point, the
  equivalence check's run (its artifacts ``<group>.<engine>.json``), trimmed: whole rounds up to at least
  :data:`KEEP_REQUESTS` requests per point, the first :data:`KEEP_TOKENS` generated tokens of each (on every
  engine alike), the profiler windows' summaries without their steps, logprobs to 7 significant digits (about a
  float32's precision), no prompt text;
* ``features.json.gz``: per engine, the ``full_context`` runs at the batch sizes :data:`FULL_BATCHES` (their
  first :data:`KEEP_TOKENS` tokens) and the ``logprobs`` result (the features whose judgement the variants calibrate);
  empty for a run without the features check.

``--whole`` keeps every request and token of the equivalence runs (a GPU run: 4 points of 8 requests of 48 tokens).

The tests judge them again with the scope's current rule (``tests/checks/test_equivalence_fixtures.py``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "equivalence"
KEEP_REQUESTS = 2
"""Requests kept per point (whole rounds: at batch 8, one round of 8)."""
KEEP_TOKENS = 16
"""Generated tokens kept per request."""
FULL_BATCHES = (1, 3)
"""Batch sizes whose full-context runs are kept."""


def _round_floats(x: Any) -> Any:
    if isinstance(x, float):
        return float(f"{x:.7g}")
    if isinstance(x, list):
        return [_round_floats(v) for v in x]
    if isinstance(x, dict):
        return {k: _round_floats(v) for k, v in x.items()}
    return x


def _first_tokens(rec: dict[str, Any]) -> dict[str, Any]:
    for key in ("token_ids", "logprobs", "top"):
        rec[key] = rec[key][:KEEP_TOKENS]
    return rec


def _trim_point(run: dict[str, Any], whole: bool = False) -> dict[str, Any]:
    batch = int(run["batch"])
    rounds = len(run["round_checks"]) if whole else max(1, -(-KEEP_REQUESTS // batch))
    keep = (lambda r: r) if whole else _first_tokens
    recs = [keep(dict(r, prompt_text="")) for r in run["records"] if int(r["round"]) < rounds]
    win = run.get("window")
    if win:
        win = {k: v for k, v in win.items() if k != "steps"}
    return {**run, "records": _round_floats(recs), "round_checks": run["round_checks"][:rounds], "window": win}


def _engines(folder: Path) -> tuple[str, dict[str, Path]]:
    """The engine group and ``engine -> artifact`` of one check's folder (``<group>.<engine>.json``)."""
    files = sorted(folder.glob("*.json"))
    groups = {f.name.split(".", 1)[0] for f in files}
    if len(groups) != 1:
        raise SystemExit(f"{folder}: expected the artifacts of one engine group, found {sorted(groups)}")
    return groups.pop(), {f.name.split(".", 1)[1].removesuffix(".json"): f for f in files}


def record(run_dir: Path, name: str, note: str, whole: bool = False) -> Path:
    """Write the fixture ``name`` from ``run_dir`` (see the module docstring; ``whole``: every request and token of
    the equivalence runs); returns its folder. A run without the features check records none."""
    summary = json.loads((run_dir / "run-summary.json").read_text())
    group, eq_files = _engines(run_dir / "artifacts" / "equivalence")
    eq = {e: json.loads(p.read_text()) for e, p in eq_files.items()}
    fdir = run_dir / "artifacts" / "features"
    ran_features = fdir.is_dir() and any(fdir.glob("*.json"))
    feats = {e: json.loads(p.read_text()) for e, p in _engines(fdir)[1].items()} if ran_features else {}
    out = FIXTURES / name
    out.mkdir(parents=True, exist_ok=True)
    trimmed_eq = {e: {pid: _trim_point(r, whole) for pid, r in runs.items()} for e, runs in eq.items()}
    trimmed_f: dict[str, Any] = {}
    for e, side in feats.items():
        res = side.get("results", {})
        full = res.get("full_context")
        keep: dict[str, Any] = {}
        if full:
            runs = [_round_floats(_full_tokens(r)) for r in full["runs"] if int(r["batch"]) in FULL_BATCHES]
            keep["full_context"] = {**full, "runs": runs, "points": [r["point"] for r in runs]}
        if "logprobs" in res:
            keep["logprobs"] = _round_floats(res["logprobs"])
        trimmed_f[e] = {"results": keep, "errors": side.get("errors", {})}
    (out / "equivalence.json.gz").write_bytes(gzip.compress(json.dumps(trimmed_eq).encode(), mtime=0))
    (out / "features.json.gz").write_bytes(gzip.compress(json.dumps(trimmed_f).encode(), mtime=0))
    meta = {
        "scope": summary["scope"],
        "tier": summary["tier"],
        "group": group,
        "note": note,
        "engines": sorted(eq),
        "verdicts_when_recorded": {c: v["verdict"] for c, v in summary["checks"].items()},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def _full_tokens(run: dict[str, Any]) -> dict[str, Any]:
    return {**run, "records": [_first_tokens(dict(r)) for r in run["records"]]}


@dataclass
class Fixture:
    """One recorded run: its meta, and per engine its equivalence runs and its features' results."""

    name: str
    meta: dict[str, Any]
    equivalence: dict[str, dict[str, Any]]
    features: dict[str, dict[str, Any]]


def names() -> list[str]:
    return sorted(p.parent.name for p in FIXTURES.glob("*/meta.json"))


def load(name: str) -> Fixture:
    folder = FIXTURES / name
    return Fixture(
        name=name,
        meta=json.loads((folder / "meta.json").read_text()),
        equivalence=json.loads(gzip.decompress((folder / "equivalence.json.gz").read_bytes())),
        features=json.loads(gzip.decompress((folder / "features.json.gz").read_bytes())),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Record a validate run folder as a fixture of the calibrated rule.")
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("name")
    ap.add_argument("--note", required=True, help="what was run, where (the command, the host, the defect)")
    ap.add_argument("--whole", action="store_true", help="keep every request and token of the equivalence runs")
    opts = ap.parse_args(argv)
    out = record(opts.run_dir, opts.name, opts.note, opts.whole)
    print(f"wrote {out.relative_to(ROOT)}: " + ", ".join(f"{p.name} {p.stat().st_size:,} B" for p in out.iterdir()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
