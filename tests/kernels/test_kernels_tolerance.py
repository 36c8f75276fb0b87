"""Tolerance policy: dtype defaults, suite and scope overrides, validation."""

from __future__ import annotations

import pytest
import torch

from fasttrack.kernels.tolerance import DTYPE_DEFAULTS, VLLM_REDUCTION, dtype_name, resolve, to_dtype, validate_table


def test_dtype_defaults_are_torch_assert_close_defaults():
    assert (DTYPE_DEFAULTS["fp32"].rtol, DTYPE_DEFAULTS["fp32"].atol) == (1.3e-6, 1e-5)
    assert (DTYPE_DEFAULTS["fp16"].rtol, DTYPE_DEFAULTS["fp16"].atol) == (1e-3, 1e-5)
    assert (DTYPE_DEFAULTS["bf16"].rtol, DTYPE_DEFAULTS["bf16"].atol) == (1.6e-2, 1e-5)
    assert all(t.ulp == 0 for t in DTYPE_DEFAULTS.values())


def test_fp8_is_one_ulp_relative_after_upcast():
    e4m3 = resolve("k", "fp8")
    assert e4m3.rtol == 2.0**-3 and e4m3.atol == 2.0**-9
    assert resolve("k", torch.float8_e5m2).rtol == 2.0**-2


@pytest.mark.parametrize(
    "name,dtype",
    [
        ("bf16", torch.bfloat16),
        ("bfloat16", torch.bfloat16),
        ("torch.float16", torch.float16),
        ("float", torch.float32),
        ("fp8", torch.float8_e4m3fn),
        ("e5m2", torch.float8_e5m2),
    ],
)
def test_dtype_names(name, dtype):
    assert to_dtype(name) is dtype
    assert to_dtype(dtype_name(dtype)) is dtype


def test_unknown_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown dtype 'int4'"):
        dtype_name("int4")


def test_scope_overrides_suite_overrides_default_field_by_field():
    suite = {"rms": {"bf16": {"atol": 1e-2, "rtol": 1e-2}}}
    scope = {"rms": {"bf16": {"rtol": 5e-2, "ulp": 2}}}
    t = resolve("rms", "bf16", suite=suite, scope=scope)
    assert (t.atol, t.rtol, t.ulp) == (1e-2, 5e-2, 2)
    assert "suite" in t.source and "scope" in t.source and t.source.startswith("torch.testing default")
    # other kernels and dtypes keep the default
    assert resolve("other", "bf16", suite=suite, scope=scope) == DTYPE_DEFAULTS["bf16"]
    assert resolve("rms", "fp32", suite=suite, scope=scope) == DTYPE_DEFAULTS["fp32"]


def test_wildcards_and_fp8_alias():
    t = resolve("any", "fp8e5m2", scope={"*": {"fp8": {"ulp": 1}}})
    assert t.ulp == 1
    assert resolve("k", "fp16", suite={"k": {"*": {"atol": 0.5}}}).atol == 0.5


def test_vllm_reduction_habit_is_looser_than_default():
    assert VLLM_REDUCTION["bf16"]["atol"] > DTYPE_DEFAULTS["bf16"].atol
    assert VLLM_REDUCTION["fp16"]["atol"] > DTYPE_DEFAULTS["fp16"].atol


@pytest.mark.parametrize(
    "table,match",
    [
        ({"k": {"bf16": {"atol": -1}}}, "non-negative"),
        ({"k": {"bf16": {"tol": 1}}}, "unknown tolerance field"),
        ({"k": {"int4": {"atol": 1}}}, "unknown dtype"),
        ({"k": [1, 2]}, "mapping dtype"),
        ({"k": {"bf16": 0.1}}, "mapping with atol"),
    ],
)
def test_validate_table_rejects_bad_entries(table, match):
    with pytest.raises(ValueError, match=match):
        validate_table(table, where="tolerances")
