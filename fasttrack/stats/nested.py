"""Nested performance samples (side -> engine lifetime -> run -> samples) and their resampling.

The layout and the draws behind :mod:`fasttrack.stats.hierarchical`: validation of one
side's nested samples, the summary statistics ('mean', 'median', 'pNN'), and the
vectorised two-level bootstrap draws (lifetimes with replacement, then runs within each
drawn lifetime), for one side alone or for two interleaved sides drawn together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from fasttrack.stats._base import StatsInputError

RunSamples = float | Sequence[float]
"""One run: a per-run summary (one number) or the run's per-request samples."""
LifetimeSamples = Sequence[RunSamples]
"""One engine lifetime: its runs, in order."""
SideSamples = Sequence[LifetimeSamples]
"""One side: its engine lifetimes, in order."""

_MAX_CHUNK_ELEMENTS = 2_000_000
_PCT = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")


def parse_statistic(statistic: str) -> Callable[[np.ndarray], np.ndarray]:
    """Return a row-wise NaN-ignoring reducer for 'mean', 'median' or 'pNN' (0 < NN < 100).

    Percentiles use numpy's default linear interpolation between order statistics.
    """
    s = statistic.strip().lower()

    def pick(
        plain: Callable[[np.ndarray], np.ndarray], nan: Callable[[np.ndarray], np.ndarray]
    ) -> Callable[[np.ndarray], np.ndarray]:
        # numpy's nan-reducers are slow on many short rows; use them only when padding is present
        return lambda x: nan(x) if np.isnan(x).any() else plain(x)

    if s == "mean":
        return pick(lambda x: np.mean(x, axis=1), lambda x: np.nanmean(x, axis=1))
    if s == "median":
        return pick(lambda x: np.median(x, axis=1), lambda x: np.nanmedian(x, axis=1))
    m = _PCT.match(s)
    if m:
        q = float(m.group(1))
        if 0.0 < q < 100.0:
            return pick(lambda x: np.percentile(x, q, axis=1), lambda x: np.nanpercentile(x, q, axis=1))
    raise StatsInputError(
        f"unknown summary statistic {statistic!r}: use 'mean', 'median' or a percentile such as 'p90' or 'p99'."
    )


def normalise_side(data: SideSamples, *, what: str) -> list[list[np.ndarray]]:
    if isinstance(data, (str, bytes)) or not isinstance(data, Sequence) or len(data) == 0:
        raise StatsInputError(
            f"{what}: expected a non-empty list of engine lifetimes (lifetime -> run -> samples), "
            f"got {type(data).__name__}."
        )
    out: list[list[np.ndarray]] = []
    for i, lifetime in enumerate(data):
        if isinstance(lifetime, (str, bytes)) or not isinstance(lifetime, Sequence) or len(lifetime) == 0:
            raise StatsInputError(f"{what}: lifetime {i} has no runs; every lifetime needs at least one run.")
        runs: list[np.ndarray] = []
        for j, run in enumerate(lifetime):
            if isinstance(run, (str, bytes)):
                raise StatsInputError(
                    f"{what}: lifetime {i} run {j} is a string, expected a number or a list of numbers."
                )
            try:
                arr = np.asarray(run, dtype=float).reshape(-1)
            except (TypeError, ValueError):
                raise StatsInputError(
                    f"{what}: lifetime {i} run {j} is not a number or a flat list of numbers."
                ) from None
            if arr.size == 0:
                raise StatsInputError(f"{what}: lifetime {i} run {j} has no samples.")
            if not np.all(np.isfinite(arr)):
                raise StatsInputError(f"{what}: lifetime {i} run {j} contains NaN or infinite values.")
            if np.any(arr <= 0):
                raise StatsInputError(
                    f"{what}: lifetime {i} run {j} contains values <= 0; latency and throughput samples must be "
                    "strictly positive (a failed run must be reported as a failure, not as 0)."
                )
            runs.append(arr)
        out.append(runs)
    return out


