"""Plans: the K3 full tier covers its envelope; shards partition it exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttrack.checks.base import build_run_plan
from fasttrack.errors import PlanError
from fasttrack.planning.plan import parse_shard
from fasttrack.scope import load_scope


@pytest.fixture(scope="module")
def k3():
    return load_scope("kimi-k3")


def test_k3_full_plan_covers_the_envelope(k3) -> None:
    plan = build_run_plan(k3.scope, tier="full", scope_sha256=k3.sha256)
    pts = plan.points
    assert {p.tp for p in pts} == {8, 16}
    assert max(p.batch for p in pts) == 64 and min(p.batch for p in pts) == 1
    dspark = [p for p in pts if p.spec == "dspark"]
    assert {p.draft_length for p in dspark} == set(range(1, 8))
    assert {p.acceptance_length for p in dspark} == {None}  # natural acceptance
    synth = [p for p in pts if p.spec == "dspark-al6"]
    assert {p.draft_length for p in synth} == {7} and {p.acceptance_length for p in synth} == {6}
    assert {p.dcp for p in pts} == {1, 8}
    assert any(p.full_context for p in pts)
    full = [p for p in pts if p.full_context]
    assert all(p.context == 262144 - k3.scope.gates.equivalence.max_tokens for p in full)
    # engine groups: one per (tp, dcp, spec config): none, dspark DL1-7, dspark-al6 DL7
    assert len(plan.groups) == 2 * 2 * 9
    grouped = [pid for g in plan.groups for pid in g.points]
    assert sorted(grouped) == sorted(p.id for p in pts)
    for g in plan.groups:
        assert "--tensor-parallel-size" in g.args["baseline"]
        assert g.args["candidate"][-2:] == ["--additional-config", '{"decode_backend": "latency_specialized"}']
        assert "latency_specialized" not in " ".join(g.args["baseline"])
        assert g.order == ["baseline", "candidate"] * g.lifetimes_per_side
    assert plan.estimate.engine_starts == sum(2 * g.lifetimes_per_side for g in plan.groups)
    assert plan.estimate.gpu_hours > 0


def test_tiers_grow(k3) -> None:
    sizes = [len(build_run_plan(k3.scope, tier=t).points) for t in ("smoke", "standard", "full")]
    assert sizes[0] < sizes[1] < sizes[2]
    smoke = {p.id for p in build_run_plan(k3.scope, tier="smoke").points}
    standard = {p.id for p in build_run_plan(k3.scope, tier="standard").points}
    assert smoke <= standard


@pytest.mark.parametrize("bad", ["0/4", "5/4", "1/0", "a/b", "3", "-1/2", ""])
def test_bad_shard_specs(bad: str) -> None:
    with pytest.raises(PlanError):
        parse_shard(bad)


def test_unknown_tier(k3) -> None:
    with pytest.raises(PlanError):
        build_run_plan(k3.scope, tier="huge")


def test_partial_scope_cannot_be_planned() -> None:
    with pytest.raises(PlanError) as ei:
        build_run_plan(load_scope("glm-5.3").scope)
    assert "incomplete" in str(ei.value) and "envelope" in str(ei.value)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(min_value=1, max_value=40), tier=st.sampled_from(["smoke", "standard", "full"]))
def test_shards_partition_every_point_exactly_once(n: int, tier: str) -> None:
    scope = load_scope("kimi-k3").scope
    whole = build_run_plan(scope, tier=tier)
    seen: list[str] = []
    fps = set()
    for i in range(1, n + 1):
        part = build_run_plan(scope, tier=tier, shard=f"{i}/{n}")
        fps.add(part.fingerprint)
        ids = [p.id for p in part.points]
        assert sorted(ids) == sorted(pid for g in part.groups for pid in g.points)
        seen.extend(ids)
    assert sorted(seen) == sorted(p.id for p in whole.points)
    assert len(fps) == 1  # every shard knows which plan it belongs to


def test_sharding_is_deterministic(k3) -> None:
    a = build_run_plan(k3.scope, tier="full", shard="2/3").model_dump()
    b = build_run_plan(k3.scope, tier="full", shard="2/3").model_dump()
    assert a == b


def test_speculative_configs_reach_the_engine_arguments(k3) -> None:
    import json

    plan = build_run_plan(k3.scope, tier="full")
    synth = next(g for g in plan.groups if g.spec == "dspark-al6")
    natural = next(g for g in plan.groups if g.spec == "dspark" and g.draft_length == 7)
    for g, extra in (
        (synth, {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 6}),
        (natural, {}),
    ):
        want = {"method": "dspark", "num_speculative_tokens": 7, **extra}
        assert g.speculative_config == want
        for side in ("baseline", "candidate"):
            args = g.args[side]
            assert json.loads(args[args.index("--speculative-config") + 1]) == want
    none = next(g for g in plan.groups if g.spec == "none")
    assert none.speculative_config is None and "--speculative-config" not in none.args["candidate"]


def test_the_demo_speculative_group_starts_at_the_standard_tier_with_synthetic_acceptance() -> None:
    import json

    from fasttrack.scope import load_scope

    scope = load_scope("demo-llama").scope
    # the smoke tier does not grow: the one stock-decode group, as before
    smoke = build_run_plan(scope, tier="smoke")
    assert [g.id for g in smoke.groups] == ["tp1-dcp1-none"] and len(smoke.points) == 10
    std = build_run_plan(scope, tier="standard")
    spec = next(g for g in std.groups if g.spec == "ngram-synth")
    want = {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 2,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.5,
    }
    assert spec.id == "tp1-dcp1-ngram-synth.dl3" and spec.speculative_config == want and spec.synthetic_acceptance
    for side in ("baseline", "candidate"):
        args = spec.args[side]
        assert json.loads(args[args.index("--speculative-config") + 1]) == want
    assert {p.acceptance_length for p in std.points if p.group == spec.id} == {2.5}
    none = next(g for g in std.groups if g.spec == "none")
    assert not none.synthetic_acceptance
