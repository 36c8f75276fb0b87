"""The registry of pluggable parts (fasttrack/registry.py): kinds and names, the order built-ins come in, the
``fasttrack`` entry-point group of installed packages, and the errors that name what is registered.

Installed packages are simulated by a distribution folder on ``sys.path`` (``NAME.dist-info`` with its
``entry_points.txt``), which is where ``importlib.metadata`` reads entry points from."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from fasttrack import registry
from fasttrack.checks.base import EnginelessCheck, register
from fasttrack.errors import FasttrackError
from fasttrack.planning.cost import NO_COST


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``install(dist, {module: source}, entries)``: a distribution on ``sys.path`` whose ``fasttrack`` entry points
    are ``entries`` (name -> value); the registry reads the entry points again, and forgets their parts after."""
    before = {kind: set(registry.entries(kind, outside=False)) for kind in registry.KINDS}
    mods: list[str] = []

    def install(dist: str, modules: dict[str, str], entries: dict[str, str]) -> None:
        for name, text in modules.items():
            (tmp_path / f"{name}.py").write_text(text)
            mods.append(name)
        info = tmp_path / f"{dist}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        lines = "".join(f"{k} = {v}\n" for k, v in entries.items())
        (info / "entry_points.txt").write_text(f"[fasttrack]\n{lines}")

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    yield install
    for kind in registry.KINDS:
        for name in set(registry.entries(kind, outside=False)) - before[kind]:
            registry.unregister(kind, name)
    for m in mods:
        sys.modules.pop(m, None)


LAUNCHER = """
from fasttrack import registry
from fasttrack.engine.launchers import LocalLauncher

@registry.component("launcher", "elsewhere")
class Elsewhere(LocalLauncher):
    name = "elsewhere"
"""


def test_an_installed_packages_entry_point_registers_its_parts_naming_it(installed: Any) -> None:
    installed("ft-elsewhere", {"ft_elsewhere": LAUNCHER}, {"elsewhere": "ft_elsewhere"})
    # a built-in name is found without importing other packages
    assert registry.get("launcher", "local").__name__ == "LocalLauncher" and "ft_elsewhere" not in sys.modules
    assert list(registry.entries("launcher")) == ["local", "slurm", "elsewhere"]
    assert registry.source("launcher", "elsewhere") == "ft-elsewhere (entry point 'elsewhere')"
    from fasttrack.engine.launchers import get_launcher

    assert type(get_launcher("elsewhere")).__name__ == "Elsewhere"


def test_a_name_the_built_ins_lack_loads_the_entry_points(installed: Any) -> None:
    installed("ft-elsewhere", {"ft_elsewhere": LAUNCHER}, {"elsewhere": "ft_elsewhere"})
    assert registry.get("launcher", "elsewhere").__name__ == "Elsewhere"


def test_a_plugin_that_fails_to_import_is_an_error_naming_it(installed: Any) -> None:
    installed("ft-broken", {"ft_broken": "raise RuntimeError('no GPU here')\n"}, {"broken": "ft_broken"})
    with pytest.raises(FasttrackError) as err:
        registry.entries("check")
    assert "the fasttrack plugin ft-broken (entry point 'broken') (ft_broken) failed to load" in err.value.message
    assert "RuntimeError: no GPU here" in err.value.message and "entry-point group" in (err.value.hint or "")


def test_unknown_names_and_kinds_list_what_is_registered() -> None:
    from fasttrack.engine.launchers import get_launcher

    with pytest.raises(registry.UnknownComponent, match="unknown launcher 'pbs'; registered: local, slurm"):
        get_launcher("pbs")
    with pytest.raises(registry.UnknownComponent, match="unknown scheduler 'pbs'; registered: slurm, kubernetes"):
        registry.get("scheduler", "pbs")
    with pytest.raises(registry.UnknownComponent, match="unknown registry kind 'hook'; kinds: check, gate, feature"):
        registry.entries("hook")
    with pytest.raises(registry.UnknownComponent) as err:
        registry.get("subcommand", "nope")
    assert "registered: bundle, report, kernels, pr, executors" in str(err.value)


