"""Planted defects: switches in the shipped example candidates that prove the tier catches bugs.

A defect is selected with ``FASTTRACK_KERNEL_DEFECT`` (comma-separated). Candidates call
:func:`active` at run time, so one process can test with and without a defect. Real
candidates (a PR's kernels) ignore this variable.
"""

from __future__ import annotations

from fasttrack.kernels import env

#: Defects the shipped example candidates implement, with what each one plants.
KNOWN: dict[str, str] = {
    "dcp-off-by-one": "the DCP log-sum-exp combine loops over ranks 0..R-2, dropping the last rank's partial result",
    "race-read-before-write": (
        "the side-stream consumer reads the producer's buffer without waiting for the producer's event"
    ),
}


def active(name: str) -> bool:
    """Whether the planted defect ``name`` is switched on."""
    if name not in KNOWN:
        raise ValueError(f"unknown planted defect {name!r}; known: {', '.join(sorted(KNOWN))}")
    return name in env.defects()


def check_names(names: frozenset[str] | set[str] | list[str]) -> None:
    unknown = sorted(set(names) - set(KNOWN))
    if unknown:
        raise ValueError(f"unknown planted defect(s) {unknown}; known: {', '.join(sorted(KNOWN))}")
