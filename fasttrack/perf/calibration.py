"""Calibration records: the lifetime variance of a scope's perf points on one host class, signed.

Two lifetimes of the same engine differ by more than the runs of one lifetime, so a perf interval with one
lifetime per side needs the between-lifetime variance from elsewhere. ``fasttrack calibrate`` measures it:
A/A runs of the scope (both sides the stock path, engines fresh per lifetime) give, per point, pairs of stock
lifetimes, and :func:`fasttrack.stats.lifetime.variance_components` their variance components. The record
keeps every pair's figures (so anyone can recompute it), the host class it was measured on, the A/A
half-widths per number of lifetimes, and the noise margin the measurement supports. It is a DSSE envelope
signed with Ed25519 like a bundle's attestation; a scope names it with its sha256 (``gates.perf.calibration``)
and the bundle names the record it used.

A record applies to a run only on the same host class (GPU model and count, or CPU and core count, and the
engine version); a point the record does not hold gets no calibrated variance.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from fasttrack.bundle.canonical import canonical_json, sha256_bytes
from fasttrack.bundle.dsse import Envelope, add_signature, check_signatures
from fasttrack.bundle.keys import PublicKey, SigningKey
from fasttrack.errors import FasttrackError
from fasttrack.modelbase import DocModel
from fasttrack.stats.lifetime import (
    AAPair,
    LifetimeVariance,
    VarianceComponents,
    variance_components,
    variance_of_pairs,
)

PAYLOAD_TYPE = "application/vnd.fasttrack.perf-calibration+json"
RECORD_MAX_BYTES = 4 * 1024 * 1024
"""A record larger than this is refused unread (a few hundred points fit in far less)."""
FALSE_ALARM_GOAL = 0.05
"""The A/A false-alarm rate the recommended margin is set for (one-sided, per point)."""


class CalibrationError(FasttrackError):
    """A calibration record that cannot be used: unreadable, tampered with, or unsigned by the scope's keys."""


class HostClass(DocModel):
    """What a record's lifetime variance holds for: the device, its count, the CPU count and the engine."""

    device: str = Field(max_length=200)
    """The GPU model as nvidia-smi names it (e.g. 'NVIDIA H100 80GB HBM3'), or 'cpu'."""
    gpus: int = Field(ge=0, le=100_000)
    cpu_count: int = Field(ge=0, le=100_000)
    """Cores of the host: part of a CPU host's class (a GPU host's engines do not run on them)."""
    engine_version: str | None = Field(default=None, max_length=200)
    """The vLLM version the engines ran."""

    def mismatch(self, other: "HostClass") -> str | None:
        """Why a run on ``other`` cannot use this host class's record (None: it can)."""
        if self.device != other.device:
            return f"the record was measured on {self.device}, this host is {other.device}"
        if self.gpus != other.gpus:
            return f"the record was measured on {self.gpus} GPU(s), this host has {other.gpus}"
        if self.device == "cpu" and self.cpu_count != other.cpu_count:
            return f"the record was measured on {self.cpu_count} cores, this host has {other.cpu_count}"
        if self.engine_version and other.engine_version and self.engine_version != other.engine_version:
            return f"the record was measured with vLLM {self.engine_version}, this run uses {other.engine_version}"
        return None


class PointCalibration(DocModel):
    """One (workload, point, metric): its variance components and what they mean for a run."""

    workload: str = Field(max_length=200)
    point: str = Field(max_length=200)
    metric: str = Field(max_length=100)
    components: VarianceComponents
    half_width: dict[str, float]
    """Relative half-width of an A/A interval (95%) by lifetimes per side ('1', '2', '3')."""
    aa_margin: float
    """The smallest noise margin at which an A/A of one lifetime per side fails this point with probability
    at most the false-alarm goal (one-sided)."""

    def variance(self, source: str) -> LifetimeVariance:
        c = self.components
        return LifetimeVariance(
            between_var_log=c.between_var_log,
            within_var_log=c.within_var_log,
            runs_per_lifetime=c.runs_per_lifetime,
            df=c.pairs,
            source=source,
        )


