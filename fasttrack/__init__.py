"""fasttrack: validation and evidence bundles for fast-track inference optimizations in vLLM."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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


def attrs(obj: object | None, *names: str, prefix: str = "") -> dict[str, Any]:
    """``{name: obj.name}`` for each of ``names``: the keyword arguments (or row columns) that copy these attributes
    of ``obj`` as they are; each None when ``obj`` is None. With ``prefix``, the keys are ``prefix + name``."""
    return {prefix + n: None if obj is None else getattr(obj, n) for n in names}


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of a package whose public names are imported from their defining modules on
    first use (``exports``: name -> module of ``package``), so that importing the package stays cheap."""

    def __getattr__(name: str) -> Any:
        mod = exports.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{mod}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
