"""``fasttrack calibrate``: measure a scope's lifetime variance on this host class and write a signed record.

1. An A/A copy of the scope (the candidate runs the baseline's arguments; no claims; no calibration; a fixed
   design: every lifetime measures every point with ``min_runs`` runs) runs ``fasttrack validate --checks perf``
   with ``--pairs`` lifetimes per side, interleaved as the scope measures (both engines of a pair up together).
2. From the A/A bundle's perf rows, every (workload, point, metric) gets its A/A pairs of stock lifetimes and
   their variance components (:mod:`fasttrack.perf.calibration`); the record is signed with ``--sign-key``.
3. The A/A comparisons are counted honestly: each pair, at each point, is judged by the lifetime rule with the
   variance of the *other* pairs (leave one out), at the scope's margin or ``--margin``; the comparisons of
   one pair share its two engines, so the independent comparisons are the pairs.

``--from-bundle`` skips step 1 and reads an A/A bundle measured before (several may be given: their pairs pool).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from fasttrack.errors import FasttrackError
from fasttrack.perf.calibration import (
    CalibrationRecord,
    HostClass,
    build_record,
    pairs_from_rows,
    point_calibration,
    sign_record,
)
from fasttrack.stats.lifetime import AAPair, paired_figures, variance_of_pairs

AA_PREFIX = ".aa-calibrate-"


def aa_scope_text(src: Path, *, tier: str, pairs: int) -> str:
    """The A/A copy of the scope at ``src``: both sides stock, ``pairs`` lifetimes per side in ``tier``, a fixed
    design, no claims and no calibration record."""
    data = yaml.safe_load(src.read_text(encoding="utf-8"))
    engine = data.setdefault("engine", {})
    engine["candidate"] = {"args": list((engine.get("baseline") or {}).get("args", []))}
    data["claims"] = []
    data["title"] = f"A/A calibration: {data.get('title', data.get('name'))}"
    perf = data.setdefault("gates", {}).setdefault("perf", {})
    perf.pop("calibration", None)
    perf["adaptive"] = False
    tiers = data.setdefault("tiers", {})
    tiers.setdefault(tier, {})["lifetimes_per_side"] = pairs
    return yaml.safe_dump(data, sort_keys=False)


def run_aa(scope_path: Path, *, tier: str, pairs: int, out: Path, extra: list[str]) -> Path:
    """Run the A/A validation (perf only); the A/A bundle's path."""
    aa = scope_path.parent / f"{AA_PREFIX}{os.getpid()}.yaml"
    aa.write_text(aa_scope_text(scope_path, tier=tier, pairs=pairs), encoding="utf-8")
    run_dir = out / "aa"
    cmd = [sys.executable, "-m", "fasttrack", "validate", "--model", str(aa), "--tier", tier, "--checks", "perf"]
    cmd += ["--out", str(run_dir), "--force", *extra]
    try:
        proc = subprocess.run(cmd, check=False)
    finally:
        aa.unlink(missing_ok=True)
    bundle = run_dir / "bundle.tar.gz"
    if not bundle.is_file():
        raise FasttrackError(f"the A/A validation wrote no bundle (exit {proc.returncode}); see {run_dir}")
    return bundle


def pairs_of_bundles(bundles: list[Path]) -> tuple[dict[tuple[str, str, str], list[AAPair]], dict[str, Any]]:
    """A/A pairs per (workload, point, metric) pooled over ``bundles``, and the facts of the first (host class,
    design, scope)."""
    from fasttrack.bundle.canonical import sha256_file
    from fasttrack.bundle.reader import open_bundle

    pooled: dict[tuple[str, str, str], list[AAPair]] = {}
    facts: dict[str, Any] = {"sources": []}
    for b in bundles:
        with open_bundle(b) as view:
            m = view.manifest
            entry = m.checks.get("perf")
            if entry is None or "points" not in entry.tables:
                raise FasttrackError(f"{b}: no perf points table (was it a perf A/A run?)")
            summary = entry.summary or {}
            interleaved = bool(summary.get("interleaved"))
            rows = view.rows("perf", "points")
            metrics = sorted({str(r.get("metric_name")) for r in rows if r.get("metric_name")})
            for metric in metrics:
                for (w, p), prs in pairs_from_rows(rows, metric=metric, paired=interleaved).items():
                    pooled.setdefault((w, p, metric), []).extend(prs)
            hw = m.provenance.hardware
            facts.setdefault(
                "host",
                HostClass(
                    device=hw.gpu_model if hw.kind == "gpu" and hw.gpu_model else "cpu",
                    gpus=hw.gpu_count,
                    cpu_count=hw.cpu_count or 0,
                    engine_version=m.provenance.vllm_version,
                ),
            )
            facts.setdefault("interleaved", interleaved)
            facts.setdefault("scope", m.scope.model)
            facts.setdefault("scope_sha256", m.scope.sha256)
            facts.setdefault("model_sha256", next(iter(m.provenance.models.values()), None))
            facts.setdefault("gated_metric", summary.get("gated_metric"))
            facts.setdefault("noise_margin", summary.get("noise_margin"))
            facts["sources"].append({"name": b.name, "sha256": sha256_file(b)[0]})
    return pooled, facts


def record_of(pooled: dict[tuple[str, str, str], list[AAPair]], facts: dict[str, Any]) -> CalibrationRecord:
    points = [point_calibration(w, p, m, prs) for (w, p, m), prs in sorted(pooled.items()) if len(prs) >= 2]
    return build_record(
        scope=str(facts["scope"]),
        host=facts["host"],
        interleaved=bool(facts["interleaved"]),
        points=points,
        sources=facts["sources"],
        scope_sha256=facts.get("scope_sha256"),
        model_sha256=facts.get("model_sha256"),
        gated_metric=facts.get("gated_metric"),
    )


