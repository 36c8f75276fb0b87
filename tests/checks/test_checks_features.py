"""Features check: judging recorded measurements (fakes; no engine)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_checks import demo_ctx, window
from jsonschema import Draft202012Validator

from fasttrack.checks.features import FeatureResult, FeaturesCheck, SideData, by_name, logprob_problems, validate_json
from fasttrack.results import Verdict

GID = "tp1-dcp1-none"
P = {b: f"{GID}-b{b}-ctx32" for b in (1, 2, 3, 4, 8)}
FULL = {b: f"{GID}-b{b}-ctxfull" for b in (1, 2, 3, 4, 8)}
REF = {
    "300": math.log(0.4),
    "301": math.log(0.25),
    "302": math.log(0.15),
    "303": math.log(0.08),
    "304": math.log(0.05),
    "305": math.log(0.03),
}


def _samples(n: int, temperature: float, seed: int) -> list[int]:
    """Draw the 2nd token from the reference at a temperature (the rest mass as token 399)."""
    toks = [int(t) for t in REF] + [399]
    lp = np.array(list(REF.values()) + [math.log(1 - sum(math.exp(v) for v in REF.values()))])
    p = np.exp(lp / temperature)
    p /= p.sum()
    return [int(x) for x in np.random.default_rng(seed).choice(toks, size=n, p=p)]


def _structured(side: str, *, valid: bool = True, batches=(1, 2, 3, 4, 8)) -> dict[str, Any]:
    recs = []
    for b in batches:
        for schema in ("city", "recipe"):
            for i in range(b):
                ok = valid if side == "candidate" else True
                recs.append(
                    {
                        "point": P[b],
                        "batch": b,
                        "schema": schema,
                        "prompt": f"Describe item {i}",
                        "text": '{"name": "x"}' if ok else "{\n\n\n\n\n   ",
                        "finish_reason": "stop" if ok else "length",
                        "completion_tokens": 9 if ok else 160,
                        "valid": ok,
                        "why": ""
                        if ok
                        else "not valid JSON: Expecting property name (the output was cut off by max_tokens)",
                    }
                )
    return {"records": recs, "points": [P[b] for b in batches]}


def _sampling(side: str, *, temperature: float = 1.0, n: int = 2000) -> dict[str, Any]:
    seed = 1 if side == "baseline" else 2
    return {
        "points": [P[8], P[3]],
        "point": P[8],
        "wave": 8,
        "prompt_id": "p05-chemistry",
        "prompt_text": "Water is a molecule",
        "first_token": 42,
        "selection": "baseline",
        "reference": {
            "first_token": 42,
            "first_logprob": math.log(0.9),
            "second_position": REF,
            "second_greedy": 300,
            "spread_ok": True,
            "first_token_text": " at",
        },
        "samples": {"1": _samples(n, temperature, seed)},
        "requests": {"1": 280},
        "masks": [{"name": "top_k=3 mask", "top_k": 3, "samples": [300, 301, 302] * 40}],
        "masks_skipped": [],
        "zero_temperature": {"point": P[3], "variants": [{}, {"seed": 11}, {"seed": 12}], "outputs": [[1, 2, 3]] * 3},
    }


def _api(side: str) -> dict[str, Any]:
    return {
        "seeded_sampling": {
            "point": P[4],
            "points": [P[4]],
            "seeds": [1, 2, 3, 4],
            "first": {str(s): [s, 7] for s in (1, 2, 3, 4)},
            "second": {str(s): [s, 7] for s in (1, 2, 3, 4)},
        },
        "stop_sequences": {
            "point": P[1],
            "points": [P[1]],
            "stop": " river",
            "greedy_text": "the long river flows",
            "text": "the long",
            "finish_reason": "stop",
            "stop_reason": " river",
        },
        "max_tokens": {
            "point": P[3],
            "points": [P[3]],
            "requests": [{"max_tokens": m, "n_tokens": m, "usage": m, "finish_reason": "length"} for m in (3, 7, 11)],
        },
        "n_best": {
            "point": P[3],
            "points": [P[3]],
            "n": 3,
            "max_tokens": 8,
            "temperature": 0.8,
            "first": [[1] * 8, [2] * 8, [3] * 8],
            "second": [[1] * 8, [2] * 8, [3] * 8],
        },
        "logprobs": {
            "point": P[1],
            "points": [P[1]],
            "token_ids": [5, 6],
            "logprobs": [-0.2, -0.2],
            "top": [
                [(5, -0.2), (6, -3.0), (7, -3.5), (8, -4.0), (9, -4.5)],
                [(6, -0.2), (5, -2.5), (7, -3.5), (8, -4.0), (9, -4.5)],
            ],
        },
    }


def _full(side: str, *, broken: bool = False, drift: float = 0.0, at: tuple[int, ...] = (1, 8)) -> dict[str, Any]:
    """Both full-context points' outputs; ``drift`` lowers the 2nd token's logprob at the batches ``at``."""
    runs = []
    for b in (1, 8):
        recs = []
        for _ in range(b):
            toks = [10, 11, 12] if not broken else [10, 99, 98]
            d = [0.0, drift if b in at else 0.0, 0.0]
            top = [
                [(t, -0.2 - d[i]), (t + 100, -3.0), (t + 101, -3.5), (t + 102, -4.0), (t + 103, -4.5)]
                for i, t in enumerate(toks)
            ]
            recs.append(
                {
                    "error": None,
                    "prompt_tokens": 1000,
                    "completion_tokens": 3,
                    "token_ids": toks,
                    "logprobs": [t[0][1] for t in top],
                    "top": top,
                    "text": "abc",
                }
            )
        runs.append(
            {
                "point": FULL[b],
                "batch": b,
                "context": 1000,
                "max_tokens": 3,
                "records": recs,
            }
        )
    return {"runs": runs, "points": [FULL[1], FULL[8]]}


def as_result(feature: str, data: dict[str, Any]) -> FeatureResult:
    """A feature's typed result from its fields (its ``result_model`` refuses a field it does not have)."""
    return by_name()[feature].result_model.model_validate(data)


