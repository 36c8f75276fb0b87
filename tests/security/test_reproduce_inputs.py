"""``reproduce`` of a trusted-signed bundle whose recorded scope is hostile: the model name is
data, never a path component, and the recorded scope text goes through the same bounds as
any scope file (a "billion laughs" is refused before anything is built).

The rerun (``run_validate``) is replaced by a double that loads the scope it is given with
the real loader and stops there: no engine starts."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from security_testlib import Keys, force_sign, rewrite_manifest, variant

from fasttrack import pipeline
from fasttrack.errors import FasttrackError, ScopeError
from fasttrack.pipeline.reproduce import reproduce


class Stop(Exception):
    pass


class LoadOnly:
    """Stands in for ``run_validate``: loads ``opts.model`` with the real loader, then stops."""

    def __init__(self) -> None:
        self.model: Path | None = None
        self.text: str | None = None

    def __call__(self, opts: Any, *, log: Any) -> Any:
        from fasttrack.scope import load_scope

        self.model = Path(opts.model)
        self.text = self.model.read_text()
        load_scope(str(opts.model))
        raise Stop


def _recorded(base: Path, dest: Path, keys: Keys, *, model: str, yaml_text: str | None = None) -> Path:
    b = variant(base, dest)

    def edit(d: dict[str, Any]) -> None:
        d["scope"]["model"] = model
        if yaml_text is not None:
            d["scope"]["yaml"] = yaml_text
            d["scope"]["sha256"] = hashlib.sha256(yaml_text.encode()).hexdigest()

    rewrite_manifest(b, edit)
    return force_sign(b, keys.trusted)


@pytest.mark.parametrize("model", ["../../..", "../../../escaped-scope", ".", "..", "/tmp", "a/../../b", "x\x00y"])
def test_the_model_name_is_never_a_path(
    model: str, base_bundle: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    b = _recorded(base_bundle, work / "bundle", keys, model=model)
    before = set(os.listdir(tmp_path))
    # other tests' folders beside this one may hold a scope.yaml of their own: compare, don't assume none
    siblings_before = set(tmp_path.parent.glob("*/scope.yaml"))
    double = LoadOnly()
    monkeypatch.setattr(pipeline, "run_validate", double)
    with pytest.raises(Stop):
        reproduce(b, checks=["perf"], out=tmp_path / "rerun", keys=[keys.trusted_pub], log=lambda m: None)
    assert double.model is not None and double.model.name == "scope.yaml"
    assert double.model.parent.name == "scope"  # a fixed name, whatever the bundle says
    assert set(os.listdir(tmp_path)) == before
    assert not (tmp_path.parent / "escaped-scope").exists() and not Path("/escaped-scope").exists()
    assert set(tmp_path.parent.glob("*/scope.yaml")) == siblings_before


def test_a_recorded_billion_laughs_is_refused(
    base_bundle: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    laughs = "\n".join(lines) + "\n"
    b = _recorded(base_bundle, tmp_path / "bundle", keys, model="demo-llama", yaml_text=laughs)
    monkeypatch.setattr(pipeline, "run_validate", LoadOnly())
    with pytest.raises(ScopeError, match="aliases"):
        reproduce(b, checks=["perf"], out=tmp_path / "rerun", keys=[keys.trusted_pub], log=lambda m: None)


def test_an_unverified_bundle_is_refused_first(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    b = variant(base_bundle, tmp_path / "bundle")
    rewrite_manifest(b, lambda d: d["scope"].update(model="../../x"))
    with pytest.raises(FasttrackError, match="did not verify"):
        reproduce(b, checks=["perf"], out=tmp_path / "rerun", keys=[keys.trusted_pub], log=lambda m: None)