def aa_comparisons(
    pooled: dict[tuple[str, str, str], list[AAPair]], *, metric: str, margin: float, confidence: float = 0.95
) -> list[dict[str, Any]]:
    """Each A/A pair at each point of ``metric``, judged by the lifetime rule with the other pairs' variance."""
    keys = [k for k in sorted(pooled) if k[2] == metric and len(pooled[k]) >= 3]
    family = 1.0 - (1.0 - confidence) / max(1, len(keys))
    out = []
    for w, p, m in keys:
        prs = pooled[(w, p, m)]
        for i, pr in enumerate(prs):
            others = prs[:i] + prs[i + 1 :]
            var = variance_of_pairs(others, source=f"the other {len(others)} A/A pairs")
            diffs = pr.run_diffs() or [math.log(pr.baseline / pr.candidate)]
            fig = paired_figures([diffs], variance=var, lower_is_better=True)
            if fig is None:
                continue
            lo, hi = fig.interval(confidence)
            strict_lo, _ = fig.interval(family)
            out.append(
                {
                    "pair": i + 1,
                    "workload": w,
                    "point": p,
                    "metric": m,
                    "speedup": math.exp(fig.d),
                    "ci_low": lo,
                    "ci_high": hi,
                    "half_width": max(1.0 - lo, hi - 1.0),
                    "false_alarm": lo < 1.0 - margin,
                    "strictly_better": strict_lo > 1.0,
                    "df": fig.df,
                }
            )
    return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def summary_lines(record: CalibrationRecord, comps: list[dict[str, Any]], *, margin: float, metric: str) -> list[str]:
    """The figures docs/perf.md records: per point, the components and half-widths; then the A/A counts."""
    lines = [
        "| point | metric | pairs | lifetime SD | sigma_B | sigma_W (run) | A/A half-width, 1 / 2 / 3 lifetimes per "
        "side | margin for <= 5% false alarms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pc in record.points:
        if pc.metric != metric:
            continue
        c, hw = pc.components, pc.half_width
        lines.append(
            f"| {pc.point} ({pc.workload}) | {pc.metric} | {c.pairs} | {c.lifetime_sd:.2%} | "
            f"{math.sqrt(c.between_var_log):.2%} | {math.sqrt(c.within_var_log):.2%} | "
            f"±{hw['1']:.2%} / ±{hw['2']:.2%} / ±{hw['3']:.2%} | {pc.aa_margin:.2%} |"
        )
    n = len(comps)
    k = sum(c["false_alarm"] for c in comps)
    sb = sum(c["strictly_better"] for c in comps)
    lo, hi = wilson(k, n)
    pairs = len({c["pair"] for c in comps})
    widest = max((c["half_width"] for c in comps), default=float("nan"))
    lines.append(
        f"\n{n} A/A comparisons ({pairs} independent lifetime pairs x {n // max(pairs, 1)} points; the points of one "
        f"pair share its engines), each judged with the other pairs' lifetime variance: widest interval ±{widest:.2%}; "
        f"false alarms at margin {margin:g}: {k} of {n} ({k / max(n, 1):.1%}, 95% Wilson {lo:.1%}-{hi:.1%}); "
        f"strictly better (family-wise): {sb} of {n}; recommended margin (one lifetime per side): "
        f"{record.recommended_margin:g}"
    )
    return lines


def calibrate(
    *,
    scope_path: Path | None,
    tier: str,
    pairs: int,
    out: Path,
    sign_key: Path,
    from_bundles: list[Path],
    margin: float | None,
    extra: list[str],
) -> int:
    """The command: measure (or read) A/A pairs, write and sign the record, print and write the figures."""
    from fasttrack.bundle.keys import load_private_key

    key = load_private_key(sign_key)
    out.mkdir(parents=True, exist_ok=True)
    bundles = list(from_bundles)
    if not bundles:
        if scope_path is None:
            raise FasttrackError("give --model (a scope to measure) or --from-bundle (A/A bundles measured before)")
        # the A/A bundle is signed with the record's key: the record names it, and it verifies on its own
        bundles = [run_aa(scope_path, tier=tier, pairs=pairs, out=out, extra=[*extra, "--sign-key", str(sign_key)])]
    pooled, facts = pairs_of_bundles(bundles)
    record = record_of(pooled, facts)
    data = sign_record(record, key)
    path = out / "calibration.dsse.json"
    path.write_bytes(data)
    from fasttrack.bundle.canonical import sha256_bytes

    metric = str(facts.get("gated_metric") or record.points[0].metric)
    m = margin if margin is not None else float(facts.get("noise_margin") or record.recommended_margin)
    comps = aa_comparisons(pooled, metric=metric, margin=m, confidence=record.confidence)
    (out / "aa-comparisons.json").write_text(json.dumps(comps, indent=1), encoding="utf-8")
    lines = summary_lines(record, comps, margin=m, metric=metric)
    (out / "calibration.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(
        f"\nwrote {path} (sha256 {sha256_bytes(data)}, signed by {key.keyid[:16]}); name it in the scope:\n"
        f"  gates.perf.calibration: {{record: <path from the scope's folder>, sha256: {sha256_bytes(data)}, "
        "keys: [<its public key>]}"
    )
    return 0