def _side(side: str, *, optimized: bool = True, **overrides: Any) -> SideData:
    sd = SideData()
    data = {
        "structured_output": _structured(side),
        "temperature_sampling": _sampling(side),
        "full_context": _full(side),
        **_api(side),
    }
    data.update(overrides)
    sd.results = {f: as_result(f, d) for f, d in data.items()}
    for pid, b in [(P[b], b) for b in (1, 2, 3, 4, 8)] + [(FULL[1], 1), (FULL[8], 8)]:
        kind = "full_context" if "full" in pid else "structured_output"
        name = f"features-{kind}-{pid}"
        sd.windows[name] = window(
            side, [pid], decode={b: 20}, optimized={b: 20} if (side == "candidate" and optimized) else {}, name=name
        )
    sd.points = {f: d.get("point") or d["points"][0] for f, d in data.items()}
    return sd


def _check(
    tmp_path: Path, base: SideData, cand: SideData, *, variants: dict[str, SideData | str] | None = None, **scope
) -> tuple[FeaturesCheck, Any]:
    """The check with both sides' data and, for each reference variant of the scope, ``variants[name]`` (default:
    the baseline's results of the features that use the reference, as a variant identical to it measures)."""
    ctx = demo_ctx(tmp_path, **scope)
    chk = FeaturesCheck()
    chk.sides[(GID, "baseline")] = base
    chk.sides[(GID, "candidate")] = cand
    ref = ctx.scope.gates.equivalence.reference
    for name in ref.variants if ref is not None else []:
        given = (variants or {}).get(name)
        if given is None:
            given = SideData(results={f: r for f, r in base.results.items() if f in ("full_context", "logprobs")})
        chk.variants[(GID, name)] = given
    return chk, ctx


def test_clean_candidate_passes_every_feature(tmp_path: Path) -> None:
    chk, ctx = _check(tmp_path, _side("baseline"), _side("candidate"))
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    # every feature of the smoke tier (the scope's features but speculative_acceptance, which needs the standard
    # tier's speculative group)
    assert set(res.summary["per_feature"]) == set(ctx.scope.features) - {"speculative_acceptance"}
    gof = [r for r in res.tables["features"] if r.get("test") == "goodness_of_fit"]
    assert gof and gof[0]["p_value"] > 0.001 and gof[0]["n_tested"] == 2000 and gof[0]["control_p_value"] > 0.001
    assert res.tables["sampling_bins"]