class CalibrationRecord(DocModel):
    """A scope's lifetime variance per point on one host class (the payload of the signed record)."""

    schema_version: Literal[1] = 1
    kind: Literal["fasttrack.perf-calibration"] = "fasttrack.perf-calibration"
    scope: str = Field(max_length=200)
    """The scope's name."""
    scope_sha256: str | None = Field(default=None, max_length=64)
    """The sha256 of the A/A copy of the scope the lifetimes were measured with."""
    model_sha256: str | None = Field(default=None, max_length=64)
    host: HostClass
    gated_metric: str | None = Field(default=None, max_length=100)
    """The metric the scope's perf gate decides by: the recommended margin is set from its points."""
    interleaved: bool
    """Whether each A/A pair's two engines were up together with their runs interleaved (the perf check's
    ``interleave``): a record applies to runs measured the same way."""
    confidence: float = 0.95
    created: str = Field(max_length=64)
    method: str = Field(max_length=2000)
    sources: list[dict[str, str]] = Field(default_factory=list, max_length=1000)
    """The A/A bundles the pairs come from (name and sha256)."""
    points: list[PointCalibration] = Field(max_length=10_000)
    recommended_margin: float
    """The largest ``aa_margin`` over the gated metric's points (every metric's where none is named), rounded
    up to 0.5%: the noise margin this host class supports for one lifetime per side."""

    def find(self, workload: str, point: str, metric: str) -> PointCalibration | None:
        return next((p for p in self.points if (p.workload, p.point, p.metric) == (workload, point, metric)), None)


@dataclass(frozen=True)
class LoadedCalibration:
    """A record read and checked for a run."""

    record: CalibrationRecord
    path: Path
    sha256: str
    signers: list[str]
    """Key ids of the scope's keys that signed it."""

    def describe(self) -> str:
        pairs = min((p.components.pairs for p in self.record.points), default=0)
        rec = self.record
        return f"calibration {self.sha256[:12]} ({rec.host.device}, {pairs}+ A/A pairs, {rec.created[:10]})"


def _z(p: float) -> float:
    from scipy import stats as sps

    return float(sps.norm.ppf(p))


def point_calibration(workload: str, point: str, metric: str, pairs: Sequence[AAPair]) -> PointCalibration:
    """The calibration of one point from its A/A pairs."""
    from scipy import stats as sps

    comp = variance_components(pairs)
    var = variance_of_pairs(pairs, source="")
    assert var is not None  # variance_components needs two pairs too
    widths = {str(n): var.half_width(lifetimes=n) for n in (1, 2, 3)}
    t = float(sps.t.ppf(0.975, comp.pairs))
    se = math.sqrt(2.0 * comp.lifetime_var_log)
    margin = 1.0 - math.exp(-(t + _z(1.0 - FALSE_ALARM_GOAL)) * se)
    return PointCalibration(
        workload=workload, point=point, metric=metric, components=comp, half_width=widths, aa_margin=margin
    )


def build_record(
    *,
    scope: str,
    host: HostClass,
    interleaved: bool,
    points: Iterable[PointCalibration],
    sources: Sequence[Mapping[str, str]] = (),
    scope_sha256: str | None = None,
    model_sha256: str | None = None,
    gated_metric: str | None = None,
) -> CalibrationRecord:
    pts = list(points)
    if not pts:
        raise CalibrationError("no point had two or more A/A pairs of lifetimes: nothing to calibrate")
    gated = [p for p in pts if p.metric == gated_metric] or pts
    worst = max(p.aa_margin for p in gated)
    return CalibrationRecord(
        scope=scope,
        scope_sha256=scope_sha256,
        model_sha256=model_sha256,
        host=host,
        gated_metric=gated_metric,
        interleaved=interleaved,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        method=(
            "A/A pairs of stock engine lifetimes per point; V (variance of one lifetime's log value) = mean square "
            "of the pairs' log ratios / 2 (an A/A's true ratio is 1, so a bias between the pair's engines counts "
            "as variance), one degree of freedom per pair; sigma_W^2 = pooled variance of the runs' log values "
            "within lifetimes; sigma_B^2 = max(0, V - sigma_W^2 / R); half-widths: t_(0.975, pairs) * "
            "sqrt(2 V / L); aa_margin: (t + z_0.95) * sqrt(2 V), the margin an A/A of one lifetime per side "
            f"fails with probability <= {FALSE_ALARM_GOAL:.0%}"
        ),
        sources=[dict(s) for s in sources],
        points=pts,
        recommended_margin=math.ceil(worst * 200.0) / 200.0,
    )


