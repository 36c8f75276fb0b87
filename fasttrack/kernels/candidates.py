"""Loading the candidate kernels a suite tests: a dotted module name or a ``.py`` file path."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class CandidateImportError(ImportError):
    """The candidate module named by the scope (or the suite default) could not be imported."""


def load(spec: str, *, base_dir: Path | None = None) -> ModuleType:
    """Import the candidate named by ``spec``.

    A spec ending in ``.py`` or containing a path separator is a file, resolved against
    ``base_dir`` when relative; anything else is a dotted module name, imported with
    ``base_dir`` on ``sys.path`` (so a suite's own modules import by bare name).
    """
    spec = spec.strip()
    if not spec:
        raise CandidateImportError("the candidate module name is empty")
    is_file = spec.endswith(".py") or "/" in spec or "\\" in spec
    if is_file:
        path = Path(spec)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        path = path.resolve()
        if not path.is_file():
            raise CandidateImportError(f"candidate file {str(path)!r} does not exist")
        name = "fasttrack_candidate_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
        if name in sys.modules:
            return sys.modules[name]
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        mod_spec = importlib.util.spec_from_file_location(name, path)
        if mod_spec is None or mod_spec.loader is None:
            raise CandidateImportError(f"cannot import candidate file {str(path)!r}")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        try:
            mod_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise CandidateImportError(
                f"importing candidate file {str(path)!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        return module
    if base_dir is not None and str(base_dir) not in sys.path:
        sys.path.insert(0, str(base_dir))
    try:
        return importlib.import_module(spec)
    except Exception as exc:
        raise CandidateImportError(f"importing candidate module {spec!r} failed: {type(exc).__name__}: {exc}") from exc
