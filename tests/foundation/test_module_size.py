"""No module in ``fasttrack/`` runs over :data:`MAX_MODULE_LINES` lines, except the listed ones, each with its
reason (the list only shrinks: a module split below the limit must leave it, and the test says so)."""

from __future__ import annotations

from fasttrack import ROOT

MAX_MODULE_LINES = 550
PKG = ROOT / "fasttrack"

#: path relative to fasttrack/ -> why it is longer than MAX_MODULE_LINES.
EXCEPTIONS: dict[str, str] = {}


def module_lines() -> dict[str, int]:
    """Lines of every module of fasttrack/, by path relative to it."""
    return {
        p.relative_to(PKG).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(PKG.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def test_no_module_is_longer_than_the_limit_without_a_reason() -> None:
    lines = module_lines()
    assert len(lines) > 100
    long = {p: n for p, n in lines.items() if n > MAX_MODULE_LINES and p not in EXCEPTIONS}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: split them by job, or give a reason: {long}"


def test_the_exceptions_are_still_long() -> None:
    lines = module_lines()
    stale = [p for p in EXCEPTIONS if lines.get(p, 0) <= MAX_MODULE_LINES]
    assert not stale, (
        f"these modules are at or under {MAX_MODULE_LINES} lines now: remove them from EXCEPTIONS: {stale}"
    )
