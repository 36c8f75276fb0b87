"""Comparing a kernel's output with its reference: errors, ULP distance, non-finite propagation."""

from __future__ import annotations

from typing import Any

import torch

from fasttrack.kernels.tolerance import Tolerance

_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _ordinal(t: torch.Tensor) -> torch.Tensor:
    """Map floats to integers whose order and differences follow the float's representable grid.

    The bit pattern is read as a signed integer; negative floats (sign bit set) map to minus
    their magnitude bits, so -0 and +0 both map to 0 and adjacent floats differ by 1.
    """
    size = t.element_size()
    bits = t.contiguous().view(_INT_OF_SIZE[size]).to(torch.int64)
    if size == 8:
        mag = bits & 0x7FFF_FFFF_FFFF_FFFF
    else:
        mag = bits & ((1 << (8 * size - 1)) - 1)
    return torch.where(bits < 0, -mag, mag)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance between ``a`` and ``b`` in units in the last place of their dtype.

    Both must have the same floating dtype and shape. NaN positions give meaningless values:
    mask them out (``compare`` does). Infinities sit one step past the largest finite value.
    """
    if a.dtype != b.dtype:
        raise ValueError(f"ulp_distance needs equal dtypes, got {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"ulp_distance needs equal shapes, got {tuple(a.shape)} and {tuple(b.shape)}")
    if not a.dtype.is_floating_point:
        raise ValueError(f"ulp_distance needs a floating dtype, got {a.dtype}")
    return (_ordinal(a.cpu()) - _ordinal(b.cpu())).abs()


def round_to(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round a (float64) tensor to ``dtype`` the way a kernel storing it would (via fp32 for fp8)."""
    if t.dtype == dtype:
        return t
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.to(torch.float32).to(dtype)
    return t.to(dtype)


def compare(actual: torch.Tensor, expected: torch.Tensor, *, tol: Tolerance) -> dict[str, Any]:
    """Compare ``actual`` (in its own dtype) with ``expected`` (the float64 reference).

    Returns the metrics of one case: max absolute and relative error over elements finite on
    both sides, max ULP distance in ``actual``'s dtype (against the reference rounded to that
    dtype), mismatch counts (elements outside ``atol + rtol*|expected|``, NaN where the
    reference has none or the reverse, infinities that differ), and the verdict.
    """
    if actual.shape != expected.shape:
        return {
            "verdict": "fail",
            "numel": int(actual.numel()),
            "error": f"shape {tuple(actual.shape)} differs from the reference's {tuple(expected.shape)}",
            "max_abs_err": None,
            "max_rel_err": None,
            "max_ulp": None,
            "mismatches": int(actual.numel()),
            "nan_mismatch": 0,
            "inf_mismatch": 0,
            "atol": tol.atol,
            "rtol": tol.rtol,
            "tol_source": tol.source,
        }
    out_dtype = actual.dtype
    act = actual.detach().cpu()
    exp64 = expected.detach().cpu().to(torch.float64)
    exp_dt = round_to(exp64, out_dtype)
    a64 = act.to(torch.float64)
    e_dt64 = exp_dt.to(torch.float64)

    nan_a, nan_e = torch.isnan(a64), torch.isnan(exp64) | torch.isnan(e_dt64)
    inf_a, inf_e = torch.isinf(a64), torch.isinf(e_dt64)
    nan_mismatch = int((nan_a != nan_e).sum())
    inf_mismatch = int(((inf_e & ~nan_a & (a64 != e_dt64)) | (inf_a & ~inf_e & ~nan_e)).sum())
    finite = torch.isfinite(a64) & torch.isfinite(exp64) & torch.isfinite(e_dt64)

    n_finite = int(finite.sum())
    max_abs = max_rel = 0.0
    max_ulp = 0
    out_of_bound = 0
    first_bad: dict[str, Any] | None = None
    if n_finite:
        a_f, e_f = a64[finite], exp64[finite]
        diff = (a_f - e_f).abs()
        max_abs = float(diff.max())
        nz = e_f != 0
        if bool(nz.any()):
            max_rel = float((diff[nz] / e_f[nz].abs()).max())
        elif max_abs > 0:
            max_rel = float("inf")
        max_ulp = int(ulp_distance(act[finite], exp_dt[finite]).max())
        bad = diff > (tol.atol + tol.rtol * e_f.abs())
        out_of_bound = int(bad.sum())
        if out_of_bound:
            idx_flat = torch.nonzero(finite.reshape(-1)).reshape(-1)[torch.nonzero(bad).reshape(-1)[0]]
            first_bad = _where(int(idx_flat), a64, exp64)
    if first_bad is None and (nan_mismatch or inf_mismatch):
        wrong = ((nan_a != nan_e) | (inf_e & ~nan_a & (a64 != e_dt64)) | (inf_a & ~inf_e & ~nan_e)).reshape(-1)
        first_bad = _where(int(torch.nonzero(wrong).reshape(-1)[0]), a64, exp64)

    mismatches = out_of_bound + nan_mismatch + inf_mismatch
    return {
        "verdict": "pass" if mismatches == 0 else "fail",
        "numel": int(act.numel()),
        "finite": n_finite,
        "max_abs_err": max_abs,
        "max_rel_err": max_rel,
        "max_ulp": max_ulp,
        "mismatches": mismatches,
        "out_of_bound": out_of_bound,
        "nan_mismatch": nan_mismatch,
        "inf_mismatch": inf_mismatch,
        "expected_nonfinite": int((~torch.isfinite(e_dt64)).sum()),
        "atol": tol.atol,
        "rtol": tol.rtol,
        "tol_source": tol.source,
        "first_bad": first_bad,
    }


