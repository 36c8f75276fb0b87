"""The scope manifest: the declared envelope of one fast-track optimization.

One YAML file per validated optimization lives at ``suites/<name>/scope.yaml``.
It is loaded into the pydantic models of this package, which reject unknown keys.
Errors name the YAML location (file, line, dotted field path) of the bad field.

Fields that the public material does not state are left out (or null) and named
in ``unknown`` with what is known; such a scope loads, ``fasttrack plan`` says
what is missing, and ``fasttrack validate`` refuses to run it.

* :mod:`~fasttrack.scope.common`: schema version, tier names, the model base, validators
* :mod:`~fasttrack.scope.deployment`: model, engine arguments per side, hardware
* :mod:`~fasttrack.scope.envelope`: the envelope and whether a config point lies inside it
* :mod:`~fasttrack.scope.inputs`: fallback, isolation, path markers, kernels, evals, workloads, claims
* :mod:`~fasttrack.scope.gates`: gates per check (one gate model each), tiers, cost-estimate assumptions
* :mod:`~fasttrack.scope.reference`: stock's own builds that calibrate the equivalence limits, and their work
* :mod:`~fasttrack.scope.manifest`: :class:`Scope` and its cross-section rules
* :mod:`~fasttrack.scope.loading`: finding, parsing and loading scope files; the JSON Schema
"""

from __future__ import annotations

from fasttrack.scope.common import (
    DEFAULT_SHARED_COMPONENTS,
    SCOPE_SCHEMA_VERSION,
    SUITES_DIR,
    TIER_ORDER,
    FallbackSituation,
    ScopeModel,
    SharedComponent,
    TierName,
)
from fasttrack.scope.deployment import (
    HOST_SAFETY_ENV,
    CpuPinning,
    EngineSpec,
    HardwareSpec,
    ModelSpec,
    NodeSpec,
    SideSpec,
)
from fasttrack.scope.envelope import (
    BatchRange,
    ContextRange,
    Envelope,
    SpecDecodeSpec,
    expand_spec_names,
    point_outside_envelope,
)
from fasttrack.scope.gates import (
    CheckGate,
    CoverageGate,
    EquivalenceGate,
    Estimates,
    FeaturesGate,
    Gates,
    PerfGate,
    ServiceLevel,
    TierSpec,
    gate_models,
)
from fasttrack.scope.inputs import (
    Claim,
    EvalSpec,
    FallbackSpec,
    IsolationSpec,
    KernelSuite,
    PathMarkers,
    WorkloadSpec,
)
from fasttrack.scope.loading import LoadedScope, available_suites, find_scope, json_schema, load_scope, parse_scope
from fasttrack.scope.manifest import Scope, TierMatrix
from fasttrack.scope.reference import ReferenceTolerance, StockReference

__all__ = [
    "DEFAULT_SHARED_COMPONENTS",
    "HOST_SAFETY_ENV",
    "SCOPE_SCHEMA_VERSION",
    "SUITES_DIR",
    "TIER_ORDER",
    "BatchRange",
    "CheckGate",
    "Claim",
    "ContextRange",
    "CoverageGate",
    "CpuPinning",
    "EngineSpec",
    "Envelope",
    "EquivalenceGate",
    "Estimates",
    "EvalSpec",
    "FallbackSituation",
    "FallbackSpec",
    "FeaturesGate",
    "Gates",
    "HardwareSpec",
    "IsolationSpec",
    "KernelSuite",
    "LoadedScope",
    "ModelSpec",
    "NodeSpec",
    "PathMarkers",
    "PerfGate",
    "ReferenceTolerance",
    "ServiceLevel",
    "Scope",
    "ScopeModel",
    "SharedComponent",
    "SideSpec",
    "SpecDecodeSpec",
    "StockReference",
    "TierMatrix",
    "TierName",
    "TierSpec",
    "WorkloadSpec",
    "available_suites",
    "expand_spec_names",
    "find_scope",
    "gate_models",
    "json_schema",
    "load_scope",
    "parse_scope",
    "point_outside_envelope",
]
