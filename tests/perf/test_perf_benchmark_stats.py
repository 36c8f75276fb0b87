"""The agreement benchmark's statistics: its 2% target is decided from an interval, not a point."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "agreement_bench", Path(__file__).resolve().parents[2] / "benchmarks" / "agreement.py"
)
agreement = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(agreement)


def test_ratio_interval_is_a_t_interval_on_log_ratios() -> None:
    g, lo, hi = agreement.ratio_interval([0.9, 1.0, 1.1])
    logs = [math.log(x) for x in (0.9, 1.0, 1.1)]
    m = sum(logs) / 3
    sd = (sum((x - m) ** 2 for x in logs) / 2) ** 0.5
    half = 4.302653 * sd / 3**0.5  # t(0.975, df 2)
    assert g == pytest.approx(math.exp(m)) and lo == pytest.approx(math.exp(m - half), rel=1e-5)
    assert hi == pytest.approx(math.exp(m + half), rel=1e-5)
    assert math.isnan(agreement.ratio_interval([1.0])[1])


@pytest.mark.parametrize(
    ("lo", "hi", "verdict"),
    [
        (0.99, 1.01, "met"),
        (0.97, 1.01, "inconclusive"),
        (1.03, 1.10, "not met"),
        (0.80, 0.97, "not met"),
        (0.7, 1.25, "inconclusive"),
        (float("nan"), float("nan"), "inconclusive"),
    ],
)
def test_agreement_verdict(lo: float, hi: float, verdict: str) -> None:
    assert agreement.agreement_verdict(lo, hi) == verdict


def test_pairs_needed_grows_with_the_spread() -> None:
    tight = agreement.pairs_needed([0.99, 1.0, 1.01, 1.0])
    loose = agreement.pairs_needed([0.8, 1.0, 1.2, 1.0])
    assert tight is not None and loose is not None and loose > 50 * tight
    assert agreement.pairs_needed([1.0]) is None


def test_agreement_leaves_out_degenerate_tpot_pairs() -> None:
    """A vLLM-client TPOT of 0.007 ms against 6.1 ms (a stream delivered in one read) is a
    failed measurement; ordinary disagreement, even 2x, is kept."""
    pairs = [(6.43, 6.57), (6.13, 0.007), (4.0, 8.0), (5.0, 0.0), (1.0, 10.5)]
    keep, drop = agreement.split_degenerate(pairs)
    assert keep == [0, 2] and drop == [1, 3, 4]
    assert agreement.split_degenerate([(1.0, 10.0)]) == ([0], [])


_fa_spec = importlib.util.spec_from_file_location(
    "false_alarm_bench", Path(__file__).resolve().parents[2] / "benchmarks" / "false_alarm.py"
)
false_alarm = importlib.util.module_from_spec(_fa_spec)
_fa_spec.loader.exec_module(false_alarm)


def _interleaved_data(host: list[float], *, b_factor: float = 1.0, pairs: int = 2, runs: int = 6) -> dict:
    """Stored interleaved runs of identical engines; run pair k slowed by ``host[k]`` on both sides."""
    import numpy as np
    from perf_testlib import fake_run

    from tests.perf.test_perf_gate import _item

    rng = np.random.default_rng(0)
    out = []
    for lt in range(pairs):
        for batch in (1, 4):
            item = _item(point=f"tp1-dcp1-none-b{batch}-ctx32", batch=batch)
            for k in range(runs):
                for side in ("baseline", "candidate"):
                    f = host[k] * (b_factor if side == "candidate" else 1.0)
                    out.append(fake_run(item, side, lt, k, tpot=5.0 * f, rng=rng).model_dump(mode="json"))
    return {
        "design": "interleaved",
        "runs": out,
        "args": {"runs": runs, "requests": 24, "output_len": 64, "context": 32},
    }


def test_false_alarm_interleaved_replay_counts_identical_engines_as_passing(capsys: pytest.CaptureFixture[str]) -> None:
    from fasttrack.scope import load_scope

    gate = load_scope("demo-llama").scope.gates.perf.model_copy(
        update={"noise_margin": 0.1, "interleave_settle_s": 0.0}
    )
    host = [1.0, 2.5, 1.0, 2.5, 1.0, 1.0]
    # each comparison is calibrated by the other pairs (leave one out): with four pairs, three calibrate each
    false_alarm.analyse_interleaved(_interleaved_data(host, pairs=4), gate)
    out = capsys.readouterr().out
    assert "8 pseudo-comparisons" in out and "leave-one-out" in out
    assert "overall (any point fails): 0.0%" in out, out
    rows = [ln for ln in out.splitlines() if ln.strip().startswith("tp1-") and "%" in ln]
    assert rows and all(ln.split()[-1] == "0.0%" for ln in rows), out  # none inconclusive
    # with two pairs one other pair cannot calibrate: every point is inconclusive, none fails
    false_alarm.analyse_interleaved(_interleaved_data(host), gate)
    out = capsys.readouterr().out
    assert "overall (any point fails): 0.0%" in out, out
    rows = [ln for ln in out.splitlines() if ln.strip().startswith("tp1-") and "%" in ln]
    assert rows and all(ln.split()[-1] == "100.0%" for ln in rows), out
    # a candidate 3x slower is what the gate is for: calibrated by the A/A pairs, every comparison in the slow
    # orientation fails
    pairs = false_alarm._aa_pairs_of(_interleaved_data(host, pairs=4), gate.gated_metric)
    variance = false_alarm._leave_out(pairs["tp1-dcp1-none-b1-ctx32"], set())
    false_alarm.analyse_interleaved(_interleaved_data(host, b_factor=3.0), gate, variance=variance)
    out = capsys.readouterr().out
    assert "overall (any point fails): 50.0%" in out, out
