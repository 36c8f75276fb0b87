"""Fixtures for these tests live in report_testlib (importable by name from the tests)."""

from report_testlib import *  # noqa: F401,F403 - the fixtures are found by pytest through this star import
