"""The project's files cite only what the repository holds.

A doc, a comment, a scope or a template that cites a design note (``DESIGN.md``, ``FACTS.md``)
or a ``reference/...`` file must name a file that is in the repository (relative to the root
or to the citing file); a reader of a clone has nothing else.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from fasttrack import ROOT

#: What counts as a citation of a design note or a reference file.
CITATION = re.compile(
    r"(?<![\w/.-])(?P<path>(?:[\w.-]+/)*(?:DESIGN\.md|FACTS\.md)|(?:[\w.-]+/)*reference/(?:[\w./-]*[\w-])?)"
    r"|(?P<bare>\bFACTS in\b)"
)
THIS = Path(__file__).resolve()


def tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    files = []
    for name in out.decode().split("\0"):
        p = ROOT / name
        if name and p.is_file() and not p.is_symlink() and p.resolve() != THIS:
            data = p.read_bytes()
            if b"\0" not in data[:8192]:
                files.append(p)
    return files


def dangling_citations(path: Path, text: str) -> list[str]:
    """``file:line: citation`` for each citation whose target the repository does not hold."""
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        for m in CITATION.finditer(line):
            cited = m.group("path")
            if cited is not None and ((ROOT / cited).exists() or (path.parent / cited).exists()):
                continue
            found.append(f"{path.relative_to(ROOT)}:{no}: {m.group(0)}")
    return found


def test_no_citation_points_outside_the_repository() -> None:
    files = tracked_text_files()
    assert len(files) > 100 and any(f.name == "README.md" for f in files)
    bad = [c for f in files for c in dangling_citations(f, f.read_text(errors="replace"))]
    assert not bad, "cited but not in the repository (copy the facts into docs/ instead):\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("line", "dangling"),
    [
        ("Measured fact this rests on (DESIGN.md): a consumer ...", True),
        ("measured on the 2-core CPU hosts (see ../DESIGN.md):", True),
        ('  - "vLLM engineering post (reference/vllm-k3-engineering-post.txt)"', True),
        ("# Envelope and claims as published (see FACTS in the project docs)", True),
        ("see docs/perf.md and README.md", False),
        ("compared with the reference implementation (a reference/stock path)", True),
        ("the kernels' reference outputs; reference run", False),
        ("see docs/kernels.md (reference/ is not a folder here)", True),
    ],
)
def test_the_citation_rule(line: str, dangling: bool) -> None:
    assert bool(dangling_citations(ROOT / "docs" / "x.md", line)) is dangling


def test_a_citation_of_a_file_next_to_the_citing_one_is_fine(tmp_path: Path) -> None:
    # a design note or reference file added to the repository may be cited
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "post.txt").write_text("x")
    (tmp_path / "DESIGN.md").write_text("x")
    doc = tmp_path / "x.md"
    assert not dangling_citations(doc, "see DESIGN.md and (reference/post.txt), section 2")
    assert dangling_citations(ROOT / "docs" / "x.md", "see DESIGN.md")
