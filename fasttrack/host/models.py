"""Where the model under test comes from: a hub id / path as given, or a locally built one."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

from fasttrack.errors import FasttrackError, ScopeError
from fasttrack.modelbase import DocModel
from fasttrack.scope import SUITES_DIR, Scope
from fasttrack.scope.common import SLUG_MAX, SLUG_PATTERN


class ResolvedModel(DocModel):
    model: str
    """What is passed to vLLM's ``--model``."""
    sha256: str | None = None
    """Content hash of the model files, when known (locally built models)."""
    built: bool = False
    """True when the model was built by this run."""


def cache_dir() -> Path:
    d = Path(os.environ.get("FASTTRACK_CACHE", Path.home() / ".cache" / "fasttrack"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def under(root: Path, rel: str | Path, what: str) -> Path:
    """``root / rel``, asserted to stay under ``root`` once resolved (``..`` and symbolic links followed)."""
    base = root.resolve()
    path = (base / rel).resolve()
    if Path(rel).is_absolute() or not path.is_relative_to(base):
        raise FasttrackError(
            f"{what} {str(rel)[:200]!r} resolves to {path}, outside {base}.",
            hint="It must name a path inside that folder (no absolute path, no '..', no link leading out).",
        )
    return path


def model_cache_path(name: str) -> Path:
    """The cache folder of a locally built model: ``<cache>/models/<name>``, where ``name`` is a slug and the
    folder, once resolved, stays under ``<cache>/models`` (a link leading out of it is refused)."""
    if not re.fullmatch(SLUG_PATTERN, name) or len(name) > SLUG_MAX:
        raise FasttrackError(
            f"scope name {name[:200]!r} is not a slug (letters, digits, single '.', '_' or '-' between them), "
            "so it cannot name the model cache folder."
        )
    root = cache_dir() / "models"
    root.mkdir(parents=True, exist_ok=True)
    out = root / name
    under(root, name, "the model cache folder of scope")
    return out


def builder_path(scope: Scope, base_dir: Path | None = None) -> Path | None:
    """The scope's ``model.local_builder``, resolved against ``base_dir`` (the scope file's folder; default
    ``suites/<name>/``) like every relative path in a scope; None when the scope builds no model."""
    rel = scope.model.local_builder
    if not rel:
        return None
    p = Path(rel)
    return p if p.is_absolute() else (base_dir if base_dir is not None else SUITES_DIR / scope.name) / p


def _load_builder(scope: Scope, base_dir: Path | None):
    path = builder_path(scope, base_dir)
    assert path is not None
    if not path.is_file():
        raise ScopeError(
            f"the scope's model.local_builder {scope.model.local_builder!r} does not exist: it resolves to {path}.",
            hint="Relative paths in a scope start from the scope file's folder (for a suite under suites/NAME/, "
            "the builder of examples/demo_model is ../../examples/demo_model/build.py).",
        )
    spec = importlib.util.spec_from_file_location(f"fasttrack_builder_{path.stem}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def resolve_model(scope: Scope, *, base_dir: Path | None = None, log=print) -> ResolvedModel:
    """Return the model to serve; build a local one into the cache if the scope says so (``base_dir``: the
    folder the scope's relative paths start from, see :func:`builder_path`)."""
    if not scope.model.local_builder:
        return ResolvedModel(model=scope.model.id, sha256=scope.model.revision)
    out = model_cache_path(scope.name)
    manifest = out / "fasttrack-model.json"
    builder = _load_builder(scope, base_dir)
    if manifest.is_file():
        try:
            meta = json.loads(manifest.read_text())
        except ValueError:
            meta = {}
        # rebuild if the builder or its inputs changed since the cached build (the files alone
        # cannot tell: a stale model still matches its own hashes)
        recipe = builder.recipe_sha256() if hasattr(builder, "recipe_sha256") else None
        if recipe is not None and meta.get("recipe_sha256") != recipe:
            log(f"cached model in {out} was built from another recipe (the builder or its corpus changed); rebuilding")
        else:
            # and if files were changed by hand: the builder knows how to hash its output
            digest = builder.model_sha256(out)[0] if hasattr(builder, "model_sha256") else meta.get("sha256")
            if digest == meta.get("sha256"):
                return ResolvedModel(model=str(out), sha256=digest)
            log(f"cached model in {out} does not match its manifest; rebuilding")
    if out.exists():
        shutil.rmtree(out)  # the builder hashes every file in its output directory: start empty
    log(f"building the {scope.name} model into {out}")
    meta = builder.build_model(out)
    return ResolvedModel(model=str(out), sha256=meta.get("sha256"), built=True)