def sign_record(record: CalibrationRecord, key: SigningKey) -> bytes:
    """The record as a DSSE envelope signed by ``key`` (the bytes to write to the record file)."""
    payload = canonical_json(record.model_dump(mode="json"), pretty=False)
    env = Envelope(payload=base64.b64encode(payload).decode(), payloadType=PAYLOAD_TYPE, signatures=[])
    env = add_signature(env, key)
    return canonical_json(env.model_dump(mode="json"))


def read_record(data: bytes, *, source: str) -> tuple[CalibrationRecord, Envelope]:
    """Parse a record file's bytes (no signature check)."""
    if len(data) > RECORD_MAX_BYTES:
        raise CalibrationError(f"{source}: {len(data)} bytes, over the {RECORD_MAX_BYTES}-byte limit of a record")
    try:
        env = Envelope.model_validate_json(data)
    except ValidationError as exc:
        raise CalibrationError(f"{source} is not a DSSE envelope: {exc.errors()[0].get('msg')}") from None
    if env.payloadType != PAYLOAD_TYPE:
        raise CalibrationError(f"{source}: payload type {env.payloadType!r}, not a perf calibration record")
    try:
        record = CalibrationRecord.model_validate(json.loads(env.payload_bytes()))
    except (ValueError, ValidationError) as exc:
        raise CalibrationError(f"{source}: not a calibration record: {str(exc)[:300]}") from None
    return record, env


def load_record(path: Path, *, sha256: str, keys: Sequence[PublicKey], field: str) -> LoadedCalibration:
    """Read the record at ``path`` for a run: its hash must be the scope's pin and, with ``keys``, one of them
    must have signed it. ``field`` names the scope setting in errors."""
    try:
        with path.open("rb") as f:  # never more than a record may hold
            data = f.read(RECORD_MAX_BYTES + 1)
    except OSError as exc:
        raise CalibrationError(f"{field}.record: cannot read {path}: {exc.strerror or exc}") from None
    digest = sha256_bytes(data)
    if digest != sha256:
        raise CalibrationError(
            f"{field}.sha256: {path} has sha256 {digest}, the scope pins {sha256}",
            hint="The record changed since the scope was reviewed; pin the new record's hash if it is the one meant.",
        )
    record, env = read_record(data, source=str(path))
    signers: list[str] = []
    if keys:
        checked = check_signatures(env, keys)
        signers = [c["key"] for c in checked if c["status"] == "valid"]
        if not signers:
            raise CalibrationError(f"{field}.keys: none of the {len(keys)} key(s) signed {path}")
    return LoadedCalibration(record=record, path=path, sha256=digest, signers=signers)


def pairs_from_rows(
    rows: Iterable[Mapping[str, Any]], *, metric: str, paired: bool
) -> dict[tuple[str, str], list[AAPair]]:
    """A/A pairs per (workload, point) from an A/A bundle's perf ``points`` rows of ``metric``: lifetime ``i`` of
    the baseline with lifetime ``i`` of the candidate (``paired``: up together, their runs interleaved)."""
    out: dict[tuple[str, str], list[AAPair]] = {}
    for r in rows:
        if r.get("metric_name") != metric:
            continue
        b_lt, c_lt = r.get("baseline_lifetime_values") or [], r.get("candidate_lifetime_values") or []
        b_runs, c_runs = r.get("baseline_run_values") or [], r.get("candidate_run_values") or []
        key = (str(r.get("workload")), str(r.get("point")))
        for i in range(min(len(b_lt), len(c_lt))):
            if not (_positive(b_lt[i]) and _positive(c_lt[i])):
                continue
            out.setdefault(key, []).append(
                AAPair(
                    baseline=float(b_lt[i]),
                    candidate=float(c_lt[i]),
                    baseline_runs=_floats(b_runs[i] if i < len(b_runs) else []),
                    candidate_runs=_floats(c_runs[i] if i < len(c_runs) else []),
                    paired=paired,
                )
            )
    return out


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _floats(xs: Any) -> list[float]:
    return [float(x) for x in (xs or []) if _positive(x)]
