"""Fixtures for the adversarial corpus live in security_testlib (importable by name from the tests)."""

from security_testlib import *  # noqa: F401,F403 - the fixtures are found by pytest through this star import