def test_sampling_at_the_wrong_temperature_is_caught(tmp_path: Path) -> None:
    cand = _side("candidate", temperature_sampling=_sampling("candidate", temperature=0.5))
    chk, ctx = _check(tmp_path, _side("baseline"), cand)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert res.summary["per_feature"]["temperature_sampling"]["verdict"] == "fail"
    assert [f for f, d in res.summary["per_feature"].items() if d["verdict"] == "fail"] == ["temperature_sampling"]
    msg = next(f for f in res.failures if "temperature sampling" in f)
    assert P[8] in msg and "(batch 8)" in msg
    assert "p=" in msg and "chi-square" in msg and "2nd generated token" in msg


def test_failing_control_makes_sampling_inconclusive(tmp_path: Path) -> None:
    base = _side("baseline", temperature_sampling=_sampling("baseline", temperature=0.5))
    chk, ctx = _check(tmp_path, base, _side("candidate"))
    res = chk.judge(ctx)
    assert res.summary["per_feature"]["temperature_sampling"]["verdict"] == "not_run"
    assert "inconclusive" in res.summary["per_feature"]["temperature_sampling"]["reason"] or any(
        "inconclusive" in str(r.get("detail")) for r in res.tables["features"]
    )


def test_mask_violation_is_caught(tmp_path: Path) -> None:
    s = _sampling("candidate")
    s["masks"] = [{"name": "top_k=3 mask", "top_k": 3, "samples": [300] * 50 + [304] * 2}]
    chk, ctx = _check(tmp_path, _side("baseline"), _side("candidate", temperature_sampling=s))
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert any("top_k=3 mask: 2 of 52 samples outside" in f for f in res.failures)


def test_broken_json_fails_structured_output_per_schema_and_batch(tmp_path: Path) -> None:
    cand = _side("candidate", structured_output=_structured("candidate", valid=False))
    chk, ctx = _check(tmp_path, _side("baseline"), cand)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert [f for f, d in res.summary["per_feature"].items() if d["verdict"] == "fail"] == ["structured_output"]
    rows = [r for r in res.tables["features"] if r["feature"] == "structured_output"]
    assert len(rows) == 10 and all(r["verdict"] == "fail" for r in rows)
    msg = next(f for f in res.failures if f.startswith(P[3]))
    assert "(batch 3), schema city" in msg and "below the floor 1" in msg and "worse than the baseline's 3/3" in msg
    assert "not valid JSON" in msg and "Wilson 95%" in msg
    assert len(res.tables["structured_output_requests"]) == 2 * 2 * 18


def test_standard_path_never_passes(tmp_path: Path) -> None:
    chk, ctx = _check(tmp_path, _side("baseline"), _side("candidate", optimized=False))
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert "used the standard path" in res.reason
    assert res.failures[0].startswith("features used the standard path")


def test_api_behaviour_failures(tmp_path: Path) -> None:
    cand = _side("candidate")
    r = cand.results
    r["seeded_sampling"].second["3"] = [9, 9]
    r["stop_sequences"].text = "the long river flows"
    r["stop_sequences"].finish_reason = "length"
    r["max_tokens"].requests[1].n_tokens = 6
    r["n_best"].first = r["n_best"].first[:2]
    r["logprobs"].top[1] = [(6, 0.2)]
    chk, ctx = _check(tmp_path, _side("baseline"), cand)
    res = chk.judge(ctx)
    bad = {f for f, d in res.summary["per_feature"].items() if d["verdict"] == "fail"}
    assert bad == {"seeded_sampling", "stop_sequences", "max_tokens", "n_best", "logprobs"}
    text = "\n".join(res.failures)
    assert f"{P[4]} (batch 4): seed 3 gave different outputs" in text
    assert "stop string ' river'" in text
    assert "max_tokens=7 produced 6 tokens" in text
    assert "2 choices returned for n=3" in text
    assert "a logprob is positive" in text


def test_full_context_divergence_fails_that_point(tmp_path: Path) -> None:
    cand = _side("candidate", full_context=_full("candidate", broken=True))
    chk, ctx = _check(tmp_path, _side("baseline"), cand)
    res = chk.judge(ctx)
    assert res.summary["per_feature"]["full_context"]["verdict"] == "fail"
    assert any(
        f.startswith(FULL[8]) and "filling max_model_len" in f and "break the check_logprobs_close rule" in f
        for f in res.failures
    )


