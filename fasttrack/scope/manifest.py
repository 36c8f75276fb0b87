"""The scope manifest as a whole: its sections and the rules that hold across them (required
sections or ``unknown``, unique names, claims inside the envelope, nested tiers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from fasttrack.scope.common import (
    SLUG_MAX,
    SLUG_PATTERN,
    TIER_ORDER,
    ScopeModel,
    TierName,
    check_unique,
)
from fasttrack.scope.deployment import EngineSpec, HardwareSpec, ModelSpec
from fasttrack.scope.envelope import Envelope, expand_spec_names, point_outside_envelope
from fasttrack.scope.gates import Estimates, Gates, TierSpec
from fasttrack.scope.inputs import Claim, EvalSpec, FallbackSpec, IsolationSpec, KernelSuite, PathMarkers, WorkloadSpec


@dataclass(frozen=True)
class TierMatrix:
    """The values of each dimension one tier selects from the envelope; its config points are their product
    (the plan expands them, and the trusted-scope comparison holds two scopes' points against each other)."""

    tensor_parallel: tuple[int, ...]
    decode_context_parallel: tuple[int, ...]
    speculative: tuple[str, ...]
    """Point labels: a config's name, or ``name:draft_length`` (one per draft length)."""
    batch: tuple[int, ...]
    context: tuple[int | Literal["full"], ...]

    def points(self) -> list[tuple[int, int, str, int, int | Literal["full"]]]:
        """Every (tp, dcp, speculative label, batch, context) of the tier, in the plan's order."""
        return [
            (tp, dcp, sp, b, c)
            for tp in self.tensor_parallel
            for dcp in self.decode_context_parallel
            for sp in self.speculative
            for b in self.batch
            for c in self.context
        ]


class Scope(ScopeModel):
    schema_version: Literal[1] = 1
    name: str = Field(pattern=SLUG_PATTERN, max_length=SLUG_MAX)
    """Suite name (the folder under suites/; a slug: it names the model cache folder too)."""
    title: str
    description: str = ""
    status: Literal["complete", "partial"] = "complete"
    """'partial' when the public material leaves fields unknown (listed in ``unknown``)."""
    unknown: dict[str, str] = Field(default_factory=dict)
    """Dotted field path -> what is known / why it is missing."""
    notes: list[str] = Field(default_factory=list)
    """Assumptions made where the source material is silent."""
    sources: list[str] = Field(default_factory=list)
    model: ModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec)
    hardware: HardwareSpec | None = None
    envelope: Envelope | None = None
    fallback: FallbackSpec | None = None
    isolation: IsolationSpec | None = None
    features: list[str] = Field(default_factory=list)
    """Serving features that must keep working on the optimized path (the features check's registered features;
    ``fasttrack plan`` names one it does not know)."""
    evals: list[EvalSpec] = Field(default_factory=list)
    kernels: list[KernelSuite] = Field(default_factory=list)
    path_markers: PathMarkers | None = None
    workloads: list[WorkloadSpec] = Field(default_factory=list)
    claims: list[Claim] = Field(default_factory=list)
    gates: Gates = Field(default_factory=Gates)
    tiers: dict[TierName, TierSpec]
    estimates: Estimates = Field(default_factory=Estimates)

    @model_validator(mode="after")
    def _cross(self) -> "Scope":
        bad_unknown = sorted(k for k in self.unknown if k.split(".")[0] not in type(self).model_fields)
        if bad_unknown:
            raise ValueError(f"'unknown' names fields that are not part of a scope: {bad_unknown}")
        required = ("hardware", "envelope", "fallback", "isolation", "path_markers")
        missing = [f for f in required if getattr(self, f) is None and f not in self.unknown]
        if missing:
            raise ValueError(f"fields {missing} are missing; give them or list them under 'unknown' with what is known")
        if self.unknown and self.status != "partial":
            raise ValueError("a scope with 'unknown' fields must say status: partial")
        if self.status == "partial" and not self.unknown:
            raise ValueError("status: partial needs 'unknown' to list what is missing")
        if set(self.tiers) != set(TIER_ORDER):
            raise ValueError(f"tiers must define exactly {list(TIER_ORDER)}; got {sorted(self.tiers)}")
        check_unique([e.name for e in self.evals], "evals names")
        check_unique([w.name for w in self.workloads], "workloads names")
        check_unique([c.id for c in self.claims], "claims ids")
        check_unique([k.name for k in self.kernels], "kernels names")
        if self.envelope is not None:
            self._check_tiers(self.envelope)
            if self.hardware is not None:
                for tp in self.envelope.tensor_parallel:
                    problem = self.hardware.layout_problem(tp)
                    if problem:
                        raise ValueError(
                            f"envelope.tensor_parallel {tp} cannot be laid out on hardware.node: {problem}"
                        )
            for c in self.claims:
                problem = point_outside_envelope(c.point, self.envelope)
                if problem:
                    raise ValueError(f"claim {c.id!r} points outside the envelope: {problem}")
        wl = {w.name for w in self.workloads}
        ev = {e.name for e in self.evals}
        for tname, t in self.tiers.items():
            if t.workloads:
                bad = sorted(set(t.workloads) - wl)
                if bad:
                    raise ValueError(f"tier {tname!r} names unknown workloads {bad}")
            if t.evals:
                bad = sorted(set(t.evals) - ev)
                if bad:
                    raise ValueError(f"tier {tname!r} names unknown evals {bad}")
            if t.features:
                bad = sorted(set(t.features) - set(self.features))
                if bad:
                    raise ValueError(f"tier {tname!r} names features {bad} the scope does not list")
        return self

    def _check_tiers(self, env: Envelope) -> None:
        full_vals: dict[str, list[Any]] = {
            "tensor_parallel": env.tensor_parallel,
            "decode_context_parallel": env.decode_context_parallel,
            "batch": env.batch.sweep,
            "context": env.context.sweep,
        }
        spec_names = {s.name for s in env.speculative}
        prev: dict[str, set[str]] | None = None
        prev_name = None
        for tname in TIER_ORDER:
            t = self.tiers[tname]
            sel: dict[str, set[str]] = {}
            for dim, allv in full_vals.items():
                chosen = getattr(t, dim)
                if chosen is None:
                    chosen = allv
                bad = [v for v in chosen if v not in allv]
                if bad:
                    raise ValueError(f"tier {tname!r}: {dim} values {bad} are not in the envelope ({allv})")
                sel[dim] = {str(v) for v in chosen}
            specs = t.speculative if t.speculative is not None else sorted(spec_names)
            for s in specs:
                base, _, dl = s.partition(":")
                sp = env.spec_by_name(base)
                if sp is None:
                    raise ValueError(
                        f"tier {tname!r}: speculative config {base!r} is not in the envelope ({sorted(spec_names)})"
                    )
                if dl and (not dl.isdigit() or int(dl) not in sp.draft_lengths):
                    raise ValueError(
                        f"tier {tname!r}: draft length {dl!r} is not one of {sp.name}'s {sp.draft_lengths}"
                    )
            sel["speculative"] = set(expand_spec_names(specs, env))
            sel["checks"] = set(t.checks) if t.checks is not None else {"*"}
            sel["workloads"] = set(t.workloads) if t.workloads is not None else {"*"}
            sel["features"] = set(t.features) if t.features is not None else {"*"}
            sel["evals"] = set(t.evals) if t.evals is not None else {"*"}
            if prev is not None:
                for dim, vals in sel.items():
                    pv = prev[dim]
                    if "*" in vals:
                        continue
                    if "*" in pv or not pv <= vals:
                        what = sorted(pv - vals) if "*" not in pv else "all"
                        raise ValueError(
                            f"tiers must be nested: {prev_name!r} selects {dim} {what} that {tname!r} does not"
                        )
            prev, prev_name = sel, tname

    # ---------------------------------------------------------------- helpers

    def tier_matrix(self, tier: str) -> TierMatrix:
        """What ``tier`` selects from the envelope, per dimension (a dimension it leaves out: all of it)."""
        if self.envelope is None:
            raise ValueError(f"scope {self.name!r} has no envelope to select points from")
        env, t = self.envelope, self.tiers[tier]  # type: ignore[index]
        names = t.speculative if t.speculative is not None else [s.name for s in env.speculative]
        return TierMatrix(
            tensor_parallel=tuple(t.tensor_parallel or env.tensor_parallel),
            decode_context_parallel=tuple(t.decode_context_parallel or env.decode_context_parallel),
            speculative=tuple(expand_spec_names(names, env)),
            batch=tuple(t.batch or env.batch.sweep),
            context=tuple(t.context or env.context.sweep),
        )

    @property
    def is_complete(self) -> bool:
        return self.status == "complete"

    def missing_report(self) -> list[str]:
        """Lines naming each unknown field and what is known about it."""
        return [f"{k}: {v}" for k, v in sorted(self.unknown.items())]
