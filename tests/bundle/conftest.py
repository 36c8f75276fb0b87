"""Fixtures for these tests live in bundle_testlib (importable by name from the tests)."""

from bundle_testlib import *  # noqa: F401,F403 - the fixtures are found by pytest through this star import
