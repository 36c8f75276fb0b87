"""The headline: one rule for what a bundle may be called, shown alike by the report, the PR comment, the
maintainers' comment body, the dashboard and ``verify``.

A bundle's headline is **PASS** only when all of these hold:

- **verified**: signed by a trusted key, and every file matches the signed hashes (every integrity item of
  the verification holds);
- **bound to the PR head**: the bundle records a PR and proves the link (the isolation row judged exactly
  the recorded base..head and every engine served the head), and, when the PR's current head is known
  (``--pr-head``), it is the head the bundle tested;
- **not a rehearsal** on hardware the scope does not declare;
- **complete for its tier**: every required check ran and passed, over the whole tier (not one shard);
- when given, the recorded scope asks for at least what the **trusted scope** asks for, and the tier is at
  least the **lowest tier** accepted.

Otherwise the headline names every condition that does not hold, in this order: ``unverified``, ``fail``
(a required check failed), ``incomplete``, ``rehearsal``, ``not evidence for this PR``, and, when the bundle
was held against a trusted scope or a lowest tier, ``scope loosened`` and ``tier too low``. The bundle's own
verdict is shown beside it, as the bundle states it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.bundle.verify import VerifyResult

#: The conditions a headline can name, in the order it names them.
MISSING_ORDER: tuple[str, ...] = (
    "unverified",
    "fail",
    "incomplete",
    "rehearsal",
    "not evidence for this PR",
    "scope loosened",
    "tier too low",
)

#: Verification items about the bundle's integrity and signature (``scope`` and ``tier`` are acceptance items,
#: ``pr_head`` the PR binding: each is said under its own condition).
_INTEGRITY = ("archive", "attestation", "signature", "hashes", "files", "schema", "predicate", "verdicts", "tables")


@dataclass(frozen=True)
class Headline:
    """What a bundle may be called, and why."""

    missing: tuple[str, ...]
    """The conditions that do not hold (:data:`MISSING_ORDER`); empty for PASS."""
    reasons: tuple[str, ...] = field(default_factory=tuple)
    """One sentence per condition that does not hold, in the same order."""
    verdict: str = "unknown"
    """The bundle's verdict as the bundle states it (pass, fail, incomplete, rehearsal; unknown when unreadable)."""

    @property
    def passed(self) -> bool:
        return not self.missing

    @property
    def text(self) -> str:
        """``PASS``, or the missing conditions in capitals, e.g. ``UNVERIFIED · NOT EVIDENCE FOR THIS PR``."""
        return "PASS" if self.passed else " \u00b7 ".join(m.upper() for m in self.missing)

    @property
    def state(self) -> Literal["pass", "fail", "warn"]:
        """For colours and icons: ``pass``; ``fail`` when unverified or a check failed; ``warn`` otherwise."""
        if self.passed:
            return "pass"
        return "fail" if ("unverified" in self.missing or "fail" in self.missing) else "warn"

    @property
    def icon(self) -> str:
        """A check mark for PASS; a cross when unverified or failed; a test tube for a rehearsal; a warning sign
        for anything else that is not PASS."""
        if self.state == "warn" and "rehearsal" in self.missing:
            return "\U0001f9ea"
        return {"pass": "\u2705", "fail": "\u274c", "warn": "\u26a0\ufe0f"}[self.state]


def headline(vr: VerifyResult) -> Headline:
    """The headline of a verified (or not) bundle, from its verification alone."""
    found: dict[str, str] = {}
    by = {it.name: it for it in vr.items}
    bad = [by[n] for n in _INTEGRITY if n in by and by[n].ok is False]
    if bad:
        sig = by.get("signature")
        first = sig if sig is not None and sig.ok is False else bad[0]
        found["unverified"] = f"{first.name}: {first.detail}"
    scope, tier = by.get("scope"), by.get("tier")
    if scope is not None and scope.ok is False:
        found["scope loosened"] = scope.detail
    if tier is not None and tier.ok is False:
        found["tier too low"] = tier.detail
    verdict = vr.verdict or "unknown"
    if verdict == "fail":
        found["fail"] = "a required check failed"
    elif verdict == "incomplete":
        found["incomplete"] = "a required check did not run"
    elif verdict == "unknown":
        found["incomplete"] = "the manifest could not be read"
    if vr.shard not in (None, "1/1"):
        found["incomplete"] = (found.get("incomplete", "") + "; " if "incomplete" in found else "") + (
            f"shard {vr.shard} holds part of the tier only"
        )
    if vr.rehearsal or verdict == "rehearsal":
        found["rehearsal"] = "run on hardware the scope does not declare"
    head = by.get("pr_head")
    if vr.pr_link != "proven":
        found["not evidence for this PR"] = vr.pr_link_detail or "the bundle records no PR link"
    elif head is not None and head.ok is False:
        found["not evidence for this PR"] = head.detail
    missing = tuple(m for m in MISSING_ORDER if m in found)
    return Headline(missing=missing, reasons=tuple(f"{m}: {found[m]}" for m in missing), verdict=verdict)
