"""Calibration records (fasttrack calibrate): built from A/A perf rows, signed, pinned by the scope, held against
the host class, handed to the points; and the host-bound label of a perf row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from perf_testlib import demo_perf_ctx

from fasttrack.bundle.canonical import sha256_bytes
from fasttrack.bundle.keys import generate_keypair, load_private_key, load_public_keys
from fasttrack.checks.perf import PerfCheck
from fasttrack.host.hardware import GPU, HostInfo
from fasttrack.perf.calibration import CalibrationError, HostClass, load_record, pairs_from_rows, sign_record
from fasttrack.perf.hostbound import host_bound_fields, memory_bandwidth_gbs
from fasttrack.pipeline.calibrate import aa_comparisons, aa_scope_text, record_of
from fasttrack.scope.gates import PerfCalibration

GPU_HOST = HostClass(device="NVIDIA H100 80GB HBM3", gpus=1, cpu_count=16, engine_version="0.26.0")


def _aa_rows(points: list[str], *, pairs: int, sd: float, seed: int = 0, runs: int = 4) -> list[dict]:
    """A/A perf rows as a bundle holds them: per point, each side's lifetime values and run values."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in points:
        b_runs, c_runs = [], []
        for _ in range(pairs):
            lb, lc = (6.0 * float(np.exp(rng.normal(0, sd))) for _ in range(2))
            b_runs.append([lb * float(np.exp(rng.normal(0, 0.001))) for _ in range(runs)])
            c_runs.append([lc * float(np.exp(rng.normal(0, 0.001))) for _ in range(runs)])
        rows.append(
            {
                "workload": "decode",
                "point": p,
                "metric_name": "median_engine_tpot_ms",
                "baseline_lifetime_values": [float(np.median(r)) for r in b_runs],
                "candidate_lifetime_values": [float(np.median(r)) for r in c_runs],
                "baseline_run_values": b_runs,
                "candidate_run_values": c_runs,
            }
        )
    return rows


def _record(points: list[str], *, pairs: int = 6, sd: float = 0.005, host: HostClass = GPU_HOST):
    rows = _aa_rows(points, pairs=pairs, sd=sd)
    pooled = {
        (w, p, "median_engine_tpot_ms"): prs
        for (w, p), prs in pairs_from_rows(rows, metric="median_engine_tpot_ms", paired=True).items()
    }
    facts = {
        "scope": "demo-llama",
        "host": host,
        "interleaved": True,
        "sources": [{"name": "aa", "sha256": "0" * 64}],
        "gated_metric": "median_engine_tpot_ms",
    }
    return record_of(pooled, facts), pooled


def test_a_record_holds_every_point_s_components_half_widths_and_margin() -> None:
    rec, pooled = _record(["p-b1", "p-b8"])
    assert [p.point for p in rec.points] == ["p-b1", "p-b8"]
    pc = rec.points[0]
    assert pc.components.pairs == 6 and len(pc.components.pair_log_ratios) == 6
    assert pc.half_width["1"] > pc.half_width["2"] > pc.half_width["3"] > 0
    assert pc.aa_margin > pc.half_width["1"]  # the margin clears the A/A interval plus its own noise
    assert rec.recommended_margin >= max(p.aa_margin for p in rec.points)
    assert rec.gated_metric == "median_engine_tpot_ms"
    assert rec.recommended_margin * 200 == pytest.approx(round(rec.recommended_margin * 200))  # a 0.5% step
    comps = aa_comparisons(pooled, metric="median_engine_tpot_ms", margin=rec.recommended_margin)
    assert len(comps) == 12 and all(c["df"] == 5 for c in comps)  # leave one out: five other pairs
    assert not any(c["strictly_better"] for c in comps)


def test_a_signed_record_loads_only_with_its_pinned_hash_and_a_scope_key(tmp_path: Path) -> None:
    rec, _ = _record(["p-b1"])
    priv, pub = generate_keypair(tmp_path / "keys", name="calib")
    data = sign_record(rec, load_private_key(priv))
    path = tmp_path / "calibration.dsse.json"
    path.write_bytes(data)
    keys = load_public_keys(pub)
    loaded = load_record(path, sha256=sha256_bytes(data), keys=keys, field="gates.perf.calibration")
    assert loaded.record == rec and loaded.signers == [keys[0].keyid]
    with pytest.raises(CalibrationError, match=r"gates.perf.calibration.sha256: .* the scope pins"):
        load_record(path, sha256="1" * 64, keys=keys, field="gates.perf.calibration")
    _, other = generate_keypair(tmp_path / "keys", name="other")
    with pytest.raises(CalibrationError, match=r"gates.perf.calibration.keys: none of the 1 key"):
        load_record(path, sha256=sha256_bytes(data), keys=load_public_keys(other), field="gates.perf.calibration")
    path.write_bytes(data.replace(b'"payload"', b'"payload_"'))
    with pytest.raises(CalibrationError):
        load_record(path, sha256=sha256_bytes(path.read_bytes()), keys=[], field="gates.perf.calibration")


def test_host_classes_must_match() -> None:
    assert GPU_HOST.mismatch(GPU_HOST) is None
    h200 = GPU_HOST.model_copy(update={"device": "NVIDIA H200"})
    assert "measured on NVIDIA H100 80GB HBM3, this host is NVIDIA H200" in (GPU_HOST.mismatch(h200) or "")
    assert "vLLM 0.26.0" in (GPU_HOST.mismatch(GPU_HOST.model_copy(update={"engine_version": "0.27.0"})) or "")
    cpu = HostClass(device="cpu", gpus=0, cpu_count=2)
    assert "2 cores" in (cpu.mismatch(cpu.model_copy(update={"cpu_count": 8})) or "")


