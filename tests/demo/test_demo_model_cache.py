"""The model cache: a locally built model is reused only while its recipe and files are unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasttrack.host.models import resolve_model
from fasttrack.scope import load_scope


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FASTTRACK_CACHE", str(tmp_path))
    return tmp_path / "models" / "demo-llama"


def test_cached_model_is_reused_and_stale_builds_are_rebuilt(cache: Path) -> None:
    scope = load_scope("demo-llama").scope
    logs: list[str] = []
    first = resolve_model(scope, log=logs.append)
    assert first.built and first.model == str(cache)
    manifest = json.loads((cache / "fasttrack-model.json").read_text())
    assert len(manifest["recipe_sha256"]) == 64

    again = resolve_model(scope, log=logs.append)
    assert not again.built and again.sha256 == first.sha256

    # a model built by an older builder still matches its own file hashes, but its recipe differs
    stale = dict(manifest, recipe_sha256="0" * 64)
    (cache / "fasttrack-model.json").write_text(json.dumps(stale))
    (cache / "left-over.bin").write_bytes(b"from the old build")
    logs.clear()
    rebuilt = resolve_model(scope, log=logs.append)
    assert rebuilt.built and rebuilt.sha256 == first.sha256
    assert any("another recipe" in m for m in logs), logs
    assert not (cache / "left-over.bin").exists()

    # a manifest from before recipes were recorded counts as stale too
    del manifest["recipe_sha256"]
    (cache / "fasttrack-model.json").write_text(json.dumps(manifest))
    assert resolve_model(scope, log=logs.append).built

    # files changed by hand
    (cache / "config.json").write_text("{}")
    logs.clear()
    assert resolve_model(scope, log=logs.append).built
    assert any("does not match its manifest" in m for m in logs), logs
    assert resolve_model(scope, log=logs.append).sha256 == first.sha256


def test_the_builder_path_is_relative_to_the_scope_files_folder(tmp_path: Path) -> None:
    """Like every path in a scope: a copy of the demo scope elsewhere finds no builder at ../../examples."""
    import pytest

    from fasttrack import ROOT
    from fasttrack.errors import ScopeError
    from fasttrack.host.doctor import diagnose
    from fasttrack.host.models import builder_path

    shipped = load_scope("demo-llama")
    assert (
        builder_path(shipped.scope, shipped.base_dir) == ROOT / "suites/demo-llama/../../examples/demo_model/build.py"
    )
    assert builder_path(shipped.scope, shipped.base_dir).resolve() == ROOT / "examples" / "demo_model" / "build.py"
    copy = tmp_path / "a" / "b"
    copy.mkdir(parents=True)
    (copy / "scope.yaml").write_text(shipped.text)
    loaded = load_scope(str(copy / "scope.yaml"))
    with pytest.raises(ScopeError) as err:
        resolve_model(loaded.scope, base_dir=loaded.base_dir)
    assert str(copy / "../../examples/demo_model/build.py") in err.value.message
    assert "start from the scope file's folder" in (err.value.hint or "")
    rep = diagnose(loaded, check_args=False)
    model = next(f for f in rep.findings if f.topic == "model")
    assert model.status == "problem" and "does not exist: it resolves to" in model.found
