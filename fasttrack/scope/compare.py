"""A bundle's recorded scope held against a trusted scope (the repository's, at the PR base), semantically.

A contributor's bundle records the scope its run used, and ``verify`` checks the bundle against that scope.
A scope edited in the PR could make any run pass: a smoke tier of only the kernels check, wider noise
margins, fewer points, features or evals removed. :func:`compare_scopes` compares the parsed scopes, not
their text, and reports every change as a **loosening** (the recorded scope asks for less evidence, or for
other evidence) or a **tightening** (it asks for more, which is fine); changes that do not touch the
evidence (title, description, notes, sources, the cost estimate's assumptions, the start timeout) are
not reported.

What counts as a loosening, by section:

- ``name``, ``model``: any difference (another scope, another model).
- ``hardware``: any difference, except SM architectures, GPU models or GPU counts removed (tighter).
- ``engine``: any difference in the arguments or environment of either side (the comparison of stock and
  candidate would run under other settings).
- ``tiers``: per tier, config points removed (the product of the tier's selections from the envelope:
  tensor and decode-context parallel sizes, speculative configs with their draft lengths, batches,
  contexts), checks dropped, engine lifetimes per side reduced, a lower ``eval_limit``, features, evals or
  workloads removed (a tier that lists none runs all of the scope's).
- ``gates``: a threshold moved the lenient way (each gate model's settings say which way is stricter, as field
  metadata: e.g. ``perf.noise_margin`` up, ``perf.confidence`` or ``perf.min_runs`` down,
  ``equivalence.max_kl`` up, ``features.sampling_alpha`` down); any other gate setting changed, except the
  settings that change nothing about the evidence (``neutral``). A gate section of a check this process has
  not registered (another package's) is compared as written: any change loosens.
- ``evals``, ``workloads``, ``kernels`` (by name): an eval's margin widened, floor, repeats, limit or
  ``max_tokens`` lowered; a workload's requests per run lowered; a kernel suite removed, a dtype removed, a
  tolerance widened or an override added or removed; any other setting of theirs changed.
- ``isolation``: owned or allowed paths added, shared components or their globs removed.
- ``fallback``: situations removed, fallbacks no longer required to be visible, any other setting changed.
- ``path_markers``, ``envelope`` (beyond the points), ``claims`` (removed or changed), and any field this
  module does not know: any change, since fasttrack cannot tell that it is stricter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fasttrack.modelbase import StrictModel
from fasttrack.results import ISOLATION
from fasttrack.scope.common import TIER_ORDER, Direction, stricter_directions
from fasttrack.scope.inputs import EvalSpec, WorkloadSpec
from fasttrack.scope.manifest import Scope

Rule = Direction
"""How a setting compares (:data:`fasttrack.scope.common.Direction`); a setting declares it as its field metadata
(:func:`~fasttrack.scope.common.stricter`), and one without is ``equal``."""
#: Top-level fields that do not touch the evidence.
NEUTRAL = frozenset({"schema_version", "title", "description", "status", "unknown", "notes", "sources", "estimates"})
#: Settings whose ``None`` means "no cap": larger than any number.
UNCAPPED = frozenset({"limit", "eval_limit"})

Json = Any


class ScopeChange(StrictModel):
    """One difference between the trusted and the recorded scope."""

    field: str
    """Dotted path of the setting, e.g. ``tiers.smoke.checks`` or ``gates.perf.noise_margin``."""
    loosens: bool
    """True when the recorded scope asks for less or for other evidence; False when it asks for more."""
    detail: str
    """What changed, in words, naming the values."""

    def line(self) -> str:
        return f"{self.field}: {self.detail}"


class ScopeComparison(StrictModel):
    """Every change from the trusted scope to the recorded one."""

    trusted: str
    """Where the trusted scope came from."""
    changes: list[ScopeChange] = []

    @property
    def loosenings(self) -> list[ScopeChange]:
        return [c for c in self.changes if c.loosens]

    @property
    def tightenings(self) -> list[ScopeChange]:
        return [c for c in self.changes if not c.loosens]

    @property
    def ok(self) -> bool:
        """No loosening (tightenings are fine)."""
        return not self.loosenings


def _short(v: Json, limit: int = 120) -> str:
    s = "none" if v is None else (", ".join(map(str, v)) if isinstance(v, list) else str(v))
    s = "[" + s + "]" if isinstance(v, list) else s
    return s if len(s) <= limit else s[: limit - 1] + "\u2026"


def _names(items: Iterable[Any], limit: int = 12) -> str:
    out = sorted(str(i) for i in items)
    return ", ".join(out[:limit]) + (f" and {len(out) - limit} more" if len(out) > limit else "")


class _Diff:
    """Collects changes while two scopes are walked."""

    def __init__(self) -> None:
        self.changes: list[ScopeChange] = []

    def add(self, fld: str, loosens: bool, detail: str) -> None:
        self.changes.append(ScopeChange(field=fld, loosens=loosens, detail=detail))

    def value(self, fld: str, t: Json, r: Json, rule: Rule, *, uncapped: bool = False) -> None:
        """One setting by its rule (``uncapped``: ``None`` is larger than any number)."""
        if t == r or rule == "neutral":
            return
        if rule in ("superset", "subset") and isinstance(t, list) and isinstance(r, list):
            gone = [x for x in t if x not in r]
            new = [x for x in r if x not in t]
            if gone:
                self.add(fld, rule == "superset", f"removed {_short(gone)}")
            if new:
                self.add(fld, rule == "subset", f"added {_short(new)}")
            return
        if rule in ("higher", "lower"):
            tn, rn = _number(t, uncapped), _number(r, uncapped)
            if tn is not None and rn is not None:
                stricter = rn > tn if rule == "higher" else rn < tn
                verb = "raised" if rn > tn else "lowered"
                self.add(fld, not stricter, f"{verb} from {_short(t)} to {_short(r)}")
                return
        self.changes.append(_changed(fld, t, r))

    def mapping(self, prefix: str, t: Mapping[str, Json], r: Mapping[str, Json], rules: Mapping[str, Rule]) -> None:
        """Every key of two mappings, by its rule (``equal`` for keys without one)."""
        for k in sorted(set(t) | set(r)):
            self.value(f"{prefix}.{k}", t.get(k), r.get(k), rules.get(k, "equal"), uncapped=k in UNCAPPED)


def _number(v: Json, uncapped: bool) -> float | None:
    if v is None and uncapped:
        return math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _changed(fld: str, t: Json, r: Json) -> ScopeChange:
    if t is None:
        what = f"added ({_short(r)})"
    elif r is None:
        what = f"removed (was {_short(t)})"
    else:
        what = f"changed from {_short(t)} to {_short(r)}"
    return ScopeChange(field=fld, loosens=True, detail=f"{what}; fasttrack cannot tell that this is stricter")


def compare_scopes(
    trusted: Scope,
    recorded: Scope,
    *,
    trusted_source: str = "the trusted scope",
    known_checks: Sequence[str] = (),
    trusted_extra_gates: Mapping[str, Json] | None = None,
    recorded_extra_gates: Mapping[str, Json] | None = None,
) -> ScopeComparison:
    """Every change from ``trusted`` to ``recorded`` (see the module docstring).

    ``known_checks``: the check names the bundle records (a tier that lists no checks runs all of them), to
    name the checks a tier drops. ``*_extra_gates``: gate sections of checks this process has not registered
    (a plugin's), as parsed YAML; compared by equality."""
    d = _Diff()
    td, rd = trusted.model_dump(mode="json"), recorded.model_dump(mode="json")
    handled = {"name", "model", "engine", "hardware", "envelope", "tiers", "gates", "evals", "workloads"}
    handled |= {"kernels", "isolation", "fallback", "features", "claims", "path_markers"} | NEUTRAL
    if td["name"] != rd["name"]:
        d.add("name", True, f"another scope: {_short(rd['name'])} instead of {_short(td['name'])}")
    d.mapping("model", td["model"], rd["model"], {})
    eng_t = {k: v for k, v in td["engine"].items() if k != "startup_timeout_s"}
    eng_r = {k: v for k, v in rd["engine"].items() if k != "startup_timeout_s"}
    d.mapping("engine", eng_t, eng_r, {})
    _hardware(d, td["hardware"], rd["hardware"])
    _envelope(d, td["envelope"], rd["envelope"])
    _tiers(d, trusted, recorded, known_checks)
    _gates(d, td["gates"], rd["gates"], dict(trusted_extra_gates or {}), dict(recorded_extra_gates or {}))
    _named(d, "evals", td["evals"], rd["evals"], "name", stricter_directions(EvalSpec))
    _named(d, "workloads", td["workloads"], rd["workloads"], "name", stricter_directions(WorkloadSpec))
    _kernels(d, td["kernels"], rd["kernels"])
    _isolation(d, td["isolation"], rd["isolation"])
    _fallback(d, td["fallback"], rd["fallback"])
    d.value("features", td["features"], rd["features"], "superset")
    d.value("path_markers", td["path_markers"], rd["path_markers"], "equal")
    # Claims by id: one removed or changed loosens (the report shows the recorded claims' verdicts); a claim
    # added is the contributor's to make, and is judged by the data like any other.
    _named(d, "claims", td["claims"], rd["claims"], "id", {})
    for k in sorted((set(td) | set(rd)) - handled):
        d.value(k, td.get(k), rd.get(k), "equal")
    return ScopeComparison(trusted=trusted_source, changes=d.changes)


def _hardware(d: _Diff, t: Json, r: Json) -> None:
    if t is None or r is None:
        d.value("hardware", t, r, "equal")
        return
    rules: dict[str, Rule] = {"sm_arch": "subset", "gpu_models": "subset", "gpu_counts": "subset"}
    d.mapping("hardware", t, r, rules)


def _envelope(d: _Diff, t: Json, r: Json) -> None:
    """The envelope beyond its points (the tiers' points are compared in :func:`_tiers`)."""
    if t is None or r is None:
        d.value("envelope", t, r, "equal")
        return
    d.value("envelope.batch.min", t["batch"]["min"], r["batch"]["min"], "equal")
    d.value("envelope.batch.max", t["batch"]["max"], r["batch"]["max"], "equal")
    d.value("envelope.context.max_model_len", t["context"]["max_model_len"], r["context"]["max_model_len"], "equal")
    ts = {s["name"]: {k: v for k, v in s.items() if k != "draft_lengths"} for s in t["speculative"]}
    rs = {s["name"]: {k: v for k, v in s.items() if k != "draft_lengths"} for s in r["speculative"]}
    for name in sorted(set(ts) & set(rs)):
        d.mapping(f"envelope.speculative.{name}", ts[name], rs[name], {})
    skip = {"tensor_parallel", "decode_context_parallel", "batch", "context", "speculative"}
    for k in sorted((set(t) | set(r)) - skip):
        d.value(f"envelope.{k}", t.get(k), r.get(k), "equal")


def _point_label(p: tuple[Any, ...]) -> str:
    tp, dcp, sp, b, c = p
    name, _, dl = str(sp).partition(":")
    return f"tp{tp}-dcp{dcp}-{name}{'.dl' + dl if dl else ''}-b{b}-ctx{c}"


def _tiers(d: _Diff, trusted: Scope, recorded: Scope, known_checks: Sequence[str]) -> None:
    for tier in TIER_ORDER:
        t, r = trusted.tiers.get(tier), recorded.tiers.get(tier)
        where = f"tiers.{tier}"
        if t is None or r is None:
            d.value(where, t is not None, r is not None, "equal")
            continue
        if trusted.envelope is not None and recorded.envelope is not None:
            tp = set(trusted.tier_matrix(tier).points())
            rp = set(recorded.tier_matrix(tier).points())
            if tp - rp:
                gone = [_point_label(p) for p in tp - rp]
                d.add(f"{where} points", True, f"{len(gone)} of {len(tp)} config points removed: {_names(gone, 6)}")
            if rp - tp:
                d.add(f"{where} points", False, f"{len(rp - tp)} config points added")
        _checks(d, f"{where}.checks", t.checks, r.checks, known_checks)
        d.value(f"{where}.lifetimes_per_side", t.lifetimes_per_side, r.lifetimes_per_side, "higher")
        d.value(f"{where}.eval_limit", t.eval_limit, r.eval_limit, "higher", uncapped=True)
        for what, scope_t, scope_r in (
            ("features", trusted.features, recorded.features),
            ("evals", [e.name for e in trusted.evals], [e.name for e in recorded.evals]),
            ("workloads", [w.name for w in trusted.workloads], [w.name for w in recorded.workloads]),
        ):
            sel_t, sel_r = getattr(t, what), getattr(r, what)
            run_t = sel_t if sel_t is not None else scope_t
            run_r = sel_r if sel_r is not None else scope_r
            # an item the recorded scope no longer has at all is said once, for the scope (not per tier)
            d.value(f"{where}.{what}", [x for x in run_t if x in scope_r], run_r, "superset")
        td, rd = t.model_dump(mode="json"), r.model_dump(mode="json")
        done = {"tensor_parallel", "decode_context_parallel", "speculative", "batch", "context", "checks"}
        done |= {"lifetimes_per_side", "eval_limit", "features", "evals", "workloads"}
        for k in sorted((set(td) | set(rd)) - done):
            d.value(f"{where}.{k}", td.get(k), rd.get(k), "equal")


def _checks(d: _Diff, fld: str, t: list[str] | None, r: list[str] | None, known: Sequence[str]) -> None:
    """A tier's checks: ``None`` runs every check; isolation runs in every tier whatever the list says."""
    if t == r:
        return
    everything = [c for c in known if c != ISOLATION]
    if t is None and r is not None:
        dropped = [c for c in everything if c not in r]
        what = _names(dropped) if dropped else "every check but " + _names(r)
        d.add(fld, True, f"checks dropped: {what} (the trusted tier runs every check; this one only {_names(r)})")
    elif t is not None and r is None:
        d.add(fld, False, "runs every check (the trusted tier lists " + _names(t) + ")")
    elif t is not None and r is not None:
        gone = [c for c in t if c not in r and c != ISOLATION]
        if gone:
            d.add(fld, True, f"checks dropped: {_names(gone)}")
        new = [c for c in r if c not in t]
        if new:
            d.add(fld, False, f"checks added: {_names(new)}")


def _gates(d: _Diff, t: Json, r: Json, tx: dict[str, Json], rx: dict[str, Json]) -> None:
    from fasttrack.scope.gates import gate_models

    models = gate_models()
    for sec in sorted(set(t) | set(r)):
        rules = models[sec].directions() if sec in models else {}
        d.mapping(f"gates.{sec}", t.get(sec) or {}, r.get(sec) or {}, rules)
    for sec in sorted(set(tx) | set(rx)):
        d.value(f"gates.{sec}", tx.get(sec), rx.get(sec), "equal")


def _matched(
    d: _Diff, section: str, t: list[Json], r: list[Json], key: str, removed: str = "removed"
) -> list[tuple[str, Json, Json]]:
    """Items of the trusted and the recorded list matched by ``key``: one the recorded list lacks loosens (said
    under ``section`` after ``removed``); the items both lists have, as (key, trusted, recorded), by key."""
    tn = {x[key]: x for x in t}
    rn = {x[key]: x for x in r}
    gone = sorted(set(tn) - set(rn))
    if gone:
        d.add(section, True, f"{removed}: {_names(gone)}")
    return [(name, tn[name], rn[name]) for name in sorted(set(tn) & set(rn))]


def _named(d: _Diff, section: str, t: list[Json], r: list[Json], key: str, rules: Mapping[str, Rule]) -> None:
    """Items of a list by name: one removed loosens (when no tier selection already said so); shared ones by
    ``rules``."""
    for name, a, b in _matched(d, section, t, r, key):
        d.mapping(f"{section}.{name}", a, b, rules)


def _leaves(v: Json, prefix: str = "") -> dict[str, Json]:
    if isinstance(v, dict):
        out: dict[str, Json] = {}
        for k, x in v.items():
            out.update(_leaves(x, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: v}


def _kernels(d: _Diff, t: list[Json], r: list[Json]) -> None:
    for name, a, b in _matched(d, "kernels", t, r, "name", "kernel suites removed"):
        where = f"kernels.{name}"
        d.value(f"{where}.dtypes", a["dtypes"], b["dtypes"], "superset")
        ta, ra = _leaves(a["tolerances"]), _leaves(b["tolerances"])
        for leaf in sorted(set(ta) | set(ra)):
            if leaf in ta and leaf in ra:
                d.value(f"{where}.tolerances.{leaf}", ta[leaf], ra[leaf], "lower")
            else:
                d.value(f"{where}.tolerances.{leaf}", ta.get(leaf), ra.get(leaf), "equal")
        rest_t = {k: v for k, v in a.items() if k not in ("dtypes", "tolerances")}
        rest_r = {k: v for k, v in b.items() if k not in ("dtypes", "tolerances")}
        d.mapping(where, rest_t, rest_r, {})


def _isolation(d: _Diff, t: Json, r: Json) -> None:
    if t is None or r is None:
        d.value("isolation", t, r, "equal")
        return
    d.value("isolation.owned_paths", t["owned_paths"], r["owned_paths"], "subset")
    d.value("isolation.allowed_paths", t["allowed_paths"], r["allowed_paths"], "subset")
    ts, rs = t["shared_components"], r["shared_components"]
    for comp in sorted(set(ts) | set(rs)):
        if comp not in rs:
            d.add(f"isolation.shared_components.{comp}", True, "removed: a change may touch it")
        elif comp not in ts:
            d.add(f"isolation.shared_components.{comp}", False, "added")
        else:
            d.value(f"isolation.shared_components.{comp}", ts[comp], rs[comp], "superset")
    for k in sorted((set(t) | set(r)) - {"owned_paths", "allowed_paths", "shared_components"}):
        d.value(f"isolation.{k}", t.get(k), r.get(k), "equal")


def _fallback(d: _Diff, t: Json, r: Json) -> None:
    if t is None or r is None:
        d.value("fallback", t, r, "equal")
        return
    d.value("fallback.stock_path_for", t["stock_path_for"], r["stock_path_for"], "superset")
    if t["visible"] and not r["visible"]:
        d.add("fallback.visible", True, "fallbacks no longer need to be visible")
    elif r["visible"] and not t["visible"]:
        d.add("fallback.visible", False, "fallbacks must now be visible")
    for k in sorted((set(t) | set(r)) - {"stock_path_for", "visible"}):
        d.value(f"fallback.{k}", t.get(k), r.get(k), "equal")


# --------------------------------------------------------------------------- reading the two scopes


def parse_for_comparison(text: str, *, source: str) -> tuple[Scope, dict[str, Json]]:
    """A scope's text as (Scope, the gate sections of checks this process has not registered, as YAML).

    Comparing needs no check registered: a plugin check's gate section is kept aside and compared as it is
    written. Everything else is parsed exactly as ``validate`` parses it (ScopeError naming file and line)."""
    from fasttrack.scope.gates import gate_models
    from fasttrack.scope.loading import load_scope_doc, validate_scope_doc

    doc = load_scope_doc(text, source=source)
    extra: dict[str, Json] = {}
    gates = doc.get("gates")
    if isinstance(gates, dict):
        known = gate_models()
        extra = {str(k): v for k, v in gates.items() if k not in known}
        doc = {**doc, "gates": {k: v for k, v in gates.items() if k in known}}
    return validate_scope_doc(doc, text, source=source), extra


def trusted_scope_file(spec: str, scope_name: str) -> Path:
    """The trusted scope ``--trusted-scope`` names for a bundle of scope ``scope_name``: a scope file; a folder
    holding ``NAME.yaml`` or ``NAME/scope.yaml`` (e.g. the repository's ``.fasttrack/scopes`` at the PR base);
    or the name of a suite shipped with this fasttrack. ``scope_name`` comes from the bundle: it is used only
    when it is a slug (the scope model requires one), so it cannot lead out of the folder."""
    import re

    from fasttrack.errors import ScopeError
    from fasttrack.scope.common import SLUG_PATTERN
    from fasttrack.scope.loading import find_scope

    p = Path(spec)
    if p.is_dir():
        if not re.fullmatch(SLUG_PATTERN, scope_name):
            raise ScopeError(f"the bundle's scope name {scope_name[:80]!r} is not a slug; no trusted scope is named so")
        for cand in (p / f"{scope_name}.yaml", p / scope_name / "scope.yaml"):
            if cand.is_file():
                return cand
        raise ScopeError(
            f"--trusted-scope {spec}: the folder holds no scope for {scope_name!r} "
            f"(looked for {p / f'{scope_name}.yaml'} and {p / scope_name / 'scope.yaml'})",
            hint="A bundle whose scope the repository does not know cannot be held against a trusted scope.",
        )
    if p.is_file():
        return p
    return find_scope(spec)


def read_trusted_scope(path: Path) -> str:
    """The text of a trusted scope file (within the scope size limit), as ``load_scope`` reads it."""
    from fasttrack.errors import ScopeError
    from fasttrack.limits import YAML_MAX_BYTES, read_capped

    try:
        data = read_capped(path, YAML_MAX_BYTES)
        if data is None:
            raise ScopeError(f"scope file {str(path)!r} is larger than {YAML_MAX_BYTES} bytes (the limit).")
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScopeError(f"cannot read the trusted scope {str(path)!r}: {exc}.") from None


def tier_below(tier: str, min_tier: str) -> bool:
    """Whether ``tier`` is below ``min_tier`` (smoke < standard < full; an unknown tier is below any)."""
    order: list[str] = list(TIER_ORDER)
    return tier not in order or order.index(tier) < order.index(min_tier)
