"""Fixtures for the executor tests: the bundle tests' keys (bundle_testlib), importable by name from here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bundle"))

from bundle_testlib import contrib, keydir  # noqa: E402,F401  (fixtures, found by pytest through this import)
from slurm_cluster import slurm_env  # noqa: E402,F401  (the local Slurm cluster, a session fixture)