def test_candidate_error_fails_baseline_error_is_not_run(tmp_path: Path) -> None:
    cand = _side("candidate")
    cand.errors["n_best"] = "EngineRequestError: n > 1 is not supported"
    chk, ctx = _check(tmp_path, _side("baseline"), cand)
    res = chk.judge(ctx)
    assert res.summary["per_feature"]["n_best"]["verdict"] == "fail"
    base = _side("baseline")
    base.errors["n_best"] = "EngineRequestError: boom"
    chk, ctx = _check(tmp_path, base, _side("candidate"))
    assert chk.judge(ctx).summary["per_feature"]["n_best"]["verdict"] == "not_run"


def test_speculative_acceptance_not_run_without_speculative_configs(tmp_path: Path) -> None:
    feats = list(demo_ctx(tmp_path).scope.features) + ["speculative_acceptance"]
    chk, ctx = _check(tmp_path, _side("baseline"), _side("candidate"), features=feats)
    res = chk.judge(ctx)
    d = res.summary["per_feature"]["speculative_acceptance"]
    assert d["verdict"] == "not_run" and "speculative-decoding configuration" in d["reason"]
    assert res.verdict is Verdict.NOT_RUN


def test_speculative_acceptance_rule(tmp_path: Path) -> None:
    base, cand = _side("baseline"), _side("candidate")
    base.results["speculative_acceptance"] = as_result(
        "speculative_acceptance",
        {
            "point": P[1],
            "points": [P[1]],
            "drafts": 100,
            "draft_tokens": 700,
            "accepted_tokens": 500,
        },
    )
    cand.results["speculative_acceptance"] = as_result(
        "speculative_acceptance",
        {
            "point": P[1],
            "points": [P[1]],
            "drafts": 100,
            "draft_tokens": 700,
            "accepted_tokens": 300,
        },
    )
    chk, ctx = _check(tmp_path, base, cand, features=["speculative_acceptance"])
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert "acceptance rate 0.429" in res.failures[0] and "below the baseline's 0.714" in res.failures[0]
    cand.results["speculative_acceptance"].accepted_tokens = 495
    assert chk.judge(ctx).verdict is Verdict.PASS


def test_validate_json_reasons() -> None:
    v = Draft202012Validator({"type": "object", "properties": {"a": {"enum": ["x"]}}, "required": ["a"]})
    assert validate_json('{"a": "x"}', v, "stop") == {"valid": True, "why": ""}
    r = validate_json('{"a": "y"}', v, "stop")
    assert not r["valid"] and "violates the schema at a" in r["why"]
    r = validate_json('{"a": ', v, "length")
    assert not r["valid"] and "cut off by max_tokens" in r["why"]


@pytest.mark.parametrize(
    "top,ok",
    [
        ([[(5, -0.1), (6, -3.0), (7, -3.5)]], True),
        ([[(6, -0.05), (5, -0.1), (7, -3.5)]], False),  # greedy token is not the argmax
        ([[(5, -0.1)]], False),  # fewer alternatives than asked
    ],
)
def test_logprob_well_formedness(top, ok) -> None:
    d = as_result("logprobs", {"point": P[1], "token_ids": [5], "logprobs": [-0.1], "top": top})
    assert (not logprob_problems(d, 3)) is ok


def test_no_profiled_candidate_window_is_not_run_never_pass(tmp_path: Path) -> None:
    """Every measurement agrees, but the candidate's windows at the full-context points produced no trace: whether
    the candidate ran the optimized path there was not observed, so full_context is not_run with the reason."""
    cand = _side("candidate")
    for pid in (FULL[1], FULL[8]):
        name = f"features-full_context-{pid}"
        cand.windows[name] = window("candidate", [pid], decode={}, available=False, name=name)
    chk, ctx = _check(tmp_path, _side("baseline"), cand)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN, (res.verdict, res.reason)
    per = res.summary["per_feature"]
    assert per["full_context"]["verdict"] == "not_run"
    assert f"no profiled window of the candidate at {FULL[1]}, {FULL[8]} (no profiler)" in per["full_context"]["reason"]
    assert all(d["verdict"] == "pass" for f, d in per.items() if f != "full_context"), per
    rows = [r for r in res.tables["features"] if r["feature"] == "full_context"]
    assert rows and all(r["verdict"] == "not_run" for r in rows)
    assert "full_context" in res.reason and "no profiled window" in res.reason


# ------------------------------------------------------------------- calibrated against stock's own builds


def _loose_kl(tmp_path: Path) -> dict[str, Any]:
    """Scope updates that lift the KL cap, so a test sees the calibrated rule alone."""
    gates = demo_ctx(tmp_path).scope.gates
    return {"gates": gates.model_copy(update={"equivalence": gates.equivalence.model_copy(update={"max_kl": 1.0})})}