def _calibrated_ctx(tmp_path: Path, host: HostClass, *, keyed: bool = True):
    ctx = demo_perf_ctx("smoke", tmp_path, interleave=True)
    chk = PerfCheck()
    chk._prepare(ctx)  # the plan's items
    points = sorted({s.item.point for s in chk.state.items.values()})
    rec, _ = _record(points, host=host)
    priv, pub = generate_keypair(tmp_path / "k", name="c")
    data = sign_record(rec, load_private_key(priv))
    (tmp_path / "cal.dsse.json").write_bytes(data)
    ctx.scope.gates.perf.calibration = PerfCalibration(
        record=str(tmp_path / "cal.dsse.json"), sha256=sha256_bytes(data), keys=[str(pub)] if keyed else []
    )
    ctx.host = HostInfo(
        cpu_model="x", cpu_count=host.cpu_count, gpus=[GPU(index=0, name=host.device)] if host.gpus else [], source="t"
    )
    return ctx


def test_the_check_hands_each_point_its_variance_and_copies_the_record(tmp_path: Path, monkeypatch) -> None:
    from fasttrack.checks.perf import calibrated

    monkeypatch.setattr(calibrated, "engine_version", lambda: GPU_HOST.engine_version)
    ctx = _calibrated_ctx(tmp_path, GPU_HOST)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    summary = chk.state.calibration_summary
    assert summary is not None and summary["applied"] and summary["points_calibrated"] == summary["points"] > 0
    assert all("median_engine_tpot_ms" in s.variance for s in chk.state.items.values())
    assert (tmp_path / summary["artifact"]).is_file()
    # another host class: not used, and the summary says why
    ctx2 = _calibrated_ctx(tmp_path / "other", GPU_HOST)
    ctx2.host.gpus[0].name = "NVIDIA H200"  # type: ignore[union-attr]
    chk2 = PerfCheck()
    assert chk2.skip_reason(ctx2) is None
    assert "this host is NVIDIA H200" in chk2.state.calibration_summary["why_not"]  # type: ignore[index]
    assert not any(s.variance for s in chk2.state.items.values())


def test_a_tampered_record_stops_the_perf_check_before_any_engine(tmp_path: Path, monkeypatch) -> None:
    ctx = _calibrated_ctx(tmp_path, GPU_HOST)
    Path(ctx.scope.gates.perf.calibration.record).write_bytes(b"{}")  # type: ignore[union-attr]
    why = PerfCheck().skip_reason(ctx)
    assert why is not None and "gates.perf.calibration.sha256" in why


def test_the_aa_scope_is_stock_on_both_sides_with_a_fixed_design(tmp_path: Path) -> None:
    import yaml

    from fasttrack import ROOT

    text = aa_scope_text(ROOT / "suites" / "demo-llama-gpu" / "scope.yaml", tier="smoke", pairs=4)
    data = yaml.safe_load(text)
    assert data["engine"]["candidate"]["args"] == data["engine"]["baseline"]["args"]
    assert data["claims"] == [] and "calibration" not in data["gates"]["perf"]
    assert data["gates"]["perf"]["adaptive"] is False and data["tiers"]["smoke"]["lifetimes_per_side"] == 4


@pytest.mark.parametrize(
    ("device", "step_ms", "weights", "bound"),
    [
        ("NVIDIA H100 80GB HBM3", 1.35, 2.0e9, True),  # the ~1B demo model: 0.6 ms of a 1.35 ms step
        ("NVIDIA H100 80GB HBM3", 6.10, 14.6e9, False),  # the ~8B shape: 4.4 ms of a 6.1 ms step
        ("NVIDIA H200", 6.10, 14.6e9, True),  # the same step on a faster card would be host-bound
    ],
)
def test_host_bound_from_the_step_and_the_weights_streaming_time(device, step_ms, weights, bound) -> None:
    f = host_bound_fields(step_ms=step_ms, weights=int(weights), bandwidth_gbs=memory_bandwidth_gbs(device))
    assert f["host_bound"] is bound
    assert f["host_bound_note"].startswith("host-bound" if bound else "GPU-bound")


def test_host_bound_is_not_judged_without_a_card_or_weights() -> None:
    assert memory_bandwidth_gbs("cpu") is None and memory_bandwidth_gbs("NVIDIA H100 PCIe") == 2000.0
    f = host_bound_fields(step_ms=5.0, weights=10**9, bandwidth_gbs=None)
    assert f["host_bound"] is None and "no GPU memory bandwidth" in f["host_bound_note"]
    assert host_bound_fields(step_ms=5.0, weights=None, bandwidth_gbs=3350.0)["host_bound"] is None


def test_the_recommended_margin_is_the_gated_metric_s() -> None:
    """A noisier metric that is only reported (client-timed TPOT, throughput) does not set the margin: on the
    H100 the engine-timed TPOT supported 1.5% while a reported metric's A/A needed 15%."""
    from fasttrack.perf.calibration import build_record

    rec, _ = _record(["p-b1"], sd=0.002)
    noisy, _ = _record(["p-b1"], sd=0.05)
    other = noisy.points[0].model_copy(update={"metric": "median_tpot_ms"})
    both = build_record(
        scope="s", host=GPU_HOST, interleaved=True, points=[rec.points[0], other], gated_metric="median_engine_tpot_ms"
    )
    assert both.recommended_margin < other.aa_margin and both.recommended_margin >= rec.points[0].aa_margin