def _where(flat_index: int, a64: torch.Tensor, e64: torch.Tensor) -> dict[str, Any]:
    idx = list(torch.unravel_index(torch.tensor(flat_index), a64.shape)) if a64.dim() else []
    return {
        "index": [int(i) for i in idx],
        "actual": _num(float(a64.reshape(-1)[flat_index])),
        "expected": _num(float(e64.reshape(-1)[flat_index])),
    }


def _num(x: float) -> float | str:
    """JSON-safe float: NaN and infinities as strings."""
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return x


def bitwise_runs(runs: list[torch.Tensor], *, budget_ulp: int = 0) -> dict[str, Any]:
    """Compare repeated outputs with the first: bitwise equality and max ULP distance.

    The comparison is on bits, so NaN equals NaN of the same pattern. A run whose NaN
    positions differ from the first run's counts as beyond any ULP budget.
    """
    if not runs:
        raise ValueError("bitwise_runs needs at least one run")
    first = runs[0].detach().cpu().contiguous()
    ints = _INT_OF_SIZE[first.element_size()]
    nan_first = torch.isnan(first.to(torch.float64))
    max_ulp = 0
    differing_runs = 0
    differing_elems = 0
    nan_differs = False
    for r in runs[1:]:
        r = r.detach().cpu().contiguous()
        neq = first.view(ints) != r.view(ints)
        if not bool(neq.any()):
            continue
        differing_runs += 1
        differing_elems = max(differing_elems, int(neq.sum()))
        nan_r = torch.isnan(r.to(torch.float64))
        if bool((nan_first != nan_r).any()):
            nan_differs = True
        both = ~(nan_first | nan_r)
        if bool(both.any()):
            max_ulp = max(max_ulp, int(ulp_distance(first[both], r[both]).max()))
    ok = differing_runs == 0 or (not nan_differs and max_ulp <= budget_ulp)
    return {
        "runs": len(runs),
        "bitwise_equal": differing_runs == 0,
        "differing_runs": differing_runs,
        "max_differing_elements": differing_elems,
        "max_ulp": max_ulp,
        "nan_differs": nan_differs,
        "budget_ulp": budget_ulp,
        "verdict": "pass" if ok else "fail",
    }
