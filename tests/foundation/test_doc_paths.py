"""Every repository path the docs name in backticks exists (a path into a moved or deleted module is a stale
line), apart from the few that name something else: a vLLM file, the wheel's layout, a commit status."""

from __future__ import annotations

import glob
import re

from fasttrack import ROOT

DOCS = [ROOT / "README.md", ROOT / "examples" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"`((?:fasttrack|docs|tests|scripts|examples|suites|templates|schemas|benchmarks|\.ci)/[^`\s]*)`")
#: Paths that are not this repository's: vLLM's own tests (docs/kernels.md), the wheel's layout, the commit
#: status context the maintainers' workflow sets.
NOT_OURS = {"tests/kernels/allclose_default.py", "tests/kernels/test_layernorm.py", "fasttrack/_shipped/"}
NOT_OURS |= {"fasttrack/verify"}


def test_every_path_the_docs_name_exists() -> None:
    stale = []
    for doc in DOCS:
        for no, line in enumerate(doc.read_text().splitlines(), 1):
            for m in PATH.finditer(line):
                p = m.group(1).rstrip(".,;:)").split("::")[0]
                if p in NOT_OURS or "<" in p:
                    continue
                if any(c in p for c in "*?["):
                    found = bool(glob.glob(str(ROOT / p)))
                else:
                    found = (ROOT / p).exists()
                if not found:
                    stale.append(f"{doc.relative_to(ROOT)}:{no}: {p}")
    assert not stale, "docs name paths that do not exist:\n" + "\n".join(stale)