def _eager(**full: Any) -> SideData:
    """The eager variant's measurements: the baseline's logprobs request, and full context as given."""
    base = _side("baseline")
    return SideData(results={"full_context": as_result("full_context", _full("baseline", **full)),
                             "logprobs": base.results["logprobs"]})  # fmt: skip


def test_full_context_drift_within_stocks_eager_spread_passes_and_shows_both(tmp_path: Path) -> None:
    cand = _side("candidate", full_context=_full("candidate", drift=0.25))
    chk, ctx = _check(tmp_path, _side("baseline"), cand, variants={"eager": _eager(drift=0.1)}, **_loose_kl(tmp_path))
    res = chk.judge(ctx)
    assert res.summary["per_feature"]["full_context"]["verdict"] == "pass", res.failures
    row = next(r for r in res.tables["features"] if r["feature"] == "full_context" and r["point"] == FULL[8])
    assert row["max_abs_logprob_diff"] == pytest.approx(0.25)
    assert "max |Δ logprob| candidate 0.25 vs stock eager 0.1 (limit 3 x 0.1 + 0.01 = 0.31)" in row["calibration"]
    assert row["limit_max_abs_logprob_diff"] == pytest.approx(0.31) and row["reference"] == "baseline"


def test_full_context_drift_beyond_stocks_spread_fails_at_that_point_only(tmp_path: Path) -> None:
    cand = _side("candidate", full_context=_full("candidate", drift=0.8, at=(8,)))
    chk, ctx = _check(tmp_path, _side("baseline"), cand, variants={"eager": _eager()}, **_loose_kl(tmp_path))
    res = chk.judge(ctx)
    assert res.summary["per_feature"]["full_context"]["verdict"] == "fail"
    rows = {r["point"]: r["verdict"] for r in res.tables["features"] if r["feature"] == "full_context"}
    assert rows == {FULL[1]: "pass", FULL[8]: "fail"}
    (msg,) = [f for f in res.failures if f.startswith(FULL[8])]
    assert "max |Δ logprob| candidate 0.8 vs stock eager 0 (limit 3 x 0 + 0.01 = 0.01) EXCEEDED" in msg


def test_full_context_and_logprobs_without_the_variant_are_not_run_saying_why(tmp_path: Path) -> None:
    why = "its engine failed (EngineStartError: out of memory; log: logs/x.log)"
    chk, ctx = _check(tmp_path, _side("baseline"), _side("candidate"), variants={"eager": why})
    res = chk.judge(ctx)
    per = res.summary["per_feature"]
    assert per["full_context"]["verdict"] == "not_run" and per["logprobs"]["verdict"] == "not_run"
    assert f"reference variant eager: {why}" in per["full_context"]["reason"]
    row = next(r for r in res.tables["features"] if r["feature"] == "logprobs" and r["side"] == "both")
    assert row["verdict"] == "not_run" and f"reference variant eager: {why}" in row["detail"]
    assert all(d["verdict"] == "pass" for f, d in per.items() if f not in ("full_context", "logprobs")), per


def test_logprobs_drift_is_judged_against_stocks_eager_build(tmp_path: Path) -> None:
    def drifted(side: str, d: float) -> Any:
        data = _api(side)["logprobs"]
        data["top"][1] = [(6, -0.2 - d), (5, -2.5), (7, -3.5), (8, -4.0), (9, -4.5)]
        data["logprobs"] = [-0.2, -0.2 - d]
        return as_result("logprobs", data)

    eager = SideData(results={"full_context": as_result("full_context", _full("baseline")),
                              "logprobs": drifted("baseline", 0.1)})  # fmt: skip
    for d, verdict in ((0.25, "pass"), (0.6, "fail")):
        cand = _side("candidate", logprobs=drifted("candidate", d).model_dump())
        chk, ctx = _check(tmp_path, _side("baseline"), cand, variants={"eager": eager}, **_loose_kl(tmp_path))
        res = chk.judge(ctx)
        assert res.summary["per_feature"]["logprobs"]["verdict"] == verdict, (d, res.failures)
        row = next(r for r in res.tables["features"] if r["feature"] == "logprobs" and r["side"] == "both")
        assert f"max |Δ logprob| candidate {d:g} vs stock eager 0.1" in row["calibration"]
