"""Tolerance policy: how close a kernel's output must be to its float64 reference.

An element passes when ``|actual - expected| <= atol + rtol * |expected|`` (the rule of
``torch.testing.assert_close``), with ``expected`` the reference computed in float64 from the
same (dtype-rounded) inputs. NaN must appear exactly where the reference has NaN, and
+/-Inf exactly where the reference (rounded to the output dtype) has the same infinity.

``ulp`` is the budget for repeated runs: two runs of a kernel on the same inputs may differ by
at most this many units in the last place of the output dtype (0 = bitwise equal).

Resolution order, later wins field by field:

1. the dtype default below (PyTorch's ``assert_close`` defaults; fp8 after upcasting);
2. the suite's per-kernel entry (``KERNEL_TOLERANCES`` in the suite's conftest), which is
   where vLLM's habit of looser bounds for reductions (norms, attention, GEMMs) lives;
3. the scope's ``kernels[].tolerances`` entry ({kernel: {dtype: {atol, rtol, ulp}}}).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping

import torch

#: Canonical dtype names -> torch dtypes. "fp8" means e4m3fn (the inference format).
DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
    "fp8e4m3": torch.float8_e4m3fn,
    "fp8e5m2": torch.float8_e5m2,
}

_ALIASES: dict[str, str] = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8e4m3",
    "fp8_e4m3": "fp8e4m3",
    "e4m3": "fp8e4m3",
    "float8_e5m2": "fp8e5m2",
    "fp8_e5m2": "fp8e5m2",
    "e5m2": "fp8e5m2",
}


def dtype_name(dtype: torch.dtype | str) -> str:
    """The canonical name of a dtype (``torch.bfloat16`` -> ``"bf16"``)."""
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        key = _ALIASES.get(key, key)
        if key not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(sorted(DTYPES))}")
        return "fp8e4m3" if key == "fp8" else key
    for name, dt in DTYPES.items():
        if dt is dtype and name != "fp8":
            return name
    raise ValueError(f"no tolerance policy for dtype {dtype}")


def to_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    return DTYPES[dtype_name(name)]


@dataclass(frozen=True)
class Tolerance:
    """The bound one comparison is held to."""

    atol: float
    """Absolute part of the elementwise bound."""
    rtol: float
    """Relative part of the elementwise bound (times |expected|)."""
    ulp: int = 0
    """Repeated runs may differ by at most this many ULPs of the output dtype (0 = bitwise)."""
    source: str = "dtype default"
    """Where each field came from, e.g. 'dtype default < suite < scope'."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: PyTorch's ``torch.testing.assert_close`` defaults for fp32/fp16/bf16 (and fp64). fp8 has no
#: PyTorch default: it is compared after upcasting to fp32 with a bound of one ULP at the
#: largest magnitude (rtol = 2**-mantissa_bits) and the smallest subnormal as atol.
DTYPE_DEFAULTS: dict[str, Tolerance] = {
    "fp64": Tolerance(atol=1e-7, rtol=1e-7, source="torch.testing default (fp64)"),
    "fp32": Tolerance(atol=1e-5, rtol=1.3e-6, source="torch.testing default (fp32)"),
    "fp16": Tolerance(atol=1e-5, rtol=1e-3, source="torch.testing default (fp16)"),
    "bf16": Tolerance(atol=1e-5, rtol=1.6e-2, source="torch.testing default (bf16)"),
    "fp8e4m3": Tolerance(
        atol=2.0**-9, rtol=2.0**-3, source="fp8 e4m3 upcast: 1 ULP (2^-3) relative, min subnormal absolute"
    ),
    "fp8e5m2": Tolerance(
        atol=2.0**-16, rtol=2.0**-2, source="fp8 e5m2 upcast: 1 ULP (2^-2) relative, min subnormal absolute"
    ),
}

#: vLLM's kernel tests compare reductions (layernorm, attention) more loosely than PyTorch's
#: defaults: tests/kernels/allclose_default.py uses atol 1e-3 for fp16/bf16, and
#: tests/kernels/test_layernorm.py uses atol = rtol = 1e-2. Suites pick these by name.
VLLM_REDUCTION: dict[str, dict[str, float]] = {
    "fp32": {"atol": 1e-5, "rtol": 1e-5},
    "fp16": {"atol": 1e-3, "rtol": 1e-3},
    "bf16": {"atol": 1e-2, "rtol": 1.6e-2},
}

_FIELDS = ("atol", "rtol", "ulp")


def _apply(base: Tolerance, override: Mapping[str, Any] | None, label: str, where: str) -> Tolerance:
    if not override:
        return base
    unknown = sorted(set(override) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown tolerance field(s) {unknown}; allowed: atol, rtol, ulp")
    changes: dict[str, Any] = {}
    for f in _FIELDS:
        if f in override and override[f] is not None:
            v = override[f]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{where}: {f} must be a non-negative number, got {v!r}")
            changes[f] = int(v) if f == "ulp" else float(v)
    if not changes:
        return base
    return replace(base, **changes, source=f"{base.source} < {label} ({', '.join(sorted(changes))})")


def _lookup(table: Mapping[str, Any] | None, kernel: str, dtype: str) -> Mapping[str, Any] | None:
    if not table:
        return None
    per_kernel = table.get(kernel) or table.get("*")
    if not per_kernel:
        return None
    for key in (dtype, "fp8" if dtype.startswith("fp8") else None, "*"):
        if key and key in per_kernel:
            return per_kernel[key]
    return None


def resolve(
    kernel: str,
    dtype: torch.dtype | str,
    *,
    suite: Mapping[str, Any] | None = None,
    scope: Mapping[str, Any] | None = None,
) -> Tolerance:
    """The tolerance for ``kernel`` at ``dtype``: dtype default < suite entry < scope entry.

    ``suite`` and ``scope`` are {kernel: {dtype: {atol, rtol, ulp}}}; ``"*"`` matches any
    kernel or dtype, and ``"fp8"`` matches both fp8 formats.
    """
    name = dtype_name(dtype)
    tol = DTYPE_DEFAULTS[name]
    tol = _apply(tol, _lookup(suite, kernel, name), "suite", f"suite tolerance {kernel}/{name}")
    tol = _apply(tol, _lookup(scope, kernel, name), "scope", f"scope tolerance {kernel}/{name}")
    return tol


def validate_table(table: Mapping[str, Any], *, where: str) -> None:
    """Raise ValueError when a {kernel: {dtype: {atol, rtol, ulp}}} table is malformed."""
    if not isinstance(table, Mapping):
        raise ValueError(f"{where}: expected a mapping kernel -> dtype -> bound, got {type(table).__name__}")
    for kernel, per_dtype in table.items():
        if not isinstance(per_dtype, Mapping):
            raise ValueError(f"{where}.{kernel}: expected a mapping dtype -> bound")
        for dt, bound in per_dtype.items():
            if dt not in ("*", "fp8"):
                try:
                    dtype_name(dt)
                except ValueError as exc:
                    raise ValueError(f"{where}.{kernel}: {exc}") from None
            if not isinstance(bound, Mapping):
                raise ValueError(f"{where}.{kernel}.{dt}: expected a mapping with atol/rtol/ulp")
            _apply(DTYPE_DEFAULTS["fp32"], bound, "check", f"{where}.{kernel}.{dt}")
