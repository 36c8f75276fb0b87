"""Fixtures for these tests live in report_testlib (importable by name from the tests)."""

from report_testlib import *  # noqa: F401,F403
from report_testlib import _rows_not_from_real_checks  # noqa: F401  (autouse fixture)
