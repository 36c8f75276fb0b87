"""fasttrack: validation and evidence bundles for fast-track inference optimizations in vLLM."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

_PACKAGE = Path(__file__).resolve().parent

SHIPPED = _PACKAGE / "_shipped"
"""The data an installed wheel carries (setup.py): ``suites/``, ``examples/demo_model/``, ``templates/``
and ``schemas/`` in the repository's layout. Absent in a source checkout (editable installs included)."""

SOURCE_CHECKOUT = not SHIPPED.is_dir()
"""True when the package runs from the repository (``pip install -e``, ``PYTHONPATH``), False from a wheel."""

#: Where suites/, examples/demo_model/, schemas/ and templates/ live: the repository root in a source
#: checkout, else the copy shipped in the package (same layout, so relative paths hold in both).
ROOT = _PACKAGE.parent if SOURCE_CHECKOUT else SHIPPED
