"""docs/glossary.md names what the code names: every headline word, every verdict, every tier, every PR-link
state and every kind of check, so the glossary cannot fall behind a new word."""

from __future__ import annotations

from typing import get_args

from fasttrack import ROOT
from fasttrack.bundle.headline import MISSING_ORDER
from fasttrack.checks.base import registered_checks
from fasttrack.results import HeadBinding, Verdict
from fasttrack.scope import TIER_ORDER

GLOSSARY = (ROOT / "docs" / "glossary.md").read_text()


def entry(term: str) -> str:
    """The paragraph of the glossary that defines ``term`` (``**Term.**`` or ``**Term** (...)``)."""
    start = GLOSSARY.index(f"**{term}")
    end = GLOSSARY.find("\n\n", start)
    return GLOSSARY[start : end if end > 0 else None]


def test_the_headline_entry_names_every_word() -> None:
    text = entry("Headline.")
    assert "**PASS**" in text
    for word in MISSING_ORDER:
        assert f"`{word.upper()}`" in text, word


def test_the_verdict_entry_names_every_verdict() -> None:
    text = entry("Verdict.")
    for v in ("pass", "fail", "incomplete", "rehearsal"):
        assert f"`{v}`" in text, v
    assert {v.value for v in Verdict} >= {"pass", "fail", "not_run"}


def test_tiers_pr_link_states_and_checks_are_named() -> None:
    tiers = entry("Tier")
    assert all(f"`{t}`" in tiers for t in TIER_ORDER), tiers
    link = entry("PR link.")
    states = (*get_args(HeadBinding), "none")  # an engine binding, or no PR link at all
    assert all(f"`{s}`" in link for s in states), (states, link)
    check = entry("Check.")
    assert all(f"`{name}`" in check for name in registered_checks()), check
