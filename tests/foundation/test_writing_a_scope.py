"""docs/writing-a-scope.md cannot drift: its final YAML loads as a complete scope from a suite folder of its own,
every tier of it can pass (passability), its plan is the one the page quotes, every snippet of the walk-through
is part of the final file, and every command it shows exists with its options."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from doc_testlib import check_command_line, code_blocks, command_lines, run_cli

from fasttrack import ROOT
from fasttrack.checks.base import build_run_plan
from fasttrack.checks.passability import analyze_tiers
from fasttrack.scope import TIER_ORDER, load_scope

DOC = ROOT / "docs" / "writing-a-scope.md"
YAMLS = code_blocks(DOC, "yaml")
FINAL = YAMLS[-1]
SNIPPETS = YAMLS[:-1]


@pytest.fixture(scope="module")
def scope_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The final YAML as ``suites/acme-moe/scope.yaml`` with the kernel suite folder the page tells you to make."""
    folder = tmp_path_factory.mktemp("suites") / "acme-moe"
    (folder / "kernels").mkdir(parents=True)
    (folder / "scope.yaml").write_text(FINAL)
    return folder / "scope.yaml"


def test_the_final_scope_loads_complete_and_every_tier_can_pass(scope_file: Path) -> None:
    loaded = load_scope(str(scope_file))
    scope = loaded.scope
    assert scope.name == scope_file.parent.name == "acme-moe" and scope.is_complete
    # every section the walk-through writes is there, the optional ones too
    for section in ("hardware", "envelope", "fallback", "isolation", "path_markers"):
        assert getattr(scope, section) is not None, section
    assert scope.features and scope.evals and scope.kernels and scope.workloads and scope.claims
    blockers = {t: p.lines() for t, p in analyze_tiers(scope, base_dir=loaded.base_dir).items()}
    assert blockers == {t: [] for t in TIER_ORDER}
    sizes = {
        t: (len(build_run_plan(scope, tier=t).points), len(build_run_plan(scope, tier=t).groups)) for t in TIER_ORDER
    }
    assert sizes == {"smoke": (2, 1), "standard": (24, 4), "full": (48, 4)}


def test_the_plan_the_page_quotes_is_the_plan(scope_file: Path) -> None:
    quoted = [ln for b in code_blocks(DOC, "") for ln in b.splitlines() if "config points in" in ln]
    assert len(quoted) == 1
    code, out = run_cli(["plan", "--model", str(scope_file), "--tier", "full", "--no-arg-check"])
    assert code == 0, out
    assert quoted[0] in out.splitlines(), out
    assert "passability: every required item of the full tier can run" in out


def test_without_its_kernel_folder_the_scope_cannot_pass(scope_file: Path, tmp_path: Path) -> None:
    """The page says the folder must be there: without it the plan names the kernel suite as a blocker."""
    (tmp_path / "acme-moe").mkdir()
    bare = tmp_path / "acme-moe" / "scope.yaml"
    bare.write_text(FINAL)
    loaded = load_scope(str(bare))
    lines = analyze_tiers(loaded.scope, base_dir=loaded.base_dir)["smoke"].lines()
    assert any("kernel suite acme-decode" in ln and "does not exist" in ln for ln in lines), lines


@pytest.mark.parametrize("n", range(len(SNIPPETS)))
def test_every_snippet_is_part_of_the_final_scope(n: int) -> None:
    final = yaml.safe_load(FINAL)
    part = yaml.safe_load(SNIPPETS[n])
    assert isinstance(part, dict) and part
    for key, value in part.items():
        assert final.get(key) == value, f"snippet {n + 1}: {key} differs from the whole scope's"


def test_the_walk_through_covers_the_whole_scope() -> None:
    covered = {k for s in SNIPPETS for k in yaml.safe_load(s)}
    assert covered == set(yaml.safe_load(FINAL))


def test_every_command_exists() -> None:
    lines = [ln for b in code_blocks(DOC, "bash") for ln in command_lines(b)]
    assert len(lines) >= 5
    for line in lines:
        check_command_line(line, run_help=False)
