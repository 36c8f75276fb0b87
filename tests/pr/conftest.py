"""Fixtures for these tests live in pr_testlib (importable by name from the tests)."""

from pr_testlib import *  # noqa: F401,F403