def test_a_name_is_unique_within_its_kind() -> None:
    class Other:
        pass

    with pytest.raises(registry.DuplicateComponent, match="launcher 'local' is registered twice: by fasttrack"):
        registry.register("launcher", "local", Other)
    registry.register("launcher", "local", registry.get("launcher", "local"))  # the same object again: fine


def test_a_check_must_declare_its_cost_and_its_own_gate() -> None:
    from fasttrack.scope.gates import CoverageGate

    class NoCost(EnginelessCheck, name="nocost", title="No cost"):
        def gate(self, ctx: Any) -> Any: ...
        def run(self, ctx: Any) -> Any: ...

    with pytest.raises(TypeError, match="NoCost must declare 'cost'"):
        register(NoCost)
    with pytest.raises(TypeError, match="not a check declaration: costs"):

        class Typo(EnginelessCheck, name="typo", title="Typo", costs=NO_COST):  # type: ignore[call-arg]
            pass

    class Borrowed(EnginelessCheck, name="borrowed", title="Borrowed", cost=NO_COST, gate_model=CoverageGate):
        def gate(self, ctx: Any) -> Any: ...
        def run(self, ctx: Any) -> Any: ...

    with pytest.raises(TypeError, match=r"is the gate of 'coverage'; declare it as class CoverageGate\(CheckGate, "):
        register(Borrowed)
    assert "nocost" not in registry.entries("check") and "borrowed" not in registry.entries("check")


def test_a_serving_feature_must_declare_its_decode_steps() -> None:
    from fasttrack.checks.features import FeatureResult, ServingFeature, register_feature

    class Silent(ServingFeature[FeatureResult]):
        name: ClassVar[str] = "silent"
        result_model: ClassVar[type[FeatureResult]] = FeatureResult

        def steps(self, gp: Any) -> list[Any]:
            return []

        def judge(self, on: Any, base: Any, cand: Any) -> Any: ...

    with pytest.raises(TypeError, match="Silent must declare 'decode_steps'"):
        register_feature(Silent())
    assert "silent" not in registry.entries("feature")


def test_the_shipped_parts_of_every_kind() -> None:
    assert list(registry.entries("check")) == [
        "isolation",
        "kernels",
        "equivalence",
        "features",
        "coverage",
        "evals",
        "perf",
    ]
    assert list(registry.entries("gate")) == ["equivalence", "features", "coverage", "perf"]
    assert list(registry.entries("feature"))[:3] == ["temperature_sampling", "structured_output", "full_context"]
    assert all(isinstance(f.decode_steps, int) and f.decode_steps > 0 for f in registry.entries("feature").values())
    assert list(registry.entries("launcher")) == ["local", "slurm"]
    assert list(registry.entries("scheduler")) == ["slurm", "kubernetes"]
    assert list(registry.entries("schema")) == ["scope.schema.json", "bundle-manifest.schema.json"]


def per_check_lists(source: str, names: set[str]) -> list[str]:
    """The module-level lists, tuples, sets, mappings (and calls) of ``source`` that name one of ``names``."""
    import ast

    found = []
    for node in ast.parse(source).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.Set, ast.Call)):
            consts = {n.value for n in ast.walk(value) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            if consts & names:
                found.append(f"line {node.lineno}: {', '.join(sorted(consts & names))}")
    return found


@pytest.mark.parametrize("module", ["fasttrack/planning/cost.py", "fasttrack/scope/compare.py"])
def test_no_central_module_holds_a_per_check_list(module: str) -> None:
    """A check's facts are its own declarations: no module-level list, tuple, set or mapping of these modules
    names a check or a serving feature."""
    from fasttrack import ROOT

    names = set(registry.entries("check")) | set(registry.entries("feature"))
    found = per_check_lists((ROOT / module).read_text(), names)
    assert not found, f"{module} lists checks or features ({found}): move it into their declarations"


def test_the_per_check_list_rule_finds_the_lists_it_replaced() -> None:
    old = 'GATE_RULES: dict = {\n    "perf": {"noise_margin": "lower"},\n}\nFEATURE_STEPS = {"logprobs": 300}\n'
    old += 'STARTS = "engine starts"\nPAIR = ("n_best", "x")\n'
    assert per_check_lists(old, {"perf", "n_best", "logprobs"}) == [
        "line 1: perf",
        "line 4: logprobs",
        "line 6: n_best",
    ]
