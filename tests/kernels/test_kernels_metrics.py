"""Error metrics, ULP distance, NaN/Inf propagation, bitwise repeat comparison."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttrack.kernels.metrics import bitwise_runs, compare, round_to, ulp_distance
from fasttrack.kernels.tolerance import Tolerance, resolve

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]


def _next_up(x: torch.Tensor) -> torch.Tensor:
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    return (x.view(ints) + 1).view(x.dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_adjacent_values_are_one_ulp_apart(dtype):
    x = torch.tensor([0.5, 1.0, 3.0, 0.0], dtype=torch.float32).to(dtype)
    assert ulp_distance(x, _next_up(x)).tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("dtype", FLOATS)
def test_signed_zeros_are_equal_and_zero_crossing_counts_both_sides(dtype):
    z = torch.tensor([0.0], dtype=torch.float32).to(dtype)
    nz = torch.tensor([-0.0], dtype=torch.float32).to(dtype)
    assert ulp_distance(z, nz).item() == 0
    tiny = _next_up(z)  # smallest positive subnormal
    neg_tiny = round_to(-tiny.to(torch.float64), dtype)
    assert ulp_distance(tiny, neg_tiny).item() == 2


def test_ulp_in_bf16_of_relative_step():
    a = torch.tensor([1.0], dtype=torch.bfloat16)
    b = torch.tensor([1.0 + 2**-7 * 3], dtype=torch.bfloat16)  # three bf16 steps above 1
    assert ulp_distance(a, b).item() == 3


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=32), st.integers(min_value=1, max_value=1000))
def test_fp32_ulp_matches_nextafter_steps(x, steps):
    a = torch.tensor([x], dtype=torch.float32)
    b = a.clone()
    for _ in range(steps):
        b = torch.nextafter(b, torch.tensor([math.inf]))
    if torch.isinf(b).item():
        return
    assert ulp_distance(a, b).item() == steps


def test_ulp_distance_rejects_mixed_dtypes():
    with pytest.raises(ValueError, match="equal dtypes"):
        ulp_distance(torch.zeros(1), torch.zeros(1, dtype=torch.float64))


def test_compare_pass_and_metrics():
    exp = torch.tensor([1.0, -2.0, 0.0, 4.0], dtype=torch.float64)
    act = torch.tensor([1.0, -2.0, 1e-6, 4.0 + 2**-18], dtype=torch.float32)  # 4 + 2^-18 is 8 fp32 steps above 4
    m = compare(act, exp, tol=resolve("k", "fp32"))
    assert m["verdict"] == "pass"
    assert m["max_abs_err"] == pytest.approx(2**-18)
    assert m["max_rel_err"] == pytest.approx(2**-20)
    # ULPs count representable fp32 values: 1e-6 is a billion steps above 0.0 (atol covers it)
    assert m["max_ulp"] == torch.tensor([1e-6], dtype=torch.float32).view(torch.int32).item()
    assert m["mismatches"] == 0


def test_compare_fails_outside_tolerance_and_names_the_element():
    exp = torch.zeros(2, 3, dtype=torch.float64)
    act = torch.zeros(2, 3)
    act[1, 2] = 1e-3
    m = compare(act, exp, tol=resolve("k", "fp32"))
    assert m["verdict"] == "fail" and m["out_of_bound"] == 1
    assert m["first_bad"]["index"] == [1, 2]


def test_compare_nan_must_match_reference():
    exp = torch.tensor([float("nan"), 1.0], dtype=torch.float64)
    ok = compare(torch.tensor([float("nan"), 1.0]), exp, tol=resolve("k", "fp32"))
    assert ok["verdict"] == "pass" and ok["expected_nonfinite"] == 1
    swallowed = compare(torch.tensor([0.0, 1.0]), exp, tol=resolve("k", "fp32"))
    assert swallowed["verdict"] == "fail" and swallowed["nan_mismatch"] == 1
    spurious = compare(torch.tensor([float("nan"), float("nan")]), exp, tol=resolve("k", "fp32"))
    assert spurious["verdict"] == "fail" and spurious["nan_mismatch"] == 1


def test_compare_inf_sign_and_overflow_in_output_dtype():
    exp = torch.tensor([float("inf"), 1e6], dtype=torch.float64)
    wrong_sign = compare(torch.tensor([float("-inf"), 1e6]), exp, tol=resolve("k", "fp32"))
    assert wrong_sign["inf_mismatch"] == 1 and wrong_sign["verdict"] == "fail"
    # 1e6 overflows fp16: a kernel writing +inf there is right
    over = compare(torch.tensor([float("inf"), float("inf")], dtype=torch.float16), exp, tol=resolve("k", "fp16"))
    assert over["verdict"] == "pass"


def test_compare_fp8_after_upcast():
    exp = torch.tensor([1.0, 3.3, -0.7, 100.0], dtype=torch.float64)
    act = round_to(exp, torch.float8_e4m3fn)
    m = compare(act, exp, tol=resolve("k", "fp8"))
    assert m["verdict"] == "pass" and m["max_ulp"] == 0
    off_by_two = torch.tensor([1.25, 3.3, -0.7, 100.0]).to(torch.float8_e4m3fn)  # 1.25 is two steps above 1.0
    assert compare(off_by_two, exp, tol=resolve("k", "fp8"))["verdict"] == "fail"


def test_compare_shape_mismatch_fails():
    m = compare(torch.zeros(2), torch.zeros(3, dtype=torch.float64), tol=Tolerance(atol=1, rtol=1))
    assert m["verdict"] == "fail" and "shape" in m["error"]


def test_bitwise_runs():
    a = torch.tensor([1.0, float("nan")], dtype=torch.bfloat16)
    same = bitwise_runs([a, a.clone(), a.clone()])
    assert same["bitwise_equal"] and same["verdict"] == "pass"
    b = a.clone()
    b[0] = _next_up(a[:1])[0]
    one = bitwise_runs([a, b])
    assert not one["bitwise_equal"] and one["max_ulp"] == 1 and one["verdict"] == "fail"
    assert bitwise_runs([a, b], budget_ulp=1)["verdict"] == "pass"
    c = a.clone()
    c[1] = 0.0
    assert bitwise_runs([a, c], budget_ulp=10**9)["nan_differs"] is True
    assert bitwise_runs([a, c], budget_ulp=10**9)["verdict"] == "fail"