class SideLayout:
    """Precomputed layout of one side for fast vectorised resampling."""

    def __init__(self, lifetimes: list[list[np.ndarray]]) -> None:
        self.lifetimes = lifetimes
        self.n_lifetimes = len(lifetimes)
        self.runs_per_lifetime = np.array([len(lt) for lt in lifetimes], dtype=np.int64)
        self.run_offset = np.concatenate([[0], np.cumsum(self.runs_per_lifetime)[:-1]]).astype(np.int64)
        runs = [r for lt in lifetimes for r in lt]
        self.max_len = max(r.size for r in runs)
        self.max_runs = int(self.runs_per_lifetime.max())
        self.matrix = np.full((len(runs), self.max_len), np.nan)
        for k, r in enumerate(runs):
            self.matrix[k, : r.size] = r
        self.all_values = np.concatenate(runs)
        self.padded = bool(len({r.size for r in runs}) > 1 or len(set(self.runs_per_lifetime.tolist())) > 1)

    def observed(self, reducer: Callable[[np.ndarray], np.ndarray]) -> float:
        return float(reducer(self.all_values[None, :])[0])

    def lifetime_values(self, reducer: Callable[[np.ndarray], np.ndarray]) -> list[float]:
        return [float(reducer(np.concatenate(lt)[None, :])[0]) for lt in self.lifetimes]

    def run_values(self, reducer: Callable[[np.ndarray], np.ndarray]) -> list[list[float]]:
        return [[float(reducer(r[None, :])[0]) for r in lt] for lt in self.lifetimes]

    def chunk_size(self) -> int:
        return max(1, _MAX_CHUNK_ELEMENTS // (self.n_lifetimes * self.max_runs * self.max_len))

    def draw(self, rng: np.random.Generator, b: int) -> tuple[np.ndarray, np.ndarray]:
        """``b`` replicates' draws: lifetimes (b, L), then runs within each drawn lifetime (b, L, R)."""
        lt = rng.integers(0, self.n_lifetimes, size=(b, self.n_lifetimes))
        n_runs = self.runs_per_lifetime[lt][..., None]  # (b, L, 1)
        return lt, rng.integers(0, n_runs, size=(b, self.n_lifetimes, self.max_runs))

    def gather(self, lt: np.ndarray, choice: np.ndarray, reducer: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The statistic of each replicate drawn by :meth:`draw`."""
        b = lt.shape[0]
        n_runs = self.runs_per_lifetime[lt][..., None]
        valid = np.arange(self.max_runs)[None, None, :] < n_runs
        gid = self.run_offset[lt][..., None] + np.where(valid, choice, 0)
        vals = self.matrix[gid]  # (b, L, R, S)
        if self.padded:
            vals = np.where(valid[..., None], vals, np.nan)
        return reducer(vals.reshape(b, -1))

    def replicates(
        self, rng: np.random.Generator, n_boot: int, reducer: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray:
        out = np.empty(n_boot)
        chunk = self.chunk_size()
        for start in range(0, n_boot, chunk):
            b = min(chunk, n_boot - start)
            out[start : start + b] = self.gather(*self.draw(rng, b), reducer)
        return out

    def same_layout(self, other: "SideLayout") -> bool:
        """Same number of lifetimes and of runs in each: the two sides' runs can be paired by position."""
        return self.n_lifetimes == other.n_lifetimes and bool(
            np.array_equal(self.runs_per_lifetime, other.runs_per_lifetime)
        )


def paired_replicates(
    b_side: SideLayout,
    c_side: SideLayout,
    rng: np.random.Generator,
    n_boot: int,
    reducer: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Replicates of both sides from one set of draws: lifetime pair i and run pair k are drawn together."""
    b_out, c_out = np.empty(n_boot), np.empty(n_boot)
    chunk = min(b_side.chunk_size(), c_side.chunk_size())
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        lt, choice = b_side.draw(rng, b)
        b_out[start : start + b] = b_side.gather(lt, choice, reducer)
        c_out[start : start + b] = c_side.gather(lt, choice, reducer)
    return b_out, c_out


def count_lifetimes(data: SideSamples, *, what: str = "samples") -> int:
    """Number of engine lifetimes in one side's samples (validated as the estimators do)."""
    return len(normalise_side(data, what=what))
