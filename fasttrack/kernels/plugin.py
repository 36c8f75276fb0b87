"""pytest plugin for kernel suites: fixtures that compare, time and record, and the rows file.

Loaded by the runner with ``-p fasttrack.kernels.plugin`` (a suite's conftest loads it too when
pytest is started by hand). Tests record through the ``kernel_rec`` fixture; at the end of the
session the rows are written as JSON to the path in ``FASTTRACK_KERNEL_ROWS``.

Fixtures a suite's conftest provides:

- ``default_candidate`` (str): the candidate module used when the scope names none;
- ``suite_tolerances`` (dict, optional): {kernel: {dtype: {atol, rtol, ulp}}} overrides.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence, TypedDict, Unpack

import pytest
import torch

from fasttrack.kernels import ROWS_SCHEMA, env
from fasttrack.kernels import candidates as _candidates
from fasttrack.kernels.metrics import compare
from fasttrack.kernels.perturb import as_list, perturbed_trials, repeated_runs
from fasttrack.kernels.tolerance import Tolerance, dtype_name, resolve

NO_CUDA = "no CUDA device on this host"

_STATE: dict[str, Any] = {
    "cases": [],
    "determinism": [],
    "perturbation": [],
    "speed_of_light": [],
    "tests": [],
    "peaks": None,
    "candidate": None,
    "candidate_error": None,
    "started": time.time(),
}


def rows_state() -> dict[str, Any]:
    """The rows collected so far in this process (tests of the plugin read it)."""
    return _STATE


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped with a stated reason where there is none)")
    config.addinivalue_line("markers", "sanitize: the small selection run under compute-sanitizer")
    for key in ("cases", "determinism", "perturbation", "speed_of_light", "tests"):
        _STATE[key] = []
    _STATE["started"] = time.time()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" and not (report.failed or report.skipped):
        return
    row: dict[str, Any] = {
        "test": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "duration_s": round(report.duration, 4),
    }
    if report.skipped:
        lr = report.longrepr
        row["reason"] = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
        row["reason"] = row["reason"].removeprefix("Skipped: ")
    elif report.failed:
        row["error"] = str(report.longrepr)[-3000:]
    _STATE["tests"].append(row)
    # keep a partial rows file on disk, so a run killed at its time limit still leaves evidence
    if time.time() - _STATE.get("last_write", 0.0) > 5.0:
        _write_rows(exitstatus=None)


def _host() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "platform": platform.platform(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # triton absent or broken: the environment record says so with None
        info["triton"] = None
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        info["cuda"] = torch.version.cuda
    return info


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _write_rows(exitstatus=int(exitstatus))


def _write_rows(*, exitstatus: int | None) -> None:
    path = os.environ.get(env.ROWS)
    if not path:
        return
    _STATE["last_write"] = time.time()
    doc = {
        "schema": ROWS_SCHEMA,
        "suite": os.environ.get(env.SUITE) or None,
        "candidate": _STATE["candidate"],
        "candidate_error": _STATE["candidate_error"],
        "defects": sorted(env.defects()),
        "tier": os.environ.get(env.TIER, "standard"),
        "sanitizer_tool": os.environ.get(env.SANITIZER) or None,
        "pytest_exit_code": exitstatus,
        "complete": exitstatus is not None,
        "wall_s": round(time.time() - _STATE["started"], 2),
        "host": _host(),
        "peaks": _STATE["peaks"],
        "cases": _STATE["cases"],
        "determinism": _STATE["determinism"],
        "perturbation": _STATE["perturbation"],
        "speed_of_light": _STATE["speed_of_light"],
        "tests": _STATE["tests"],
    }
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=_json_default), encoding="utf-8")
    tmp.replace(path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (torch.dtype, torch.device, Path)):
        return str(o)
    if isinstance(o, float):
        return str(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def suite_tolerances() -> Mapping[str, Any]:
    """Per-kernel tolerance overrides of the suite (a suite's conftest overrides this)."""
    return {}


@pytest.fixture(scope="session")
def kernel_candidate(request: pytest.FixtureRequest) -> ModuleType:
    """The candidate kernels: ``FASTTRACK_KERNEL_CANDIDATE`` or the suite's ``default_candidate``."""
    spec = os.environ.get(env.CANDIDATE, "").strip()
    if not spec:
        try:
            spec = request.getfixturevalue("default_candidate")
        except pytest.FixtureLookupError:
            pytest.fail(
                "no candidate: set FASTTRACK_KERNEL_CANDIDATE or define a 'default_candidate' fixture "
                "in the suite's conftest"
            )
    base_dir = Path(str(request.config.rootpath))
    try:
        base_dir = Path(request.getfixturevalue("suite_dir"))
    except pytest.FixtureLookupError:
        pass
    _STATE["candidate"] = spec
    try:
        mod = _candidates.load(spec, base_dir=base_dir)
    except _candidates.CandidateImportError as exc:
        _STATE["candidate_error"] = str(exc)
        pytest.fail(str(exc), pytrace=False)
    return mod


@pytest.fixture(scope="session")
def kernel_device(kernel_candidate: ModuleType) -> torch.device:
    """Where the candidate runs: its ``DEVICE`` ('cuda', 'cpu' or 'any'); skips without CUDA."""
    want = str(getattr(kernel_candidate, "DEVICE", "any"))
    if want.startswith("cuda"):
        if not torch.cuda.is_available():
            pytest.skip(NO_CUDA)
        return torch.device(want)
    if want == "any":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(want)


@pytest.fixture
def kernel_rec(request: pytest.FixtureRequest, suite_tolerances: Mapping[str, Any]) -> "Recorder":
    return Recorder(nodeid=request.node.nodeid, suite_tolerances=suite_tolerances)


def require_cuda(device: torch.device, what: str) -> None:
    """Skip the current test unless ``device`` is a CUDA device (``what`` names the need)."""
    if device.type != "cuda":
        reason = NO_CUDA if not torch.cuda.is_available() else f"the candidate runs on {device}"
        pytest.skip(f"{what} needs CUDA: {reason}")


# --------------------------------------------------------------------------- recorder


class KernelCase(TypedDict):
    """What every row of a kernel test names (each :class:`Recorder` method takes these keywords)."""

    kernel: str
    shape: Mapping[str, Any]
    """The case's dimensions by name."""
    dtype: str | torch.dtype


class Recorder:
    """Records one test's rows: numerics cases, determinism, perturbation, speed of light."""

    def __init__(self, *, nodeid: str, suite_tolerances: Mapping[str, Any]) -> None:
        self.nodeid = nodeid
        self.suite_tolerances = suite_tolerances
        self.scope_tolerances = env.json_var(env.TOLERANCES)
        self.suite = os.environ.get(env.SUITE) or None

    def tolerance(self, kernel: str, dtype: torch.dtype | str, output: str | None = None) -> Tolerance:
        """Tolerance for ``kernel`` (or ``kernel.output`` where declared) at ``dtype``."""
        name = dtype_name(dtype)

        def pick(table: Mapping[str, Any]) -> dict[str, Any]:
            entry = (table.get(f"{kernel}.{output}") if output else None) or table.get(kernel) or table.get("*")
            return {kernel: entry} if entry else {}

        suite, scope = pick(self.suite_tolerances), pick(self.scope_tolerances)
        return resolve(kernel, name, suite=suite, scope=scope)

    def _record(self, table: str, where: KernelCase, **extra: Any) -> dict[str, Any]:
        """One row of ``table`` for the case ``where``, kept for the rows file."""
        row = {
            "suite": self.suite,
            "test": self.nodeid,
            "kernel": where["kernel"],
            "candidate": _STATE["candidate"],
            "shape": ",".join(f"{k}={v}" for k, v in where["shape"].items()),
            "dtype": dtype_name(where["dtype"]),
            **extra,
        }
        _STATE[table].append(row)
        return row

    def case(
        self,
        *,
        dist: str,
        outputs: Mapping[str, tuple[torch.Tensor, ...]],
        seed: int | None = None,
        device: torch.device | str | None = None,
        **where: Unpack[KernelCase],
    ) -> list[dict[str, Any]]:
        """Compare each named output and record one row each.

        ``outputs`` maps a name to ``(actual, expected)`` or ``(actual, expected, scale)``:
        ``expected`` is the float64 reference; ``scale`` (default 1) multiplies atol for
        outputs whose magnitude scales with the inputs (the ``large`` distribution), since
        atol is stated for unit-scale data. The tolerance is the case dtype's (the activation
        dtype the kernel computes in); ULPs are counted in the output's own dtype.
        """
        rows = []
        for name, pair in outputs.items():
            actual, expected = pair[0], pair[1]
            atol_scale = float(pair[2]) if len(pair) > 2 else 1.0
            tol = self.tolerance(where["kernel"], where["dtype"], name)
            if atol_scale != 1.0:
                tol = replace(
                    tol, atol=tol.atol * atol_scale, source=f"{tol.source}; atol x {atol_scale:g} (input scale)"
                )
            m = compare(actual, expected, tol=tol)
            rows.append(
                self._record(
                    "cases",
                    where,
                    dist=dist,
                    output=name,
                    out_dtype=dtype_name(actual.dtype),
                    seed=seed,
                    device=str(device or actual.device),
                    atol_scale=atol_scale,
                    **m,
                )
            )
        return rows

    def determinism(
        self,
        *,
        fn: Callable[[], Any],
        names: Sequence[str],
        runs: int = 10,
        device: torch.device | str | None = None,
        **where: Unpack[KernelCase],
    ) -> list[dict[str, Any]]:
        """Run ``fn`` ``runs`` times; bitwise (or within the tolerance's ULP budget) per output."""
        budget = self.tolerance(where["kernel"], where["dtype"]).ulp
        results = repeated_runs(fn, runs=runs, budget_ulp=budget)
        return [
            self._record("determinism", where, output=name, device=str(device), **res)
            for name, res in zip(names, results, strict=False)
        ]

    def perturbation(
        self,
        *,
        run: Callable[[Any], Any],
        kind: str,
        poison: Sequence[torch.Tensor] = (),
        trials: int = 20,
        seed: int = 0,
        device: torch.device | str = "cuda",
        expected_nan: Sequence[torch.Tensor] | None = None,
        **where: Unpack[KernelCase],
    ) -> dict[str, Any]:
        """Timing perturbation with NaN-poisoned buffers; a failed trial means a race."""
        budget = self.tolerance(where["kernel"], where["dtype"]).ulp
        res = perturbed_trials(
            run, poison=poison, trials=trials, seed=seed, device=device, budget_ulp=budget, expected_nan=expected_nan
        )
        return self._record("perturbation", where, kind=kind, defects=sorted(env.defects()), device=str(device), **res)

    def speed(
        self,
        *,
        fn: Callable[[], Any],
        bytes_moved: int,
        flops: int,
        device: torch.device | str = "cuda",
        **where: Unpack[KernelCase],
    ) -> dict[str, Any]:
        """Time ``fn`` and record achieved bandwidth / FLOP/s against the measured peaks."""
        from fasttrack.kernels import sol

        res = sol.bench(fn, bytes_moved=bytes_moved, flops=flops, device=device)
        _STATE["peaks"] = sol.measure_peaks(device)
        return self._record("speed_of_light", where, device=str(device), **res)

    @staticmethod
    def expect(rows: Sequence[Mapping[str, Any]], what: str = "case") -> None:
        """Fail the test when any row's verdict is not 'pass', naming the worst evidence."""
        bad = [r for r in rows if r.get("verdict") != "pass"]
        if bad:
            lines = []
            for r in bad[:8]:
                keys = (
                    "kernel",
                    "output",
                    "shape",
                    "dtype",
                    "dist",
                    "max_abs_err",
                    "max_rel_err",
                    "max_ulp",
                    "mismatches",
                    "nan_mismatch",
                    "inf_mismatch",
                    "atol",
                    "rtol",
                    "first_bad",
                    "differing_runs",
                    "failed_trials",
                    "stale_nan_trials",
                )
                lines.append(", ".join(f"{k}={r[k]}" for k in keys if k in r and r[k] is not None))
            raise AssertionError(f"{len(bad)} {what} row(s) failed:\n  " + "\n  ".join(lines))


__all__ = ["Recorder", "NO_CUDA", "require_cuda", "rows_state", "as_list"]
